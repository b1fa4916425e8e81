"""The formula attack list (issue #19): each class refused by lint's static bound, and at check time a named
FormulaError within a bounded time — never a hang, a raw Python exception or a silently wrong answer."""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import pytest

from falsify.contracts.corners import cannot_fail
from falsify.contracts.cost import check_cost
from falsify.contracts.formula import MAX_BITS, MAX_SIZE, parse
from falsify.errors import FormulaError

DECLS: dict[str, dict[str, Any]] = {
    "x": {"type": "int"},
    "f": {"type": "float"},
    "s": {"type": "str"},
    "xs": {"type": "list"},
    "b": {"type": "bool"},
    "n": {"type": "int", "min": 0, "max": 8},
}
VALUES = {"x": 3, "f": 1.5, "s": "a", "xs": [1, 2], "b": True, "n": 2}
SECONDS = 5.0  # generous on a loaded 2-core machine; the worst case measured is ~1 s


def evaluate(source: str, values: dict[str, object] | None = None) -> object:
    start = time.monotonic()
    try:
        return parse(source).evaluate(values or VALUES)
    finally:
        assert time.monotonic() - start < SECONDS, f"{source!r} took {time.monotonic() - start:.1f} s"


# (formula, fragment of the lint refusal): refused before anything runs.
REFUSED_BY_PARSE = [
    ("'%999999999d' % 1 == s", "string formatting"),
    ('"10" <= "9"', "ordering compares numbers only"),
    ("[1] < [2]", "ordering compares numbers only"),
    ("+".join(["x"] * 600) + " > 0", "nests deeper"),
    ("-" * 300 + "x == 0", "nests deeper"),
    ("(" * 250 + "x" + ")" * 250, "too many nested parentheses"),
    ("x << 4000 > 0", "`<<`"),
    ("x is None", "`is`"),
    ("~x == 0", "`~`"),
    ("x.bit_length() > 0", "attribute"),
    ("().__class__", "attribute"),
    ("len() == 0", "takes 1..1 arguments"),
    ("range(1, 2, 3, 4) == xs", "takes 1..3"),
    ("x == " + "9" * 1300, "over 4096 bits"),
    ("f == 1e999", "overflows to inf"),
    (" or ".join(["x<1"] * 280), "syntax nodes"),
    ("s < 'b'", "ordering compares numbers only"),
    ("xs >= [1]", "ordering compares numbers only"),
    ("x\x00 == 1", "NUL"),
]


@pytest.mark.parametrize(("source", "fragment"), REFUSED_BY_PARSE, ids=lambda v: str(v)[:40])
def test_refused_at_parse(source: str, fragment: str) -> None:
    with pytest.raises(FormulaError, match=fragment):
        parse(source)


# (formula, fragment of the static-cost refusal): parse accepts them; lint's cost bound does not.
REFUSED_BY_COST = [
    ("(((9**64)**64)**64)**64 > 0", "4096-bit limit"),
    ("9**64**64 > 0", "exponent"),
    ("x ** x > 0", "exponent must be bounded"),
    ("2 ** f > 0", "exponent must be bounded"),
    ("(x**64)**64 > 0", "amplify an observed integer"),
    (" * ".join(["9**60"] * 25) + " > x", "4096-bit limit"),
    ("len(range(1000000) + range(1000000)) > x", "can build"),
    ("[[0] * 1000000] * 1000000 == xs", "can build"),
    ("'a' * 2000000 == s", "can build"),
    (" == ".join(["range(x)"] * 30), "units of work"),
    (" + ".join(["range(x)"] * 20) + " == xs", "units of work"),
    ("s < s", "numbers only"),
    ("xs >= xs", "numbers only"),
    ("b < x", "numbers only"),
    ("s % 2 == s", "string formatting"),
]


@pytest.mark.parametrize(("source", "fragment"), REFUSED_BY_COST, ids=lambda v: str(v)[:40])
def test_refused_by_static_cost(source: str, fragment: str) -> None:
    problems = check_cost(parse(source), DECLS)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize(("source", "fragment"), REFUSED_BY_COST, ids=lambda v: str(v)[:40])
def test_static_refusals_also_fail_named_at_check_time(source: str, fragment: str) -> None:
    """A formula that slipped past lint (say, a contract loaded without it) still ends in a FormulaError, fast."""
    for values in (VALUES, {**VALUES, "x": 10**6, "s": "%d", "xs": [[1], 2]}):
        with contextlib.suppress(FormulaError):
            evaluate(source, values)


# (formula, values, fragment): each raw Python failure class, as a named error at check time.
NAMED_AT_CHECK = [
    ("1e300 ** 2 > f", {}, "overflow"),
    ("f * 1e308 > 0", {"f": 1e308}, "float overflow"),
    ("x / 0 > 1", {}, "division by zero"),
    ("not (x / 0 > 1)", {}, "division by zero"),
    ("f // 0.0 > 1", {}, "division by zero"),
    ("x % 0 == 0", {}, "division by zero"),
    ("0 ** -1 == x", {}, "division by zero"),
    ("xs[::0] == xs", {}, "slice step is zero"),
    ("range(0, 5, 0) == xs", {}, "range step is zero"),
    ("xs[10] == 1", {}, "out of range"),
    ("xs[f] == 1", {}, "an index is an int"),
    ("xs[b] == 1", {}, "an index is an int"),
    ("x[0] == 1", {}, "only lists and strings"),
    ("max(xs) > 0", {"xs": []}, "empty list"),
    ("min(xs) > 0", {"xs": [1, "a"]}, "numbers"),
    ("max(xs) > 0", {"xs": [[1], [2]]}, "numbers"),
    ("sum(xs) > 0", {"xs": [[1], [2]]}, "numbers only"),
    ("len(x) > 0", {}, "len takes a list"),
    ("abs(s) > 0", {}, "abs takes a number"),
    ("-s == s", {}, "unary"),
    ("x < s", {}, "cannot order int and str"),
    ("x < xs", {}, "cannot order int and list"),
    ("b < 2", {}, "cannot order bool and int"),
    ("f < 1", {"f": float("nan")}, "cannot order NaN"),
    ("f - f == 0", {"f": float("inf")}, "NaN"),
    ("x + s == 1", {}, "arithmetic on int and str"),
    ("xs + s == 1", {}, "arithmetic on list and str"),
    ("s * f == s", {}, "repeats an int"),
    ("b + 1 == 2", {}, "arithmetic on bool and int"),
    ("x in 'abc'", {}, "`in` a string takes a string"),
    ("x in x", {}, "`in` takes a list"),
    ("is_prefix(x, xs)", {}, "is_prefix takes two lists"),
    ("range(f) == xs", {}, "range takes ints"),
    ("range(x) == xs", {"x": MAX_SIZE + 5}, "over the"),
    ("[0] * x == xs", {"x": MAX_SIZE + 5}, "repetition builds"),
    ("x * x > 0", {"x": 2 ** (MAX_BITS - 2)}, "bits"),
    ("x ** 2 > 0", {"x": 2 ** (MAX_BITS - 2)}, "bits"),
    ("2 ** 65 > x", {}, "exponent"),
    ("(-8) ** 0.5 > 0", {}, "complex"),
    ("x == 1", {"x": 2 ** (MAX_BITS + 1)}, "integer over"),
    ("xs == []", {"xs": [{}]}, "holds a dict"),
    ("xs == []", {"xs": {}}, "holds a dict"),
    ("x == 1", {"x": object()}, "holds a object"),
    ("xs == []", {"xs": [0] * (MAX_SIZE + 5)}, "more than"),
    ("s == 'a'", {"s": "a" * (MAX_SIZE + 5)}, "over"),
    ("x == 1", {"x": 1 + 2j}, "holds a complex"),
]


# ids without a memory address: pytest-xdist's workers must collect the same ids (tox -e py runs -n 2)
@pytest.mark.parametrize(
    ("source", "values", "fragment"),
    NAMED_AT_CHECK,
    ids=lambda v: re.sub(r" at 0x[0-9a-f]+", "", str(v))[:40],
)
def test_named_error_at_check_time(source: str, values: dict[str, object], fragment: str) -> None:
    with pytest.raises(FormulaError, match=fragment):
        evaluate(source, {**VALUES, **values})


def test_mock_any_is_not_a_value() -> None:
    from unittest import mock

    with pytest.raises(FormulaError, match="holds a _ANY"):
        evaluate("x == 3", {**VALUES, "x": mock.ANY})


def test_a_lint_clean_formula_stays_within_its_budget() -> None:
    """The largest work the static bound admits finishes in bounded time and gives an answer."""
    source = " == ".join(["range(x)"] * 3)
    assert check_cost(parse(source), DECLS) == []
    assert evaluate(source, {**VALUES, "x": MAX_SIZE}) is True


@pytest.mark.parametrize(
    "source",
    ["not not True", "1 == 1", "x == x", "xs == xs", "abs(x) >= 0", "x == 1 or x != 1", "len(xs) >= 0",
     "s == s or b", "b or not b", "n <= 8", "f == f or f != f"],
)  # fmt: skip
def test_cannot_fail(source: str) -> None:
    assert cannot_fail(parse(source), DECLS) is not None


@pytest.mark.parametrize(
    "source",
    ["x != 5", "x == 1", "s == 'cancelled'", "x <= 0", "xs == [1] * len(xs)", "is_prefix(xs, [1, 2])",
     "f <= 1e-4", "abs(f - 0.25) <= 1e-9", "n < 8", "b", "len(xs) < 3", "x != 2**31 + 1"],
)  # fmt: skip
def test_can_fail(source: str) -> None:
    assert cannot_fail(parse(source), DECLS) is None


def test_corner_checks_are_bounded_per_file() -> None:
    """A file of expensive tautologies cannot make lint slow: the corner checks share one budget per file, and a
    formula reached after it is spent is reported as not judged (a lint error), never passed in silence."""
    from falsify.contracts.corners import Budget, NotJudged

    heavy = parse(" and ".join(["abs(x - n) >= 0"] * 40))
    budget = Budget(50_000)
    verdicts = []
    with pytest.raises(NotJudged, match="not judged"):
        for _ in range(100):
            verdicts.append(cannot_fail(heavy, DECLS, budget))
    assert verdicts and all(v is not None for v in verdicts)
    assert budget.left <= 0
