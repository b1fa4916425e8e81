"""What the wire client and the lane host share: the stand-in state a reported forward is replayed on and the checks
of the arrays an engine sends (a malformed one ends the connection; logits of the wrong shape or not finite are a
ProtocolViolation naming the rule). A token-id argument is checked before it is sent by falsify/engines/tokens.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from falsify.engines.protocol import RunRecord
from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection
from falsify.engines.wire.messages import decode_bytes, decode_f32


@dataclass(slots=True)
class EventState:
    """The stand-in state a reported forward is replayed with through the session's model object."""

    pos: int
    session: str


def _conn(engine: Any) -> Connection:
    conn: Connection = engine.connection()
    return conn


def _engine_f32(engine: Any, obj: dict[str, Any], what: str) -> np.ndarray:
    """An array the engine sent; one whose bytes and shape disagree is a MalformedMessage that ends the
    connection, never a ValueError (which a falsifier would read as the engine refusing its input)."""
    try:
        return decode_f32(obj, what)
    except (ValueError, OverflowError) as exc:
        _conn(engine).fail(errors.MalformedMessage(f"engine {engine.spec}: {exc}"))


def engine_bytes(engine: Any, text: str, what: str) -> bytes:
    try:
        return decode_bytes(text, what)
    except ValueError as exc:
        _conn(engine).fail(errors.MalformedMessage(f"engine {engine.spec}: {exc}"))


def checked_ids(engine: Any, ids: list[int], vocab: int, where: str) -> list[int]:
    """Token ids an engine sent, each in [0, vocab) of the vocabulary its load_model announced (`config.vocab_size`);
    one outside is a ProtocolViolation naming the message and field (`where`: "$/token params.token" for one id,
    "prefill_step result kept[0].tokens" for a list, then indexed), never a value a falsifier sees (issue #48)."""
    for i, token in enumerate(ids):
        if not 0 <= token < vocab:
            field = where if where.endswith(".token") else f"{where}[{i}]"
            _conn(engine).fail(
                errors.ProtocolViolation(
                    f"engine {engine.spec}: {field} is {token}, outside the vocabulary of {vocab} the engine "
                    "announced (load_model config.vocab_size) [rule: token ids lie in [0, vocab_size)]"
                )
            )
    return [int(t) for t in ids]


def checked_logits(engine: Any, obj: dict[str, Any], what: str, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 array an engine sent, held to the rules: the shape the request implies, every value finite
    (a ProtocolViolation naming the rule otherwise)."""
    logits = _engine_f32(engine, obj, what)
    if logits.shape != shape:
        _conn(engine).fail(
            errors.ProtocolViolation(
                f"engine {engine.spec}: {what} of shape {list(logits.shape)}, expected {list(shape)} "
                "[rule: logits are shaped [tokens, vocab_size] as the request implies]"
            )
        )
    if not np.isfinite(logits).all():
        bad = int(np.flatnonzero(~np.isfinite(logits.reshape(-1)))[0])
        _conn(engine).fail(
            errors.ProtocolViolation(
                f"engine {engine.spec}: {what} holds {logits.reshape(-1)[bad]} at flat index {bad} "
                "[rule: logits are finite]"
            )
        )
    return logits


@dataclass(frozen=True, slots=True)
class WireRun(RunRecord):
    """What one generate emitted and cost, as the harness counted it from the engine's events (polls: counted by
    the cancel token the harness answered from), with the prompt tokens the engine reused."""

    reused: int
    claims: dict[str, Any] = field(default_factory=dict)  # the engine's own counts: a claim, never the record
