"""Which predictions are shown able to fail: PROVEN when some planted bug (a semantic mutant) turned it red.

A falsifier that no mutant has ever turned red may be unable to fail at all; its PASS proves nothing. For each
prediction the mutants that must turn it red are its contract's `mutants:` and every mutant file whose `kills`
names it (lint keeps the two in step). After a mutant run, the predictions each mutant actually turned red come
from the run itself or from its Stryker report, whose statusReason `falsify mutants` writes as
"red: P1, P2; ...". A prediction is

    PROVEN        some mutant turned it red;
    UNPROVEN      none did (or none is listed): GO is refused unless the contract gives `unproven_because:`;
    EXCUSED       unproven, with the contract's reviewed `unproven_because:` shown beside it (whether or not a
                  mutant run was made); a pack's reason only where the pack's own mutants are planted;
    CANNOT SHOW   unproven because it cannot be shown false here: its falsifier's sensitivity control said so
                  (falsify.cannot_show, with whose reason: the engine's or this machine's) and its mutants were
                  reported CANNOT SHOW, not run (FALSIFY-DET-001 where BLAS gives the same bytes under any thread
                  count);
    NOT MEASURED  no mutant run to judge by, or its report is stale: made on another engine (or on an engine it
                  does not record), or the mutated files changed since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus
from falsify.contracts.packs import is_pack_file
from falsify.engines.boundary.catalogue import REPORT_FILE as BOUNDARY_REPORT_FILE


class Proof(StrEnum):
    PROVEN = "PROVEN"
    UNPROVEN = "UNPROVEN"
    EXCUSED = "EXCUSED"
    CANNOT_SHOW = "CANNOT SHOW"
    NOT_MEASURED = "NOT MEASURED"


@dataclass(frozen=True, slots=True)
class PredictionProof:
    id: str
    status: Proof
    expected: tuple[str, ...]  # mutants that must turn it red (contract `mutants:` and mutant files' `kills`)
    red_by: tuple[str, ...]  # mutants that did, in the run judged
    because: str | None  # the contract's `unproven_because:`

    @property
    def cell(self) -> str:
        """The gate table's PROVEN cell."""
        if self.status is Proof.PROVEN:
            return f"yes ({len(self.red_by)})"
        if self.status is Proof.EXCUSED:
            return "no: reviewed"
        if self.status is Proof.CANNOT_SHOW:
            return "n/a here"
        if self.status is Proof.UNPROVEN:
            return "NO" if self.expected else "NO (no mutant)"
        return "?"


def expected_killers(corpus: Corpus, prediction_id: str) -> tuple[str, ...]:
    p = corpus.predictions[prediction_id]
    present = {m.id for m in corpus.mutants}
    # A pack's `mutants:` name bugs planted in falsify's reference engine: another project is held only to its own.
    own = set(p.mutants) if not is_pack_file(p.file) else set(p.mutants) & present
    listed = own | {m.id for m in corpus.mutants if prediction_id in m.kills}
    return tuple(sorted(listed))


def reviewed_reason(corpus: Corpus, prediction_id: str) -> str | None:
    """The contract's `unproven_because:` where it applies to the engine under test, else None.

    A project's own reason is its own. A pack's reason is about the engine the pack's `mutants:` are planted in,
    falsify's reference (OAI-009: "the reference server keeps no prefix cache"): it applies only in a project that
    holds one of those mutant files, never to an adopter's engine, whose prediction stays UNPROVEN until its own
    mutant turns it red (issue #46)."""
    p = corpus.predictions[prediction_id]
    if not p.unproven_because or not is_pack_file(p.file):
        return p.unproven_because
    planted = {m for q in corpus.contract_of(prediction_id).predictions for m in q.mutants}
    return p.unproven_because if planted & {m.id for m in corpus.mutants} else None


def proofs(
    corpus: Corpus, red: Mapping[str, Iterable[str]] | None, cannot_show: Iterable[str] = ()
) -> dict[str, PredictionProof]:
    """red: mutant id -> the predictions it turned red, from a mutant run; None when there was none.
    cannot_show: predictions that run found this machine cannot show false (its CANNOT SHOW mutants' kills)."""
    machine = set(cannot_show) if red is not None else set()
    by_prediction: dict[str, list[str]] = {}
    for mutant, predictions in (red or {}).items():
        for pid in predictions:
            by_prediction.setdefault(pid, []).append(mutant)
    out = {}
    for pid in corpus.predictions:
        killers = tuple(sorted(by_prediction.get(pid, ())))
        because = reviewed_reason(corpus, pid)
        if killers:
            status = Proof.PROVEN
        elif pid in machine:
            status = Proof.CANNOT_SHOW
        elif because:
            status = Proof.EXCUSED
        elif red is None:
            status = Proof.NOT_MEASURED
        else:
            status = Proof.UNPROVEN
        out[pid] = PredictionProof(pid, status, expected_killers(corpus, pid), killers, because)
    return out


def shown_here(proved: Mapping[str, PredictionProof], not_here: set[str]) -> dict[str, PredictionProof]:
    """A mutant run's CANNOT SHOW holds only where this run found the prediction unshowable too (`not_here`): a
    report from another machine or OpenBLAS kernel, where it could not be shown, proves nothing here, where it
    can: UNPROVEN until a mutant run here turns it red."""
    return {
        pid: replace(p, status=Proof.UNPROVEN) if p.status is Proof.CANNOT_SHOW and pid not in not_here else p
        for pid, p in proved.items()
    }


def summary(proved: Mapping[str, PredictionProof], not_applicable: Iterable[str] = ()) -> str:
    """ "31 proven, 2 unproven with a reviewed reason, 8 UNPROVEN", or "proven not measured (...)"; with
    predictions that cannot be shown false here, "57 proven of 57 provable here, 1 cannot be shown here".
    `not_applicable`: predictions NOT APPLICABLE to the engine or machine of the run: never counted as proven or
    UNPROVEN (nothing ran that a mutant could turn red), only named as "16 not applicable" (issue #46)."""
    skip = set(not_applicable)
    chosen = [p for pid, p in proved.items() if pid not in skip]
    n_a = f", {len(skip & set(proved))} not applicable" if skip & set(proved) else ""
    if chosen and all(p.status in (Proof.NOT_MEASURED, Proof.EXCUSED) for p in chosen):
        return f"proven not measured (no current mutant run){n_a}"
    counts = {s: sum(1 for p in chosen if p.status is s) for s in Proof}
    text = f"{counts[Proof.PROVEN]} proven"
    if counts[Proof.CANNOT_SHOW]:
        text += (
            f" of {len(chosen) - counts[Proof.CANNOT_SHOW]} provable here, {counts[Proof.CANNOT_SHOW]} cannot "
            "be shown here"
        )
    if counts[Proof.EXCUSED]:
        text += f", {counts[Proof.EXCUSED]} unproven with a reviewed reason"
    if counts[Proof.UNPROVEN]:
        text += f", {counts[Proof.UNPROVEN]} UNPROVEN"
    return text + n_a


def red_from_stryker(report: Mapping[str, Any]) -> dict[str, set[str]]:
    """mutant id -> predictions it turned red, from the statusReason lines of a `falsify mutants` report."""
    red: dict[str, set[str]] = {}
    for entry in (report.get("files") or {}).values():
        for m in entry.get("mutants", []) or []:
            mid = str(m.get("id", ""))
            red[mid] = set()
            if m.get("status") != "Killed":
                continue
            first = str(m.get("statusReason", "")).split("\n", 1)[0]
            if first.startswith("red: "):
                names = first[len("red: ") :].split(";", 1)[0].split(",")
                red[mid] = {n.strip() for n in names if n.strip().startswith("FALSIFY-")}
    return red


# A CANNOT SHOW mutant's statusReason starts so; the lines below it say whose reason each is (the engine's, this
# machine's or the configuration's). Reports written before issue #46 said "on this machine" for every reason.
CANNOT_SHOW_REASON = "cannot be shown here: "
CANNOT_SHOW_REASONS = (CANNOT_SHOW_REASON, "cannot be shown on this machine: ")


def cannot_show_from_stryker(report: Mapping[str, Any]) -> set[str]:
    """Predictions of the report's CANNOT SHOW mutants, from statusReason "cannot be shown here: P1, P2"."""
    out: set[str] = set()
    for entry in (report.get("files") or {}).values():
        for m in entry.get("mutants", []) or []:
            first = str(m.get("statusReason", "")).split("\n", 1)[0]
            prefix = next((p for p in CANNOT_SHOW_REASONS if first.startswith(p)), None)
            if m.get("status") == "Ignored" and prefix is not None:
                names = first[len(prefix) :].split(";", 1)[0].split(",")
                out |= {n.strip() for n in names if n.strip().startswith("FALSIFY-")}
    return out


def stale_files(report: Mapping[str, Any], root: Path) -> list[str]:
    """Files of the report whose source (as the report recorded it) differs from the tree's now."""
    changed = []
    for name, entry in sorted((report.get("files") or {}).items()):
        if name == BOUNDARY_REPORT_FILE:  # boundary mutants edit no file of the project
            continue
        source = entry.get("source")
        path = root / name
        if not isinstance(source, str) or not path.is_file() or path.read_text(encoding="utf-8") != source:
            changed.append(name)
    return changed


def report_engine(report: Mapping[str, Any]) -> str | None:
    """The engine spec a `falsify mutants` report was made on (its config.engine); None when it records none."""
    config = report.get("config")
    engine = config.get("engine") if isinstance(config, Mapping) else None
    return engine if isinstance(engine, str) and engine else None


def staleness(report: Mapping[str, Any], root: Path, engine: str) -> str | None:
    """Why a mutant report proves nothing about a run on `engine` in the tree at `root`, or None when it is
    current. A mutant killed under one engine says nothing of another's falsifiers (its mutated files may be
    ones the other never imports), so the report must have been made on the same engine spec; and its mutated
    files must be unchanged."""
    made_on = report_engine(report)
    if made_on != engine:
        made = "an engine it does not record" if made_on is None else f"engine {made_on!r}"
        return f"stale: made on {made}, this run is on engine {engine!r}"
    changed = stale_files(report, root)
    if changed:
        return f"stale ({', '.join(changed)} changed since)"
    return None
