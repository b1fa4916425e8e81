"""GO / NO-GO from the three kinds of result, with every denominator. Shared by `evidence` and `verify`.

GO needs all of:
- every prediction PASS (NOT APPLICABLE allowed, at least one PASS), as `falsify gate` requires;
- the JUnit XML shows no failure and no error (a collection error fails here even if no prediction did);
- the mutant run happened, killed (or timed out) every mutant it ran, and ran every declared mutant. A declared
  mutant that was not run is never counted as killed: mutants not run is NO-GO, said so in the verdict;
- every applicable prediction is PROVEN (some mutant turned it red), or its contract gives a reviewed
  `unproven_because:` (shown on the report). A prediction no mutant turned red may be unable to fail: its PASS
  proves nothing, so an UNPROVEN one is NO-GO, named.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from falsify.evidence import JUNIT, junit
from falsify.harness.proven import Proof
from falsify.harness.results import Outcome, counts_text

KILLED = "Killed"
# Detected without a kill: the falsifiers ran past the runner's time limit (Stryker counts it as detected, and so
# does `falsify mutants`). Allowed in a GO, shown apart, never counted as killed.
TIMEOUT = "Timeout"


def junit_totals(xml: bytes, what: str = JUNIT) -> dict[str, int]:
    """tests/failures/errors/skipped summed over the <testsuite> elements of a JUnit XML document (WHAT names
    it in an error: not bounded XML, or a count that is not decimal digits)."""
    return junit.totals(xml, what)


def junit_view(counts: dict[str, int]) -> dict[str, int]:
    """pytest's count as pytest's JUnit XML writer totals the same reports: an xfail is a skipped testcase, an
    xpass a passed one, a collection skip or error a testcase too. (A test that fails and then errors in teardown
    is one testcase with both, so `tests` is one less than here: such a run is NO-GO on its failure anyway.)"""
    ran = counts["passed"] + counts["failed"] + counts["errors"] + counts["skipped"]
    return {
        "tests": ran + counts["xfailed"] + counts["xpassed"],
        "failures": counts["failed"],
        "errors": counts["errors"],
        "skipped": counts["skipped"] + counts["xfailed"],
    }


def decide(
    outcomes: list[str],
    tests: dict[str, int],
    mutants: dict[str, Any],
    proofs: dict[str, dict[str, Any]] | None = None,
    pytest_counts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """outcomes: one Outcome value per prediction; tests: junit_totals(); mutants: {run, reason, declared,
    results: [{id, status}]}; proofs: prediction id -> {outcome, proven (falsify.harness.proven.Proof value),
    because}, None to leave proof out (a caller with no corpus); pytest_counts: the same run's tests as pytest
    counted them (falsify.harness.results.test_counts), which the summary states and the JUnit totals must
    equal; None for results with no tally. Returns the verdict record the statements carry and the reports
    show."""
    counts = Counter(outcomes)
    n = len(outcomes)
    reasons = []
    passed = counts[Outcome.PASS.value]
    bad = {
        o.value: counts[o.value]
        for o in (Outcome.FAIL, Outcome.ERROR, Outcome.TIMEOUT, Outcome.NOT_RUN)
        if counts[o.value]
    }
    if n == 0:
        reasons.append("no prediction: an empty corpus is never a pass")
    elif passed == 0:
        reasons.append(f"0 of {n} predictions passed")
    for outcome, k in bad.items():
        reasons.append(f"{k} of {n} predictions {outcome}")
    if tests["failures"] or tests["errors"]:
        reasons.append(
            f"JUnit: {tests['failures']} failed and {tests['errors']} errors of {tests['tests']} tests"
        )
    if pytest_counts is not None and junit_view(pytest_counts) != tests:
        reasons.append(
            f"JUnit totals {tests} differ from pytest's count of the same run {junit_view(pytest_counts)}"
        )
    declared: list[str] = sorted(mutants.get("declared", []))
    results = {r["id"]: r["status"] for r in mutants.get("results", [])}
    killed = sorted(m for m, s in results.items() if s == KILLED)
    timed_out = sorted(m for m, s in results.items() if s == TIMEOUT)
    # A mutant this machine cannot show (falsify mutants: CANNOT SHOW) is excused only if every prediction it
    # names is NOT APPLICABLE for that reason in this same run.
    outcome_of = {pid: p["outcome"] for pid, p in (proofs or {}).items()}
    machine = sorted(
        r["id"]
        for r in mutants.get("results", [])
        if r.get("cannotShowPredictions")
        and all(outcome_of.get(pid) == Outcome.NOT_APPLICABLE.value for pid in r["cannotShowPredictions"])
    )
    not_killed = sorted(m for m, s in results.items() if s not in (KILLED, TIMEOUT) and m not in machine)
    missing = sorted(set(declared) - set(results)) if mutants.get("run") else []
    if not mutants.get("run"):
        if declared:
            reasons.append(
                f"mutants not run ({len(declared)} declared): {mutants.get('reason', 'no mutant report')}"
            )
    else:
        if not_killed:
            reasons.append(
                f"{len(not_killed)} of {len(results)} mutants not killed: "
                + ", ".join(f"{m} ({results[m]})" for m in not_killed)
            )
        if missing:
            reasons.append(
                f"{len(missing)} of {len(declared)} declared mutants missing from the report: "
                + ", ".join(missing)
            )
    proof_text, proof_record = "", None
    if proofs is not None:
        applicable = {pid: p for pid, p in proofs.items() if p["outcome"] != Outcome.NOT_APPLICABLE.value}
        proven = sorted(pid for pid, p in applicable.items() if p["proven"] == Proof.PROVEN.value)
        excused = sorted(pid for pid, p in applicable.items() if p["proven"] == Proof.EXCUSED.value)
        unshowable = sorted(pid for pid, p in proofs.items() if p["proven"] == Proof.CANNOT_SHOW.value)
        unproven = sorted(
            pid
            for pid, p in applicable.items()
            if p["proven"] in (Proof.UNPROVEN.value, Proof.NOT_MEASURED.value)
        )
        measured = mutants.get("run", False)
        if unproven:
            why = "no mutant turned them red" if measured else "no mutant run, so none is shown able to fail"
            reasons.append(
                f"{len(unproven)} of {len(applicable)} applicable predictions UNPROVEN ({why}; no reviewed "
                f"unproven_because): {', '.join(unproven)}"
            )
        proof_text = (
            f"; {len(proven)} of {len(applicable)} proven"
            + (f", {len(excused)} unproven with a reviewed reason" if excused else "")
            + (f", {len(unproven)} UNPROVEN" if unproven else "")
            + (f", {len(unshowable)} cannot be shown here" if unshowable else "")
            if measured
            else "; proven not measured"
        )
        proof_record = {
            "measured": bool(measured),
            "applicable": len(applicable),
            "proven": len(proven),
            "excused": excused,
            "unproven": unproven,
        } | ({"cannotShow": unshowable} if unshowable else {})
    decision = "NO-GO" if reasons else "GO"
    if mutants.get("run"):
        mutant_text = f"{len(killed)} of {len(set(results) | set(declared))} mutants killed"
        if timed_out:
            mutant_text += f", {len(timed_out)} timed out"
        if machine:
            mutant_text += f", {len(machine)} cannot be shown here"
    else:
        mutant_text = (
            f"mutants NOT RUN ({len(declared)} declared, 0 killed)" if declared else "no mutant declared"
        )
    if pytest_counts is not None:
        tests_text = counts_text(pytest_counts)
    else:
        tests_text = (
            f"{tests['tests']} tests, {tests['failures']} failed, {tests['errors']} errors, "
            f"{tests['skipped']} skipped"
        )
    summary = (
        f"{decision} — {passed} of {n} predictions passed"
        f" ({counts[Outcome.NOT_APPLICABLE.value]} not applicable){proof_text}; {tests_text}; {mutant_text}"
    )
    record: dict[str, Any] = {} if proof_record is None else {"proof": proof_record}
    if pytest_counts is not None:
        record["pytest"] = dict(pytest_counts)
    return record | {
        "decision": decision,
        "summary": summary,
        "reasons": reasons,
        "predictions": {"total": n, **{o.value: counts[o.value] for o in Outcome}},
        "tests": dict(tests),
        "mutants": {
            "run": bool(mutants.get("run")),
            "declared": len(declared),
            "ran": len(results),
            "killed": len(killed),
            "timedOut": timed_out,
            "notKilled": not_killed,
            **({"cannotShow": machine} if machine else {}),
            "missing": missing,
        },
    }
