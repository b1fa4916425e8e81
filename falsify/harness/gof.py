"""Goodness of fit for falsifiers that judge a sampler: Pearson's chi-square test with an exact p-value.

    from falsify.harness.gof import chi_square_gof, chi_square_sf

    fit = chi_square_gof(counts, probs)    # counts: int[bins] observed; probs: float[bins], summing to 1
    fit.statistic, fit.df, fit.p_value, fit.bins, fit.outside

Bins whose expected count is below 5 (Cochran's rule) are pooled, smallest first, into one bin; a draw that
landed where the probability is 0 is counted in `outside` and makes the p-value 0 (no distribution with those
probabilities can produce it). `chi_square_sf(x, df)` is the chi-square survival function, the regularised
upper incomplete gamma function Q(df/2, x/2), computed here (series below a + 1, Lentz's continued fraction
above) so the default gate needs no scipy; tests/test_gof.py checks it against the closed forms for df = 1, 2, 3
and every even df.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Fit", "chi_square_gof", "chi_square_sf"]

_EPS = 1e-16  # relative size of the last term kept in the series and the continued fraction
_TINY = 1e-300  # Lentz's guard against a zero denominator
_MAX_TERMS = 100_000


@dataclass(frozen=True, slots=True)
class Fit:
    statistic: float  # Pearson's X^2 over the pooled bins
    df: int  # pooled bins - 1
    p_value: float  # P(X^2 >= statistic) under the null hypothesis
    bins: int  # bins after pooling
    outside: int  # draws where the probability is 0
    draws: int


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square with df degrees of freedom."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"chi_square_sf: df must be an int >= 1, got {df!r}")
    if not math.isfinite(x):
        raise ValueError(f"chi_square_sf: x must be finite, got {x!r}")
    return _gamma_q(df / 2.0, x / 2.0)


def _gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a)."""
    if x <= 0:
        return 1.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        # P(a, x) = e^-x x^a / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n)), converging fast for x < a + 1.
        term = total = 1.0 / a
        for n in range(1, _MAX_TERMS):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * _EPS:
                return max(0.0, 1.0 - total * math.exp(log_prefactor))
        raise ArithmeticError(f"chi_square_sf: series did not converge for a={a}, x={x}")
    # Q(a, x) = e^-x x^a / Gamma(a) * 1 / (x + 1 - a - 1(1 - a) / (x + 3 - a - 2(2 - a) / (x + 5 - a - ...))),
    # evaluated with the modified Lentz method.
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return min(1.0, math.exp(log_prefactor) * h)
    raise ArithmeticError(f"chi_square_sf: continued fraction did not converge for a={a}, x={x}")


def chi_square_gof(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> Fit:
    """Pearson's test of observed `counts` against `probs` (same length; probs >= 0 summing to 1)."""
    counts = np.asarray(counts, np.int64)
    probs = np.asarray(probs, np.float64)
    if counts.shape != probs.shape or counts.ndim != 1:
        raise ValueError(
            f"chi_square_gof: counts {counts.shape} and probs {probs.shape} must be equal 1-D shapes"
        )
    if (counts < 0).any() or (probs < 0).any() or not np.isfinite(probs).all():
        raise ValueError("chi_square_gof: counts and probs must be finite and >= 0")
    if abs(math.fsum(probs) - 1.0) > 1e-9:
        raise ValueError(f"chi_square_gof: probs sum to {math.fsum(probs)!r}, not 1")
    n = int(counts.sum())
    if n == 0:
        raise ValueError("chi_square_gof: no draws")
    support = probs > 0
    outside = int(counts[~support].sum())
    expected = probs[support] * n
    observed = counts[support]
    # Pool the bins expected below min_expected, smallest first, into one; a pooled bin still short takes the
    # next-smallest bin too, so every bin the statistic sees is expected at least min_expected (or is the only one).
    by_size = np.argsort(expected, kind="stable")
    bins_e: list[float] = []
    bins_o: list[int] = []
    pool_e, pool_o = 0.0, 0
    for i in by_size:
        if pool_e < min_expected and (pool_e > 0 or expected[i] < min_expected):
            pool_e += float(expected[i])
            pool_o += int(observed[i])
        else:
            bins_e.append(float(expected[i]))
            bins_o.append(int(observed[i]))
    if pool_e > 0:
        bins_e.append(pool_e)
        bins_o.append(pool_o)
    e = np.asarray(bins_e)
    o = np.asarray(bins_o, np.float64)
    statistic = float(np.sum((o - e) ** 2 / e))
    df = len(bins_e) - 1
    if outside:
        p_value = 0.0
    elif df == 0:
        p_value = 1.0  # one bin: every draw lands in it, nothing to test
    else:
        p_value = chi_square_sf(statistic, df)
    return Fit(statistic, df, p_value, len(bins_e), outside, n)
