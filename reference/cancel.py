"""A cancel token a generation loop polls before each forward pass.

Three kinds of token share one class:
  - `CancelToken()`: cancelled by `cancel()`, which any thread may call;
  - `CancelToken.with_budget(n)`: also cancels by itself once n polls have been answered false, so a test can
    stop a run after exactly n tokens without racing a thread;
  - `CancelToken.never()`: never cancels, and its polls cost nothing and are not counted (it reports 0 polls).

`is_cancelled()` is the poll a generation loop makes and counts; `peek()` is for onlookers (another thread, a
test) and counts nothing, so looking at a token never changes what the run observes.
"""

from __future__ import annotations

import threading


class CancelToken:
    __slots__ = ("_budget", "_counting", "_event", "_lock", "_polls")

    def __init__(self, budget: int | None = None, *, _counting: bool = True) -> None:
        if budget is not None:
            _check_budget(budget)
        self._budget = budget  # polls answered false before the token cancels itself; None = no budget
        self._counting = _counting
        self._event = threading.Event()  # set by cancel(), from any thread
        self._lock = threading.Lock()  # guards _polls when several threads poll one token
        self._polls = 0

    @classmethod
    def never(cls) -> CancelToken:
        """A token that never cancels; polling it counts nothing."""
        return cls(None, _counting=False)

    @classmethod
    def with_budget(cls, n: int) -> CancelToken:
        """The first n polls return False, every later poll True; a budget of 0 permits no token."""
        return cls(_check_budget(n))

    def cancel(self) -> None:
        """Request cancellation; safe to call from any thread, any number of times."""
        if not self._counting:
            raise ValueError(
                "CancelToken.never() cannot be cancelled; use CancelToken() to be able to cancel"
            )
        self._event.set()

    def is_cancelled(self) -> bool:
        """The poll a generation loop makes: counts one poll, then answers."""
        if not self._counting:
            return False
        with self._lock:
            self._polls += 1
            over_budget = self._budget is not None and self._polls > self._budget
        return over_budget or self._event.is_set()

    def peek(self) -> bool:
        """Whether the next poll would answer True, without counting a poll."""
        if not self._counting:
            return False
        with self._lock:
            over_budget = self._budget is not None and self._polls >= self._budget
        return over_budget or self._event.is_set()

    @property
    def polls(self) -> int:
        """Polls counted so far (always 0 for `never()`)."""
        return self._polls

    def __repr__(self) -> str:
        if not self._counting:
            return "CancelToken.never()"
        budget = "" if self._budget is None else f"budget={self._budget}, "
        return f"CancelToken({budget}polls={self._polls}, cancelled={self._event.is_set()})"


def _check_budget(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"cancel budget must be an int >= 0, got {n!r}")
    return n
