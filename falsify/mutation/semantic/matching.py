"""What `falsify lint` checks of a semantic mutant against the file it edits: its statement and anchor (op text:
its snippet or regex) each match exactly once. At run time a mutant that does not is STALE; lint says so first,
naming the mutant file, the field and the lines matched. Also what no run could get past (spec.py): a target
that is not UTF-8 or too large, a build line no shell could split, a replacement that is no statement."""

from __future__ import annotations

from pathlib import Path

from falsify.contracts.corpus import Mutant
from falsify.contracts.yamlfile import load_yaml
from falsify.errors import ContractError, FalsifyError, Problem
from falsify.mutation.semantic.edits import MutantSpecError, edit_of, match_lines
from falsify.mutation.semantic.spec import read_target, static_findings
from falsify.project import find_project_or_none, source_problem


def match_problems(mutants: list[Mutant]) -> list[Problem]:
    """One problem per field of each mutant that matches its target other than once, or per target that cannot
    be read. A mutant whose `file` is not a file of its project is already a lint problem (mutant-file)."""
    problems = []
    for m in mutants:
        project = find_project_or_none(Path(m.path).parent)
        root = project.root if project else Path.cwd()
        if source_problem(root, m.file):
            continue
        try:
            source = read_target(root, m)
        except MutantSpecError as exc:
            problems.append(Problem(m.path, field_line(m, "file"), "file", str(exc), "mutant-match"))
            continue
        try:
            found = match_lines(source, edit_of(m), m.file)
        except FalsifyError as exc:
            field = getattr(exc, "field", "") or ("regex" if m.op == "text" else "function")
            problems.append(Problem(m.path, field_line(m, field), field, str(exc), "mutant-match"))
            found = {}
        matched = all(len(lines) == 1 for lines in found.values())
        for field, message in static_findings(m, source if found and matched else None):
            problems.append(Problem(m.path, field_line(m, field), field, message, "mutant-spec"))
        for field, lines in found.items():
            if len(lines) == 1:
                continue
            where = f"{m.file}, function {m.function}" if m.function else m.file
            at = f" (lines {', '.join(map(str, lines))})" if lines else ""
            what = "statements" if field in ("statement", "anchor") else "places"
            help_ = (
                "quote more of it, or another statement"
                if lines
                else "the source drifted: quote what it has now"
            )
            problems.append(
                Problem(
                    m.path,
                    field_line(m, field),
                    field,
                    f"matches {len(lines)} {what} in {where}{at}; a mutant needs exactly one ({help_})",
                    "mutant-match",
                )
            )
    return problems


def field_line(m: Mutant, field: str) -> int:
    """The line of `field` in the mutant's file (its first line when the field is absent or unreadable)."""
    try:
        return load_yaml(Path(m.path)).line((field,))
    except ContractError:
        return m.line
