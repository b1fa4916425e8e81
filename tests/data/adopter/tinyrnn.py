"""An adopter's own engine, for tests/test_adopter.py: a tiny Elman RNN in numpy, neither the reference engine nor
`falsify init`'s example, behind the engine protocol (docs/engines.md) with the `generate` capability only.

    h_t = tanh(E[x_t] + W h_{t-1})       E: [V, D], W: [D, D]
    logits_t = h_t @ U                   U: [D, V]

Weights come from a fixed seed. The state is (pos, h); each token is one step, so a forward over a chunk gives the
bytes of the same tokens fed one call at a time. The loop in `Session.generate` polls the cancel token before
every forward that could produce a token; tests/test_adopter.py plants bugs in it (mutants/ of the adopter's repo).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

V, D = 96, 24


@dataclass(frozen=True)
class Config:
    vocab_size: int = V
    max_position_embeddings: int = 2048
    chunk_size: int = 1


class Hidden:
    """One stream's state: tokens consumed and the hidden vector."""

    def __init__(self) -> None:
        self.pos = 0
        self.h = np.zeros(D, np.float32)

    def to_bytes(self) -> bytes:
        return self.pos.to_bytes(8, "little") + self.h.tobytes()

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def copy(self) -> Hidden:
        twin = Hidden()
        twin.pos, twin.h = self.pos, self.h.copy()
        return twin

    def release(self) -> None:
        pass


class Rnn:
    config = Config()

    def __init__(self) -> None:
        rng = np.random.default_rng(20261201)
        self.E = rng.standard_normal((V, D)).astype(np.float32)
        self.W = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
        self.U = rng.standard_normal((D, V)).astype(np.float32)

    def new_state(self, pool: object = None) -> Hidden:
        return Hidden()

    def forward(self, tokens: Sequence[int], state: Hidden) -> np.ndarray:  # [T] -> f32[T, V]
        ids = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if any(not 0 <= t < V for t in ids):
            raise ValueError(f"a token id outside [0, {V}): {ids}")
        out = np.empty((len(ids), V), np.float32)
        for i, t in enumerate(ids):
            state.h = np.tanh(self.E[t] + self.W @ state.h).astype(np.float32)
            state.pos += 1
            out[i] = state.h @ self.U
        return out


class Budget:
    """A cancel token: cancel() from any thread, or with_budget(n): false to n polls, then true."""

    def __init__(self, budget: int | None = None, counting: bool = True) -> None:
        self.budget, self.counting, self.polls = budget, counting, 0
        self._set = threading.Event()

    @classmethod
    def with_budget(cls, n: int) -> Budget:
        return cls(budget=n)

    @classmethod
    def never(cls) -> Budget:
        return cls(counting=False)

    def cancel(self) -> None:
        self._set.set()

    def is_cancelled(self) -> bool:
        if not self.counting:
            return False
        self.polls += 1
        return self._set.is_set() or (self.budget is not None and self.polls > self.budget)


@dataclass
class Record:
    tokens: list[int] = field(default_factory=list)
    emitted: int = 0
    decode_forwards: int = 0
    prefill_forwards: int = 0
    polls: int = 0
    positions: list[int] = field(default_factory=list)
    wasted_forwards: int = 0
    stop_reason: str = "cancelled"
    prompt_len: int = 0


def argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


def finished(out: list[int], max_tokens: int, stops: set[int]) -> str | None:
    if out and out[-1] in stops:
        return "stop_token"
    if len(out) >= max_tokens:
        return "max_tokens"
    return None


class Session:
    def __init__(self, model: Rnn) -> None:
        self.model = model

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Budget | None = None,
        stop_tokens: Iterable[int] = (),
        sampler: Callable[[np.ndarray], int] = argmax,
        on_token: Callable[[int], object] | None = None,
    ) -> Record:
        cancel = cancel if cancel is not None else Budget.never()
        stops = set(stop_tokens)
        state = self.model.new_state()
        rec = Record(prompt_len=len(prompt))
        start = cancel.polls
        out: list[int] = []
        logits = None
        while True:
            if finished(out, max_tokens, stops):
                break
            if cancel.is_cancelled():
                break
            logits = self.advance(prompt, out, state, rec)
            out.append(int(sampler(logits)))
            if on_token is not None:
                on_token(out[-1])
        rec.tokens, rec.emitted = out, len(out)
        rec.polls = cancel.polls - start
        rec.stop_reason = finished(out, max_tokens, stops) or "cancelled"
        return rec

    def advance(self, prompt: Sequence[int], out: list[int], state: Hidden, rec: Record) -> np.ndarray:
        """The prompt on the first step, then the previous token: the logits of the last position."""
        if not out:
            rec.prefill_forwards += 1
            return self.model.forward(list(prompt), state)[-1]
        rec.positions.append(state.pos)
        rec.decode_forwards += 1
        return self.model.forward([out[-1]], state)[-1]


class TinyRnnEngine:
    name = "tinyrnn"

    def supports(self, capability: str) -> str | None:
        return None if capability == "generate" else f"tinyrnn has no {capability}"

    def load_model(self, weights: str = "f32") -> Rnn:
        return Rnn()

    def session(self, model: Rnn) -> Session:
        return Session(model)

    def cancel_token(self) -> type[Budget]:
        return Budget


def make_engine() -> TinyRnnEngine:
    return TinyRnnEngine()
