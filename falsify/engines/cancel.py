"""The harness's cancel token: what `engine.cancel_token()` hands out for every engine the harness adapts (hf,
llamacpp, broken, wire engines), so every engine is polled through the same instrument.

    token = HarnessCancel()              # cancelled by cancel(), from any thread
    token = HarnessCancel.with_budget(n) # the first n polls answer False, every later one True (0: no token)
    token = HarnessCancel.never()        # never cancels; its polls are free and not counted (polls stays 0)

`is_cancelled()` is the engine's poll: it counts one poll (thread-safe), then answers. `peek()` looks without
counting, so an onlooker never changes what the run observes. `polls` is the count. This is the engine protocol's
CancelToken (falsify/engines/protocol.py); falsify.harness.instruments.CountingCancel is the same token whose
`never()` also counts its polls, and the reference engine's CancelToken (reference/cancel.py) is this token under
its own name.
"""

from __future__ import annotations

import threading
from typing import Self

__all__ = ["HarnessCancel"]


class HarnessCancel:
    """A counting cancel token; see the module docstring."""

    __slots__ = ("_budget", "_can_cancel", "_counting", "_event", "_lock", "_polls")

    def __init__(
        self, budget: int | None = None, *, _can_cancel: bool = True, _counting: bool = True
    ) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"cancel budget must be an int >= 0 or None, got {budget!r}")
        self._budget = budget  # polls answered False before the token cancels itself; None: no budget
        self._can_cancel = _can_cancel
        self._counting = _counting  # False only for never(): its polls are free
        self._event = threading.Event()  # set by cancel(), from any thread
        self._lock = threading.Lock()  # guards _polls across polling threads
        self._polls = 0

    @classmethod
    def with_budget(cls, n: int) -> Self:
        """The first n polls answer False, every later poll True (n: an int >= 0; None is no budget)."""
        if n is None:
            raise ValueError("cancel budget must be an int >= 0, got None")
        return cls(n)

    @classmethod
    def never(cls) -> Self:
        """Never cancels (cancel() refuses); its polls are not counted."""
        return cls(None, _can_cancel=False, _counting=False)

    def is_cancelled(self) -> bool:
        """The engine's poll: counts one poll, then answers."""
        if not self._counting:
            return False
        with self._lock:
            self._polls += 1
            over = self._budget is not None and self._polls > self._budget
        return over or self._event.is_set()

    def peek(self) -> bool:
        """Whether the next poll would answer True; counts nothing."""
        with self._lock:
            over = self._budget is not None and self._polls >= self._budget
        return over or self._event.is_set()

    def cancel(self) -> None:
        """Request cancellation; any thread, any number of times."""
        if not self._can_cancel:
            name = type(self).__name__
            raise ValueError(f"{name}.never() cannot be cancelled; use {name}() to cancel")
        self._event.set()

    @property
    def polls(self) -> int:
        """Polls counted so far."""
        with self._lock:
            return self._polls

    @property
    def cancelled(self) -> bool:
        """Whether cancel() was called (the budget aside)."""
        return self._event.is_set()

    def __repr__(self) -> str:
        name = type(self).__name__
        if not self._counting:
            return f"{name}.never()"
        kind = "" if self._budget is None else f"budget={self._budget}, "
        if not self._can_cancel:  # CountingCancel.never(): counted, never cancels
            kind = "never, "
        return f"{name}({kind}polls={self._polls}, cancelled={self._event.is_set()})"
