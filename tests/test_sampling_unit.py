"""Unit tests of reference/sampling.py's inverse CDF, on logits whose distribution is known by hand. The
statistical falsifiers of apr-serve-sampling-v1 are in tests/test_sampling_contract.py."""

from __future__ import annotations

import math

import numpy as np

from reference.sampling import MIN_TEMPERATURE, Sampler


def test_pick_lays_tokens_out_by_probability() -> None:
    # softmax([0, ln 3]) = [1/4, 3/4]: token 1 holds [0, 0.75), token 0 holds [0.75, 1).
    logits = np.array([0.0, math.log(3.0)])
    s = Sampler()
    assert [s.pick(logits, u) for u in (0.0, 0.74, 0.76, 0.999)] == [1, 1, 0, 0]


def test_temperature_divides_the_logits() -> None:
    # At temperature 2 the weights are [1, 3**-0.5]: token 1 holds [0, 0.634), token 0 the rest.
    logits = np.array([0.0, math.log(3.0)])
    s = Sampler(temperature=2.0)
    assert [s.pick(logits, u) for u in (0.62, 0.65)] == [1, 0]


def test_large_logits_do_not_overflow() -> None:
    # Shifted by the largest logit before exp: 1000 and 1000 - ln 3 sample as 0 and -ln 3 do.
    logits = np.array([1000.0 - math.log(3.0), 1000.0])
    assert [Sampler().pick(logits, u) for u in (0.74, 0.76)] == [1, 0]


def test_ties_keep_the_lower_id_first_whatever_the_length() -> None:
    # 200 logits in {0, 1, 2}: the tokens lie on [0, 1) in descending logit order, ties by the lower id (Python's
    # sort is stable; numpy's default sort is not, past 16 elements). Each interval's midpoint picks its token.
    logits = np.random.default_rng(0).integers(0, 3, 200).astype(np.float64)
    order = sorted(range(200), key=lambda i: -logits[i])
    weights = np.exp(logits[order] - logits.max())
    ends = np.cumsum(weights) / weights.sum()
    mids = ends - weights / weights.sum() / 2
    assert Sampler().pick(logits, mids).tolist() == order


def test_one_sampler_follows_each_row_it_is_given() -> None:
    """A sampler keeps its last layout (Sampler._layout_of): each pick must still follow the logits of its call,
    whether another row or the same array changed in place, and the cuts it has now."""
    rng = np.random.default_rng(5)
    rows = [(rng.standard_normal(64) * 3).astype(np.float32) for _ in range(3)]
    us = (np.arange(200) + 0.5) / 200
    shared = Sampler(temperature=0.9, top_k=20, top_p=0.9)
    for row in [*rows, rows[0]]:
        fresh = Sampler(temperature=0.9, top_k=20, top_p=0.9)
        assert list(shared.pick(row, us)) == list(fresh.pick(row, us))
    row = rows[1].copy()
    before = list(shared.pick(row, us))
    row[::-1] = row.copy()  # the same array, other values
    assert list(shared.pick(row, us)) == list(Sampler(temperature=0.9, top_k=20, top_p=0.9).pick(row, us))
    assert list(shared.pick(row, us)) != before
    shared.top_k = 3
    assert set(shared.pick(row, us)) == set(np.argsort(-row, kind="stable")[:3])


def test_the_temperature_floor_is_taken_and_exact() -> None:
    """Issue #48: 1e-6 is the smallest temperature taken (below it is refused: test_session_unit.py); at the floor
    itself, with the largest float32 logits, the layout stays finite and every draw is the top token."""
    assert MIN_TEMPERATURE == 1e-6
    sampler = Sampler(temperature=1e-6)
    logits = np.array([-3.4e38, 3.4e38, 1.0, 3.4e38 * (1 - 2**-23)], np.float32)
    picks = sampler.pick(logits, np.array([0.0, 0.5, 0.999999]))
    assert picks.tolist() == [1, 1, 1]
    assert Sampler(temperature=1e-6 * (1 + 2**-52)).temperature > MIN_TEMPERATURE
