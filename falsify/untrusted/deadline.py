"""The bytes a peer sends over a socket, read by one deadline (issues #27, #48): each recv is given what is left of
it, so a peer that drips a byte at a time, or stalls, cannot hold the reader past it, as a timeout per recv would.

Both sides of HTTP read an untrusted peer through it: the harness's client an engine's replies
(falsify/engines/deadline_http.py), the reference engine's servers a client's requests (reference/http_guard.py).
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol


class HasDeadline(Protocol):
    """Whatever owns the exchange: `deadline` is the time.monotonic() by which it must end, read at each recv, so
    the owner may move it between exchanges (a server per request, the wire transport per event it waits for)."""

    deadline: float


class DeadlineReader(io.RawIOBase):
    """`sock`'s bytes as a raw stream (the io.BufferedReader around it is http.client's or http.server's rfile). Each
    recv is given what is left of `owner.deadline`, at most `idle` seconds, and past the deadline raises
    TimeoutError(`late`). With `idle`, the socket keeps it as its timeout between recvs (sends are bounded by it).
    `on_close` runs once, when the reader is closed."""

    def __init__(
        self,
        sock: socket.socket,
        owner: HasDeadline,
        *,
        idle: float | None = None,
        late: str = "timed out",
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._sock = sock
        self._owner = owner
        self._idle = idle
        self._late = late
        self._on_close = on_close

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._owner.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(self._late)
        self._sock.settimeout(left if self._idle is None else min(left, self._idle))
        try:
            return self._sock.recv_into(buffer)
        finally:
            if self._idle is not None:
                self._sock.settimeout(self._idle)

    def close(self) -> None:
        if not self.closed and self._on_close is not None:
            self._on_close()
        super().close()
