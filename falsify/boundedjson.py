"""The one reader for JSON falsify did not write: wire lines, HTTP bodies, DSSE envelopes, bundle statements and
an engine's config.json.

`loads(data, what=...)` bounds what a hostile document can cost before and while it is parsed: its size in bytes,
repeated keys in one object, the digits of each integer (Python's own int limit raises a plain ValueError at 4,300 digits, which a caller
could mistake for something else), the length of each number literal, NaN and Infinity (not JSON), and the
nesting depth. Every failure is a JsonFormatError naming `what`, never a ValueError, RecursionError or
UnicodeDecodeError, so nothing a parser raises can pass for an engine's refusal or any other meaning.
"""

from __future__ import annotations

import json
from typing import Any

from falsify.errors import FalsifyError

MAX_BYTES = 16 * 2**20  # one document; callers with their own limit (FALSIFY_WIRE_MAX_LINE) pass it
MAX_DEPTH = 64  # nested arrays and objects; the protocol's deepest message is 4
MAX_INT_DIGITS = 40  # 2**128 has 39 digits: every count, id and position falsify reads fits
MAX_NUMBER_CHARS = 64  # a float literal: repr() of any double is at most 24 characters


class JsonFormatError(FalsifyError):
    """A document that is not bounded JSON: too large, too deep, a number too long, NaN, or not JSON at all."""


def _int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise JsonFormatError(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise JsonFormatError(f"a number literal of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonFormatError(f"the number {text} overflows a double")
    return value


def _constant(text: str) -> Any:
    raise JsonFormatError(f"{text} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are distinct: readers disagree on a repeated key (Python keeps the last, others the
    first), so a document that means two things to two readers is refused (issue #27)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise JsonFormatError(f"the key {repeated[:80]!r} appears twice in one object")
    return value


def loads(
    data: bytes | str,
    *,
    what: str,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The value of one JSON document; JsonFormatError("WHAT: ...") when it is not bounded JSON."""
    if len(data) > max_bytes:
        raise JsonFormatError(f"{what}: {len(data)} bytes (at most {max_bytes})")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        value = json.loads(
            text, parse_int=_int, parse_float=_float, parse_constant=_constant, object_pairs_hook=_object
        )
    except JsonFormatError as exc:
        raise JsonFormatError(f"{what}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise JsonFormatError(f"{what}: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise JsonFormatError(
            f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise JsonFormatError(f"{what}: nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # anything else the parser raises (a lone surrogate the codec refuses, ...)
        raise JsonFormatError(f"{what}: not JSON ({exc})") from None
    _check_depth(value, what, max_depth)
    return value


def _check_depth(value: Any, what: str, max_depth: int) -> None:
    """Walk the parsed value without recursion; refuse it past `max_depth` levels of arrays and objects."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            raise JsonFormatError(f"{what}: nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
