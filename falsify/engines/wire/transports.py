"""Carrying messages: a subprocess speaking JSON lines on stdio, or a server taking one HTTP POST per message.

A transport moves raw lines; it never parses JSON. Reader threads put what they read on one queue, so the client
waits in one place, with one timeout, whatever the transport:

    ("line", bytes)        one complete line (without its LF), at most `max_line` bytes
    ("oversize", n)        a line longer than `max_line`: reading stops there (nothing more is buffered)
    ("eof", detail)        the engine closed its side (stdout closed, process gone, connection dropped)
    ("end", request_id)    HTTP only: the response stream of that request ended (normal after its reply)
"""

from __future__ import annotations

import contextlib
import http.client
import os
import queue
import shlex
import signal
import subprocess
import threading
from collections import deque
from typing import IO, Any
from urllib.parse import urlsplit

Item = tuple[str, Any]


class TransportError(Exception):
    """A transport could not be set up or written to; the client names it."""


def read_lines(stream: IO[bytes], out: queue.Queue[Item], max_line: int, end: Item | None) -> None:
    """Put each line of `stream` on `out` until EOF or an oversized line; then `end` (if any)."""
    try:
        while True:
            line = stream.readline(max_line + 1)
            if not line:
                break
            if not line.endswith(b"\n"):
                if len(line) > max_line:
                    out.put(("oversize", len(line)))
                    return
                out.put(("eof", f"the stream ended inside a line ({len(line)} bytes without a newline)"))
                return
            out.put(("line", line[:-1]))
    except (OSError, ValueError, http.client.HTTPException) as exc:
        out.put(("eof", f"reading failed: {exc}"))
        return
    if end is not None:
        out.put(end)


class StdioTransport:
    """`exec:CMD ARGS`: the engine is a child process; requests go to its stdin, its stdout is read as lines.

    The child gets its own process group, so close() can stop it and anything it started. Its stderr is drained
    (a full pipe would hang it) and its last lines kept for error messages.
    """

    def __init__(self, command: str, max_line: int) -> None:
        argv = shlex.split(command)
        if not argv:
            raise TransportError('exec: needs a command, e.g. exec:"python -m reference.serve"')
        self.description = f"exec:{command}"
        self.queue: queue.Queue[Item] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(
            target=read_lines,
            args=(self.proc.stdout, self.queue, max_line, ("eof", "the engine closed its stdout")),
            daemon=True,
            name="wire-stdout",
        ).start()
        threading.Thread(target=self._drain_stderr, daemon=True, name="wire-stderr").start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in iter(lambda: self.proc.stderr.readline(65536), b""):  # type: ignore[union-attr]
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def send(self, line: bytes, *, request_id: int | None) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise TransportError("the engine's stdin is closed") from None

    def exit_status(self) -> str | None:
        try:
            code = self.proc.wait(0.5)  # its stdout just closed: give the exit a moment to be reaped
        except subprocess.TimeoutExpired:
            return None
        return f"exited with code {code}" if code >= 0 else f"killed by signal {signal.Signals(-code).name}"

    def stderr_tail(self) -> str:
        return " | ".join(list(self._stderr)[-5:])

    def close(self, grace: float) -> None:
        """Wait `grace` seconds for the process to exit by itself, then kill its process group."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        else:  # the leader is gone; anything it left in its group goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class HttpTransport:
    """`http://HOST:PORT`: each message is one `POST /rpc`. A request's response body is the stream of JSON lines
    the engine sends while serving it (its own requests and notifications), ending with the reply; a message that
    is not a request (a reply to the engine, a notification) gets `204 No Content`."""

    def __init__(self, url: str, max_line: int, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise TransportError(f"engine URL {url!r}: expected http://HOST:PORT")
        self.description = url
        self.host, self.port = parts.hostname, parts.port
        self.path = (parts.path.rstrip("/") or "") + "/rpc"
        self.max_line = max_line
        self.timeout = timeout
        self.queue: queue.Queue[Item] = queue.Queue()
        self._open: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _post(self, line: bytes) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        with self._lock:
            self._open.append(conn)
        try:
            conn.request("POST", self.path, body=line + b"\n", headers={"Content-Type": "application/json"})
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(f"POST {self.description}{self.path}: {exc}") from None

    def send(self, line: bytes, *, request_id: int | None) -> None:
        conn, resp = self._post(line)
        if request_id is None:
            body = resp.read(self.max_line)
            conn.close()
            with self._lock:
                self._open.remove(conn)
            if resp.status not in (200, 204):
                raise TransportError(f"POST {self.path}: HTTP {resp.status} {body[:200]!r}")
            return
        if resp.status != 200:
            body = resp.read(2000)
            conn.close()
            raise TransportError(f"POST {self.path}: HTTP {resp.status} {body[:200]!r}")

        def pump() -> None:
            try:
                read_lines(resp, self.queue, self.max_line, ("end", request_id))
            finally:
                conn.close()
                with self._lock:
                    if conn in self._open:
                        self._open.remove(conn)

        threading.Thread(target=pump, daemon=True, name=f"wire-http-{request_id}").start()

    def exit_status(self) -> str | None:
        return None

    def stderr_tail(self) -> str:
        return ""

    def close(self, grace: float) -> None:
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()


def open_transport(spec: str, *, max_line: int, timeout: float) -> StdioTransport | HttpTransport:
    if spec.startswith("exec:"):
        return StdioTransport(spec[len("exec:") :], max_line)
    if spec.startswith("http://"):
        return HttpTransport(spec, max_line, timeout)
    raise TransportError(f'engine {spec!r}: a wire engine is exec:"CMD ARGS" or http://HOST:PORT')
