"""Token samplers: turn one row of logits into one token id.

`greedy` is the default. `Sampler` draws from the softmax of the top-k logits at a temperature, with its own
seeded RNG and exactly one uniform draw per token, so two samplers with the same seed pick the same tokens,
and a run cut short (cancelled) picks a prefix of the tokens the full run picks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# What Session.generate calls once per emitted token.
SampleFn = Callable[[np.ndarray], int]


def _check_logits(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 1 or logits.size == 0:
        raise ValueError(f"sampler wants logits of shape [vocab], got shape {logits.shape}")
    return logits


def greedy(logits: np.ndarray) -> int:  # [vocab] -> token id
    """The id of the largest logit; the lowest id wins a tie."""
    return int(np.argmax(_check_logits(logits)))


class Sampler:
    """Temperature and top-k sampling with a seeded RNG: `Sampler(temperature=0.8, top_k=40, seed=1)`."""

    __slots__ = ("rng", "seed", "temperature", "top_k")

    def __init__(self, temperature: float = 1.0, top_k: int | None = None, seed: int = 0) -> None:
        if not (isinstance(temperature, int | float) and np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0 (greedy is 0), got {temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        self.temperature = float(temperature)
        self.top_k = top_k
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: np.ndarray) -> int:  # [vocab] -> token id
        logits = _check_logits(logits).astype(np.float64)
        # Candidates in descending logit order; a stable sort breaks ties by the lower id, so the order (and
        # with it the token a given draw lands on) does not depend on the sort algorithm.
        order = np.argsort(-logits, kind="stable")
        if self.top_k is not None:
            order = order[: self.top_k]
        z = logits[order] / self.temperature
        p = np.exp(z - z[0])  # z[0] is the largest, so every term is in (0, 1]
        cdf = np.cumsum(p)
        u = self.rng.random() * cdf[-1]  # exactly one draw per token
        pick = min(int(np.searchsorted(cdf, u, side="right")), len(order) - 1)
        return int(order[pick])

    def __repr__(self) -> str:
        return f"Sampler(temperature={self.temperature}, top_k={self.top_k}, seed={self.seed})"
