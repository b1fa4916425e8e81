"""The engine's sampler over the wire (capability `sample`, protocol 1.1): `engine.sampler(...)` and
`engine.greedy()` of falsify/engines/protocol.py, each call one request (1.2: `draws` asks for many seeded
draws in one).

The harness chooses the uniforms (`sample_pick` carries them as exact float64), so the sampling falsifiers probe
the engine's inverse CDF where they like; `sample_draw` is one draw of the sampler's own seeded RNG. What comes
back is checked before a falsifier sees it: one token per uniform, each in [0, len(logits)); a token outside is a
ProtocolViolation naming the rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from falsify.engines.wire import errors
from falsify.engines.wire.messages import batches, encode_f32, encode_f64

# The most draws one `sample_draws` asks for (its schema's maximum): an answer stays well under the line limit.
MAX_DRAWS = 65536


def number(value: Any) -> Any:
    """A sampler parameter as JSON: a float that JSON cannot spell (NaN, ±inf) as the string the protocol names,
    anything else as is, so the engine, not the harness, refuses what it must (-32010)."""
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _logits(engine: Any, logits: Any) -> tuple[dict[str, Any], int]:
    row = np.asarray(logits)
    if row.ndim != 1 or row.size == 0:
        raise ValueError(f"sampler wants logits of shape [vocab], got shape {row.shape}")
    if row.dtype != np.float32 and not np.array_equal(row.astype(np.float32), row, equal_nan=True):
        raise ValueError("the wire carries float32 logits; these are not exactly float32")
    return encode_f32(row), int(row.size)


def _checked(engine: Any, method: str, tokens: list[int], vocab: int, want: int) -> list[int]:
    if len(tokens) != want:
        engine.connection().fail(
            errors.ProtocolViolation(
                f"engine {engine.spec}: {method} answered {len(tokens)} tokens for {want} "
                + (
                    "draws [rule: one token per draw asked for]"
                    if method == "sample_draws"
                    else "uniforms [rule: one token per uniform]"
                )
            )
        )
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        engine.connection().fail(
            errors.ProtocolViolation(
                f"engine {engine.spec}: {method} answered token {bad[0]} for logits of {vocab} "
                "[rule: token ids lie in [0, len(logits))]"
            )
        )
    return tokens


class WireSampler:
    """`engine.sampler(temperature, top_k, top_p, seed)` living in the engine."""

    def __init__(self, engine: Any, temperature: Any, top_k: Any, top_p: Any, seed: Any) -> None:
        self.engine = engine
        params = {
            "temperature": number(temperature),
            "top_k": number(top_k),
            "top_p": number(top_p),
            "seed": number(seed),
        }
        self.handle = engine.connection().request("new_sampler", params)["sampler"]
        self.temperature, self.top_k, self.top_p, self.seed = temperature, top_k, top_p, seed

    def __call__(self, logits: Any) -> int:
        row, vocab = _logits(self.engine, logits)
        token = self.engine.connection().request("sample_draw", {"sampler": self.handle, "logits": row})[
            "token"
        ]
        return _checked(self.engine, "sample_draw", [token], vocab, 1)[0]

    def draws(self, logits: Any, count: int) -> np.ndarray:
        """`count` tokens drawn with the sampler's own seeded RNG on one row: what `count` calls of `self(logits)`
        answer, in order. A 1.2 engine answers them in `sample_draws` calls of at most MAX_DRAWS each; a 1.1
        engine is asked one `sample_draw` at a time."""
        if not batches(self.engine.version):
            return np.array([self(logits) for _ in range(count)], np.int64)
        row, vocab = _logits(self.engine, logits)
        out: list[int] = []
        while len(out) < count:
            want = min(MAX_DRAWS, count - len(out))
            params = {"sampler": self.handle, "logits": row, "count": want}
            tokens = self.engine.connection().request("sample_draws", params)["tokens"]
            out += _checked(self.engine, "sample_draws", tokens, vocab, want)
        return np.array(out, np.int64)

    def pick(self, logits: Any, u: Any) -> Any:
        row, vocab = _logits(self.engine, logits)
        us = np.asarray(u, np.float64)
        params = {"sampler": self.handle, "logits": row, "u": encode_f64(us.reshape(-1))}
        tokens = self.engine.connection().request("sample_pick", params)["tokens"]
        picked = np.asarray(_checked(self.engine, "sample_pick", tokens, vocab, us.size), np.int64)
        return int(picked[0]) if us.ndim == 0 else picked.reshape(us.shape)

    def __repr__(self) -> str:
        return (
            f"WireSampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
            f"seed={self.seed}, engine={self.engine.spec})"
        )


class WireGreedy:
    """`engine.greedy()`: the engine's greedy pick, one request per call."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def __call__(self, logits: Any) -> int:
        row, vocab = _logits(self.engine, logits)
        token = self.engine.connection().request("greedy_pick", {"logits": row})["token"]
        return _checked(self.engine, "greedy_pick", [token], vocab, 1)[0]
