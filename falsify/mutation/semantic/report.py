"""What `falsify mutants` prints and writes: one row per mutant, a kill matrix (prediction x mutant), a verdict
with its denominators, and the Stryker-schema report with its HTML page."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from falsify import __version__
from falsify.engines.boundary.catalogue import ID_PREFIX
from falsify.harness.proven import Proof, proofs
from falsify.harness.proven import summary as proof_summary
from falsify.harness.results import Outcome
from falsify.mutation import stryker
from falsify.mutation.semantic.boundary import OP as BOUNDARY_OP
from falsify.mutation.semantic.runner import FAILING, MutantOutcome, MutantResult, Run
from falsify.mutation.semantic.spec import read_target
from falsify.mutation.semantic.targets import MutantSpecError
from falsify.table import table

STRYKER_STATUS = {
    MutantOutcome.KILLED: "Killed",
    MutantOutcome.SURVIVED: "Survived",
    MutantOutcome.TIMEOUT: "Timeout",
    MutantOutcome.STALE: "Ignored",  # the source drifted: the mutant was not applied
    MutantOutcome.ERROR: "RuntimeError",
    MutantOutcome.CANNOT_SHOW: "Ignored",  # statusReason: "cannot be shown here: P1, P2", then whose reason
}

# Kill matrix cells.
LEGEND = (
    "X killed, as its file says; ! listed in `kills` but stayed green (or was not reached); x red though not "
    "listed; . ran and held; blank: not run"
)


PARTLY = "PARTLY KILLED"  # killed, but not by every prediction its file lists in `kills`


def outcome_word(r: MutantResult) -> str:
    """A mutant's outcome as the table, the matrix and the progress lines say it: KILLED only when every listed
    prediction went red; one that turned only part of its `kills` red is PARTLY KILLED (issue #46: it showed
    KILLED while the run was FAIL for it)."""
    return PARTLY if r.partly else str(r.outcome)


def render_rows(run: Run) -> str:
    rows = []
    for r in run.results:
        detail = ""
        if r.outcome is MutantOutcome.KILLED:
            detail = f"by {len(r.killed_by)}/{len(r.mutant.kills)} listed"
            if r.missed:
                detail += f"; NOT by {', '.join(r.missed)}"
            if r.also_red:
                detail += f"; also {len(r.also_red)} more"
        else:
            detail = " ".join(r.detail.split())[:110]
        rows.append(
            [
                r.mutant.id,
                outcome_word(r),
                "boundary: wraps the engine"
                if r.mutant.op == BOUNDARY_OP
                else f"{r.mutant.op} in {r.mutant.file}:{r.span.line if r.span else '?'}",
                str(len(r.tests)),
                f"{r.seconds:.1f}s",
                "" if r.cpu is None else f"{r.cpu:.1f}s",
                detail,
            ]
        )
    return table(["mutant", "outcome", "edit", "tests", "wall", "cpu", "detail"], rows)


def kill_matrix(run: Run) -> str:
    """One row per prediction some mutant lists or turned red, one column per mutant (numbered, see legend)."""
    results = [r for r in run.results if r.predictions or r.mutant.kills]
    if not results:
        return ""
    order = list(run.corpus.predictions)
    wanted = {p for r in results for p in (*r.mutant.kills, *r.also_red)}
    preds = [p for p in order if p in wanted] + sorted(wanted - set(order))
    header = ["prediction", *(f"M{i}" for i in range(1, len(results) + 1))]
    rows = []
    for pid in preds:
        cells = []
        for r in results:
            outcome = r.predictions.get(pid)
            listed = pid in r.mutant.kills
            red = outcome in (Outcome.FAIL, Outcome.ERROR)
            if listed:
                cells.append("X" if red else "!")
            elif red:
                cells.append("x")
            elif outcome == Outcome.PASS:
                cells.append(".")
            else:
                cells.append("")
        rows.append([pid, *cells])
    legend = "\n".join(f"  M{i} = {r.mutant.id} ({outcome_word(r)})" for i, r in enumerate(results, 1))
    return f"{table(header, rows)}\n{legend}\n  {LEGEND}"


def red_by_mutant(run: Run) -> dict[str, set[str]]:
    """mutant id -> predictions it turned red (killed mutants only; a timeout proves nothing red)."""
    return {
        r.mutant.id: set(r.killed_by) | set(r.also_red) if r.outcome is MutantOutcome.KILLED else set()
        for r in run.results
    }


def cannot_show(run: Run) -> set[str]:
    """Predictions of the mutants this machine could not show (CANNOT SHOW)."""
    return {p for r in run.results if r.outcome is MutantOutcome.CANNOT_SHOW for p in r.mutant.kills}


def proof_lines(run: Run, not_applicable: Iterable[str] = ()) -> str:
    """Which predictions this run proved able to fail, with the unproven ones named; those in `not_applicable`
    (NOT APPLICABLE to the engine) are counted apart, never UNPROVEN."""
    skip = set(not_applicable)
    proved = proofs(run.corpus, red_by_mutant(run), cannot_show(run))
    weak = sum(
        1
        for pid, proof in proved.items()
        if pid not in skip
        and proof.status is Proof.PROVEN
        and proof.red_by
        and all(map(is_boundary, proof.red_by))
    )
    also = f" ({weak} of them by boundary mutants only)" if weak else ""
    lines = [f"mutants: {len(proved)} predictions: {proof_summary(proved, skip)} by this run{also}"]
    proved = {pid: p for pid, p in proved.items() if pid not in skip}
    ran = {r.mutant.id for r in run.results}
    elsewhere = [
        pid
        for pid, proof in proved.items()
        if proof.status is Proof.UNPROVEN and proof.expected and not set(proof.expected) & ran
    ]
    if elsewhere:
        lines.append(f"  {len(elsewhere)} of them are listed only by mutants this run did not include")
    boundary = [r for r in run.results if r.mutant.op == BOUNDARY_OP]
    for pid, proof in proved.items():
        if proof.status is Proof.UNPROVEN and pid not in elsewhere:
            why = (
                f"listed mutants {', '.join(proof.expected)} did not turn it red"
                if proof.expected
                else "no mutant lists it"
            )
            # the boundary mutants that were to prove it, with their outcome: the reason it stays unproven
            tried = [r for r in boundary if pid in r.mutant.kills]
            if tried:
                why = "; ".join(
                    f"boundary mutant {r.mutant.id} {r.outcome}"
                    + (" but it stayed green" if r.outcome is MutantOutcome.KILLED else "")
                    + (
                        f" ({' '.join(r.detail.split())[:160]})"
                        if r.detail and r.outcome is not MutantOutcome.KILLED
                        else ""
                    )
                    for r in tried
                )
            lines.append(f"  UNPROVEN {pid}: {why}")
        elif proof.status is Proof.PROVEN and proof.red_by and all(is_boundary(m) for m in proof.red_by):
            lines.append(
                f"  proven {pid} by boundary mutants only (a weaker proof): {', '.join(proof.red_by)}"
            )
        elif proof.status is Proof.EXCUSED:
            lines.append(f"  unproven {pid} (reviewed): {proof.because}")
        elif proof.status is Proof.CANNOT_SHOW:
            lines.append(
                f"  {pid} cannot be shown here (its mutants' rows say whose reason: the engine's or the machine's)"
            )
    return "\n".join(lines)


def is_boundary(mutant_id: str) -> bool:
    return mutant_id.startswith(ID_PREFIX)


def verdict(run: Run, lenient: bool = False, not_applicable: Iterable[str] = ()) -> tuple[str, bool]:
    """The run's verdict line. A PARTLY KILLED mutant fails the run unless `lenient` (falsify mutants --lenient),
    and is counted apart from the killed ones either way; `not_applicable`: predictions NOT APPLICABLE to the
    engine, counted apart from proven and UNPROVEN."""
    if run.control is None or not run.control.ok:
        return "mutants: FAIL — the control run is not green, so no mutant was judged", False
    counts = Counter(r.outcome for r in run.results)
    n = len(run.results)
    partly = sum(1 for r in run.results if r.partly)
    killed, timeouts = counts[MutantOutcome.KILLED], counts[MutantOutcome.TIMEOUT]
    # A timeout counts as detected beside kills (as Stryker counts it), never alone: a run whose mutants all
    # timed out (--timeout 0.01) showed no prediction red, and is no pass.
    ok = n > 0 and not any(counts[o] for o in FAILING) and (killed > 0 or not timeouts)
    ok = ok and (lenient or not partly)
    judged = n - counts[MutantOutcome.STALE] - counts[MutantOutcome.ERROR] - counts[MutantOutcome.CANNOT_SHOW]
    shown = [
        o for o in MutantOutcome if o is not MutantOutcome.CANNOT_SHOW or counts[o]
    ]  # that one only when seen
    counts[MutantOutcome.KILLED] -= partly
    parts = ", ".join(
        f"{counts[o]} {o.value.lower()}"
        + (f", {partly} partly killed" if o is MutantOutcome.KILLED and partly else "")
        for o in shown
    )
    note = f" ({partly} not by every listed prediction)" if partly else ""
    if partly and lenient:
        note += ", accepted (--lenient)"
    if not lenient:
        killed -= partly
    if timeouts:
        note += f"; {timeouts} of {judged} applied timed out ({run_timeout(run)}): a timeout is not a kill"
        if not killed:
            note += ", and no mutant was killed"
    word = "PASS" if ok else "FAIL"
    if partly and not lenient and not any(counts[o] for o in FAILING):
        word = "FAIL (kill lists enforced; --lenient to accept)"
    proved = proofs(run.corpus, red_by_mutant(run), cannot_show(run))
    return (
        f"mutants: {word} — {n} mutants: {parts}{note}; killed {killed} of {judged} "
        f"applied; {control_text(run)}; {run.jobs} workers, {run.wall:.1f} s wall, scope {run.settings.scope}; "
        f"{len(run.corpus.predictions)} predictions: {proof_summary(proved, not_applicable)}"
    ), ok


def run_timeout(run: Run) -> str:
    """The per-mutant timeout the run used, as the user gave it or as it was derived."""
    if run.settings.timeout is not None:
        return f"--timeout {run.settings.timeout:g} s"
    seconds = max(60.0, 5 * run.control.seconds) if run.control is not None else 60.0
    return f"timeout {seconds:.0f} s: 60 s or 5x the control run"


def control_text(run: Run) -> str:
    """The control's part of the verdict, its time apart from the mutants' time."""
    assert run.control is not None
    c = run.control
    mutants = max(run.wall - run.control_wall, 0.0)
    seconds = sorted(r.seconds for r in run.results if r.seconds)
    median = f", median {seconds[len(seconds) // 2]:.1f} s per mutant run" if seconds else ""
    if c.reused:
        control = (
            f"control reused from {c.reused} ({len(c.selected)} falsifiers green in {c.seconds:.1f} s when recorded "
            f"{c.recorded}; {run.control_wall:.1f} s to read it here)"
        )
    else:
        control = f"control green ({len(c.selected)} falsifiers, {c.seconds:.1f} s)"
    return f"{control}; mutants {mutants:.1f} s wall{median}"


def to_stryker(run: Run) -> dict[str, Any]:
    files: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    tests: set[str] = set()
    for r in run.results:
        m = r.mutant
        if m.file not in files:
            try:  # a target the run refused (binary, too large, gone) is shown empty, its row says why
                source = read_target(run.project.root, m) if m.op != BOUNDARY_OP else ""
            except MutantSpecError:
                source = ""
            files[m.file] = (source, [])
        span = r.span
        loc = (
            stryker.Location(span.line, span.column, span.end_line, span.end_column)
            if span
            else stryker.Location(1, 1, 1, 2)
        )
        added = "\n".join(
            line[1:] for line in r.diff.splitlines() if line.startswith("+") and not line.startswith("+++")
        )
        reason = r.detail
        if r.outcome is MutantOutcome.KILLED:
            reason = (
                f"red: {', '.join(r.killed_by + r.also_red)}"
                + (f"; listed but green: {', '.join(r.missed)}" if r.missed else "")
                + f"\n{r.detail}"
            )
        elif r.outcome is MutantOutcome.TIMEOUT:
            # How long it ran depends on the machine and on the control's time (the default timeout is 5x it):
            # below the first line, which an evidence bundle keeps (falsify/evidence/mutation.py, normalise).
            reason = f"timed out\n{r.detail}"
        tests.update(r.tests)
        files[m.file][1].append(
            stryker.mutant(
                m.id,
                m.op,
                loc,
                STRYKER_STATUS[r.outcome],
                description=" ".join(m.description.split()),
                replacement=added if r.diff else None,
                killed_by=list(r.failing_tests),
                covered_by=list(r.tests),
                reason=reason[:4000],
                duration_ms=r.seconds * 1000,
                tests_completed=len(r.tests) if r.tests else None,
            )
        )
    # initialRun: what this run spent on the control (reading a stored one when it was reused, as config says)
    control = run.control_wall * 1000 if run.control else 0.0
    reused = (
        {
            "control": f"reused from {run.control.reused}, recorded {run.control.recorded} in {run.control.seconds:.1f} s"
        }
        if run.control and run.control.reused
        else {}
    )
    return stryker.report(
        files,
        framework="falsify mutants",
        version=__version__,
        config={"scope": run.settings.scope, "engine": run.settings.engine, "jobs": run.jobs, **reused},
        tests=sorted(tests),
        project_root=str(run.project.root),
        performance={"setup": 0.0, "initialRun": control, "mutation": run.wall * 1000 - control},
    )


def write(run: Run, out: Path) -> tuple[Path, Path]:
    return stryker.write_report(to_stryker(run), out, "falsify mutants: semantic mutants")


def diffs(results: list[MutantResult]) -> str:
    return "\n".join(
        f"# {r.mutant.id} ({r.outcome})\n{r.diff or '(not applied: ' + r.detail + ')'}" for r in results
    )
