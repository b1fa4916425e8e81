"""The one reader for JSON falsify did not write: wire lines, HTTP bodies, DSSE envelopes, bundle statements and
an engine's config.json.

`loads(data, what=...)` bounds what a hostile document can cost before and while it is parsed: its size in bytes,
repeated keys in one object, the digits of each integer (Python's own int limit raises a plain ValueError at 4,300 digits, which a caller
could mistake for something else), the length of each number literal, NaN and Infinity (not JSON), and the
nesting depth. Every failure is a JsonFormatError naming `what`, never a ValueError, RecursionError or
UnicodeDecodeError, so nothing a parser raises can pass for an engine's refusal or any other meaning.

`Field(file)` then reads the parsed value with typed checks (`Field("results.json")["tests"].need_dict(v)`):
a value of the wrong type is one FieldError line naming the file and the field, never a KeyError or TypeError
deep in whatever reads it next.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

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


class FieldError(JsonFormatError):
    """A value in a parsed document of the wrong type or range; the message names the file and the field."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def show(value: Any, limit: int = 60) -> str:
    """A value as one short line of JSON (control characters escaped), for a message."""
    try:
        text = json.dumps(value, sort_keys=True, default=repr, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Field:
    """Where a value sits in a document (`results.json: tests["t.py::x"].outcome`), and the typed checks that
    name it: each `need_*` returns the value when it has the type, else raises one FieldError line naming the file
    and the field. Every value read from a document falsify did not write goes through one of them."""

    file: str
    path: str = ""

    def __getitem__(self, key: str | int) -> Field:
        if isinstance(key, int):
            step = f"[{key}]"
        elif _NAME.match(key):
            step = f".{key}" if self.path else key
        else:
            step = f"[{show(key)}]"
        return Field(self.file, self.path + step)

    def __str__(self) -> str:
        return f"{self.file}: {self.path}" if self.path else self.file

    def fail(self, problem: str) -> NoReturn:
        raise FieldError(f"{self}: {problem}")

    def _expected(self, kind: str, value: Any) -> NoReturn:
        self.fail(f"expected {kind}, got {show(value)}")

    def need_dict(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self._expected("a JSON object", value)
        return value

    def need_list(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            self._expected("a list", value)
        return value

    def need_str(self, value: Any) -> str:
        if not isinstance(value, str):
            self._expected("a string", value)
        return value

    def need_bool(self, value: Any) -> bool:
        if not isinstance(value, bool):
            self._expected("true or false", value)
        return value

    def need_int(self, value: Any, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._expected(f"an integer >= {minimum}", value)
        return value

    def need_number(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self._expected("a finite number", value)
        return float(value)

    def need_str_list(self, value: Any) -> list[str]:
        for i, item in enumerate(self.need_list(value)):
            self[i].need_str(item)
        return value

    def get(
        self, obj: dict[str, Any], key: str, kind: str, default: Any = None, *, null: bool = False
    ) -> Any:
        """obj[key] checked as KIND (dict, list, str, bool, int, number, str_list), DEFAULT when absent; with
        NULL, a JSON null is allowed too (and returned as None)."""
        if key not in obj:
            return default
        value = obj[key]
        if value is None and null:
            return None
        need: Callable[[Any], Any] = getattr(self[key], f"need_{kind}")
        return need(value)
