"""From the plugin's per-test results to one verdict per prediction: shared by gate, mutants and evidence."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus
from falsify.untrusted.boundedjson import Field, show


def write_results(
    path: Path, payload: dict[str, Any], written: dict[str, str] | None, encoded: dict[str, str] | None = None
) -> None:
    """The plugin's results file, replaced whole (a reader never sees half a file). At the end of a run: indented.
    Mid-run (`written` given, after each test): compact, through json's C encoder (an indented dump is pure
    Python), each finished test's record taken from `written`, where it was encoded once at its teardown:
    re-encoding every record after every test grew as the tests squared (~0.5 s CPU of this repository's gate,
    issue #28). `encoded` holds top-level fields already encoded (the collected list, fixed after collection:
    ~60 kB for this repository's gate), spliced in as they are."""
    if written is None:
        text = json.dumps(payload, indent=1, sort_keys=True, default=repr)
    else:
        fixed = encoded or {}
        rest = {k: v for k, v in payload.items() if k != "tests" and k not in fixed}
        fragments = (
            f"{json.dumps(nid)}: {written.get(nid) or json.dumps(record, sort_keys=True, default=repr)}"
            for nid, record in sorted(payload["tests"].items())
        )
        parts = [json.dumps(rest, sort_keys=True, default=repr)[1:-1]]
        parts += [f"{json.dumps(k)}: {v}" for k, v in fixed.items() if k in payload]
        parts.append(f'"tests": {{{", ".join(fragments)}}}')
        text = "{" + ", ".join(p for p in parts if p) + "}"
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    NOT_RUN = "NOT RUN"
    NOT_APPLICABLE = "NOT APPLICABLE"
    TIMEOUT = "TIMEOUT"


# When a prediction's tests disagree, the worst outcome wins, in this order: a skipped (or otherwise not run)
# bound test outranks PASS, so a prediction is PASS only when every bound test that applies ran and checked it.
# A test NOT APPLICABLE by name (a capability or oracle the prediction declares) does not.
_SEVERITY = [
    Outcome.FAIL,
    Outcome.ERROR,
    Outcome.TIMEOUT,
    Outcome.NOT_RUN,
    Outcome.PASS,
    Outcome.NOT_APPLICABLE,
]


@dataclass(frozen=True, slots=True)
class PredictionResult:
    id: str
    contract: str
    outcome: Outcome
    tests: tuple[str, ...]
    failing_tests: tuple[str, ...]
    seconds: float
    checks: int
    detail: str  # why, for anything but PASS: the failure message, the skip reason
    values: dict[str, Any] | None  # the observed values of a failing check, else of the last check
    skipped: int = 0  # bound tests skipped or not run (NOT APPLICABLE ones aside)
    not_applicable: int = 0  # bound tests NOT APPLICABLE by name
    vacuous: int = 0  # checks that held over nothing (falsify.check: all/any/comparisons of empty sequences)
    corners: tuple[str, ...] = ()  # the prediction's declared corners, in declaration order
    corners_reached: tuple[str, ...] = ()  # those some check reached
    cannot_show: bool = (
        False  # NOT APPLICABLE because this machine cannot show it false (falsify.cannot_show)
    )

    @property
    def corners_cell(self) -> str:
        """`reached/declared` ("6/6"), or "-" for a prediction that declares no corner."""
        return f"{len(self.corners_reached)}/{len(self.corners)}" if self.corners else "-"


# pytest's categories as its summary line names them ("3 failed, 97 passed, 19 skipped, 2 errors in 9.1s").
PYTEST_COUNTS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")


def test_counts(results: dict[str, Any]) -> dict[str, int] | None:
    """The run's tests as pytest counted them (the plugin's tally: collected, then each summary category), plus
    `not_applicable`: the skipped tests that were NOT APPLICABLE by name. None for results with no tally."""
    counts = results.get("counts")
    if not isinstance(counts, dict):
        return None
    # NOT APPLICABLE as the plugin recorded it from the engine's supports(), never from a skip message.
    not_applicable = sum(
        1
        for t in results.get("tests", {}).values()
        if t.get("outcome") == "skipped" and t.get("not_applicable")
    )
    return {k: int(counts.get(k, 0)) for k in ("collected", *PYTEST_COUNTS)} | {
        "not_applicable": not_applicable
    }


def counts_text(counts: dict[str, int] | None) -> str:
    """pytest's numbers in one phrase, e.g. `120 tests collected: 99 passed, 2 failed, 0 errors, 19 skipped (17 not
    applicable)`; xfailed, xpassed and deselected only when not 0."""
    if counts is None:
        return "tests not counted (the results carry no pytest tally)"
    text = (
        f"{counts['collected']} tests collected: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} skipped ({counts['not_applicable']} not applicable)"
    )
    return text + "".join(f", {counts[k]} {k}" for k in ("xfailed", "xpassed", "deselected") if counts[k])


MAX_RESULTS = 256 * 2**20  # bytes of a results.json


def load_results(path: Path) -> dict[str, Any]:
    """A results.json (the gate's, or one given to `falsify evidence --from`): through the file layer and the
    bounded JSON reader, and a JSON object, or a FalsifyError naming the file."""
    from falsify.errors import FalsifyError
    from falsify.untrusted import safefile

    data = safefile.read_json(path, limit=MAX_RESULTS, what="results file")
    if not isinstance(data, dict):
        raise FalsifyError(f"{path}: not a results file (expected a JSON object)")
    return check_results(data, str(path))


# What a test's record says happened to it (the plugin's outcome field); anything else is not a results file.
TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "not run", "timeout")


def check_results(data: Any, what: str) -> dict[str, Any]:
    """DATA when it has the shape the plugin writes, every field this module and the evidence read of the type
    they read it as; else a FieldError naming WHAT (the file) and the field. Absent optional fields are fine
    (results from older versions lack some)."""
    doc = Field(what)
    results = doc.need_dict(data)
    doc.get(results, "engine", "str", null=True)
    doc.get(results, "binding_problems", "str_list")
    for i, item in enumerate(doc.get(results, "collected", "list", [])):
        entry = doc["collected"][i].need_dict(item)
        doc["collected"][i].get(entry, "nodeid", "str")
        doc["collected"][i].get(entry, "predictions", "str_list")
        doc["collected"][i].get(entry, "path", "str", null=True)
    counts = doc.get(results, "counts", "dict", {})
    for key, value in counts.items():
        doc["counts"][key].need_int(value)
    tests = doc.get(results, "tests", "dict", {})
    for nid, record in tests.items():
        _check_record(doc["tests"][nid], record)
    return results


def _check_record(at: Field, value: Any) -> None:
    record = at.need_dict(value)
    at.get(record, "predictions", "str_list")
    outcome = at.get(record, "outcome", "str")
    if outcome is not None and outcome not in TEST_OUTCOMES:
        at["outcome"].fail(f"{show(outcome)} is not one of {', '.join(TEST_OUTCOMES)}")
    for key in ("message", "exception", "where", "not_applicable"):
        at.get(record, key, "str")
    at.get(record, "duration", "number")
    at.get(record, "assertion", "bool")
    at.get(record, "cannot_show", "dict")
    for pid, reason in at.get(record, "not_applicable_by", "dict", {}).items():
        at["not_applicable_by"][pid].need_str(reason)
    for pid, ob in at.get(record, "observations", "dict", {}).items():
        where = at["observations"][pid]
        summary = where.need_dict(ob)
        for key in ("checks", "held"):
            if key not in summary:
                where.fail(f"no {key} count")
        checks = where.get(summary, "checks", "int")
        held = where.get(summary, "held", "int")
        vacuous = where.get(summary, "vacuous", "int", 0)
        if not vacuous <= held <= checks:
            where.fail(f"vacuous {vacuous} <= held {held} <= checks {checks} does not hold")
        where.get(summary, "corners", "str_list")
        where.get(summary, "failed_message", "str", null=True)
        where.get(summary, "failed_values", "dict", null=True)
        where.get(summary, "last_values", "dict", null=True)


def per_prediction(corpus: Corpus, results: dict[str, Any]) -> list[PredictionResult]:
    tests: dict[str, dict[str, Any]] = results.get("tests", {})
    out = []
    for contract in corpus.contracts:
        for p in contract.predictions:
            bound = [nid for nid, r in tests.items() if p.id in r.get("predictions", [])]
            seen: list[tuple[Outcome, str, str, dict[str, Any] | None]] = []
            checks = 0
            seconds = 0.0
            for nid in bound:
                r = tests[nid]
                ob = r.get("observations", {}).get(p.id)
                checks += ob["checks"] if ob else 0
                seconds += r.get("duration", 0.0)
                seen.append((*_test_outcome(p.id, r, ob), nid, _values(ob)))
            vacuous = sum(
                (tests[nid].get("observations", {}).get(p.id) or {}).get("vacuous", 0) for nid in bound
            )
            result: tuple[Outcome, str, str, dict[str, Any] | None]
            if not seen:
                result = (Outcome.NOT_RUN, "no bound test ran", "", None)
            else:
                result = min(seen, key=lambda s: _SEVERITY.index(s[0]))
            outcome, detail, _, values = result
            skipped = sum(1 for o, *_ in seen if o is Outcome.NOT_RUN)
            not_applicable = sum(1 for o, *_ in seen if o is Outcome.NOT_APPLICABLE)
            if outcome is Outcome.NOT_RUN and seen:
                detail = f"{skipped} of {len(seen)} bound tests not run; first: {detail}"
            if outcome is Outcome.PASS and checks - vacuous < p.min_checks:
                outcome = Outcome.NOT_RUN
                detail = (
                    f"vacuous: {checks - vacuous} non-vacuous of {checks} checks, needs {p.min_checks} "
                    "(the others held over an empty sequence)"
                )
            declared = tuple(c.id for c in p.corners)
            hit = {
                c
                for nid in bound
                for c in (tests[nid].get("observations", {}).get(p.id) or {}).get("corners", ())
            }
            reached = tuple(c for c in declared if c in hit)
            missed = [c for c in declared if c not in hit]
            if outcome is Outcome.PASS and missed:
                # A declared corner no check reached: the claim was not tested where it is most likely to break.
                outcome = Outcome.NOT_RUN
                detail = f"corners {len(reached)}/{len(declared)}: no check reached " + ", ".join(
                    f"{c} ({_when(p, c)})" for c in missed
                )
            failing = tuple(nid for o, _, nid, _ in seen if o in (Outcome.FAIL, Outcome.ERROR))
            machine = outcome is Outcome.NOT_APPLICABLE and any("cannot_show" in tests[nid] for nid in bound)
            out.append(
                PredictionResult(
                    p.id,
                    contract.id,
                    outcome,
                    tuple(bound),
                    failing,
                    seconds,
                    checks,
                    "" if outcome is Outcome.PASS else detail,
                    values,
                    skipped,
                    not_applicable,
                    vacuous,
                    declared,
                    reached,
                    machine,
                )
            )
    return out


def _when(p: Any, corner: str) -> str:
    return next(c.when.source for c in p.corners if c.id == corner)


def _values(ob: dict[str, Any] | None) -> dict[str, Any] | None:
    if not ob:
        return None
    return ob.get("failed_values") or ob.get("last_values")


def _test_outcome(pid: str, r: dict[str, Any], ob: dict[str, Any] | None) -> tuple[Outcome, str]:
    outcome = r.get("outcome", "not run")
    message = r.get("message", "")
    if ob and ob["held"] < ob["checks"]:
        # Its own failed check's message, not the test's: that names whichever prediction the test raised first.
        return Outcome.FAIL, ob.get("failed_message") or message
    if outcome == "timeout":
        return Outcome.TIMEOUT, message
    if outcome == "error":
        return Outcome.ERROR, message
    if outcome == "failed":
        # The test failed before or after this prediction's checks. If the prediction held at least once in
        # this test and another prediction was the one violated, it did not fail here.
        if ob and ob["held"] and r.get("exception") == "ContractViolation" and pid not in message:
            return Outcome.PASS, ""
        if not ob and r.get("exception") == "ContractViolation":
            return Outcome.NOT_RUN, f"not reached: the test stopped at another prediction ({message})"
        return Outcome.FAIL, message
    if outcome == "skipped":
        if message.startswith("Skipped: "):
            message = message[len("Skipped: ") :]
        # Only the plugin's own record of the engine's supports() answer makes a skip NOT APPLICABLE; a test
        # that skips itself with the same words is NOT RUN.
        if r.get("not_applicable"):
            # The prediction's own reason (results from before per-prediction reasons carry the test's only).
            own = (r.get("not_applicable_by") or {}).get(pid)
            return Outcome.NOT_APPLICABLE, str(own or r["not_applicable"])
        return Outcome.NOT_RUN, f"skipped: {message}"
    if outcome == "passed":
        return (Outcome.PASS, "") if ob else (Outcome.NOT_RUN, "passed without checking it")
    return Outcome.NOT_RUN, "not run"
