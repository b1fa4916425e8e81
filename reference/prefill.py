"""Stepped prefill: a prompt's forward pass cut into planned chunks, run one chunk per `step` call.

The whole pass is `Prefill.open` then `step` until it reports done (`run`); a lane host calls `step` once per
round so that other streams decode between two chunks. Both drivers run the same chunk body over the same
cuts, so a reply never depends on which driver ran it.

A cut is where one `model.forward` call ends and the next begins. `forward` groups tokens into internal chunks
of `config.chunk_size` aligned to the call's first token, so a pass is byte-identical to one forward call only
if every cut lies on that grid: the chunk width must be a multiple of `chunk_size`. Cuts are memoryless: the
next cut depends only on the current position, so a pass resumed from any of its cuts (after a cancel, or from
a kept prefix) cuts exactly as the whole pass does from there. Chunked prefill as in Sarathi-Serve (arXiv
2403.02310) and llama.cpp's server, which feeds a prompt `n_batch` tokens per `llama_decode`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class PrefillError(ValueError):
    """A prefill asked for something it cannot do; the message names the argument."""


@dataclass(frozen=True, slots=True)
class KeptPrefix:
    """A snapshot kept for reuse: `state` has consumed exactly `tokens` and is never advanced."""

    tokens: tuple[int, ...]
    state: Any  # StreamState with state.pos == len(tokens)


def chunk_width(model: Any, chunk_cap: int | None) -> int:
    """The chunk width a pass over `model` uses for a requested cap (None: the model's own chunk_size)."""
    size = int(model.config.chunk_size)
    if chunk_cap is None:
        return size
    if isinstance(chunk_cap, bool) or not isinstance(chunk_cap, int | np.integer) or chunk_cap < 1:
        raise PrefillError(f"chunk_cap must be an int >= 1, got {chunk_cap!r}")
    if not chunk_invariant(model) and chunk_cap % size:
        raise PrefillError(
            f"chunk_cap {chunk_cap} is not a multiple of the model's chunk_size {size}: "
            "cuts off that grid would change the state bytes"
        )
    return int(chunk_cap)


def chunk_invariant(model: Any) -> bool:
    """Whether the model declares that where calls are cut never changes its output (ours does not)."""
    return bool(getattr(model, "chunk_invariant", False))


def next_cut(pos: int, end: int, width: int, planned: Sequence[int]) -> int:
    """Where the chunk starting at `pos` ends: the first of pos + width, the next planned start, the end.

    planned: sorted positions at which a chunk must start (kept marks and requested starts).
    """
    i = bisect.bisect_right(planned, pos)
    stop = planned[i] if i < len(planned) else end
    return min(pos + width, stop, end)


def plan_cuts(start: int, end: int, width: int, planned: Iterable[int] = ()) -> tuple[int, ...]:
    """Chunk ends of a pass over positions [start, end); each chunk ends at `next_cut` of its start."""
    marks = sorted(set(planned))
    cuts = []
    pos = start
    while pos < end:
        pos = next_cut(pos, end, width, marks)
        cuts.append(pos)
    return tuple(cuts)


class Prefill:
    """One prompt's prefill over one stream state: `open`, then `step` until done.

    After open, `state` is the stream's state (a restored copy when a kept prefix was used). `logits` holds
    the last forwarded token's logits (f32[vocab]) once a chunk has run; `kept` collects a KeptPrefix at each
    mark.
    """

    def __init__(
        self,
        model: Any,
        state: Any,
        prompt: tuple[int, ...],
        width: int,
        planned: tuple[int, ...],
        marks: frozenset[int],
        keep_logits: bool,
    ) -> None:
        self.model = model
        self.state = state
        self.prompt = prompt
        self.width = width
        self.planned = planned
        self.marks = marks
        self.start = int(state.pos)
        self.cuts = plan_cuts(self.start, len(prompt), width, planned)
        self.chunks_run = 0
        self.logits: np.ndarray | None = None
        self.kept: list[KeptPrefix] = []
        self.chunk_logits: list[np.ndarray] | None = [] if keep_logits else None

    @classmethod
    def open(
        cls,
        model: Any,
        state: Any,
        prompt: Sequence[int],
        chunk_cap: int | None = None,
        kept: KeptPrefix | Iterable[KeptPrefix] = (),
        marks: Iterable[int] = (),
        starts: Iterable[int] = (),
        keep_logits: bool = False,
    ) -> Prefill:
        """Plan a pass over `prompt` into `state`, which must already hold `prompt[:state.pos]`.

        kept: snapshots; the longest one that `prompt` strictly extends and that is ahead of `state` is
              restored (the state passed in is then released and `self.state` is a copy of the snapshot).
        marks: positions whose state is snapshotted into `self.kept` for reuse; a chunk ends at each.
        starts: further positions at which a chunk must start.
        """
        tokens = _tokens(prompt, int(model.config.vocab_size))
        width = chunk_width(model, chunk_cap)
        kept_at = frozenset(_positions(marks, "marks", len(tokens)))
        planned = tuple(sorted(kept_at | set(_positions(starts, "starts", len(tokens)))))
        snapshot = _longest_extended(tokens, [kept] if isinstance(kept, KeptPrefix) else list(kept))
        if snapshot is not None and len(snapshot.tokens) > state.pos:
            restored = snapshot.state.copy()
            state.release()
            state = restored
        if not state.pos < len(tokens):
            raise PrefillError(
                f"the state already holds {state.pos} tokens; a prompt of {len(tokens)} "
                "tokens must extend it by at least one"
            )
        return cls(model, state, tokens, width, planned, kept_at, keep_logits)

    @property
    def pos(self) -> int:
        return int(self.state.pos)

    @property
    def done(self) -> bool:
        return self.pos >= len(self.prompt)

    def step(self, width: int | None = None) -> bool:
        """Run exactly one chunk; True when the pass is done.

        width: a new chunk width from here on; ignored (the cuts never move) unless the model declares chunk
        invariance.
        """
        if self.done:
            raise PrefillError(f"prefill of {len(self.prompt)} tokens is already done")
        if width is not None and chunk_invariant(self.model) and width != self.width:
            self.width = chunk_width(self.model, width)
            self.cuts = self.cuts[: self.chunks_run] + plan_cuts(
                self.pos, len(self.prompt), self.width, self.planned
            )
        start, end = self.pos, self.cuts[self.chunks_run]
        # [end - start, vocab]
        logits = self.model.forward(np.asarray(self.prompt[start:end], np.int64), self.state)
        self.chunks_run += 1
        assert self.state.pos == end, (self.state.pos, end)
        self.logits = logits[-1]
        if self.chunk_logits is not None:
            self.chunk_logits.append(logits)
        if end in self.marks:
            self.kept.append(KeptPrefix(self.prompt[:end], self.state.copy()))
        return self.done

    def run(self, cancel: Any = None) -> bool:
        """The whole pass: step until done; True when the pass completed.

        With a cancel token, poll it before each chunk and stop when it fires: the state stays at the last
        finished chunk's end, and a later open from there cuts as the whole pass does.
        """
        while not self.done:
            if cancel is not None and cancel.is_cancelled():
                return False
            self.step()
        return True

    def remaining_cuts(self) -> tuple[int, ...]:
        return self.cuts[self.chunks_run :]


def _tokens(prompt: Sequence[int], vocab: int) -> tuple[int, ...]:
    arr = np.asarray(prompt)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise PrefillError(f"prompt must be a non-empty 1-d sequence of ints, got {arr.shape} {arr.dtype}")
    if arr.min() < 0 or arr.max() >= vocab:
        raise PrefillError(f"prompt token ids must lie in [0, {vocab}), got min {arr.min()} max {arr.max()}")
    return tuple(int(t) for t in arr)


def _positions(values: Iterable[int], name: str, n: int) -> list[int]:
    out = [int(v) for v in values]
    bad = [v for v in out if not 0 < v < n]
    if bad:
        raise PrefillError(f"{name} must lie strictly inside the prompt (0, {n}), got {bad}")
    return out


def _longest_extended(tokens: tuple[int, ...], kept: list[KeptPrefix]) -> KeptPrefix | None:
    best = None
    for snap in kept:
        n = len(snap.tokens)
        if n < len(tokens) and tokens[:n] == snap.tokens and (best is None or n > len(best.tokens)):
            best = snap
    return best
