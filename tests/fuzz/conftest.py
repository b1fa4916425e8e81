"""Fixtures shared by the fuzzers."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def alarm() -> Iterator[None]:
    """SIGALRM fails the case that set it (`signal.alarm(seconds)` around each case): a hang is a finding."""

    def hung(signum: int, frame: object) -> None:
        raise AssertionError("a case hung past its alarm")

    old = signal.signal(signal.SIGALRM, hung)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
