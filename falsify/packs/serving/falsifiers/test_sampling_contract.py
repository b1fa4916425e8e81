"""Falsifiers of contract apr-serve-sampling-v1 (falsify/packs/serving/contracts/apr-serve-sampling-v1.yaml).

The analytic distribution is computed here, from the logits alone: Python's sort on (-logit, id), exp in float64,
sums with math.fsum. The engine is reached only through `engine.sampler(...)`: its `pick(logits, u)` is probed
with uniforms this module chooses, and its seeded `__call__` is judged by a chi-square fit
(falsify.harness.gof). Every formula lives in the YAML; the tests only observe.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import falsify
from falsify.harness.gof import chi_square_gof

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A top-p cut whose running sum lies this close to top_p is decided by float rounding, not by the rule; such
# cases are left out (float64 sums of <= 512 terms err by < 1e-13), except on rows whose probabilities are exact
# (all kept logits tied: every weight is exp(0) = 1, every probability 1/n), where the cut is decided in exact
# rational arithmetic, the mass exactly at top_p included.
TOP_P_MARGIN = 1e-9
# Narrower intervals cannot hold a probe that float64 places reliably on the engine's side of both bounds.
MIN_PROBED = 1e-12
SWEEP = 1 << 16
LAST_BELOW_ONE = float(np.nextafter(1.0, 0.0))


@dataclass(frozen=True)
class Analytic:
    """The kept tokens in layout order (descending logit, lower id first) and their renormalised probabilities."""

    order: list[int]
    probs: list[float]
    mass_at_top_p: bool = False  # the kept tokens' probability is exactly top_p (decided in exact arithmetic)

    def dense(self, vocab: int) -> np.ndarray:
        p = np.zeros(vocab)
        p[self.order] = self.probs
        return p


def analytic(
    logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None
) -> Analytic | None:
    """softmax(logits / temperature), top-k, then top-p, renormalised; None if the top-p cut is within
    TOP_P_MARGIN of top_p (rounding decides it)."""
    values = [float(v) for v in logits]
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    if top_k is not None:
        order = order[:top_k]
    top = values[order[0]]
    weights = [math.exp((values[i] - top) / temperature) for i in order]
    total = math.fsum(weights)
    probs = [w / total for w in weights]
    if top_p is not None and top_p < 1 and all(w == 1.0 for w in weights):
        # Every probability is 1/n exactly; the cut keeps the fewest tokens whose mass m/n reaches top_p. Decided
        # only when top_p * n is exact in float64 too, so an engine's own product cannot round across it.
        n = len(weights)
        target = Fraction(top_p) * n
        if target == Fraction(top_p * n):
            keep = min(n, math.ceil(target))
            return Analytic(
                order[:keep], [1 / keep] * keep, mass_at_top_p=Fraction(keep, n) == Fraction(top_p)
            )
    if top_p is not None and top_p < 1:
        running = [math.fsum(probs[: j + 1]) for j in range(len(probs))]
        keep = next((j + 1 for j, s in enumerate(running) if s >= top_p), len(probs))
        if abs(running[keep - 1] - top_p) < TOP_P_MARGIN or (
            keep > 1 and abs(running[keep - 2] - top_p) < TOP_P_MARGIN
        ):
            return None
        order = order[:keep]
        total = math.fsum(weights[:keep])
        probs = [w / total for w in weights[:keep]]
    return Analytic(order, probs)


def probes(a: Analytic) -> tuple[list[float], list[int], int]:
    """u = 0, the midpoint of every kept interval at least MIN_PROBED wide, the largest double below 1; and the
    token the layout puts at each."""
    us, want = [0.0], [a.order[0]]
    bounds = [0.0, *itertools.accumulate(a.probs)]
    for j, token in enumerate(a.order):
        if a.probs[j] >= MIN_PROBED:
            us.append((bounds[j] + bounds[j + 1]) / 2)
            want.append(token)
    us.append(LAST_BELOW_ONE)
    want.append(a.order[-1])
    return us, want, len(us) - 2


def domain(vocab: int, temperature: float, top_k: int | None, top_p: float | None) -> dict[str, Any]:
    cut = {"top_k": top_k, "top_p": top_p}
    return {"vocab": vocab, "temperature": temperature, **{k: v for k, v in cut.items() if v is not None}}


Case = tuple[np.ndarray, float, int | None, float | None]  # logits f32[V], temperature, top_k, top_p


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Logits with ties (values on a coarse grid) or without; the temperature is raised where needed so that the
    row's spread over it is at most 20, which keeps every kept probability above MIN_PROBED."""
    vocab = draw(st.integers(1, 512))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([0.01, 0.5, 2.0, 6.0]))
    logits = (rng.standard_normal(vocab) * scale).astype(np.float32)
    if draw(st.booleans()):
        logits = (np.round(logits * 2) / 2).astype(np.float32)  # ties
    spread = float(logits.max() - logits.min())
    temperature = max(draw(st.floats(0.05, 20.0)), spread / 20)
    assume(temperature <= 20.0)
    top_k = draw(st.none() | st.integers(1, 600))
    top_p = draw(st.none() | st.floats(0.01, 1.0))
    return logits, temperature, top_k, top_p


@pytest.fixture(scope="module")
def model_rows(engine: Any) -> list[np.ndarray]:
    """Last-position logits of the tiny model for three prompts: rows an engine really samples from."""
    model = engine.load_model("f32")
    rows = []
    for n, seed in ((1, 0), (9, 1), (40, 2)):
        prompt = np.random.default_rng(seed).integers(0, model.config.vocab_size, n)
        rows.append(np.asarray(model.forward(prompt, model.new_state())[-1], np.float32))
    return rows


def observe_layout(
    engine: Any,
    logits: np.ndarray,
    a: Analytic,
    t: float,
    k: int | None,
    p: float | None,
    sampler: Any = None,
) -> None:
    sampler = sampler or engine.sampler(temperature=t, top_k=k, top_p=p, seed=0)
    us, want, probed = probes(a)
    picks = [int(sampler.pick(logits, u)) for u in us]
    falsify.check(
        "FALSIFY-SERVE-SAMPLE-001",
        picks=picks,
        expected=want,
        kept=sorted(a.order),
        probed=probed,
        mass_at_top_p=a.mass_at_top_p,
        **domain(len(logits), t, k, p),
    )


def observe_counts(
    engine: Any, logits: np.ndarray, a: Analytic, t: float, k: int | None, p: float | None
) -> None:
    sampler = engine.sampler(temperature=t, top_k=k, top_p=p, seed=0)
    grid = (np.arange(SWEEP) + 0.5) / SWEEP
    counts = np.bincount(np.asarray(sampler.pick(logits, grid), np.int64), minlength=len(logits))
    falsify.check(
        "FALSIFY-SERVE-SAMPLE-002",
        max_count_error=float(np.max(np.abs(counts - SWEEP * a.dense(len(logits))))),
        sweep=SWEEP,
        mass_at_top_p=a.mass_at_top_p,
        **domain(len(logits), t, k, p),
    )


EXAMPLES = [
    (np.array([1.0, 1.0, 1.0, 0.0], np.float32), 1.0, 2, None),  # a tie at the k-th logit
    (np.array([3.0, 2.0, 1.0, 0.0], np.float32), 0.5, None, 0.9),
    (np.array([0.0, 2.0, 2.0, 1.0], np.float32), 2.0, 1, None),  # top-1 is the lower id of a tie
    (np.array([5.0], np.float32), 3.0, None, 0.01),
    # The contract's corner: the mass exactly at top_p (tied logits, probabilities 1/4 and 1/8, exact in float32):
    # the token whose interval ends at top_p is the last kept, the next is not.
    (np.zeros(4, np.float32), 1.0, None, 0.5),
    (np.array([2.0] * 8 + [0.0, -1.0], np.float32), 0.7, 8, 0.375),
]
MODEL_CASES = [
    (1.0, None, None),
    (0.7, 40, None),
    (1.5, None, 0.9),
    (0.8, 50, 0.95),
    (4.0, 3, None),
    (1.0, None, 0.3),
]


def on_drawn_cases(test: Any) -> Any:
    """`test(engine, case)` on the cases hypothesis draws (SETTINGS), each of EXAMPLES tried first."""
    for case in EXAMPLES:
        test = example(case=case)(test)
    return SETTINGS(given(case=cases())(test))


def drawn(case: Case) -> Analytic:
    a = analytic(*case)
    assume(a is not None)
    assert a is not None
    return a


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-001")
@on_drawn_cases
def test_layout_puts_every_kept_token_where_the_analytic_cdf_does(engine: Any, case: Case) -> None:
    observe_layout(engine, case[0], drawn(case), *case[1:])


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-002")
@on_drawn_cases
def test_stratified_counts_match_the_analytic_probabilities(engine: Any, case: Case) -> None:
    observe_counts(engine, case[0], drawn(case), *case[1:])


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-001")
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), MODEL_CASES)
def test_layout_on_model_logits(
    engine: Any, model_rows: list[np.ndarray], temperature: float, top_k: int | None, top_p: float | None
) -> None:
    # One sampler for the three rows, as a generation samples every token's row with one: each pick must follow
    # the row it is given, not a layout kept from an earlier row.
    sampler = engine.sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=0)
    for row in model_rows:
        a = fixed(row, temperature, top_k, top_p)
        observe_layout(engine, row, a, temperature, top_k, top_p, sampler=sampler)


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-002")
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), MODEL_CASES)
def test_counts_on_model_logits(
    engine: Any, model_rows: list[np.ndarray], temperature: float, top_k: int | None, top_p: float | None
) -> None:
    for row in model_rows:
        observe_counts(engine, row, fixed(row, temperature, top_k, top_p), temperature, top_k, top_p)


def fixed(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> Analytic:
    a = analytic(logits, temperature, top_k, top_p)
    assert a is not None, "a fixed case sits on a top-p boundary; choose another"
    return a


# (logits row: "model" row i or a synthetic (vocab, scale, rng seed), temperature, top_k, top_p, sampler seed).
GOF_CASES = [
    (("model", 0), 1.0, None, None, 11),
    (("model", 1), 0.7, 40, None, 12),
    (("model", 2), 1.5, None, 0.9, 13),
    (("model", 0), 0.8, 50, 0.95, 14),
    (("model", 1), 4.0, 3, None, 15),
    (("synthetic", 8, 1.0, 3), 0.5, None, None, 16),
    (("synthetic", 8, 1.0, 3), 2.0, None, None, 17),
    (("synthetic", 64, 2.0, 4), 1.0, 10, 0.8, 18),
    (("synthetic", 512, 0.5, 5), 0.25, None, 0.5, 19),
    (("synthetic", 3, 0.0, 6), 1.0, None, None, 20),  # all logits equal: uniform over three
]
DRAWS = 5000
# Where the engine batches seeded draws (wire 1.2's sample_draws), a sampler of the same seed drawn one at a time
# this many times must give the batch's first tokens: the batch is judged, and it must be the draws it stands for.
SINGLES = 64


def seeded_draws(sampler: Any, logits: np.ndarray, n: int) -> np.ndarray:
    """n tokens of the sampler's own seeded RNG on one row: its `draws(logits, n)` where it has one (a wire engine
    speaking 1.2 answers them in one round trip), else n calls."""
    batched = getattr(sampler, "draws", None)
    if batched is not None:
        return np.asarray(batched(logits, n), np.int64)
    return np.array([sampler(logits) for _ in range(n)], np.int64)


def batch_mismatch(engine: Any, draws: np.ndarray, logits: np.ndarray, **params: Any) -> int:
    """How many of the first SINGLES draws differ from single draws of a fresh sampler of the same parameters
    (0 for a sampler without `draws`: its draws were single)."""
    sampler = engine.sampler(**params)
    if getattr(sampler, "draws", None) is None:
        return 0
    singles = np.array([sampler(logits) for _ in range(SINGLES)], np.int64)
    return int(np.count_nonzero(singles != draws[:SINGLES]))


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-003")
@pytest.mark.parametrize(("row", "temperature", "top_k", "top_p", "seed"), GOF_CASES)
def test_seeded_draws_fit_the_analytic_distribution(
    engine: Any,
    model_rows: list[np.ndarray],
    row: tuple[Any, ...],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int,
) -> None:
    if row[0] == "model":
        logits = model_rows[row[1]]
    else:
        _, vocab, scale, rng_seed = row
        logits = (np.random.default_rng(rng_seed).standard_normal(vocab) * scale).astype(np.float32)
    a = fixed(logits, temperature, top_k, top_p)
    params = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    draws = seeded_draws(engine.sampler(**params), logits, DRAWS)
    fit = chi_square_gof(np.bincount(draws, minlength=len(logits)), a.dense(len(logits)))
    cut = {k: v for k, v in (("top_k", top_k), ("top_p", top_p)) if v is not None}
    falsify.check(
        "FALSIFY-SERVE-SAMPLE-003",
        outside=fit.outside,
        p_value=fit.p_value,
        draws=fit.draws,
        checks=len(GOF_CASES),
        batch_mismatch=batch_mismatch(engine, draws, logits, **params),
        seed=seed,
        temperature=temperature,
        **cut,
    )


@st.composite
def near_ties(draw: st.DrawFn) -> np.ndarray:
    """float32 logits a few ulps apart (and exactly tied), around one base value."""
    vocab = draw(st.integers(1, 512))
    base = np.float32(draw(st.floats(-30.0, 30.0, width=32)))
    steps = np.array(draw(st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab)))
    out = np.full(vocab, base, np.float32)
    for s in range(1, 4):  # logit i is `base` moved up steps[i] ulps
        out = np.where(steps >= s, np.nextafter(out, np.float32(np.inf)), out)
    return out


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-004")
@SETTINGS
@given(logits=near_ties())
@example(logits=np.array([1.0, np.nextafter(np.float32(1.0), np.float32(2.0))], np.float32))
@example(logits=np.array([2.0, 7.0, 7.0, 1.0], np.float32))
def test_greedy_is_the_lowest_id_of_the_largest_logit(engine: Any, logits: np.ndarray) -> None:
    values = [float(v) for v in logits]
    top = max(values)
    falsify.check(
        "FALSIFY-SERVE-SAMPLE-004",
        greedy_pick=int(engine.greedy()(logits)),
        argmax_lowest=values.index(top),
        vocab=len(values),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-SAMPLE-005")
@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("temperature", 0.0),
        ("temperature", -1.0),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("temperature", 5e-324),  # the smallest double: logits / temperature overflows, the CDF is NaN
        ("temperature", 9.99e-7),  # just under the floor, 1e-6
        ("top_k", 0),
        ("top_k", -3),
        ("top_k", 2.5),
        ("top_k", True),
        ("top_p", 0.0),
        ("top_p", -0.1),
        ("top_p", 1.5),
        ("top_p", float("nan")),
        ("top_p", True),
    ],
)
def test_bad_parameters_are_refused(engine: Any, parameter: str, value: object) -> None:
    try:
        engine.sampler(**{parameter: value})
    except ValueError as exc:
        refused, error = True, str(exc)
    else:
        refused, error = False, ""
    falsify.check("FALSIFY-SERVE-SAMPLE-005", refused=refused, error=error, parameter=parameter)
