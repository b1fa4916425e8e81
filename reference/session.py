"""One stream's generation loop: prefill a prompt, then decode token by token, polling a cancel token.

`Session.generate` (falsify.engines.calls.CheckedGenerate: the Session protocol's signature) checks its
arguments in `Session._check`, then runs the loop in `Session._run`, the claim of contract
apr-serve-cancellation-v1, in this order:

    ended (a stop token, or max_tokens)?  -> stop, before any further forward
    poll the cancel token                 -> stop, before any further forward
    one forward: the prefill for the first token, else a decode forward on the previous token
    emit the token sampled from those logits

so a run cancelled after n polls emits n tokens and runs n - 1 decode forwards (the first token comes from
the prefill), and no run ever pays for a forward whose logits it throws away. The engine this follows first
polled after the decode forward: with a budget of 8 polls it emitted 8 tokens and ran 8 decode passes, the
last one wasted. The mutants in mutants/ (poll-after-forward, poll-deleted, forward-after-last-token) each
undo one line of that order; they are matched by source text, so each statement of `_run` is unique there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from falsify.engines.calls import CheckedGenerate, GenerateCall, generate_call
from reference.sampling import greedy


class StopReason(StrEnum):
    CANCELLED = "cancelled"
    MAX_TOKENS = "max_tokens"
    STOP_TOKEN = "stop_token"


@dataclass(frozen=True, slots=True)
class Run:
    """What one `generate` call emitted and what it cost."""

    tokens: tuple[int, ...]  # emitted, in order
    emitted: int  # len(tokens)
    decode_forwards: int  # one-token forwards on a previously emitted token
    prefill_forwards: int  # model.forward calls spent on the prompt (0 when cancelled first, or all reused)
    polls: int  # cancel-token polls this run made (0 for CancelToken.never(), whose polls are free)
    positions: tuple[int, ...]  # the position of the token each decode forward consumed, in order
    wasted_forwards: int  # forwards whose logits produced no emitted token
    stop_reason: StopReason
    prompt_len: int  # tokens in the prompt
    reused: int  # prompt tokens the session's state already held; the prefill ran over prompt[reused:]


@dataclass(slots=True)
class _Meter:
    """Per-run counters, kept where the work happens so the record is measured, not derived."""

    prefill_forwards: int = 0
    decode_forwards: int = 0
    positions: list[int] = field(default_factory=list)
    reused: int = 0
    unused: int = 0  # forwards behind the current logits while no token has been sampled from them
    wasted: int = 0

    def took(self, forwards: int) -> None:
        """New logits from `forwards` forwards; the previous ones, if never sampled, were wasted."""
        self.wasted += self.unused
        self.unused = forwards

    def emit(self, token: int) -> int:
        """A token was sampled from the current logits: the forwards behind them paid off."""
        self.unused = 0
        return token


def _ended(tokens: list[int], max_tokens: int, stops: frozenset[int]) -> StopReason | None:
    """Why the run is over before it polls again, or None while it may go on."""
    if tokens and tokens[-1] in stops:
        return StopReason.STOP_TOKEN
    if len(tokens) >= max_tokens:
        return StopReason.MAX_TOKENS
    return None


class Session(CheckedGenerate[Run]):
    """A model and one stream's state, with the exact token history that state has consumed.

    A later `generate` whose prompt starts with that history prefills only the rest of the prompt. After a run
    the history is the prompt plus every emitted token but the last (which was never fed back), so a chat turn
    `prompt + run.tokens + more` reuses the whole state.
    """

    def __init__(self, model: Any, *, pool: Any = None) -> None:
        self.model = model
        self._pool = pool
        self.state = model.new_state(pool)
        self.history: list[int] = []  # tokens the state has consumed, in order; len == state.pos
        self._logits: np.ndarray | None = None  # [vocab] logits after the last token of history

    def _check(
        self, prompt: Any, max_tokens: Any, stop_tokens: Any, cancel: Any, sampler: Any, on_token: Any
    ) -> GenerateCall:
        """Refuse a bad call before touching any state: also a prompt that is empty, an id outside the vocabulary
        and a run past the context, as an engine must (falsify.engines.calls)."""
        config = self.model.config
        return generate_call(
            prompt,
            max_tokens,
            stop_tokens,
            cancel,  # None: a token that never cancels (HarnessCancel.never(), CancelToken's own class)
            sampler,
            on_token,
            vocab=config.vocab_size,
            positions=config.max_position_embeddings,
            nonempty=True,
        )

    def _run(self, call: GenerateCall) -> Run:
        """Emit up to `max_tokens` tokens continuing `prompt`; the module docstring gives the loop's order."""
        prompt, max_tokens, stops, cancel = call.prompt, call.max_tokens, frozenset(call.stops), call.cancel
        sampler, on_token = greedy if call.sampler is None else call.sampler, call.on_token
        polls_before = cancel.polls
        meter = _Meter()
        tokens: list[int] = []
        while True:
            if _ended(tokens, max_tokens, stops):
                break
            if cancel.is_cancelled():
                break
            logits = self._next_logits(prompt, tokens, meter)
            tokens.append(meter.emit(sampler(logits)))
            if on_token is not None:
                on_token(tokens[-1])
        meter.took(0)  # the last logits, if no token came from them, were wasted
        return Run(
            tokens=tuple(tokens),
            emitted=len(tokens),
            decode_forwards=meter.decode_forwards,
            prefill_forwards=meter.prefill_forwards,
            polls=cancel.polls - polls_before,
            positions=tuple(meter.positions),
            wasted_forwards=meter.wasted,
            stop_reason=_ended(tokens, max_tokens, stops) or StopReason.CANCELLED,
            prompt_len=len(prompt),
            reused=meter.reused,
        )

    def reset(self) -> None:
        """Forget the history: a fresh state (the old one's KV pages go back to their pool)."""
        self.state.release()
        self.state = self.model.new_state(self._pool)
        self.history = []
        self._logits = None

    def _next_logits(self, prompt: list[int], tokens: list[int], meter: _Meter) -> np.ndarray:  # -> [vocab]
        """The logits the next token is sampled from: the prompt's for the first, else a decode forward."""
        if not tokens:
            return self._start(prompt, meter)
        return self._decode(tokens[-1], meter)

    def _start(self, prompt: list[int], meter: _Meter) -> np.ndarray:  # [T] -> [vocab]
        """Bring the state to the end of `prompt`, reusing the history when it is a prefix of the prompt."""
        n = len(self.history)
        if n and self.history != prompt[:n]:
            self.reset()
            n = 0
        meter.reused = n
        if n == len(prompt):  # the state already holds the whole prompt: its last logits are kept
            assert self._logits is not None
            meter.took(0)
            return self._logits
        logits, forwards = self._prefill(prompt[n:])
        self.history.extend(prompt[n:])
        self._logits = logits
        meter.prefill_forwards += forwards
        meter.took(forwards)
        return logits

    def _prefill(self, prompt: list[int]) -> tuple[np.ndarray, int]:  # [T] -> [vocab], forward calls
        """Run the model over `prompt` on this session's state: the logits after its last token.

        One stepped-prefill pass (reference.prefill, the chunk body the lane host steps) whose chunk cap
        covers the whole suffix: alone, nothing runs between chunks, so it is one forward call.
        """
        from reference.prefill import Prefill

        cap = -(-len(prompt) // self.model.config.chunk_size) * self.model.config.chunk_size
        whole = Prefill.open(self.model, self.state, [*self.history, *prompt], chunk_cap=cap)
        whole.run()
        assert whole.logits is not None  # the suffix is never empty, so at least one chunk ran
        return whole.logits, whole.chunks_run

    def _decode(self, token: int, meter: _Meter) -> np.ndarray:  # -> [vocab]
        """One decode forward: feed back the previously emitted token."""
        meter.positions.append(self.state.pos)
        logits = self.model.forward(np.asarray([token], dtype=np.int64), self.state)[-1]
        self.history.append(token)
        self._logits = logits
        meter.decode_forwards += 1
        meter.took(1)
        return logits
