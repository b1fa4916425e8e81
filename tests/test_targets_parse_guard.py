"""No source reaches libcst before CPython's parser accepted it: libcst's native parser crashed the process
(SIGSEGV) on 3,000 nested parentheses (docs/hardening.md)."""

from __future__ import annotations

import pytest

from falsify.mutation.semantic.targets import (
    Edit,
    MutantSpecError,
    StaleMutant,
    match_lines,
    parse_statements,
    python_parse_error,
)

DEEP = {
    "parentheses": "(" * 3000 + "1" + ")" * 3000,
    "unary minus": "-" * 3000 + "1",
    "not": "not " * 3000 + "1",
}


@pytest.mark.parametrize("nesting", DEEP, ids=list(DEEP))
def test_a_target_nested_too_deeply_is_named_not_parseable(nesting: str) -> None:
    source = f"def f():\n    x = 1\n    y = {DEEP[nesting]}\n"
    with pytest.raises(StaleMutant, match=r"^engine\.py does not parse: "):
        match_lines(source, Edit("f", "delete", "x = 1"), "engine.py")


def test_a_replacement_nested_too_deeply_is_a_spec_error() -> None:
    with pytest.raises(
        MutantSpecError, match=r"^replacement does not parse: line 1: too many nested parentheses"
    ):
        parse_statements(f"x = {DEEP['parentheses']}", "replacement")


def test_a_source_python_parses_still_matches() -> None:
    assert python_parse_error("def f():\n    x = (((1)))\n") is None
    assert match_lines("def f():\n    x = (((1)))\n", Edit("f", "delete", "x = (((1)))")) == {
        "statement": [2]
    }
