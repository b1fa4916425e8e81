"""The wire protocol's vocabulary: its version, error codes, the array encoding, and the message schemas.

docs/engine-protocol.md is the specification; this module is what the harness side checks messages against.
Every message's params or result has a JSON Schema in `schemas/` (package data), named
`<method>.params.schema.json` / `<method>.result.schema.json`, with a method's `$/` spelt `dollar-` (`$/poll` ->
`dollar-poll.params.schema.json`), plus `envelope.schema.json` for the three message shapes.
"""

from __future__ import annotations

import base64
import binascii
import json
from enum import IntEnum
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import numpy as np

PROTOCOL_VERSION = "falsify-engine/1.2"  # what the harness offers first
# What it speaks, newest first: 1 is 1.1 without lanes, sample; 1.1 is 1.2 without its batched calls (BATCHED).
PROTOCOL_VERSIONS = (
    "falsify-engine/1.2",
    "falsify-engine/1.1",
    "falsify-engine/1",
)
V1 = "falsify-engine/1"

# Wire capabilities (what `initialize` answers) and the methods each one obliges the engine to serve.
WIRE_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "generate": ("load_model", "new_session", "release_session", "generate"),
    "state": (
        "load_model",
        "new_state",
        "copy_state",
        "release_state",
        "forward",
        "state_bytes",
        "state_digest",
    ),
    "prefill": ("prefill_open", "prefill_step"),  # with "state": a prefill advances a state handle
    # 1.1
    "lanes": (
        "load_model",
        "lane_host",
        "lane_submit",
        "lane_round",
        "lane_cancel",
        "lane_resume",
        "lane_leave",
        "lane_status",
        "lane_digest",
        "release_lane_host",
    ),
    "sample": ("new_sampler", "sample_pick", "sample_draw", "greedy_pick", "sample_draws"),
}
V1_CAPABILITIES = ("generate", "state", "prefill")  # what falsify-engine/1 carries
# 1.2: calls that answer many questions of one kind in one round trip, each equal to the calls it batches (a 1.1
# engine is asked them one call at a time). `sample_draws`: `count` successive `sample_draw`s on one row.
BATCHED = ("sample_draws",)


def batches(version: str) -> bool:
    """Whether the agreed protocol version carries 1.2's batched calls (BATCHED): a 1.1 or 1 engine is asked one
    call at a time."""
    return version == PROTOCOL_VERSION


# Methods the harness sends (the lifecycle's two, then every capability's), the engine sends, and which of them are
# notifications (no reply).
HARNESS_REQUESTS = (
    "initialize",
    "shutdown",
    *dict.fromkeys(m for methods in WIRE_CAPABILITIES.values() for m in methods),
)
HARNESS_NOTIFICATIONS = ("exit", "$/cancelRequest")
ENGINE_REQUESTS = ("$/poll", "$/sample")
ENGINE_NOTIFICATIONS = ("$/forward", "$/token", "$/log")


class ErrorCode(IntEnum):
    """`error.code` of a response (JSON-RPC 2.0's reserved range, plus the protocol's own)."""

    PARSE_ERROR = -32700  # the line is not JSON
    INVALID_REQUEST = -32600  # JSON, but not a request/response/notification of this protocol
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602  # params do not match the method's schema
    INTERNAL_ERROR = -32603
    UNSUPPORTED_PROTOCOL_VERSION = -32001
    SERVER_NOT_INITIALIZED = -32002
    INVALID_INPUT = -32010  # well-formed, but the values are refused (token id outside the vocabulary, ...)
    UNKNOWN_HANDLE = -32011
    CAPABILITY_NOT_OFFERED = -32012
    LANE_REFUSED = -32013  # 1.1: a lane_submit the host cannot fit (lanes or pages); nothing was allocated
    REQUEST_CANCELLED = -32800


def schema_name(method: str) -> str:
    """The file-name stem of a method's schemas: `$/poll` -> `dollar-poll`."""
    return method.replace("$/", "dollar-")


@cache
def _schema(name: str) -> jsonschema.protocols.Validator | None:
    ref = resources.files(__package__).joinpath(f"schemas/{name}.schema.json")
    if not ref.is_file():
        return None
    schema = json.loads(ref.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    # JSON Schema's "integer" takes 3.0 too; the protocol's integers have no fraction and no exponent (§1.1), and
    # a float that reached a position or an id would be a TypeError deep in the harness, not a named schema break
    strict = cls.TYPE_CHECKER.redefine("integer", _json_integer)
    items = cls.VALIDATORS["items"]
    return jsonschema.validators.extend(cls, {"items": _int_items(items)}, type_checker=strict)(schema)


def _json_integer(_: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


# The keywords an array of integers may carry for `_int_items` to judge it without jsonschema's per-item descent.
_INT_KEYWORDS = frozenset({"type", "minimum", "maximum", "description"})


def _int_items(items: Any) -> Any:
    """jsonschema's `items` keyword, with a fast path for arrays of integers (token ids, positions: a
    `sample_pick` answer carries one per uniform, 65,536 in a sampling falsifier's sweep, where jsonschema's
    descent into each item took ~2 s of the harness's CPU per message). The fast path only finds the items that
    break `{"type": "integer", "minimum": m, "maximum": M}`; each is then judged by jsonschema itself, so the
    errors are the ones jsonschema gives, item for item (tests/test_wire_schemas.py holds them equal)."""

    def validate(validator: Any, schema: Any, instance: Any, parent: Any) -> Any:
        if (
            not isinstance(schema, dict)
            or schema.get("type") != "integer"
            or not _INT_KEYWORDS.issuperset(schema)
            or not isinstance(instance, list)
        ):
            yield from items(validator, schema, instance, parent)
            return
        low, high = schema.get("minimum"), schema.get("maximum")
        for index, item in enumerate(instance):
            if (
                type(item) is not int  # bool, float, str ...: jsonschema says which rule it breaks
                or (low is not None and item < low)
                or (high is not None and item > high)
            ):
                yield from validator.descend(item, schema, path=index)

    return validate


def schema_problem(method: str, part: str, value: Any) -> str | None:
    """None when `value` (the `params` or `result` of `method`) matches its schema, else one line naming the
    field and the rule, jsonschema-style."""
    validator = _schema(f"{schema_name(method)}.{part}")
    if validator is None:
        return f"no schema for {method} {part}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{method} {part}{where}: {error.message} [{error.validator}]"


def envelope_problem(message: Any) -> str | None:
    validator = _schema("envelope")
    assert validator is not None
    error = jsonschema.exceptions.best_match(validator.iter_errors(message))
    return None if error is None else f"not a message of {PROTOCOL_VERSION}: {error.message}"


def encode_f32(array: np.ndarray) -> dict[str, Any]:
    """An exact float32 array: base64 of its little-endian bytes, row-major, with its shape."""
    a = np.ascontiguousarray(array, dtype="<f4")
    return {"dtype": "float32", "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_f32(obj: dict[str, Any], what: str) -> np.ndarray:
    """The array `encode_f32` wrote; ValueError naming `what` when its bytes and shape disagree."""
    raw = decode_bytes(obj["data"], what)
    shape = tuple(int(n) for n in obj["shape"])
    if len(raw) != 4 * int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"{what}: {len(raw)} bytes of data for float32 shape {list(shape)}")
    return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)


def encode_f64(array: np.ndarray) -> dict[str, Any]:
    """An exact float64 array (the uniforms of `sample_pick`): base64 of its little-endian bytes."""
    a = np.ascontiguousarray(array, dtype="<f8")
    return {"dtype": "float64", "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_bytes(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: not standard base64 (RFC 4648 §4, with padding)") from None
