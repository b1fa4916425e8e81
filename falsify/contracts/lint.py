"""`falsify lint`: every problem in every file, reported at once, with a verdict that states its denominator."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from falsify.contracts.corpus import Corpus, load_corpus
from falsify.contracts.packs import help_for, is_pack_file
from falsify.errors import ContractError, Problem, terminal_safe

EXIT_CLEAN, EXIT_ERRORS, EXIT_EMPTY = 0, 1, 2
FORMATS = ("text", "json", "sarif", "github")


def lint(paths: list[Path]) -> tuple[Corpus, int]:
    try:
        corpus = load_corpus(paths)
    except ContractError as exc:  # a path that does not exist
        corpus = Corpus(problems=list(exc.problems))
        return corpus, EXIT_ERRORS
    if corpus.problems:
        return corpus, EXIT_ERRORS
    # no contract is nothing checked, whatever else was found (mutants alone have no prediction to kill)
    return corpus, EXIT_CLEAN if corpus.contracts else EXIT_EMPTY


def unkilled_classes(corpus: Corpus, boundary: Mapping[str, Iterable[str]]) -> list[Problem]:
    """Warnings (rule `catches-unkilled`): a bug class a prediction's `catches` names that no mutant plants and turns
    that prediction red: no mutant file whose class (`class`, else its id) it is lists the prediction in `kills`,
    and no boundary mutant of that id (`boundary`: class -> the predictions it must turn red, from
    falsify/engines/boundary) does. A warning, not an error: the class is the catalogue's gap, while whether the
    prediction itself can fail is judged by `falsify mutants` and the gate (PROVEN / UNPROVEN). A prediction with
    a reviewed `unproven_because` is not warned about: that reason says why no mutant can turn it red."""
    planted: dict[str, set[str]] = {}
    for m in corpus.mutants:
        planted.setdefault(m.plants, set()).update(m.kills)
    for cls, kills in boundary.items():
        planted.setdefault(cls, set()).update(kills)
    out = []
    for c in corpus.contracts:
        for p in c.predictions:
            if p.unproven_because:
                continue
            missing = [cls for cls in p.catches if p.id not in planted.get(cls, set())]
            if missing:
                classes = ", ".join(missing)
                out.append(
                    Problem(
                        p.file,
                        p.line,
                        p.id,
                        f"catches {classes}, but no mutant of {'that class' if len(missing) == 1 else 'those classes'} "
                        f"turns it red (a mutant file whose `class`, or id, is the class, listing {p.id} in "
                        "`kills`; no boundary mutant of falsify plants it)",
                        "catches-unkilled",
                    )
                )
    return out


def verdict(corpus: Corpus, paths: list[Path]) -> str:
    if not corpus.contracts and not corpus.problems:
        n = len(corpus.mutants)
        also = f" ({n} mutant{'s' if n != 1 else ''}, no prediction for them to kill)" if n else ""
        packs = help_for(pid for m in corpus.mutants for pid in m.kills)
        if packs:  # the mutants kill a pack's predictions: the pack is what is missing (issue #46)
            also = f" ({n} mutant{'s' if n != 1 else ''}, whose kills name {packs.strip()[1:-1]})"
        return (
            f"lint: no contract found in {', '.join(map(str, paths))}{also} (an empty corpus is never a pass)"
        )
    predictions = sum(len(c.predictions) for c in corpus.contracts)
    mutants = ""
    if corpus.mutants:
        # Which predictions some mutant must turn red (its contract's `mutants:` or a mutant file's `kills:`).
        # A pack prediction counts by the mutants this project has (its `mutants:` are the reference engine's).
        present = {m.id for m in corpus.mutants}
        killable = {
            p.id
            for c in corpus.contracts
            for p in c.predictions
            if (set(p.mutants) & present if is_pack_file(p.file) else p.mutants)
        }
        # A `kills:` id that names no prediction is its own error (mutant-kills); it is not one of the predictions.
        known = {p.id for c in corpus.contracts for p in c.predictions}
        killable |= {pid for m in corpus.mutants for pid in m.kills if pid in known}
        excused = sum(1 for c in corpus.contracts for p in c.predictions if p.unproven_because)
        mutants = (
            f", {len(corpus.mutants)} mutants ({len(killable)} of {predictions} predictions listed by one, "
            f"{excused} with unproven_because)"
        )
    n = len(corpus.problems)
    return (
        f"lint: {corpus.files} files, {len(corpus.contracts)} contracts, {predictions} predictions{mutants}, "
        f"{n} error{'s' if n != 1 else ''}"
    )


def render(corpus: Corpus, paths: list[Path], fmt: str, warnings: list[Problem] | None = None) -> str:
    """The problems (errors) and `warnings` (they leave the exit code alone) in `fmt`."""
    problems = corpus.problems
    warnings = warnings or []
    if fmt == "json":
        return json.dumps(
            {
                "verdict": verdict(corpus, paths),
                "files": corpus.files,
                "contracts": len(corpus.contracts),
                "predictions": sum(len(c.predictions) for c in corpus.contracts),
                "mutants": len(corpus.mutants),
                "errors": [_as_dict(p) for p in problems],
                "warnings": [_as_dict(p) for p in warnings],
            },
            indent=2,
        )
    if fmt == "sarif":
        return json.dumps(_sarif(problems, warnings), indent=2)
    if fmt == "github":
        lines = [
            f"::{level} file={_gh_property(p.file)},line={p.line},title={_gh_property(p.rule)}"
            f"::{_gh_escape(_text(p))}"
            for level, found in (("error", problems), ("warning", warnings))
            for p in found
        ]
        # The verdict is no command, but a path in it must not start one on a line of its own either.
        return "\n".join([*lines, _gh_escape(verdict(corpus, paths))])
    return "\n".join(
        [
            *(str(p) for p in problems),
            *(f"warning: {p}" for p in warnings),
            terminal_safe(verdict(corpus, paths)),
        ]
    )


def _text(p: Problem) -> str:
    return f"{p.path}: {p.message}" if p.path else p.message


def _as_dict(p: Problem) -> dict[str, object]:
    return {"file": p.file, "line": p.line, "path": p.path, "message": p.message, "rule": p.rule}


# A workflow command is one line, `::error key=value,...::data`: a newline in a file name would end it and start a
# command of the file's choosing, and `:` or `,` in a property would forge another key. Escaped as the runner
# unescapes them (actions/toolkit, packages/core/src/command.ts: escapeData, escapeProperty).
def _gh_escape(text: str) -> str:
    # then every other control character shown escaped: the log shows ESC sequences as colours and worse
    return terminal_safe(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _gh_property(text: str) -> str:
    return _gh_escape(text).replace(":", "%3A").replace(",", "%2C")


def _sarif(problems: list[Problem], warnings: list[Problem]) -> dict[str, object]:
    rules = sorted({p.rule for p in [*problems, *warnings]})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "falsify",
                        "informationUri": "https://falsify.dev",
                        "rules": [{"id": r, "shortDescription": {"text": r}} for r in rules],
                    }
                },
                "results": [
                    {
                        "ruleId": p.rule,
                        "level": level,
                        "message": {"text": _text(p)},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": p.file},
                                    "region": {"startLine": max(p.line, 1)},
                                }
                            }
                        ],
                    }
                    for level, found in (("error", problems), ("warning", warnings))
                    for p in found
                ],
            }
        ],
    }
