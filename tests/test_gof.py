"""falsify.harness.gof: the chi-square survival function against closed forms, and the pooled Pearson test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from falsify.harness.gof import chi_square_gof, chi_square_sf

XS = [0.0, 1e-6, 0.01, 0.3, 1.0, 2.5, 4.0, 9.9, 17.0, 33.0, 80.0, 150.0, 400.0, 900.0]


def even_df_sf(x: float, df: int) -> float:
    """Q(k, x/2) for integer k = df/2: e^(-x/2) sum_{i<k} (x/2)^i / i!."""
    h = x / 2
    return math.fsum(
        math.exp(-h + i * math.log(h) - math.lgamma(i + 1)) if h > 0 else float(i == 0)
        for i in range(df // 2)
    )


@pytest.mark.parametrize("df", [2, 4, 6, 10, 30, 64, 100, 200, 510])
@pytest.mark.parametrize("x", XS)
def test_sf_even_df_closed_form(x: float, df: int) -> None:
    want = even_df_sf(x, df)
    got = chi_square_sf(x, df)
    assert got == pytest.approx(want, rel=1e-10, abs=1e-300), (x, df, got, want)


@pytest.mark.parametrize("x", XS)
def test_sf_df1_and_df3_closed_form(x: float) -> None:
    q1 = math.erfc(math.sqrt(x / 2))
    q3 = q1 + math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    assert chi_square_sf(x, 1) == pytest.approx(q1, rel=1e-10, abs=1e-300)
    assert chi_square_sf(x, 3) == pytest.approx(q3, rel=1e-10, abs=1e-300)


def test_sf_is_monotone_and_bounded() -> None:
    for df in (1, 5, 77, 300):
        values = [chi_square_sf(x, df) for x in np.linspace(0, 4 * df + 50, 400)]
        assert values[0] == 1.0
        assert all(0.0 <= v <= 1.0 for v in values)
        assert all(b <= a for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(
    ("x", "df"), [(float("nan"), 2), (float("inf"), 2), (1.0, 0), (1.0, 2.5), (1.0, True)]
)
def test_sf_refuses_bad_arguments(x: float, df: object) -> None:
    with pytest.raises(ValueError, match="chi_square_sf"):
        chi_square_sf(x, df)  # type: ignore[arg-type]


def test_gof_exact_counts_fit_perfectly() -> None:
    probs = np.array([0.5, 0.25, 0.125, 0.125])
    fit = chi_square_gof(np.array([400, 200, 100, 100]), probs)
    assert (fit.statistic, fit.df, fit.p_value, fit.outside, fit.draws) == (0.0, 3, 1.0, 0, 800)


def test_gof_pools_small_bins_and_counts_draws_outside_the_support() -> None:
    probs = np.array([0.9, 0.05, 0.03, 0.02, 0.0])
    fit = chi_square_gof(np.array([90, 5, 3, 2, 0]), probs)  # expected 90, 5, 3, 2: 3 and 2 pool to 5
    assert (fit.bins, fit.df, fit.statistic) == (3, 2, 0.0)
    stray = chi_square_gof(np.array([90, 5, 3, 1, 1]), probs)
    assert (stray.outside, stray.p_value) == (1, 0.0)


def test_gof_rejects_a_wrong_distribution_and_keeps_a_right_one() -> None:
    rng = np.random.default_rng(0)
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    right = np.bincount(rng.choice(4, 20_000, p=probs), minlength=4)
    wrong = np.bincount(rng.choice(4, 20_000, p=[0.37, 0.31, 0.21, 0.11]), minlength=4)
    assert chi_square_gof(right, probs).p_value > 1e-3
    assert chi_square_gof(wrong, probs).p_value < 1e-6


def test_gof_refuses_mismatched_input() -> None:
    with pytest.raises(ValueError, match="equal 1-D shapes"):
        chi_square_gof(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(ValueError, match="sum to"):
        chi_square_gof(np.array([1, 2]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="no draws"):
        chi_square_gof(np.array([0, 0]), np.array([0.5, 0.5]))
