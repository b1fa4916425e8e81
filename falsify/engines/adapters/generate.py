"""What the adapters (hf, llamacpp, broken) share around one `generate` call: `AdapterSession` checks the arguments
before the library sees them (falsify.engines.calls, with the model's vocabulary and context: one clear ValueError
naming the argument, never an error from deep inside torch or llama.cpp), counts the cancel token's polls, runs the
adapter's own loop (`_generate`, which reports the forwards it measured) and builds the run record from those."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from falsify.engines.calls import CheckedGenerate, GenerateCall, generate_call
from falsify.engines.protocol import RunRecord


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
class Measured:
    """What an adapter's loop saw: the tokens it emitted and each forward as (tokens fed, start position)."""

    tokens: list[int]
    prefill: list[tuple[int, int]]  # forwards on the prompt
    decode: list[tuple[int, int]]  # forwards on an emitted token
    forwards: int  # every forward started (an aborted one included)
    extra: dict[str, Any] = field(default_factory=dict)  # the adapter's own fields of its record type


class AdapterSession(CheckedGenerate[R]):
    """The Session protocol's generate for an adapter: subclasses set `model` and `record` (RunRecord, or a
    subclass whose further fields come from Measured.extra) and implement `_generate`."""

    model: Any
    record: type[R]

    def _check(
        self, prompt: Any, max_tokens: Any, stop_tokens: Any, cancel: Any, sampler: Any, on_token: Any
    ) -> GenerateCall:
        config = self.model.config
        return generate_call(
            prompt,
            max_tokens,
            stop_tokens,
            cancel,
            sampler,
            on_token,
            vocab=config.vocab_size,
            positions=config.max_position_embeddings,
            nonempty=True,
            least=1,
        )

    def _run(self, call: GenerateCall) -> R:
        polls_before = call.cancel.polls
        seen = self._generate(call)
        record = run_record(
            seen.tokens,
            seen.prefill,
            seen.decode,
            forwards=seen.forwards,
            polls=call.cancel.polls - polls_before,
            prompt_len=len(call.prompt),
            stops=call.stops,
            max_tokens=call.max_tokens,
        )
        return self.record(**asdict(record), **seen.extra)

    def _generate(self, call: GenerateCall) -> Measured:
        raise NotImplementedError
