"""The libcst operators of falsify.mutation.semantic.edits: every operator's own (before, after) examples, and the ways a
mutant goes STALE or is malformed. One test per example, named from the operator (cosmic-ray style)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from falsify.mutation.semantic.edits import (
    OPERATORS,
    Edit,
    MutantSpecError,
    StaleMutant,
    apply,
    header,
    tokens,
)

EXAMPLES = [
    pytest.param(op, ex, id=f"{name}-{i}")
    for name, op in OPERATORS.items()
    for i, ex in enumerate(op.examples)
]


def test_every_operator_has_examples() -> None:
    assert set(OPERATORS) == {"move", "delete", "replace", "swap", "insert"}
    assert all(op.examples for op in OPERATORS.values())


@pytest.mark.parametrize(("op", "example"), EXAMPLES)
def test_example_mutates_to_its_after(op: object, example: object) -> None:
    applied = apply(example.before, example.edit)  # type: ignore[attr-defined]
    assert applied.mutated != example.before  # type: ignore[attr-defined]
    assert applied.mutated == example.after  # type: ignore[attr-defined]
    assert applied.source == example.before  # type: ignore[attr-defined]
    compile(applied.mutated, "<example>", "exec")


def _unmatched(text: str) -> str:
    return text + "  and  nothing_like_this_exists"


@pytest.mark.parametrize(("op", "example"), EXAMPLES)
def test_non_matching_anchor_or_statement_changes_nothing(
    op: object, example: object, tmp_path: Path
) -> None:
    edit: Edit = example.edit  # type: ignore[attr-defined]
    path = tmp_path / "module.py"
    path.write_text(example.before, encoding="utf-8")  # type: ignore[attr-defined]
    before = path.read_bytes()
    field = "anchor" if edit.anchor else "statement"
    stale = dataclasses.replace(edit, **{field: _unmatched(getattr(edit, field))})
    with pytest.raises(StaleMutant, match="matches 0 statements"):
        apply(path.read_text(encoding="utf-8"), stale, str(path))
    assert path.read_bytes() == before


@pytest.mark.parametrize(("op", "example"), EXAMPLES)
def test_an_anchor_that_matches_twice_is_stale(op: object, example: object) -> None:
    edit: Edit = example.edit  # type: ignore[attr-defined]
    target = edit.anchor or edit.statement
    doubled = example.before.rstrip("\n") + "\n"  # type: ignore[attr-defined]
    # Append a second copy of the matched statement at the end of the function body.
    indent = " " * 8 if edit.function.count(".") else " " * 4
    doubled += f"{indent}{target.rstrip(':')}{':' if target.endswith(':') else ''}"
    doubled += f"\n{indent}    pass\n" if target.endswith(":") else "\n"
    with pytest.raises(StaleMutant, match="matches 2 statements"):
        apply(doubled, edit)


def test_matching_ignores_whitespace_and_comments() -> None:
    source = "def f(x):\n    y = (x  +\n         1)  # one more\n    return y\n"
    applied = apply(source, Edit("f", "delete", "y = (x + 1)"))
    assert applied.mutated == "def f(x):\n    return y\n"
    assert tokens("if  a :  # c") == ("if", "a", ":")
    assert header(tokens("while (a and\n b): pass")) == ("while", "(", "a", "and", "b", ")", ":")


def test_compound_statement_matches_by_first_line_with_or_without_colon() -> None:
    source = "def f(xs):\n    for x in xs:\n        print(x)\n    return 1\n"
    for text in ("for x in xs:", "for x in xs"):
        assert apply(source, Edit("f", "delete", text)).mutated == "def f(xs):\n    return 1\n"


def test_missing_function_is_stale() -> None:
    with pytest.raises(StaleMutant, match=r"no function Session\.generate"):
        apply("def generate():\n    pass\n", Edit("Session.generate", "delete", "pass"))


def test_methods_and_nested_functions_by_qualname() -> None:
    source = "class A:\n    def f(self):\n        def g():\n            return 1\n        return g()\n"
    applied = apply(source, Edit("A.f.g", "replace", "return 1", replacement="return 2"))
    assert "return 2" in applied.mutated and "return g()" in applied.mutated
    assert applied.span.line == 4


def test_moving_break_out_of_its_loop_is_a_spec_error() -> None:
    source = "def f():\n    while True:\n        break\n    x = 1\n"
    with pytest.raises(MutantSpecError, match="does not compile"):
        apply(source, Edit("f", "move", "break", anchor="x = 1", where="after"))


def test_bad_replacement_is_a_spec_error() -> None:
    with pytest.raises(MutantSpecError, match="replacement does not parse"):
        apply("def f():\n    x = 1\n", Edit("f", "replace", "x = 1", replacement="x = = 2"))


def test_edit_that_changes_nothing_is_a_spec_error() -> None:
    with pytest.raises(MutantSpecError, match="changes nothing"):
        apply("def f():\n    x = 1\n", Edit("f", "replace", "x = 1", replacement="x = 1"))


def test_insert_statement_must_name_the_replacement() -> None:
    with pytest.raises(MutantSpecError, match="first line of the replacement"):
        apply(
            "def f():\n    x = 1\n",
            Edit("f", "insert", "y = 2", anchor="x = 1", where="after", replacement="z = 3"),
        )


def test_moving_a_statement_relative_to_its_own_child_is_a_spec_error() -> None:
    source = "def f(c):\n    if c:\n        x = 1\n    y = 2\n"
    with pytest.raises(MutantSpecError, match="nested"):
        apply(source, Edit("f", "move", "if c:", anchor="x = 1", where="after"))


def test_move_out_of_the_enclosing_block() -> None:
    source = "def f(c):\n    while c():\n        poll()\n        step()\n    done()\n"
    applied = apply(source, Edit("f", "move", "poll()", anchor="while c():", where="after"))
    assert applied.mutated == "def f(c):\n    while c():\n        step()\n    poll()\n    done()\n"


def test_comments_above_a_deleted_statement_stay() -> None:
    source = "def f():\n    a()\n    # why b\n    b()\n    c()\n"
    assert apply(source, Edit("f", "delete", "b()")).mutated == "def f():\n    a()\n    # why b\n    c()\n"


def test_overloaded_method_is_its_implementation() -> None:
    # typing.overload stubs come first and hold no statement; the implementation is the last definition.
    source = (
        "class S:\n"
        "    @overload\n"
        "    def pick(self, u: float) -> int: ...\n"
        "    @overload\n"
        "    def pick(self, u: list) -> list: ...\n"
        "    def pick(self, u):\n"
        "        z = u / 2\n"
        "        return z\n"
    )
    applied = apply(source, Edit("S.pick", "replace", "z = u / 2", replacement="z = u * 2"))
    assert "z = u * 2" in applied.mutated and applied.mutated.count("def pick") == 3


def test_match_lines_counts_each_field_lint_checks() -> None:
    from falsify.mutation.semantic.edits import match_lines

    source = "def f(x):\n    x += 1\n    x += 1\n    return x\n"
    assert match_lines(source, Edit("f", "delete", "x += 1")) == {"statement": [2, 3]}
    assert match_lines(source, Edit("f", "move", "return x", anchor="x += 1", where="before")) == {
        "statement": [4],
        "anchor": [2, 3],
    }
    # an insert's statement is the new code: only its anchor is looked up
    assert match_lines(source, Edit("f", "insert", "y = 0", anchor="return x", where="before")) == {
        "anchor": [4]
    }
    assert match_lines(source, Edit("", "text", "", snippet="x += 1")) == {"snippet": [2, 3]}
    assert match_lines(source, Edit("", "text", "", regex=r"^\s+return")) == {"regex": [4]}
    with pytest.raises(StaleMutant, match="has no function g"):
        match_lines(source, Edit("g", "delete", "x += 1"))
