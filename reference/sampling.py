"""Token samplers: turn one row of logits into one token id.

`greedy` is the default. `Sampler` draws from softmax(logits / temperature), cut to the top-k logits and then to
the top-p nucleus and renormalised over what is kept, with its own seeded RNG and exactly one uniform draw per
token, so two samplers with the same seed pick the same tokens, and a run cut short (cancelled) picks a prefix of
the tokens the full run picks.

The draw is an inverse CDF (`Sampler.pick(logits, u)`): the kept tokens are laid out on [0, 1) in descending
logit order, ties broken by the lower id, each over an interval as long as its probability, and the token whose
interval holds u is the pick. Contract apr-serve-sampling-v1 holds it to the analytic distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

import numpy as np

# What Session.generate calls once per emitted token.
SampleFn = Callable[[np.ndarray], int]

# The smallest temperature taken (0 means greedy, asked for apart). The layout divides float64 logits by it: under
# ~4e-270 a float32 logit's spread overflows to inf and inf - inf makes the CDF NaN (issue #48: 5e-324 drew the
# least likely token). At 1e-6 a spread of 1e-4 already gives the top token all but exp(-100) of the mass, so
# nothing a smaller temperature could mean is lost; the refusal names 0 for greedy.
MIN_TEMPERATURE = 1e-6


def _check_logits(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 1 or logits.size == 0:
        raise ValueError(f"sampler wants logits of shape [vocab], got shape {logits.shape}")
    return logits


def greedy(logits: np.ndarray) -> int:  # [vocab] -> token id
    """The id of the largest logit; the lowest id wins a tie."""
    return int(np.argmax(_check_logits(logits)))


class Sampler:
    """Temperature, top-k and top-p sampling with a seeded RNG: `Sampler(temperature=0.8, top_k=40, top_p=0.95)`.

    The cuts apply in the order transformers' logits warpers do: temperature, then top-k (exactly k tokens, the
    lower id kept on a tie at the k-th logit), then top-p (the shortest run of the remaining tokens, in descending
    order, whose probability sums to at least top_p; so the token that crosses top_p is kept). top_p = 1 and
    top_k = None cut nothing.
    """

    __slots__ = ("_last", "rng", "seed", "temperature", "top_k", "top_p")

    def __init__(
        self, temperature: float = 1.0, top_k: int | None = None, seed: int = 0, top_p: float | None = None
    ) -> None:
        if not (
            isinstance(temperature, int | float)
            and np.isfinite(temperature)
            and temperature >= MIN_TEMPERATURE
        ):
            raise ValueError(
                f"temperature must be a finite number >= {MIN_TEMPERATURE:g} (greedy is 0), got {temperature!r}"
            )
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if top_p is not None and not (
            isinstance(top_p, int | float) and not isinstance(top_p, bool) and 0 < top_p <= 1
        ):
            raise ValueError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")
        self.temperature = float(temperature)
        self.top_k = top_k
        self.top_p = None if top_p is None else float(top_p)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._last: tuple[tuple[object, ...], np.ndarray, np.ndarray] | None = None  # see _layout_of

    def __call__(self, logits: np.ndarray) -> int:  # [vocab] -> token id
        return int(self.pick(logits, self.rng.random()))  # exactly one draw per token

    @overload
    def pick(self, logits: np.ndarray, u: float) -> int: ...
    @overload
    def pick(self, logits: np.ndarray, u: np.ndarray) -> np.ndarray: ...
    def pick(self, logits: np.ndarray, u: float | np.ndarray) -> int | np.ndarray:  # [vocab], u in [0, 1)
        """The token whose interval holds u (a float, or an array of them: one token id each)."""
        order, cdf = self._layout_of(_check_logits(logits))
        at = np.searchsorted(cdf, np.asarray(u, np.float64) * cdf[-1], side="right")
        picked = order[np.minimum(at, len(order) - 1)]
        return int(picked) if picked.ndim == 0 else picked

    def _layout_of(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The kept candidates in draw order and their running (unnormalised) probability. The last layout is
        kept with a copy of the logits and the cuts it was made from: a caller drawing again from the same logits (equal
        bytes, whatever array holds them) under the same cuts reuses it, anything else lays out afresh."""
        key = (self.temperature, self.top_k, self.top_p, logits.dtype.str, logits.tobytes())
        if self._last is not None and self._last[0] == key:
            return self._last[1], self._last[2]
        wide = logits.astype(np.float64)
        # Candidates in descending logit order; a stable sort breaks ties by the lower id, so the order (and
        # with it the token a given draw lands on) does not depend on the sort algorithm.
        order = np.argsort(-wide, kind="stable")
        if self.top_k is not None:
            order = order[: self.top_k]
        z = wide[order] / self.temperature
        p = np.exp(z - z[0])  # z[0] is the largest, so every term is in (0, 1]
        cdf = np.cumsum(p)
        if self.top_p is not None and self.top_p < 1:
            # The first index whose running sum reaches top_p of the total is the last token kept.
            keep = int(np.searchsorted(cdf, self.top_p * cdf[-1], side="left")) + 1
            order, cdf = order[:keep], cdf[:keep]
        self._last = (key, order, cdf)
        return order, cdf

    def __repr__(self) -> str:
        return f"Sampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, seed={self.seed})"
