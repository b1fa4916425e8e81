"""Numbers falsify reads from the environment: FALSIFY_WIRE_TIMEOUT, FALSIFY_WIRE_CALL_TIMEOUT, FALSIFY_OPENAI_TIMEOUT and FALSIFY_TEST_TIMEOUT
(seconds), FALSIFY_WIRE_MAX_LINE (bytes), FALSIFY_LLAMACPP_THREADS and FALSIFY_TORCH_THREADS (threads), FALSIFY_GATE_JOBS (processes). Unset or
empty means the default; anything else must be a finite number in the variable's range, else the caller's named
error, `NAME='value' must be ...`, one line: never a float() traceback, nor the OverflowError 1e308 seconds gave
a wait, nor a thread count of a million."""

from __future__ import annotations

import os

from falsify.subcommand import MAX_SECONDS, MIN_SECONDS, seconds_problem  # the command line's timeout range

MAX_THREADS = 1024
WIRE_TIMEOUT = 30.0  # seconds the harness waits for each message of a wire engine
# seconds one wire call may take, all of it, whatever the engine sends meanwhile ($/poll, $/log, $/forward): a
# message restarts WIRE_TIMEOUT, never this (issue #48: an engine repeating $/poll held a lane_round for ever)
WIRE_CALL_TIMEOUT = 300.0
WIRE_MAX_LINE = 16 * 2**20  # bytes in one wire message line
OPENAI_TIMEOUT = 300.0  # seconds one request to an OpenAI-compatible server may take, all of it


def _raw(name: str) -> str | None:
    raw = os.environ.get(name)
    return None if raw is None or raw.strip() == "" else raw


def seconds(name: str, default: float, error: type[Exception], *, zero_is_none: bool = False) -> float:
    """NAME as seconds from MIN_SECONDS to MAX_SECONDS (or 0, "no limit", with `zero_is_none`); DEFAULT unset."""
    raw = _raw(name)
    if raw is None:
        return default
    value = _number(name, raw, error)
    if seconds_problem(value, zero_is_none=zero_is_none):
        low = "0 (no limit) or " if zero_is_none else ""
        raise error(f"{name}={raw!r} must be {low}a number of seconds from {MIN_SECONDS:g} to {MAX_SECONDS}")
    return value


def whole_number(
    name: str, default: int, error: type[Exception], *, low: int, high: int, unit: str = ""
) -> int:
    """NAME as a whole number from LOW to HIGH; DEFAULT when unset."""
    raw = _raw(name)
    if raw is None:
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or not low <= int(text) <= high:
        raise error(f"{name}={raw!r} must be a whole number{unit} from {low:,} to {high:,}")
    return int(text)


def _number(name: str, raw: str, error: type[Exception]) -> float:
    try:
        return float(raw)
    except ValueError:
        raise error(f"{name}={raw!r} is not a number") from None


# Each variable's reader, with its default and range, for the adapter that reads it and for check_all.
def wire_timeout(error: type[Exception]) -> float:
    return seconds("FALSIFY_WIRE_TIMEOUT", WIRE_TIMEOUT, error)


def wire_call_timeout(error: type[Exception]) -> float:
    return seconds("FALSIFY_WIRE_CALL_TIMEOUT", WIRE_CALL_TIMEOUT, error)


def wire_max_line(error: type[Exception]) -> int:
    return whole_number("FALSIFY_WIRE_MAX_LINE", WIRE_MAX_LINE, error, low=1024, high=2**30, unit=" of bytes")


def openai_timeout(error: type[Exception]) -> float:
    return seconds("FALSIFY_OPENAI_TIMEOUT", OPENAI_TIMEOUT, error)


def test_timeout(error: type[Exception]) -> float:
    return seconds("FALSIFY_TEST_TIMEOUT", 0.0, error, zero_is_none=True)  # the plugin's, per falsifier


def threads(name: str, error: type[Exception]) -> int:
    return whole_number(name, 1, error, low=1, high=MAX_THREADS, unit=" of threads")


def gate_jobs(error: type[Exception]) -> int | None:
    """FALSIFY_GATE_JOBS: how many pytest processes `falsify gate` splits its falsifiers over; None unset."""
    if _raw("FALSIFY_GATE_JOBS") is None:
        return None
    return whole_number("FALSIFY_GATE_JOBS", 1, error, low=1, high=8, unit=" of processes")


def check_all(error: type[Exception]) -> None:
    """Every FALSIFY_* number, checked before a run starts: the first bad one is ERROR naming it."""
    wire_timeout(error)
    wire_call_timeout(error)
    wire_max_line(error)
    openai_timeout(error)
    test_timeout(error)
    threads("FALSIFY_LLAMACPP_THREADS", error)
    threads("FALSIFY_TORCH_THREADS", error)
    gate_jobs(error)
