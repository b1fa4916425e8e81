"""What the reference's HTTP servers take from a client before a handler sees the request (issue #27).

Both servers (`python -m reference.serve --http PORT`, the wire protocol, and `--openai`, the OpenAI-compatible
API) listen on 127.0.0.1, but any local process may connect, so each request is bounded the same way:

- a connection that sends nothing, or dribbles, for `timeout` seconds is closed (a slowloris client holds one
  thread for at most that long, never for ever);
- `Content-Length` must be plain decimal digits and at most `max_body` bytes: a negative, non-numeric or huge
  length is `400` / `413` before a byte of the body is read (a negative one used to read to the end of the
  connection, a huge one to allocate it); `Transfer-Encoding` is refused (`501`): these servers read lengths only;
- `body()` reads exactly that many bytes within the timeout; a client that stalls mid-body gets `408` and the
  connection is closed.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

MAX_BODY = 16 * 2**20  # bytes of one request body
IDLE_TIMEOUT = 30.0  # seconds a connection may go without sending (or taking) a byte


class ClientTooSlow(TimeoutError):
    """The client stalled or hung up mid-body. A TimeoutError, so BaseHTTPRequestHandler closes the connection."""


class GuardedHandler(BaseHTTPRequestHandler):
    timeout = IDLE_TIMEOUT  # StreamRequestHandler.setup applies it to the connection: every recv and send
    max_body = MAX_BODY

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
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            data = b""
        if len(data) != n:
            self.send_error(408, f"the body ended after {len(data)} of {n} bytes")
            raise ClientTooSlow(f"{len(data)} of {n} body bytes")
        return data
