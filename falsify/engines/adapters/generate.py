"""What the adapters (hf, llamacpp, broken) share around one `generate` call: `AdapterSession.generate`, the Session
protocol's signature once, checks the arguments before the library sees them (one clear ValueError naming the
argument, never an error from deep inside torch or llama.cpp), counts the cancel token's polls, runs the adapter's
own loop (`_generate`, which reports the forwards it measured) and builds the run record from those."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from falsify.engines.cancel import HarnessCancel
from falsify.engines.protocol import RunRecord


def token_ids(tokens: Any, what: str, vocab: int) -> list[int]:
    """Plain int token ids, each checked against the vocabulary."""
    if isinstance(tokens, str | bytes):
        raise ValueError(f"{what} must be a sequence of token ids, got {type(tokens).__name__}")
    arr = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens)
    if arr.size == 0:
        return []
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"{what} must be a 1-D sequence of int token ids, got shape {arr.shape} dtype {arr.dtype}"
        )
    bad = np.flatnonzero((arr < 0) | (arr >= vocab))
    if bad.size:
        raise ValueError(f"{what}[{int(bad[0])}] = {int(arr[bad[0]])} is outside the vocabulary [0, {vocab})")
    return [int(t) for t in arr]


def generate_arguments(
    prompt: Sequence[int] | np.ndarray,
    max_tokens: int | np.integer,
    stop_tokens: Iterable[int],
    cancel: Any,
    sampler: Callable[[np.ndarray], int] | None,
    *,
    vocab: int,
    positions: int,
) -> tuple[list[int], list[int], Any]:
    """(prompt ids, stop ids, cancel token) of a `generate` call, or a ValueError. The library generates at
    least one token (max_tokens >= 1) within `positions` (its context); no cancel token means one that never
    cancels (HarnessCancel.never())."""
    ids = token_ids(prompt, "prompt", vocab)
    if not ids:
        raise ValueError("prompt is empty: generate needs at least one token to prefill")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int | np.integer) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if len(ids) + max_tokens - 1 > positions:
        raise ValueError(
            f"prompt of {len(ids)} tokens with max_tokens={max_tokens} exceeds the model's {positions} positions"
        )
    stops = token_ids(stop_tokens, "stop_tokens", vocab)
    cancel = HarnessCancel.never() if cancel is None else cancel
    if not (callable(getattr(cancel, "is_cancelled", None)) and hasattr(cancel, "polls")):
        raise ValueError(f"cancel must have is_cancelled() and polls, got {type(cancel).__name__}")
    if sampler is not None and not callable(sampler):
        raise ValueError(
            f"sampler must be callable (logits [vocab] -> token id), got {type(sampler).__name__}"
        )
    return ids, stops, cancel


def run_record(
    tokens: Sequence[int],
    prefill: Sequence[tuple[int, int]],
    decode: Sequence[tuple[int, int]],
    *,
    forwards: int,
    polls: int,
    prompt_len: int,
    stops: Iterable[int],
    max_tokens: int,
) -> RunRecord:
    """The run record of one generate call. prefill, decode: the adapter's (tokens fed, start position) of each
    forward on the prompt and on an emitted token; forwards: every forward started, so the ones whose logits
    produced no emitted token count as wasted."""
    if tokens and tokens[-1] in set(stops):
        reason = "stop_token"
    elif len(tokens) >= max_tokens:
        reason = "max_tokens"
    else:
        reason = "cancelled"
    return RunRecord(
        tokens=tuple(tokens),
        emitted=len(tokens),
        decode_forwards=len(decode),
        prefill_forwards=len(prefill),
        polls=polls,
        positions=tuple(start for _, start in decode),
        wasted_forwards=forwards - len(tokens),
        stop_reason=reason,
        prompt_len=prompt_len,
    )


R = TypeVar("R", bound=RunRecord)


@dataclass(frozen=True, slots=True)
class GenerateCall:
    """One generate call's arguments, checked."""

    prompt: list[int]
    max_tokens: int
    stops: list[int]
    cancel: Any  # a cancel token (HarnessCancel.never() when none was given)
    sampler: Callable[[np.ndarray], int] | None
    on_token: Callable[[int], object] | None


@dataclass(frozen=True, slots=True)
class Measured:
    """What an adapter's loop saw: the tokens it emitted and each forward as (tokens fed, start position)."""

    tokens: list[int]
    prefill: list[tuple[int, int]]  # forwards on the prompt
    decode: list[tuple[int, int]]  # forwards on an emitted token
    forwards: int  # every forward started (an aborted one included)
    extra: dict[str, Any] = field(default_factory=dict)  # the adapter's own fields of its record type


class AdapterSession(Generic[R]):
    """The Session protocol's generate for an adapter: subclasses set `model` and `record` (RunRecord, or a
    subclass whose further fields come from Measured.extra) and implement `_generate`."""

    model: Any
    record: type[R]

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Any = None,
        stop_tokens: Iterable[int] = (),
        sampler: Callable[[np.ndarray], int] | None = None,
        on_token: Callable[[int], object] | None = None,
    ) -> R:
        config = self.model.config
        ids, stops, cancel = generate_arguments(
            prompt,
            max_tokens,
            stop_tokens,
            cancel,
            sampler,
            vocab=config.vocab_size,
            positions=config.max_position_embeddings,
        )
        polls_before = cancel.polls
        seen = self._generate(GenerateCall(ids, int(max_tokens), stops, cancel, sampler, on_token))
        record = run_record(
            seen.tokens,
            seen.prefill,
            seen.decode,
            forwards=seen.forwards,
            polls=cancel.polls - polls_before,
            prompt_len=len(ids),
            stops=stops,
            max_tokens=int(max_tokens),
        )
        return self.record(**asdict(record), **seen.extra)

    def _generate(self, call: GenerateCall) -> Measured:
        raise NotImplementedError
