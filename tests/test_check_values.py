"""`falsify.check` validates what it is given (types, list element types, finiteness, domain ranges, required
parameters) and flags vacuous checks; `falsify.strategies` draws from a prediction's domain. Real contracts in a
scratch directory, the real check."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import falsify
from falsify.harness import checks

DATA = Path(__file__).parent / "data" / "contracts"  # contract texts the tests write into a project
CONTRACT = (DATA / "check-values-typed-v1.yaml").read_text(encoding="utf-8")

GOOD = {"count": 3, "ratio": 1.5, "flag": True, "name": "x", "n_blocks": 4, "kind": "a"}


class Seen(list):
    """The observations falsify.check records, captured in the test body (the plugin sets its own recorder
    around each test call, after fixtures ran)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.monkeypatch = monkeypatch

    def start(self) -> Seen:
        self.monkeypatch.setattr(checks, "recorder", self.append)
        return self


@pytest.fixture
def typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Seen:
    (tmp_path / "typed-v1.yaml").write_text(CONTRACT)
    monkeypatch.setattr(checks, "contracts_dirs", (tmp_path,))
    return Seen(monkeypatch)


def test_good_values_check_and_record(typed: Seen) -> None:
    typed.start()
    falsify.check("FALSIFY-TYPED-001", **GOOD)
    falsify.check("FALSIFY-TYPED-001", **GOOD, seed=3)
    assert [o.held for o in typed] == [True, True]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("n_blocks", 4000, "n_blocks = 4000 is above the domain's max 64"),
        ("n_blocks", 0, "n_blocks = 0 is below the domain's min 1"),
        ("kind", "c", "kind = 'c' is outside the domain: allowed values ['a', 'b']"),
        ("count", 3.0, "count = 3.0 is a float, not an int"),
        ("count", True, "count = True is a bool, not an int"),
        ("flag", 1, "flag = 1 is a int, not a bool"),
        ("ratio", math.nan, "ratio = nan is not finite"),
        ("ratio", "1.5", "ratio = '1.5' is a str, not a float"),
        ("name", None, "name = None is a NoneType, not a str"),
        ("seed", 10, "seed = 10 is above the domain's max 9"),
    ],
)
def test_a_wrong_value_is_a_named_error_naming_value_and_bound(
    typed: Seen, name: str, value: object, message: str
) -> None:
    typed.start()
    with pytest.raises(falsify.ObservationError, match=re.escape(message)):
        falsify.check("FALSIFY-TYPED-001", **(GOOD | {name: value}))
    assert typed == []  # nothing recorded: an error is never a pass
    assert not issubclass(falsify.ObservationError, AssertionError)  # the test is an ERROR, not a FAIL


def test_a_required_parameter_must_be_given(typed: Seen) -> None:
    values = {k: v for k, v in GOOD.items() if k != "n_blocks"}
    with pytest.raises(falsify.ObservationError, match=r"domain parameter\(s\) n_blocks not given"):
        falsify.check("FALSIFY-TYPED-001", **values)


def test_list_elements_and_nonfinite_floats_where_declared(typed: Seen) -> None:
    with pytest.raises(falsify.ObservationError, match=r"gaps\[1\] = 1.0 is a float, not an int"):
        falsify.check("FALSIFY-TYPED-002", gaps=[1, 1.0])
    falsify.check("FALSIFY-TYPED-003", wild=math.nan, scale=1)  # declared: NaN allowed; an int is a float
    with pytest.raises(falsify.ObservationError, match=r"scale = 3\.0 is above"):
        falsify.check("FALSIFY-TYPED-003", wild=1.0, scale=3.0)


def test_a_value_nested_without_end_is_a_named_error_not_a_recursion_error(typed: Seen) -> None:
    loop: list[object] = [1]
    loop.append(loop)  # a list that holds itself
    deep: list[object] = [1]
    for _ in range(10_000):
        deep = [deep]
    typed.start()
    held = np.empty(1, dtype=object)
    held[0] = loop  # an object array's items are walked too
    for value in (loop, deep, (deep,), held):
        with pytest.raises(
            falsify.ObservationError,
            match=r"FALSIFY-TYPED-002: gaps \(.*typed-v1.yaml:\d+\): nested deeper than 64",
        ):
            falsify.check("FALSIFY-TYPED-002", gaps=value)
    assert typed == []


def test_an_empty_quantification_is_recorded_vacuous(typed: Seen) -> None:
    typed.start()
    falsify.check("FALSIFY-TYPED-002", gaps=[])
    falsify.check("FALSIFY-TYPED-002", gaps=[1, 1])
    assert [(o.held, o.vacuous) for o in typed] == [(True, True), (True, False)]
    with pytest.raises(falsify.ContractViolation):
        falsify.check("FALSIFY-TYPED-002", gaps=[1, 2])
    assert typed[-1].vacuous is False  # a failure is never vacuous


def test_one_conjunct_over_nothing_makes_the_check_vacuous() -> None:
    from falsify.contracts.formula import parse

    both = parse("gaps == [1] * len(gaps) and max_wait < streams")  # PREFILL-009's shape
    assert checks.vacuous(both, {"gaps": [], "max_wait": 0, "streams": 2}, {"gaps", "max_wait", "streams"})
    assert not checks.vacuous(
        both, {"gaps": [1], "max_wait": 0, "streams": 2}, {"gaps", "max_wait", "streams"}
    )
    assert checks.vacuous(parse("s not in t[:-1] and s == 1"), {"s": 1, "t": [1]}, {"s", "t"})
    alone = parse("positions == range(a, a + e - 1)")
    assert checks.vacuous(alone, {"positions": [], "a": 3, "e": 1}, {"positions"})
    assert checks.vacuous(parse("all(xs)"), {"xs": []}, {"xs"})
    assert checks.vacuous(parse("is_prefix(t, u)"), {"t": [], "u": [1]}, {"t", "u"})
    assert not checks.vacuous(parse("is_prefix(t, u)"), {"t": [1], "u": [1]}, {"t", "u"})


def test_strategies_draw_only_from_the_domain(typed: Seen) -> None:
    drawn = falsify.strategies("FALSIFY-TYPED-001")
    assert set(drawn) == {"n_blocks", "kind", "seed"}

    @settings(max_examples=50, database=None)
    @given(n=drawn["n_blocks"], kind=drawn["kind"], seed=drawn["seed"], count=st.integers(0, 1))
    def inside(n: int, kind: str, seed: int, count: int) -> None:
        assert 1 <= n <= 64 and kind in ("a", "b") and 0 <= seed <= 9
        falsify.check(
            "FALSIFY-TYPED-001", **(GOOD | {"n_blocks": n, "kind": kind, "seed": seed, "count": count})
        )

    inside()
    scale = falsify.strategies("FALSIFY-TYPED-003")["scale"]

    @settings(max_examples=30, database=None)
    @given(scale)
    def floats(x: float) -> None:
        assert 0.5 <= x <= 2.0

    floats()
