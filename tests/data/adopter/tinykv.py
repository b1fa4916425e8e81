"""An adopter's numpy engine with a KV cache, for tests/test_adopter.py: tinyrnn.py's Elman RNN whose readout also
attends to a cache of every consumed position, with the `generate` and `prefill` capabilities (the stepped prefill
is the harness's SteppedPrefill over this model's forward).

    h_t = tanh(E[x_t] + W h_{t-1})                         E: [V, D], W: [D, D]
    kv[t] = E[x_t]                                         kv: [max_pos, D], the cache, written at position t
    logits_t = (h_t + mean(kv[0..t])) @ U                  U: [D, V]

The state is (pos, h, kv); its bytes are pos, h and the cache of the consumed positions. Each token is one step, so
a forward over a chunk gives the bytes of the same tokens fed one call at a time (chunk_size 1). Issue 45: a copy
that shares the cache with its original passed FALSIFY-SERVE-PREFILL-020 while the check advanced both alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from tinyrnn import Budget, D, Rnn, Session, V

from falsify.engines.prefill import SteppedPrefill

MAX_POS = 2048


class KvState:
    """One stream's state: tokens consumed, the hidden vector and the cache of every consumed position."""

    def __init__(self) -> None:
        self.pos = 0
        self.h = np.zeros(D, np.float32)
        self.kv = np.zeros((MAX_POS, D), np.float32)

    def to_bytes(self) -> bytes:
        return self.pos.to_bytes(8, "little") + self.h.tobytes() + self.kv[: self.pos].tobytes()

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def copy(self) -> KvState:
        twin = KvState()
        twin.pos, twin.h = self.pos, self.h.copy()
        twin.kv = self.kv.copy()
        return twin

    def release(self) -> None:
        pass


class KvRnn(Rnn):
    def new_state(self, pool: object = None) -> KvState:
        return KvState()

    def forward(self, tokens: Sequence[int], state: Any) -> np.ndarray:  # [T] -> f32[T, V]
        ids = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if any(not 0 <= t < V for t in ids):
            raise ValueError(f"a token id outside [0, {V}): {ids}")
        if state.pos + len(ids) > MAX_POS:
            raise ValueError(f"{state.pos} + {len(ids)} positions exceed the cache of {MAX_POS}")
        out = np.empty((len(ids), V), np.float32)
        for i, t in enumerate(ids):
            state.h = np.tanh(self.E[t] + self.W @ state.h).astype(np.float32)
            state.kv[state.pos] = self.E[t]
            state.pos += 1
            out[i] = (state.h + state.kv[: state.pos].mean(axis=0)) @ self.U
        return out


class TinyKvEngine:
    name = "tinykv"

    def supports(self, capability: str) -> str | None:
        return None if capability in ("generate", "prefill") else f"tinykv has no {capability}"

    def load_model(self, weights: str = "f32") -> KvRnn:
        return KvRnn()

    def session(self, model: KvRnn) -> Session:
        return Session(model)

    def prefill(self, model: KvRnn, state: KvState, prompt: Sequence[int], **options: Any) -> SteppedPrefill:
        return SteppedPrefill.open(model, state, prompt, **options)

    def cancel_token(self) -> type[Budget]:
        return Budget


def make_engine() -> TinyKvEngine:
    return TinyKvEngine()
