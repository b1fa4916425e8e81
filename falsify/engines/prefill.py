"""The harness's stepped prefill over any engine's `model.forward`: the adapters' `engine.prefill` (hf, llamacpp).

    pf = SteppedPrefill.open(model, state, prompt, chunk_cap=64, kept=(), marks=(), starts=(), keep_logits=False)
    while not pf.step(): ...          # one model.forward per chunk; or pf.run(cancel) polls before each chunk

The model needs `config.chunk_size`, `config.vocab_size` and `forward(tokens, state) -> [T, vocab]`; a state needs
`pos`, `copy()` and `release()` (the engine protocol's Model and StreamState). The pass is planned once, as cuts:
a chunk starting at p ends at the first of p + width, the next planned start (a mark or a requested start) and
the end of the prompt. The next cut depends only on where the chunk starts, so a pass resumed from any cut (after
a cancel, or from a kept prefix) cuts as the whole pass does from there. The width must be a multiple of the
model's chunk_size unless the model declares `chunk_invariant`: an engine groups a call's tokens into chunks
aligned to the call's first token, so only cuts on that grid leave the state bytes those of one whole call.

The reference engine's Prefill (reference/prefill.py) is this pass with its cuts planned ahead. The falsifiers judge
every engine by the forward calls the harness counts, not by this plan.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from falsify.engines.tokens import token_list

__all__ = ["Kept", "PrefillError", "Stepped", "SteppedPrefill", "chunk_invariant", "chunk_width"]


class PrefillError(ValueError):
    """A prefill asked for something it cannot do; the message names the argument."""


@dataclass(frozen=True, slots=True)
class Kept:
    """A snapshot kept for reuse (the protocol's KeptPrefix): `state` has consumed exactly `tokens`."""

    tokens: tuple[int, ...]
    state: Any  # never advanced; state.pos == len(tokens)


class Stepped:
    """A pass run one chunk per `step()`: `run` steps until `done`, polling the cancel token before each chunk
    (the harness polls it, so the stop is the same for every engine: SteppedPrefill, the wire's WirePrefill)."""

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def step(self) -> bool:
        raise NotImplementedError

    def run(self, cancel: Any = None) -> bool:
        """Step until done, polling `cancel` (if any) before each chunk; False when it stopped the pass."""
        while not self.done:
            if cancel is not None and cancel.is_cancelled():
                return False
            self.step()
        return True


class SteppedPrefill(Stepped):
    """One prompt's pass over one stream state; see the module docstring."""

    def __init__(
        self, model: Any, state: Any, prompt: tuple[int, ...], width: int, planned: list[int], marks: set[int]
    ) -> None:
        self.model = model
        self.state = state
        self.prompt = prompt
        self.width = width
        self.planned = planned  # sorted positions where a chunk must start
        self.marks = marks  # positions whose state is kept
        self.logits: np.ndarray | None = None  # [vocab] of the last token forwarded
        self.chunk_logits: list[np.ndarray] | None = None  # each chunk's [T, vocab] when keep_logits
        self.kept: list[Kept] = []

    @classmethod
    def open(
        cls,
        model: Any,
        state: Any,
        prompt: Sequence[int],
        chunk_cap: int | None = None,
        kept: Kept | Iterable[Kept] = (),
        marks: Iterable[int] = (),
        starts: Iterable[int] = (),
        keep_logits: bool = False,
    ) -> Self:
        """A pass over `prompt` into `state`, which already holds prompt[:state.pos]. The longest kept snapshot
        that the prompt strictly extends and that is ahead of `state` replaces it (`state` is released)."""
        tokens = _token_tuple(prompt, int(model.config.vocab_size))
        marked = set(_inside(marks, "marks", len(tokens)))
        planned = sorted(marked | set(_inside(starts, "starts", len(tokens))))
        snapshots = [kept] if isinstance(kept, Kept) else list(kept)
        usable = [k for k in snapshots if len(k.tokens) < len(tokens) and tokens[: len(k.tokens)] == k.tokens]
        best = max(usable, key=lambda k: len(k.tokens), default=None)  # the first of equal lengths
        if best is not None and len(best.tokens) > state.pos:
            restored = best.state.copy()
            state.release()
            state = restored
        if state.pos >= len(tokens):
            raise PrefillError(
                f"the state already holds {state.pos} tokens; a prompt of {len(tokens)} "
                "tokens must extend it by at least one"
            )
        pf = cls(model, state, tokens, chunk_width(model, chunk_cap), planned, marked)
        pf.chunk_logits = [] if keep_logits else None
        return pf

    @property
    def pos(self) -> int:
        return int(self.state.pos)

    @property
    def done(self) -> bool:
        return self.pos >= len(self.prompt)

    def next_cut(self) -> int:
        """Where the chunk starting at `pos` ends."""
        later = self.planned[bisect.bisect_right(self.planned, self.pos) :]
        return min(self.pos + self.width, *later[:1], len(self.prompt))

    def step(self) -> bool:
        """Run exactly one chunk through model.forward; True when the pass is done."""
        if self.done:
            raise PrefillError(f"prefill of {len(self.prompt)} tokens is already done")
        start, end = self.pos, self.next_cut()
        logits = self.model.forward(np.asarray(self.prompt[start:end], np.int64), self.state)  # [T, vocab]
        if self.state.pos != end:
            raise PrefillError(f"the engine's forward of [{start}, {end}) left the state at {self.state.pos}")
        self.ran(end, logits)
        return self.done

    def ran(self, end: int, logits: np.ndarray) -> None:
        """Record a chunk that ended at `end` with `logits` [T, vocab]: the last token's logits, every chunk's
        when keep_logits, and a kept snapshot when `end` is a mark."""
        self.logits = logits[-1]
        if self.chunk_logits is not None:
            self.chunk_logits.append(logits)
        if end in self.marks:
            self.kept.append(Kept(self.prompt[:end], self.state.copy()))


def chunk_invariant(model: Any) -> bool:
    """Whether the model declares that where calls are cut never changes its output."""
    return bool(getattr(model, "chunk_invariant", False))


def chunk_width(model: Any, chunk_cap: int | None) -> int:
    """The chunk width a pass over `model` uses for a requested cap (None: the model's own chunk_size)."""
    size = int(model.config.chunk_size)
    if chunk_cap is None:
        return size
    if isinstance(chunk_cap, bool) or not isinstance(chunk_cap, int | np.integer) or chunk_cap < 1:
        raise PrefillError(f"chunk_cap must be an int >= 1, got {chunk_cap!r}")
    if chunk_cap % size and not chunk_invariant(model):
        raise PrefillError(
            f"chunk_cap {chunk_cap} is not a multiple of the model's chunk_size {size}: "
            "cuts off that grid would change the state bytes"
        )
    return int(chunk_cap)


def _token_tuple(prompt: Sequence[int], vocab: int) -> tuple[int, ...]:
    """The prompt's ids through the one token-id check (falsify.engines.tokens), as a PrefillError."""
    try:
        ids = token_list(prompt, "prompt", vocab)
    except ValueError as e:
        raise PrefillError(str(e)) from None
    if not ids:
        raise PrefillError("prompt is empty: a prefill needs at least one token")
    return tuple(ids)


def _inside(positions: Iterable[int], name: str, n: int) -> list[int]:
    out = [int(p) for p in positions]
    outside = [p for p in out if not 0 < p < n]
    if outside:
        raise PrefillError(f"{name} must lie strictly inside the prompt (0, {n}), got {outside}")
    return out
