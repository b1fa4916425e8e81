"""What `falsify lint` checks of a semantic mutant against the file it edits: its statement and anchor (op text:
its snippet or regex) each match exactly once. At run time a mutant that does not is STALE; lint says so first,
naming the mutant file, the field and the lines matched."""

from __future__ import annotations

from pathlib import Path

from falsify.contracts.corpus import Mutant
from falsify.contracts.yamlfile import load_yaml
from falsify.errors import ContractError, FalsifyError, Problem
from falsify.mutation.semantic.edits import edit_of, match_lines
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
            source = (root / m.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(m.path, _line(m, "file"), "file", f"{m.file}: {exc}", "mutant-match"))
            continue
        try:
            found = match_lines(source, edit_of(m), m.file)
        except FalsifyError as exc:
            field = "regex" if m.op == "text" else "function"
            problems.append(Problem(m.path, _line(m, field), field, str(exc), "mutant-match"))
            continue
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
                    _line(m, field),
                    field,
                    f"matches {len(lines)} {what} in {where}{at}; a mutant needs exactly one ({help_})",
                    "mutant-match",
                )
            )
    return problems


def _line(m: Mutant, field: str) -> int:
    try:
        return load_yaml(Path(m.path)).line((field,))
    except ContractError:
        return m.line
