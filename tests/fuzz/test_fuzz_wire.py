"""A seeded fuzzer for the wire client (issue #27): hostile engine output, over stdio and over HTTP, against
`Connection.request`. Each case is one or more lines an engine sends in answer to `new_session`: a valid reply
damaged one way or several (a byte flipped, cut short, an integer of thousands of digits, nesting thousands deep,
NaN/Infinity/1e999, invalid UTF-8, other ids, extra keys, random JSON, engine messages before the reply).

Properties, for every case:
- the request returns or raises within its bound (no hang: SIGALRM per case);
- it raises nothing but a WireError, or EngineRefusal for an INVALID_INPUT reply and only then (no traceback);
- nothing invalid is accepted: a returned result comes from a line that strict JSON parses (no NaN, integers the
  reader allows), is the reply to id 1, and validates against new_session's result schema with jsonschema
  directly; every line before it is a `$/log` notification.

CI runs CASES cases per transport from a fixed seed; FALSIFY_FUZZ=thorough runs 20x more from a fresh one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
from testkit_canned_http import CannedServer

from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection
from falsify.engines.wire.messages import ErrorCode
from falsify.engines.wire.transports import open_transport

THOROUGH = "thorough" in (os.environ.get("HYPOTHESIS_PROFILE", ""), os.environ.get("FALSIFY_FUZZ", ""))
CASES = 20_000 if THOROUGH else 1_000
SEED = int.from_bytes(os.urandom(4), "little") if THOROUGH else 27
TIMEOUT = 1.0  # FALSIFY_WIRE_TIMEOUT of each connection: every case ends well within the alarm below
ALARM = 10
SCHEMA = json.loads(
    (Path(errors.__file__).parent / "schemas" / "new_session.result.schema.json").read_text(encoding="utf-8")
)
VALID = [
    {"id": 1, "result": {"session": "s"}},
    {"id": 1, "result": {"session": "x" * 256}},
    {"id": 1, "error": {"code": int(ErrorCode.INVALID_INPUT), "message": "refused"}},
    {"id": 1, "error": {"code": int(ErrorCode.INTERNAL_ERROR), "message": "boom"}},
    {"method": "$/log", "params": {"message": "hello"}},
    {"id": 7, "method": "$/poll", "params": {"request": 1}},
    {"method": "$/token", "params": {"request": 1, "token": 3}},
]
HOSTILE_VALUES: list[Any] = [
    None, True, 0, -1, 1.5, "", "s", [], {}, 2**63, -(2**63), 10**39, 10**40, "\u0000", "\ud7ff", [[[]]],
]  # fmt: skip


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.5:
        return rng.choice(HOSTILE_VALUES)
    if pick < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["id", "result", "error", "method", "params", "session", "x"]): _value(rng, depth + 1)}


def _raw_number(rng: random.Random) -> str:
    return rng.choice(
        [
            "9" * rng.randint(38, 6000),
            "-" + "1" * rng.randint(38, 200),
            "NaN",
            "Infinity",
            "-Infinity",
            "1e999",
            "0." + "3" * rng.randint(60, 400),
            "1e-999",
            "-0",
            "1.7976931348623157e308",
        ]
    )


def _damage(rng: random.Random, text: str) -> bytes:
    kind = rng.randrange(11)
    if kind == 0:  # a byte flipped
        flipped = bytearray(text.encode())
        flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        return bytes(flipped)
    if kind == 1:  # cut short
        return text.encode()[: rng.randrange(len(text))]
    if kind == 2:  # a number where a value was
        return text.replace('"s"', _raw_number(rng), 1).replace("1}", _raw_number(rng) + "}", 1).encode()
    if kind == 3:  # nesting
        depth = rng.choice([2, 30, 63, 64, 65, 70, 500, 3000, 50_000])
        return text.replace('"s"', "[" * depth + '"s"' + "]" * depth, 1).encode()
    if kind == 4:  # invalid UTF-8 or escapes
        bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\\ud800", b"\\u0000", b"\x00", b"\r"])
        data = text.encode()
        i = rng.randrange(len(data))
        return data[:i] + bad + data[i:]
    if kind == 5:  # the id
        return text.replace('"id": 1', '"id": ' + rng.choice(["0", "-1", "2", '"1"', "1.0", "1e0", "true", "null", "9" * 50]), 1).encode()  # fmt: skip
    if kind == 6:  # extra keys, duplicated keys
        return text.replace("{", '{"x": 1, "id": 2, ', 1).encode() if rng.random() < 0.5 else text.replace("}", ', "result": {}}', 1).encode()  # fmt: skip
    if kind == 7:  # random JSON
        return json.dumps(_value(rng), allow_nan=True).encode()
    if kind == 8:  # a value swapped for a hostile one
        return text.replace('"s"', json.dumps(rng.choice(HOSTILE_VALUES)), 1).encode()
    if kind == 9:  # long
        return text.replace('"s"', '"' + "a" * rng.choice([257, 10_000, 300_000]) + '"', 1).encode()
    return text.encode()  # unchanged


def case(rng: random.Random) -> list[bytes]:
    """The lines an engine sends for one case (each without its newline; b"" lines are dropped)."""
    lines = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        text = json.dumps(rng.choice(VALID))
        lines.append(_damage(rng, text) if rng.random() < 0.85 else text.encode())
    return lines


def cases(seed: int, n: int) -> Iterator[list[bytes]]:
    rng = random.Random(seed)
    for _ in range(n):
        yield case(rng)


def _strict(line: bytes) -> Any:
    def refuse(text: str) -> Any:
        raise ValueError(text)

    return json.loads(line.decode("utf-8"), parse_constant=refuse)


def _deciding(lines: list[bytes]) -> Any:
    """The first message that is not `$/log`, parsed strictly: the only one the client may act on."""
    for line in lines:
        message = _strict(line)
        if not (isinstance(message, dict) and message.get("method") == "$/log" and "id" not in message):
            return message
    raise AssertionError(f"no reply among {lines!r}")


def judge(lines: list[bytes], outcome: object) -> str:
    """'accepted', 'refused' or 'named'; AssertionError for an exception of another kind or an invalid result."""
    if isinstance(
        outcome, errors.EngineRefusal
    ):  # only an INVALID_INPUT reply to id 1, after $/log lines only
        reply = _deciding(lines)
        assert type(reply["id"]) is int and reply["id"] == 1, (lines, outcome)
        assert reply["error"]["code"] == ErrorCode.INVALID_INPUT, (lines, outcome)
        return "refused"
    if isinstance(outcome, errors.WireError):
        return "named"
    assert not isinstance(outcome, BaseException), f"{type(outcome).__name__}: {outcome} on {lines!r}"[:2000]
    reply = _deciding(lines)
    assert type(reply["id"]) is int and reply["id"] == 1 and reply["result"] == outcome, (lines, outcome)
    assert all(abs(n) < 10**40 for n in _ints(reply)), lines
    jsonschema.validate(outcome, SCHEMA)
    return "accepted"


def _ints(value: Any) -> Iterator[int]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _ints(item)
    elif isinstance(value, int):
        yield value


def run_case(spec: str, lines: list[bytes]) -> object:
    conn = Connection(
        open_transport(spec, max_line=1 << 20, timeout=TIMEOUT), timeout=TIMEOUT, max_line=1 << 20
    )
    try:
        return conn.request("new_session", {"model": "m"})
    except (errors.WireError, errors.EngineRefusal) as exc:
        return exc
    except Exception as exc:  # what the fuzzer exists to find: judged (and failed) by judge()
        return exc
    finally:
        conn.transport.close(grace=0)


def fuzz(spec_for: Any, tag: str) -> Counter[str]:
    seen: Counter[str] = Counter()
    slowest = 0.0
    started = time.monotonic()
    for i, lines in enumerate(cases(SEED + (tag == "http"), CASES)):
        signal.alarm(ALARM)
        t = time.monotonic()
        outcome = run_case(spec_for(lines), lines)
        slowest = max(slowest, time.monotonic() - t)
        signal.alarm(0)
        try:
            seen[judge(lines, outcome)] += 1
        except AssertionError as exc:
            raise AssertionError(f"case {i} (seed {SEED}): {exc}") from None
    print(
        f"wire fuzz ({tag}): {CASES} cases, seed {SEED}: {dict(seen)}; slowest {slowest:.2f} s, "
        f"{time.monotonic() - started:.1f} s in all"
    )
    return seen


def test_stdio_wire_fuzz(tmp_path: Path, alarm: None) -> None:
    path = tmp_path / "lines"

    def spec_for(lines: list[bytes]) -> str:
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        return f"exec:cat {path}"  # an engine that says exactly these lines, then closes its stdout

    seen = fuzz(spec_for, "stdio")
    assert sum(seen.values()) == CASES and seen["accepted"] and seen["named"] and seen["refused"], seen


def test_http_wire_fuzz(alarm: None) -> None:
    with CannedServer() as server:

        def spec_for(lines: list[bytes]) -> str:
            server.body = b"".join(line + b"\n" for line in lines)
            return server.url

        seen = fuzz(spec_for, "http")
    assert sum(seen.values()) == CASES and seen["accepted"] and seen["named"] and seen["refused"], seen
