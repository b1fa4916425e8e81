"""A bound for tests that drive something that may hang: at the bound the test fails instead of hanging the suite."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hang_bound(seconds: int, what: str) -> Iterator[None]:
    """SIGALRM after SECONDS raises AssertionError("WHAT hung past the test's SECONDS s bound") in the main thread."""

    def hung(signum: int, frame: object) -> None:
        raise AssertionError(f"{what} hung past the test's {seconds} s bound")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
