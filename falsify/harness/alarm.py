"""--falsify-test-timeout: a falsifier past its seconds gets FalsifierTimeout raised into it by SIGALRM (the main
thread only; the gate's own timeout still bounds the rest)."""

from __future__ import annotations

import signal
import threading
from typing import Any


class FalsifierTimeout(BaseException):
    """Raised into a falsifier past --falsify-test-timeout. A BaseException, so `except Exception` in the test
    cannot swallow it; raised again every second until the test gives up."""


class Alarm:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.previous: Any = None
        self.armed = False

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only; the gate's own timeout still applies
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, 1.0)
        self.armed = True

    def stop(self) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            self.armed = False

    def _fire(self, signum: int, frame: Any) -> None:
        raise FalsifierTimeout(
            f"the falsifier ran past its {self.seconds:g} s timeout (--falsify-test-timeout)"
        )
