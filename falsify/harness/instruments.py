"""Harness instruments: a cancel token and a model proxy the harness owns, so a falsifier judges what the harness
measured rather than what the engine's run record says about itself (an engine's self-report is a claim to check).

    from falsify.harness.instruments import CountingCancel, CountingModel   # also falsify.CountingCancel, ...

    cancel = CountingCancel(budget=3)      # first 3 polls answer False, every later poll True
    model = CountingModel(engine.load_model("f32"))
    run = engine.session(model).generate(prompt, 8, cancel=cancel)
    cancel.polls                           # polls the engine made, counted by the harness
    model.forwards                         # forward calls, counted by the harness
    model.split(len(prompt))               # (prefill calls, decode calls): calls starting before / at or after
                                           # the end of the prompt

CountingCancel(budget=None)
    falsify.engines.cancel.HarnessCancel (the engine protocol's CancelToken): `is_cancelled()` is the poll an
    engine makes (counted, thread-safe), `cancel()` sets the flag from any thread, `peek()` looks without
    counting, `polls` is the count. With a budget of n the first n polls answer False and every later one True; a
    budget of 0 permits no token. `with_budget(n)` and `never()` are the factory's other constructors; a `never()`
    token still counts its polls (the harness counts every poll; only the engine's record may leave them out).

CountingModel(model)
    Wraps any Model (new_state, forward, config, ...): every attribute but `forward` is the wrapped model's, so a
    session, a prefill or a lane host built on the proxy runs the engine's own code. Each `forward(tokens,
    state)` call is recorded as a `Forward(start, tokens, stream)` before it runs: `start` is `state.pos` at the
    call, `tokens` the ids fed, `stream` a small ordinal per distinct state object (first seen = 0). `calls` is
    the list, `forwards` its length, `tokens_fed` the total tokens, `stream_of(state)` a state's ordinal,
    `reset()` forgets them (e.g. after a warm-up run). Thread-safe. Only calls through this object are seen: an engine that must advance state only through
    the model it is given (the engine protocol's rule) cannot hide a forward from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Self

from falsify.engines.cancel import HarnessCancel

__all__ = ["CountingCancel", "CountingModel", "Forward"]


class CountingCancel(HarnessCancel):
    """The engines' HarnessCancel, but `never()` counts its polls too; see the module docstring."""

    __slots__ = ()

    @classmethod
    def never(cls) -> Self:
        """Never cancels (cancel() refuses), yet every poll is counted."""
        return cls(None, _can_cancel=False)


@dataclass(frozen=True, slots=True)
class Forward:
    """One forward call the proxy saw."""

    start: int  # state.pos when the call began: the position of tokens[0]
    tokens: tuple[int, ...]  # the ids fed, in order
    stream: int  # ordinal of the state object (first state seen = 0)


class CountingModel:
    """A model proxy recording every forward call; see the module docstring."""

    def __init__(self, model: Any) -> None:
        if isinstance(model, CountingModel):
            raise ValueError(
                "CountingModel: the model is already a CountingModel; wrap the engine's model once"
            )
        if not callable(getattr(model, "forward", None)):
            raise ValueError(f"CountingModel: {type(model).__name__} has no forward(tokens, state)")
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_calls", [])
        object.__setattr__(self, "_streams", {})  # id(state) -> ordinal; the states are kept alive below
        object.__setattr__(self, "_states", [])

    def forward(self, tokens: Any, state: Any) -> Any:
        self.record(int(state.pos), tokens, state)
        return self._model.forward(tokens, state)

    def record(self, start: int, tokens: Any, state: Any) -> None:
        """Record one forward that an adapter saw at its engine's own forward boundary.

        For adapters (ours, harness-side) over a library whose generate loop never calls `forward` on the model
        object, e.g. a torch forward pre-hook in the HF adapter: the count still comes from the harness's
        instrument, not from the engine's run record. `state` is any object identifying the stream.
        """
        fed = tuple(int(t) for t in _flat(tokens))
        with self._lock:
            stream = self._streams.get(id(state))
            if stream is None:
                stream = self._streams[id(state)] = len(self._states)
                self._states.append(state)  # keeps id(state) unique while recorded
            self._calls.append(Forward(int(start), fed, stream))

    def stream_of(self, state: Any) -> int | None:
        """The ordinal `Forward.stream` gives calls on `state`; None if no call on it was recorded."""
        with self._lock:
            return self._streams.get(id(state))

    @property
    def wrapped(self) -> Any:
        """The engine's own model object."""
        return self._model

    @property
    def calls(self) -> list[Forward]:
        """Every forward call since construction or the last reset(), in order (a copy)."""
        with self._lock:
            return list(self._calls)

    @property
    def forwards(self) -> int:
        with self._lock:
            return len(self._calls)

    @property
    def tokens_fed(self) -> int:
        with self._lock:
            return sum(len(c.tokens) for c in self._calls)

    def split(self, prompt_len: int) -> tuple[list[Forward], list[Forward]]:
        """(prefill calls, decode calls): a call starting before `prompt_len` works on the prompt; one starting
        at or after it consumes an emitted token. For a single-stream run after reset()."""
        calls = self.calls
        return [c for c in calls if c.start < prompt_len], [c for c in calls if c.start >= prompt_len]

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()
            self._streams.clear()
            self._states.clear()

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not defined here: config, new_state, new_pool, chunk_invariant, ...
        return getattr(object.__getattribute__(self, "_model"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"CountingModel is read-only; set {name!r} on the wrapped model")

    def __repr__(self) -> str:
        return f"CountingModel({self._model!r}, forwards={self.forwards})"


def _flat(tokens: Any) -> list[Any]:
    """Token ids of a forward call's argument (a 1-D array or sequence), as a list."""
    if hasattr(tokens, "tolist"):
        out = tokens.tolist()
        return out if isinstance(out, list) else [out]
    return list(tokens)
