"""The formula language: what it accepts, what it refuses, and that it never runs Python."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from falsify.contracts.formula import is_prefix, parse
from falsify.errors import FormulaError


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ("decode_forwards == emitted - 1", {"emitted": 8, "decode_forwards": 7}, True),
        ("decode_forwards == emitted - 1", {"emitted": 8, "decode_forwards": 8}, False),
        ("0 < decay <= 1", {"decay": 1.0}, True),
        ("abs(a - b) <= 1e-4", {"a": 1.0, "b": 1.00001}, True),
        ("max(gaps) <= 1 if gaps else True", {"gaps": []}, True),
        ("positions == range(start, start + n)", {"positions": [3, 4], "start": 3, "n": 2}, True),
        ("is_prefix(tokens, full) and len(tokens) == n", {"tokens": [1, 2], "full": [1, 2, 3], "n": 2}, True),
        ("stop_reason in ['cancelled', 'max_tokens']", {"stop_reason": "stop_token"}, False),
        ("all(flags) and not any(bad)", {"flags": [True], "bad": [False]}, True),
        ("tokens[-1] == stop and tokens[:2] == [5, 6]", {"tokens": [5, 6, 9], "stop": 9}, True),
        ("sum(xs) // 2 == 3 and 7 % 4 == 3 and 2 ** 3 == 8", {"xs": [3, 3]}, True),
        ("min(a, b) < 0 or b == 0", {"a": -1, "b": 2}, True),
    ],
)
def test_evaluates(source: str, values: dict[str, object], expected: bool) -> None:
    assert parse(source).evaluate(values) is expected


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("x.real", "attribute access"),
        ("().__class__", "attribute access"),
        ("__import__", "reserved"),
        ("_x == 1", "reserved"),
        ("open('f')", "call to 'open'"),
        ("eval('1')", "call to 'eval'"),
        ("(lambda: 1)()", "lambda"),
        ("[t for t in xs]", "comprehension"),
        ("any(t for t in xs)", "generator"),
        ("{1: 2}", "dict"),
        ("f'{x}'", "f-string"),
        ("(y := 1)", "assignment"),
        ("len(x, key=1)", "keyword"),
        ("x ==", "syntax error"),
        ("max(*xs)", "star"),
    ],
)
def test_refuses(source: str, fragment: str) -> None:
    with pytest.raises(FormulaError, match=fragment):
        parse(source)


def test_names_in_order_of_appearance_without_callees() -> None:
    assert parse("decode_forwards == emitted - 1").names == ("decode_forwards", "emitted")
    assert parse("max(gaps) <= cap").names == ("gaps", "cap")


def test_missing_value_is_named() -> None:
    with pytest.raises(FormulaError, match="no value for emitted"):
        parse("emitted == 1").evaluate({})


@pytest.mark.parametrize(
    ("source", "values", "fragment"),
    [
        ("2 ** n", {"n": 10_000}, "exponent"),
        ("[0] * n", {"n": 10**9}, "repetition"),
        ("len(range(n))", {"n": 10**9}, "range"),
        ("x[5]", {"x": [1]}, "out of range"),
        ("n[0]", {"n": 3}, "only lists"),
        ("a < b", {"a": 1, "b": "s"}, "cannot order int and str"),
    ],
)
def test_resource_and_type_limits(source: str, values: dict[str, object], fragment: str) -> None:
    with pytest.raises(FormulaError, match=fragment):
        parse(source).evaluate(values)


@given(st.lists(st.integers()), st.lists(st.integers()))
def test_is_prefix_matches_slicing(a: list[int], b: list[int]) -> None:
    assert is_prefix(a, b) == (b[: len(a)] == a and len(a) <= len(b))
    assert is_prefix(a, a + b)
