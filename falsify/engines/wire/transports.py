"""Carrying messages: a subprocess speaking JSON lines on stdio, or a server taking one HTTP POST per message.

A transport moves raw lines; it never parses JSON. `recv(timeout)` gives the client one item, whatever the
transport:

    ("line", bytes)        one complete line (without its LF), at most `max_line` bytes
    ("oversize", n)        a line longer than `max_line`: reading stops there (nothing more is buffered)
    ("eof", detail)        the engine closed its side (stdout closed, process gone, connection dropped)
    ("end", request_id)    HTTP only: the response stream of that request ended (normal after its reply)
    ("timeout", None)      nothing arrived within the timeout
"""

from __future__ import annotations

import contextlib
import http.client
import os
import selectors
import shlex
import signal
import subprocess
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from falsify.engines import process_tree
from falsify.engines.deadline_http import DeadlineConnection

Item = tuple[str, Any]


STDERR_KEPT = 4096  # bytes of an engine's stderr kept for error messages; the rest is read and dropped


class TransportError(Exception):
    """A transport could not be set up or written to; the client names it."""


def split_command(command: str) -> list[str]:
    """`exec:CMD ARGS`'s command split as a POSIX shell splits it (shlex). A command that cannot be split (an
    unbalanced quote, a NUL byte) or is empty is a TransportError saying so, not shlex's or Popen's ValueError."""
    if "\0" in command:
        raise TransportError("exec: the command holds a NUL byte, which no program's arguments can carry")
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise TransportError(f"exec: cannot split the command as a shell would: {exc}") from None
    if not argv:
        raise TransportError('exec: needs a command, e.g. exec:"python -m reference.serve"')
    return argv


class StdioTransport:
    """`exec:CMD ARGS`: the engine is a child process; requests go to its stdin, its stdout is read as lines.

    The child gets its own process group, so close() can stop it and anything it started. Its stdout and stderr
    are read in the calling thread with a selector (no reader threads: Hypothesis draws other examples when a
    test process has extra threads alive, which would make a wire run incomparable with an in-process one);
    stderr is drained so a full pipe cannot hang the engine, and its last lines kept for error messages.
    """

    def __init__(self, command: str, max_line: int) -> None:
        argv = split_command(command)
        self.description = f"exec:{command}"
        self.max_line = max_line
        try:  # what leaves the group is found by the mark (issue #48)
            self.proc, self.mark = process_tree.start(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise TransportError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        assert self.proc.stdout is not None and self.proc.stderr is not None
        assert self.proc.stdin is not None
        self._out, self._err = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        self._in = self.proc.stdin.fileno()
        os.set_blocking(self._in, False)  # send() writes what the pipe takes and reads the engine meanwhile
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._out, selectors.EVENT_READ)
        self._selector.register(self._err, selectors.EVENT_READ)
        self._buffer = bytearray()
        self._lines: deque[bytes] = deque()
        self._eof = False
        self._oversize = 0
        self._stderr = bytearray()  # the last STDERR_KEPT bytes: a ring, however much the engine writes

    def recv(self, timeout: float) -> Item:
        """The next item (see the module docstring), or ("timeout", None) after `timeout` seconds of silence."""
        deadline = time.monotonic() + timeout
        while True:
            if self._lines:
                return ("line", self._lines.popleft())
            if self._oversize or len(self._buffer) > self.max_line:
                return ("oversize", self._oversize or len(self._buffer))
            if self._eof:
                if self._buffer:
                    return (
                        "eof",
                        f"the stream ended inside a line ({len(self._buffer)} bytes without a newline)",
                    )
                return ("eof", "the engine closed its stdout")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ("timeout", None)
            for key, _ in self._selector.select(remaining):
                self._read(key.fd)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 20)
        except OSError:
            data = b""
        if fd == self._err:
            if not data:
                self._selector.unregister(fd)
            self._stderr += data[-STDERR_KEPT:]
            del self._stderr[:-STDERR_KEPT]
            return
        if not data:
            self._selector.unregister(fd)
            self._eof = True
            return
        self._buffer += data
        while (cut := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:cut])
            del self._buffer[: cut + 1]
            if len(line) > self.max_line:
                self._buffer[:0] = b"x" * (
                    self.max_line + 1
                )  # reported as oversize once the lines before it are read
                return
            self._lines.append(line)

    def send(self, line: bytes, *, request_id: int | None, timeout: float = 30.0) -> None:
        """Write one line within `timeout` seconds, reading the engine's stdout and stderr meanwhile: an engine
        blocked writing to a full pipe while the harness blocks writing a long request would wait for ever."""
        data = memoryview(line + b"\n")
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self._in, selectors.EVENT_WRITE)
            for fd in self._selector.get_map():
                sel.register(fd, selectors.EVENT_READ)
            while data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"writing a {len(line) + 1}-byte line timed out after {timeout:g} s "
                        f"({len(data)} bytes not taken by the engine)"
                    )
                for key, _ in sel.select(remaining):
                    if key.fd != self._in:
                        self._read(key.fd)
                        if key.fd not in self._selector.get_map():
                            sel.unregister(key.fd)
                        continue
                    try:
                        data = data[os.write(self._in, data[: 1 << 16]) :]
                    except BlockingIOError:
                        pass
                    except OSError:  # EPIPE and the like: the engine closed its stdin or exited
                        raise TransportError("the engine's stdin is closed") from None

    def exit_status(self) -> str | None:
        try:
            code = self.proc.wait(0.5)  # its stdout just closed: give the exit a moment to be reaped
        except subprocess.TimeoutExpired:
            return None
        return f"exited with code {code}" if code >= 0 else f"killed by signal {signal.Signals(-code).name}"

    def stderr_tail(self) -> str:
        lines = self._stderr.decode("utf-8", "replace").strip().splitlines()
        return " | ".join(lines[-5:])

    def close(self, grace: float) -> None:
        """Wait `grace` seconds for the process to exit by itself, then kill its process group."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            process_tree.end_group(self.proc.pid, self.mark)
            self.proc.wait()
        # the leader is gone; anything it left in its group, or started outside it (setsid, a daemon), goes too
        process_tree.end_group(self.proc.pid, self.mark)
        for stream in (self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._selector.close()


class HttpTransport:
    """`http://HOST:PORT`: each message is one `POST /rpc`. A request's response body is the stream of JSON lines
    the engine sends while serving it (its own requests and notifications), ending with the reply; a message that
    is not a request (a reply to the engine, a notification) gets `204 No Content`. Read in the calling thread.
    Each POST (connect, request, status line and headers, `1xx` responses included) ends within its timeout, and
    each `recv` within its own, however slowly the bytes come."""

    def __init__(self, url: str, max_line: int, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise TransportError(f"engine URL {url!r}: expected http://HOST:PORT")
        self.description = url
        self.host, self.port = parts.hostname, parts.port
        self.path = (parts.path.rstrip("/") or "") + "/rpc"
        self.max_line = max_line
        self.timeout = timeout
        self._stream: tuple[DeadlineConnection, http.client.HTTPResponse, int] | None = None

    def _post(self, line: bytes, timeout: float) -> tuple[DeadlineConnection, http.client.HTTPResponse]:
        conn = DeadlineConnection(self.host, self.port, time.monotonic() + timeout)
        try:
            conn.request("POST", self.path, body=line + b"\n", headers={"Content-Type": "application/json"})
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            text = "timed out" if isinstance(exc, TimeoutError) else str(exc)
            raise TransportError(f"POST {self.description}{self.path}: {text}") from None

    def send(self, line: bytes, *, request_id: int | None, timeout: float | None = None) -> None:
        conn, resp = self._post(line, self.timeout if timeout is None else timeout)
        if request_id is None or resp.status != 200:
            try:
                body = resp.read(2000)
            except (OSError, http.client.HTTPException):
                body = b""
            conn.close()
            if resp.status not in ((200, 204) if request_id is None else (200,)):
                raise TransportError(f"POST {self.path}: HTTP {resp.status} {body[:200]!r}")
            return
        self._drop_stream()
        self._stream = (conn, resp, request_id)

    def recv(self, timeout: float) -> Item:
        if self._stream is None:
            return ("eof", "no response stream is open")
        conn, resp, rid = self._stream
        assert conn.deadline_sock is not None  # set by connect(), before any response
        conn.deadline_sock.deadline = time.monotonic() + timeout
        try:
            line = resp.readline(self.max_line + 1)
        except TimeoutError:
            return ("timeout", None)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return ("eof", f"reading the response stream failed: {exc}")
        if not line:
            self._drop_stream()
            return ("end", rid)
        if not line.endswith(b"\n"):
            if len(line) > self.max_line:
                return ("oversize", len(line))
            return ("eof", f"the stream ended inside a line ({len(line)} bytes without a newline)")
        return ("line", line[:-1])

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream[0].close()
            self._stream = None

    def exit_status(self) -> str | None:
        return None

    def stderr_tail(self) -> str:
        return ""

    def close(self, grace: float) -> None:
        self._drop_stream()


def open_transport(spec: str, *, max_line: int, timeout: float) -> StdioTransport | HttpTransport:
    if spec.startswith("exec:"):
        return StdioTransport(spec[len("exec:") :], max_line)
    if spec.startswith("http://"):
        return HttpTransport(spec, max_line, timeout)
    raise TransportError(f'engine {spec!r}: a wire engine is exec:"CMD ARGS" or http://HOST:PORT')
