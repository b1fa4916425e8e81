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

from typing import Any

import numpy as np

from falsify.engines.adapters.generate import AdapterSession, Measured
from falsify.engines.calls import GenerateCall
from falsify.engines.cancel import HarnessCancel
from falsify.engines.loading import load_engine
from falsify.engines.protocol import RunRecord


class BrokenSession(AdapterSession[RunRecord]):
    record = RunRecord

    def __init__(self, model: Any) -> None:
        self.model = model

    def _generate(self, call: GenerateCall) -> Measured:
        sample = call.sampler or (lambda logits: int(np.argmax(logits)))
        state = self.model.new_state()
        tokens: list[int] = []
        prefill: list[tuple[int, int]] = []
        decode: list[tuple[int, int]] = []
        while len(tokens) < call.max_tokens and not (tokens and tokens[-1] in call.stops):
            fed = call.prompt if not tokens else tokens[-1:]
            (decode if tokens else prefill).append((len(fed), int(state.pos)))
            logits = self.model.forward(np.asarray(fed, np.int64), state)[-1]
            # THE BUG: polled after the forward, whose logits are now thrown away
            if call.cancel.is_cancelled():
                break
            tokens.append(int(sample(logits)))
            if call.on_token is not None:
                call.on_token(tokens[-1])
        return Measured(tokens, prefill, decode, forwards=len(prefill) + len(decode))


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
