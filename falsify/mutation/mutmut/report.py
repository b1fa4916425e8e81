"""`falsify mutmut`'s report: the kill rate over the non-equivalent mutants, the verdict line, the survivors' table
and the Stryker mutation-testing report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from falsify import __version__
from falsify.mutation import stryker
from falsify.mutation.mutmut.config import (
    LISTED_NOT_RUN,
    NOT_SAMPLED,
    STRYKER_STATUS,
    MutmutMutant,
    MutmutRun,
)
from falsify.table import table


def kill_rate(run: MutmutRun) -> tuple[int, int]:
    """(detected, judged) over the non-equivalent mutants: killed, timed out or caught by the type check, over
    every mutant that ran (not skipped, not left unchecked, not outside a --sample) and is not listed as
    equivalent."""
    counts = run.counts
    detected = counts["killed"] + counts["timeout"] + counts["caught by type check"]
    judged = (
        len(run.mutants)
        - counts["skipped"]
        - counts["not checked"]
        - counts[NOT_SAMPLED]
        - len(run.equivalent)
    )
    return detected, judged


def verdict(run: MutmutRun) -> tuple[str, bool]:
    counts = run.counts
    total = len(run.mutants)
    detected, judged = kill_rate(run)
    rate = 100.0 * detected / judged if judged else 0.0
    floor = run.config.kill_rate_floor
    new = len(run.new_survivors)
    # A --since or --recheck run mutates a subset chosen by what changed or what is listed: the floor is a property
    # of the whole run, not of such a subset. A --sample draws its mutants by a hash of their names, regardless of
    # outcome, so the floor is applied to the sample's rate (stated as such).
    floor_ok = run.partial or rate >= floor
    ok = judged > 0 and floor_ok and new == 0
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    known = len(run.survivors) - new - len(run.equivalent)
    drawn = ""
    if run.sample:
        k, n = run.sample
        drawn = (
            f"sample {k} of {n}: {total - len(run.not_sampled)} of {total} mutants drawn, the other "
            f"{len(run.not_sampled)} not run (the whole run: no --sample); "
        )
    return (
        f"mutmut: {'PASS' if ok else 'FAIL'} — {total} mutants over {len(run.files)} files ({parts}); {drawn}"
        f"{len(run.equivalent)} listed as equivalent; kill rate {detected}/{judged} = "
        f"{f'{rate:.1f}%' if judged else 'n/a'} of the non-equivalent mutants"
        f"{' in the sample' if run.sample else ''} against a floor of {floor:g}%"
        f"{' (not applied to a partial run)' if run.partial else ''}; {len(run.survivors) - len(run.equivalent)} "
        f"survivors (survived or no test): {known} listed in {run.baseline.path}, {new} not listed; "
        + (f"{len(run.not_run)} listed mutants not run (--run-listed); " if run.not_run else "")
        + f"{run.seconds:.0f} s"
    ), ok


def render_survivors(run: MutmutRun) -> str:
    def listed(m: MutmutMutant) -> str:
        if run.baseline.is_equivalent(m):
            return "equivalent"
        return "known" if run.baseline.is_known_survivor(m) else "NEW"

    rows = [
        [
            f"{m.file}:{m.line}",
            m.status,
            listed(m),
            m.original[:60],
            m.mutated[:60],
            m.name.rpartition(".")[2],
        ]
        for m in sorted(run.survivors, key=lambda m: (m.file, m.line, m.name))
    ]
    return table(["where", "status", "baseline", "original", "mutated", "mutant"], rows)


def _description(m: MutmutMutant, equivalent: bool) -> str:
    if m.status == NOT_SAMPLED:
        return "mutmut: outside this run's --sample, not run" + (
            " (listed as equivalent)" if equivalent else ""
        )
    if m.status == LISTED_NOT_RUN:
        listed = "listed as equivalent" if equivalent else "a listed survivor, counted as surviving"
        return f"mutmut: {listed}, not run (--run-listed runs it)"
    return f"mutmut: {m.status}" + (" (listed as equivalent)" if equivalent else "")


def to_stryker(run: MutmutRun, root: Path) -> dict[str, Any]:
    files: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for m in run.mutants:
        if m.file not in files:
            files[m.file] = ((root / m.file).read_text(encoding="utf-8"), [])
        line = max(m.line, 1)
        source_line = files[m.file][0].splitlines()[line - 1] if m.line else ""
        indent = len(source_line) - len(source_line.lstrip())
        loc = stryker.Location(line, indent + 1, line, max(len(source_line), indent + 1) + 1)
        equivalent = run.baseline.is_equivalent(m)
        files[m.file][1].append(
            stryker.mutant(
                m.name,
                "mutmut",
                loc,
                "Ignored" if equivalent else STRYKER_STATUS.get(m.status, "RuntimeError"),
                description=_description(m, equivalent),
                replacement=m.mutated or None,
                reason=m.status,
                duration_ms=m.duration * 1000 if m.duration is not None else None,
            )
        )
    return stryker.report(
        files,
        framework="falsify mutmut",
        version=__version__,
        project_root=str(root),
        config={
            "paths": list(run.config.paths),
            "tests": list(run.config.tests),
            "kill_rate_floor": run.config.kill_rate_floor,
            "baseline": run.config.baseline,
            "since": run.since,
            "sample": list(run.sample) if run.sample else None,
        },
    )
