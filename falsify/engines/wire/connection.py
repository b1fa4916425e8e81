"""One conversation with a wire engine: ids, framing, the timeout, schema checks, and replies to the engine.

`Connection.request(method, params, on_engine)` sends a request and reads messages until its reply. Messages
the engine sends meanwhile (`$/poll`, `$/forward`, ...) go to `on_engine(method, params)`, which returns the
result of an engine request (the harness's answer) or None for a notification. Any failure is a named WireError
(errors.py), after which the engine is stopped and every later request raises the same error at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, NoReturn

from falsify.engines.env_settings import WIRE_CALL_TIMEOUT
from falsify.engines.wire import errors
from falsify.engines.wire.messages import (
    ENGINE_NOTIFICATIONS,
    ENGINE_REQUESTS,
    ErrorCode,
    envelope_problem,
    schema_problem,
)
from falsify.engines.wire.transports import HttpTransport, StdioTransport, TransportError
from falsify.errors import terminal_safe
from falsify.untrusted import boundedjson

LAST_LINE = 200  # bytes of the engine's last line kept to name a break (WireEngine.last_message)
# what a call raises with the conversation in step: a reply read (an error reply, a refusal), or the connection
# already failed; anything else (a falsifier's callback raising, its timeout) leaves the engine mid-call
IN_STEP = (errors.WireError, errors.EngineRefusal, errors.LaneRefused)
OnEngine = Callable[[str, dict[str, Any]], dict[str, Any] | None]


class EngineRefused(Exception):
    """Raised by an `on_engine` handler: answer the engine's request with this error instead of a result."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Connection:
    def __init__(
        self,
        transport: StdioTransport | HttpTransport,
        *,
        timeout: float,
        max_line: int,
        call_timeout: float = WIRE_CALL_TIMEOUT,
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        # one deadline per request, whatever the engine sends meanwhile: each message restarts `timeout` (the
        # engine is alive), never this one (it may be alive and never answer: $/poll without end, issue #48)
        self.call_timeout = call_timeout
        self.max_line = max_line
        self.failure: errors.WireError | None = None
        # what this conversation exercised: each method sent or received, and each error code received
        # ("error -32010"); `falsify engine check --conformance` prints it (falsify/engines/wire/conformance.py)
        self.seen: Counter[str] = Counter()
        self._next_id = 1
        self._answered = False  # a message of the engine's has been read
        self.last_line = b""  # the engine's last line, its first LAST_LINE bytes: what a break names
        self._lock = threading.Lock()  # one request in flight: the protocol is not pipelined
        self._quiet_until = 0.0  # time.monotonic() by which the engine must send a message other than $/log
        self._during: Counter[str] = Counter()  # the engine's messages since the request in flight was sent
        self._total: tuple[float, float] | None = (
            None  # (deadline, seconds) of the whole request, if it has one
        )

    # -- sending -----------------------------------------------------------------------------------------------
    def _send(
        self,
        message: dict[str, Any],
        *,
        request_id: int | None,
        waiting_for: str,
        timeout: float | None = None,
    ) -> None:
        line = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
        timeout = self.timeout if timeout is None else timeout
        if self._total is not None:
            timeout = max(0.001, min(timeout, self._total[0] - time.monotonic()))
        try:
            self.transport.send(line, request_id=request_id, timeout=timeout)
        except TransportError as exc:
            text = str(exc)
            if "timed out" in text:
                cls: type[errors.WireError] = errors.EngineTimeout
            else:  # nothing answered yet: it never started (or nothing listens at the URL)
                cls = errors.EngineCrashed if self._answered else errors.EngineStartError
            self.fail(cls(f"{self._who()}: {text} ({waiting_for}){self._status()}"))

    def notify(self, method: str, params: dict[str, Any], *, timeout: float | None = None) -> None:
        if self.failure is None:
            self.seen[method] += 1
            self._send(
                {"method": method, "params": params},
                request_id=None,
                waiting_for=f"notifying {method}",
                timeout=timeout,
            )

    # -- the request loop ------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        params: dict[str, Any],
        on_engine: OnEngine | None = None,
        *,
        total: float | None = None,
    ) -> dict[str, Any]:
        """The result of `method`. The engine must send a message of the protocol within the timeout of the last
        one (`$/log` lines do not count: an endless log is silence), and the reply within `call_timeout` (or
        `total`, if shorter) of the request, however many messages come between."""
        with self._lock:
            if self.failure is not None:
                raise self.failure.again()
            rid = self._next_id
            self._next_id += 1
            self.seen[method] += 1
            waiting = f"waiting for the reply to {method} (id {rid})"
            now = time.monotonic()
            self._quiet_until = now + self.timeout
            total = self.call_timeout if total is None else min(total, self.call_timeout)
            self._total = (now + total, total)
            self._during = Counter()
            try:
                self._send(
                    {"id": rid, "method": method, "params": params}, request_id=rid, waiting_for=waiting
                )
                return self._await_reply(method, rid, waiting, on_engine)
            except BaseException as exc:
                if self.failure is None and not isinstance(exc, IN_STEP):  # left mid-call, not by the engine
                    self.failure = errors.CallAbandoned(
                        f"{self._who()}: the harness left {method} (id {rid}) before its reply: "
                        f"{type(exc).__name__}: {str(exc)[:200]}"
                    )
                    self.transport.close(grace=0)
                raise
            finally:
                self._total = None

    def _await_reply(self, method: str, rid: int, waiting: str, on_engine: OnEngine | None) -> dict[str, Any]:
        while True:
            message = self._receive(waiting, rid)
            if "method" in message:
                self._engine_message(message, on_engine, method)
                continue
            if type(message.get("id")) is not int or message["id"] != rid:  # 1.0 and true are not id 1
                self.fail(
                    errors.ProtocolViolation(
                        f"{self._who()}: a reply to id {message.get('id')} while {waiting}"
                    )
                )
            if "error" in message:
                return self._error_reply(method, message["error"])
            problem = schema_problem(method, "result", message["result"])
            if problem:
                self.fail(errors.MalformedMessage(f"{self._who()}: {problem}"))
            return message["result"]

    def _receive(self, waiting: str, rid: int) -> dict[str, Any]:
        while True:
            now = time.monotonic()
            if self._total is not None and now >= self._total[0]:
                self.fail(
                    errors.EngineTimeout(
                        f"{self._who()}: no reply within {self._total[1]:g} s while {waiting} "
                        f"(one deadline per call, FALSIFY_WIRE_CALL_TIMEOUT; {self._since_request()})"
                    )
                )
            if now >= self._quiet_until:
                self.fail(
                    errors.EngineTimeout(
                        f"{self._who()}: no message but $/log for {self.timeout:g} s while {waiting}"
                    )
                )
            until = self._quiet_until if self._total is None else min(self._quiet_until, self._total[0])
            kind, value = self.transport.recv(until - now)
            if kind == "timeout":
                if self._total is not None and time.monotonic() >= self._total[0]:
                    continue  # named above
                self.fail(
                    errors.EngineTimeout(f"{self._who()}: no message for {self.timeout:g} s while {waiting}")
                )
            if kind == "end":
                if value == rid:
                    self.fail(
                        errors.EngineCrashed(f"{self._who()}: the response stream ended while {waiting}")
                    )
                continue  # the stream of an earlier request closing: normal
            if kind == "oversize":
                self.fail(
                    errors.OversizedMessage(
                        f"{self._who()}: a line of more than {self.max_line} bytes (limit FALSIFY_WIRE_MAX_LINE) "
                        f"while {waiting}"
                    )
                )
            if kind == "eof":
                self.fail(errors.EngineCrashed(f"{self._who()}: {value} while {waiting}{self._status()}"))
            self._answered = True
            self.last_line = value[:LAST_LINE]
            message = self._parse(value, waiting)
            self._during[str(message.get("method", "a reply"))] += 1
            if message.get("method") != "$/log":
                self._quiet_until = time.monotonic() + self.timeout
            return message

    def _parse(self, line: bytes, waiting: str) -> dict[str, Any]:
        try:
            message = boundedjson.loads(line, what="a line", max_bytes=self.max_line)
        except boundedjson.JsonFormatError as exc:
            shown = line[:60].decode("utf-8", "replace")
            self.fail(errors.MalformedMessage(f"{self._who()}: {exc} while {waiting}: {shown!r}"))
        problem = envelope_problem(message)
        if problem:
            self.fail(errors.MalformedMessage(f"{self._who()}: {problem} while {waiting}"))
        return message

    def _engine_message(self, message: dict[str, Any], on_engine: OnEngine | None, during: str) -> None:
        method, params, mid = message["method"], message["params"], message.get("id")
        self.seen[method] += 1
        if method == "$/log":
            return
        known = ENGINE_REQUESTS if mid is not None else ENGINE_NOTIFICATIONS
        if method not in known:
            kind = "request" if mid is not None else "notification"
            self.fail(
                errors.ProtocolViolation(f"{self._who()}: unknown engine {kind} {method!r} during {during}")
            )
        problem = schema_problem(method, "params", params)
        if problem:
            self.fail(errors.MalformedMessage(f"{self._who()}: {problem}"))
        if on_engine is None:
            self.fail(errors.ProtocolViolation(f"{self._who()}: {method} during {during}, which sends none"))
        try:
            result = on_engine(method, params)
        except EngineRefused as refused:
            if mid is not None:
                self._send(
                    {"id": mid, "error": {"code": int(refused.code), "message": str(refused)}},
                    request_id=None,
                    waiting_for=f"answering {method}",
                )
            return
        if mid is not None:
            self._send(
                {"id": mid, "result": result or {}}, request_id=None, waiting_for=f"answering {method}"
            )

    def _error_reply(self, method: str, error: dict[str, Any]) -> dict[str, Any]:
        # the engine's words, shown in falsifiers' failures and the gate's table: one terminal-safe line
        code, text = error.get("code"), terminal_safe(error.get("message", ""))
        self.seen[f"error {code}"] += 1
        if code == ErrorCode.INVALID_INPUT:
            raise errors.EngineRefusal(text)  # a ValueError, as an in-process engine's refusal
        if code == ErrorCode.LANE_REFUSED:
            raise errors.LaneRefused(text)
        if code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION:
            if method == "initialize":  # the engine stays up: the harness may offer an older version
                raise errors.ProtocolVersionMismatch(f"{self._who()}: {text}")
            self.fail(errors.ProtocolVersionMismatch(f"{self._who()}: {text}"))
        try:
            name = ErrorCode(code).name if isinstance(code, int) else f"code {code!r}"
        except ValueError:
            name = f"code {code}"
        raise errors.EngineErrorReply(f"{self._who()}: {method} failed: {name}: {text}")

    # -- failure and shutdown --------------------------------------------------------------------------------
    def fail(self, error: errors.WireError) -> NoReturn:
        """Remember `error`, stop the engine, raise. Every later request raises the same error."""
        if self.failure is None:
            self.failure = error
            self.transport.close(grace=0)
            raise error
        raise self.failure.again()

    def close(self, grace: float = 2.0) -> None:
        if self.failure is None:
            try:
                bound = min(
                    self.timeout, max(grace, 0.1)
                )  # an engine logging without end cannot hold the exit
                self.request("shutdown", {}, total=bound)
                self.notify("exit", {}, timeout=bound)
            except (errors.WireError, errors.EngineRefusal):
                pass
        self.transport.close(grace)
        if self.failure is None:
            self.failure = errors.EngineCrashed(f"{self._who()}: the connection was closed by the harness")

    def _since_request(self) -> str:
        if not self._during:
            return "the engine sent nothing meanwhile"
        shown = ", ".join(f"{m} {n:,}" for m, n in self._during.most_common(3))
        return f"the engine sent {sum(self._during.values()):,} messages meanwhile: {shown}"

    def _who(self) -> str:
        return f"engine {self.transport.description}"

    def _status(self) -> str:
        status = self.transport.exit_status()
        tail = self.transport.stderr_tail()
        return (f"; the engine {status}" if status else "") + (f"; stderr: {tail}" if tail else "")
