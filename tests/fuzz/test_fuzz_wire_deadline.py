"""One deadline per wire call (issue #48), fuzzed: an engine sends any mix of `$/poll`, `$/forward`, `$/sample`-free
notifications and `$/log` during a call, then one of them without end; the call ends with EngineTimeout naming the
call's deadline, whatever the mix, and nothing else escapes. The engine is an in-process transport that answers at
once (no process, no sleep), so a case costs its 0.05 s deadline."""

from __future__ import annotations

import json
import signal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection

MESSAGES = {
    "poll": lambda rid, k: {"id": 10**6 + k, "method": "$/poll", "params": {"request": rid}},
    "forward": lambda rid, k: {"method": "$/forward", "params": {"request": rid, "start": k, "tokens": [1]}},
    "token": lambda rid, k: {"method": "$/token", "params": {"request": rid, "token": 1}},
    "log": lambda rid, k: {"method": "$/log", "params": {"message": "x"}},
}


class Chatty:
    """A transport whose engine sends `prefix`, then `tail` for ever, and never the reply."""

    description = "chatty"

    def __init__(self, prefix: list[str], tail: str) -> None:
        self.prefix, self.tail, self.sent = prefix, tail, 0
        self.rid = 0

    def send(self, line: bytes, *, request_id: int | None, timeout: float = 30.0) -> None:
        if request_id is not None:
            self.rid = request_id

    def recv(self, timeout: float) -> tuple[str, Any]:
        kind = self.prefix[self.sent] if self.sent < len(self.prefix) else self.tail
        self.sent += 1
        return "line", json.dumps(MESSAGES[kind](self.rid, self.sent)).encode()

    def exit_status(self) -> str | None:
        return None

    def stderr_tail(self) -> str:
        return ""

    def close(self, grace: float) -> None:
        pass


@settings(max_examples=60, deadline=None)
@given(
    prefix=st.lists(st.sampled_from(sorted(MESSAGES)), max_size=40),
    tail=st.sampled_from(["poll", "forward", "token"]),
)
def test_any_mix_of_engine_messages_ends_at_the_calls_deadline(prefix: list[str], tail: str) -> None:
    conn = Connection(Chatty(prefix, tail), timeout=5.0, max_line=1 << 20, call_timeout=0.05)  # type: ignore[arg-type]

    def hung(signum: int, frame: object) -> None:
        raise AssertionError("the call outlived its deadline by seconds")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        conn.request(
            "generate", {}, lambda method, params: {"cancelled": False} if method == "$/poll" else None
        )
    except errors.EngineTimeout as exc:
        assert "one deadline per call" in str(exc), exc  # (how many came first depends on the machine's load)
    else:
        raise AssertionError("the call returned without a reply")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
