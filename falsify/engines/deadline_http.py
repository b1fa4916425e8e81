"""HTTP with one deadline per exchange, not a timeout per recv: connect, request, status line, `1xx` responses,
headers and body all end by `deadline` (time.monotonic()), however slowly the bytes come (issue #27). Used by the
wire protocol's HTTP transport and by the OpenAI-compatible engine."""

from __future__ import annotations

import http.client
import io
import socket
import time
from typing import Any


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

    def recv_into(self, buffer: Any) -> int:
        self._sock.settimeout(self._left())
        return self._sock.recv_into(buffer)

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        assert mode == "rb", mode
        self._readers += 1
        return io.BufferedReader(DeadlineReader(self))

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


class DeadlineReader(io.RawIOBase):
    def __init__(self, sock: DeadlineSocket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._sock.reader_closed()
        super().close()


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
