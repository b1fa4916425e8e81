"""Op text: semantic mutants for a source file in any language (falsify/mutation/semantic/edits.py apply_text).
The snippet (or regex) must match exactly once, else the mutant is STALE and nothing changes; the schema keeps
the statement ops' fields and op text's apart."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from falsify.mutation.semantic.edits import Edit, MutantSpecError, StaleMutant, apply

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "falsify" / "contracts" / "schema" / "mutant-v1.schema.json").read_text("utf-8"))

JS = """for (;;) {
  const { cancelled } = await poll();
  if (cancelled) break;
  forward(tokens);
}
"""


def text(snippet: str | None = None, regex: str | None = None, replacement: str = "X") -> Edit:
    return Edit("", "text", "", replacement=replacement, snippet=snippet, regex=regex)


def test_a_snippet_that_occurs_once_is_replaced() -> None:
    edit = text(
        snippet="  const { cancelled } = await poll();\n  if (cancelled) break;\n  forward(tokens);\n",
        replacement="  forward(tokens);\n  const { cancelled } = await poll();\n  if (cancelled) break;\n",
    )
    applied = apply(JS, edit, "engine.js")
    assert applied.mutated == (
        "for (;;) {\n  forward(tokens);\n  const { cancelled } = await poll();\n  if (cancelled) break;\n}\n"
    )
    assert (applied.span.line, applied.span.column, applied.span.end_line) == (2, 1, 5)
    assert "+  forward(tokens);" in applied.diff("engine.js")


def test_a_regex_that_matches_once_is_replaced_literally() -> None:
    applied = apply(JS, text(regex=r"^\s*forward\(\w+\);$", replacement="  forward(tokens); // \\1"), "e.js")
    assert "  forward(tokens); // \\1\n}" in applied.mutated
    assert applied.span.line == 4


@pytest.mark.parametrize(
    ("edit", "times"),
    [
        (text(snippet="forward(other);"), 0),
        (text(snippet="cancelled"), 2),
        (text(regex=r"cancel+ed"), 2),
        (text(regex=r"nothing here"), 0),
    ],
    ids=["snippet-absent", "snippet-twice", "regex-twice", "regex-absent"],
)
def test_no_match_or_several_is_stale(edit: Edit, times: int) -> None:
    with pytest.raises(StaleMutant, match=f"{times} times, not once"):
        apply(JS, edit, "e.js")


@pytest.mark.parametrize(
    "edit",
    [
        Edit("", "text", "", replacement="x"),
        Edit("", "text", "", replacement="x", snippet="for", regex="for"),
        Edit("", "text", "", replacement=None, snippet="for"),
        text(regex="(unclosed"),
        text(snippet="forward(tokens);", replacement="forward(tokens);"),
    ],
    ids=["neither", "both", "no-replacement", "bad-regex", "no-change"],
)
def test_a_malformed_text_edit_is_a_spec_error(edit: Edit) -> None:
    with pytest.raises(MutantSpecError):
        apply(JS, edit, "e.js")


GOOD = {
    "id": "x",
    "description": "d",
    "file": "engine/src/generate.rs",
    "op": "text",
    "snippet": "poll();",
    "replacement": "",
    "engine": "exec:./target/release/engine",
    "build": "cargo build --release",
    "kills": ["FALSIFY-SERVE-CANCEL-002"],
}


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        ({"replacement": "forward();"}, True),
        ({"replacement": "forward();", "snippet": None, "regex": "poll\\(\\);"}, True),
        ({"replacement": "forward();", "regex": "poll"}, False),  # snippet and regex
        ({"replacement": "forward();", "snippet": None}, False),  # neither
        ({"replacement": "forward();", "function": "generate"}, False),  # a statement-op field
        (
            {"replacement": "forward();", "op": "move"},
            False,
        ),  # a statement op on a .rs file, with text fields
    ],
    ids=["snippet", "regex", "both", "neither", "function-field", "statement-op"],
)
def test_the_schema_keeps_text_and_statement_mutants_apart(change: dict[str, object], valid: bool) -> None:
    doc = {k: v for k, v in (GOOD | change).items() if v is not None}
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc))
    assert (not errors) == valid, [e.message for e in errors]


def test_a_regex_that_backtracks_without_end_is_named_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op text regex is searched for at most REGEX_SECONDS (lint, falsify mutants): `^(a|a)*$` on forty a's
    and a `!` would take years; it is a MutantSpecError naming the regex within the bound (in a child process,
    so in any thread: tests/test_mutants_hostile.py searches from a worker thread)."""
    import time

    from falsify.mutation.semantic import targets

    monkeypatch.setattr(targets, "REGEX_SECONDS", 0.3)
    edit = Edit(function="", op="text", statement="", regex="^(a|a)*$", replacement="b")
    started = time.monotonic()
    with pytest.raises(MutantSpecError, match=r"regex searched the file for over 0.3 s .*'\^\(a\|a\)\*\$'"):
        targets.text_hits("a" * 40 + "!\n", edit)
    assert time.monotonic() - started < 3
    plain = Edit(function="", op="text", statement="", regex="a+", replacement="b")
    assert targets.text_hits("xaay\n", plain) == [(1, 3)]
