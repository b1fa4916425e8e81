"""A deliberately broken engine: the reference model under a generate loop that polls after the forward.

This is the bug apr-serve-cancellation-v1 comes from, written as an outside adapter would write it (only the
Model protocol: new_state, forward) rather than as a mutant of reference/session.py: the forward that finds
the run cancelled has already run, and its logits are thrown away. With a budget of n polls the run emits n
tokens and runs n decode forwards, so the falsifiers must report FALSIFY-SERVE-CANCEL-002
(decode_forwards == emitted - 1) red on it: `falsify gate --engine falsify.engines.adapters.broken:BrokenEngine`.

Only `generate` is offered: every other capability is NOT APPLICABLE, so the gate checks just this loop. The model
is the reference engine's, found by name at run time (`falsify.engines.loading`), so the harness does not depend
on the reference distribution; without it, load_model is a one-line EngineError naming what to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from falsify.engines.cancel import HarnessCancel
from falsify.engines.loading import load_engine
from falsify.engines.protocol import RunRecord


class BrokenSession:
    def __init__(self, model: Any) -> None:
        self.model = model

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Any = None,
        stop_tokens: Iterable[int] = (),
        sampler: Callable[[np.ndarray], int] | None = None,
        on_token: Callable[[int], object] | None = None,
    ) -> RunRecord:
        cancel = HarnessCancel.never() if cancel is None else cancel
        sample = sampler or (lambda logits: int(np.argmax(logits)))
        stops = frozenset(int(t) for t in stop_tokens)
        state = self.model.new_state()
        polls_before = cancel.polls
        tokens: list[int] = []
        positions: list[int] = []
        prefill_forwards = decode_forwards = wasted = 0
        cancelled = False
        while len(tokens) < max_tokens and not (tokens and tokens[-1] in stops):
            if not tokens:
                logits = self.model.forward(np.asarray(prompt, np.int64), state)[-1]
                prefill_forwards += 1
            else:
                positions.append(int(state.pos))
                logits = self.model.forward(np.asarray(tokens[-1:], np.int64), state)[-1]
                decode_forwards += 1
            if cancel.is_cancelled():  # THE BUG: polled after the forward, whose logits are now thrown away
                wasted += 1
                cancelled = True
                break
            tokens.append(int(sample(logits)))
            if on_token is not None:
                on_token(tokens[-1])
        if tokens and tokens[-1] in stops:
            reason = "stop_token"
        elif not cancelled and len(tokens) >= max_tokens:
            reason = "max_tokens"
        else:
            reason = "cancelled"
        return RunRecord(
            tuple(tokens),
            len(tokens),
            decode_forwards,
            prefill_forwards,
            cancel.polls - polls_before,
            tuple(positions),
            wasted,
            reason,
            len(prompt),
        )


class BrokenEngine:
    name = "broken"
    capabilities = frozenset({"generate"})

    def load_model(self, weights: str = "f32") -> Any:
        return load_engine("reference").load_model(weights)

    def cancel_token(self) -> type[HarnessCancel]:
        return HarnessCancel

    def supports(self, capability: str) -> str | None:
        if capability in self.capabilities:
            return None
        return f"the broken adapter only plants a bug in generate, not in {capability!r}"

    def session(self, model: Any) -> BrokenSession:
        return BrokenSession(model)
