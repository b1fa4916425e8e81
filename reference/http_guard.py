"""What the reference's HTTP servers take from a client before a handler sees the request (issue #27).

Both servers (`python -m reference.serve --http PORT`, the wire protocol, and `--openai`, the OpenAI-compatible
API) listen on 127.0.0.1, but any local process may connect, so each request is bounded the same way:

- a request must arrive whole (request line, headers and body) within `request_timeout` seconds of the wait for
  its first byte, however its bytes are spread (issue #48: a body dribbled one byte every 5 s held a connection past
  the 30 s each recv was given); a connection that sends nothing, or takes nothing, for `timeout` seconds is closed;
- `Content-Length` must be plain decimal digits and at most `max_body` bytes: a negative, non-numeric or huge
  length is `400` / `413` before a byte of the body is read (a negative one used to read to the end of the
  connection, a huge one to allocate it); `Transfer-Encoding` is refused (`501`): these servers read lengths only;
- `body()` reads exactly that many bytes within the deadline; a client that stalls mid-body gets `408` and the
  connection is closed;
- the bodies being read or handled at once hold at most `max_bodies` bytes in all, across connections: a request
  whose body would pass it is `503` before a byte of it is read (six 16 MiB prompts at once took the OpenAI server
  from 50 to 640 MB);
- the listen backlog is LISTEN_BACKLOG connections, not socketserver's 5 (200 concurrent loopback clients saw
  ~40 % of their connections reset).
"""

from __future__ import annotations

import contextlib
import io
import math
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from falsify.untrusted.deadline import DeadlineReader

MAX_BODY = 16 * 2**20  # bytes of one request body
MAX_BODIES = 2 * MAX_BODY  # bytes of all the bodies read or handled at once, across connections
IDLE_TIMEOUT = 30.0  # seconds a connection may go without sending (or taking) a byte
REQUEST_TIMEOUT = 30.0  # seconds from the wait for a request's first byte to its last body byte
LISTEN_BACKLOG = 1024  # the servers' request_queue_size (Linux caps it at net.core.somaxconn)


class BodyBudget:
    """Bytes of request bodies a server holds at once: `take(n)` is False when n more would pass the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held -= n


_BUDGETS_LOCK = threading.Lock()


def _budget(server: Any, limit: int) -> BodyBudget:
    with _BUDGETS_LOCK:
        budget = getattr(server, "body_budget", None)
        if budget is None:
            budget = server.body_budget = BodyBudget(limit)
        return budget


class ClientTooSlow(TimeoutError):
    """The client stalled or hung up mid-body, or its body would pass the server's budget for all bodies (503). A
    TimeoutError, so BaseHTTPRequestHandler closes the connection."""


class GuardedHandler(BaseHTTPRequestHandler):
    timeout = IDLE_TIMEOUT  # StreamRequestHandler.setup applies it to the connection: every recv and send
    request_timeout = REQUEST_TIMEOUT
    max_body = MAX_BODY
    max_bodies = MAX_BODIES

    def setup(self) -> None:
        super().setup()
        self.deadline = math.inf
        self.held = 0  # bytes of the body budget this request holds
        self.rfile.close()
        # each recv is given what is left of the request's deadline, at most the idle timeout, which sends keep
        late = f"the request did not arrive whole within {self.request_timeout:g} s"
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self, idle=self.timeout, late=late))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.request_timeout
        try:
            super().handle_one_request()
        finally:
            self.deadline = math.inf  # a reply being written is bounded by the idle timeout of each send
            if self.held:
                _budget(self.server, self.max_bodies).give(self.held)
                self.held = 0

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.headers.get("Transfer-Encoding") is not None:
            self.send_error(501, "Transfer-Encoding is not supported: send a Content-Length")
            return False
        raw = self.headers.get("Content-Length")
        if raw is None:
            return True
        if not (raw.isascii() and raw.isdigit()):
            self.send_error(400, f"Content-Length must be a number of bytes, got {raw[:40]!r}")
            return False
        if len(raw) > 12 or int(raw) > self.max_body:
            self.send_error(413, f"a body of {raw[:40]} bytes; at most {self.max_body} are taken")
            return False
        return True

    def body(self) -> bytes:
        """The request body: exactly Content-Length bytes (validated by parse_request), read within the timeout."""
        n = int(self.headers.get("Content-Length") or 0)
        if n and not _budget(self.server, self.max_bodies).take(n):
            self.send_error(503, f"busy: the bodies being read take {self.max_bodies} bytes in all; retry")
            self.close_connection = True
            raise ClientTooSlow(f"{n} body bytes over the server's budget")
        self.held = n
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            data = b""
        if len(data) != n:
            with contextlib.suppress(OSError):  # a client that hung up mid-body reads no answer
                self.send_error(408, f"the body ended after {len(data)} of {n} bytes")
            raise ClientTooSlow(f"{len(data)} of {n} body bytes")
        return data
