"""HTTP with one deadline per exchange, not a timeout per recv: connect, request, status line, `1xx` responses,
headers and body all end by `deadline` (time.monotonic()), however slowly the bytes come (issue #27). Used by the
wire protocol's HTTP transport and by the OpenAI-compatible engine; the replies are read through the untrusted-input
layer's DeadlineReader (falsify/untrusted/deadline.py), as the reference engine's servers read their requests."""

from __future__ import annotations

import http.client
import io
import socket
import time
from typing import Any

from falsify.untrusted.deadline import DeadlineReader


class DeadlineSocket:
    """A connected socket whose every send and receive ends by one deadline (`deadline`, time.monotonic()), not a
    timeout per call: a reply dripped one byte a second, or an endless run of `100 Continue` responses, cannot
    outlast it. http.client reads through `makefile`, so its status line, headers and body all share it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self.deadline = deadline
        self._readers = 0  # as socket.makefile does: the socket closes when its last reader and it are closed
        self._closed = False

    def _left(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        return remaining

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(self._left())  # since Python 3.5 the timeout bounds the whole sendall
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        assert mode == "rb", mode
        self._readers += 1
        return io.BufferedReader(DeadlineReader(self._sock, self, on_close=self.reader_closed))

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closed and self._readers == 0:
            self._sock.close()

    def close(self) -> None:
        self._closed = True
        if self._readers == 0:
            self._sock.close()

    def setsockopt(self, *args: Any) -> None:
        self._sock.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)


class DeadlineConnection(http.client.HTTPConnection):
    """An HTTPConnection whose connect, request and response all end by `deadline`."""

    def __init__(self, host: str, port: int, deadline: float) -> None:
        super().__init__(host, port, timeout=max(deadline - time.monotonic(), 0.001))
        self.deadline = deadline
        self.deadline_sock: DeadlineSocket | None = None

    def connect(self) -> None:
        super().connect()
        self.deadline_sock = DeadlineSocket(self.sock, self.deadline)
        self.sock = self.deadline_sock
