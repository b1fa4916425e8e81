"""An HTTP server on 127.0.0.1 that is not an engine: it answers every POST with 200 and the bytes it was given,
for tests of what the wire client makes of an HTTP engine's replies."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class _Reply(BaseHTTPRequestHandler):
    server: CannedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class CannedServer(ThreadingHTTPServer):
    """`with CannedServer(body) as server:` serves on a free loopback port (`server.url`) in a daemon thread until
    the block ends; `server.body` may be changed between requests."""

    def __init__(self, body: bytes = b"") -> None:
        super().__init__(("127.0.0.1", 0), _Reply)
        self.body = body
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> CannedServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()
        self.server_close()
