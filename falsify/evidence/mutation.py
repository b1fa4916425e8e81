"""The mutant run as evidence: read a Stryker mutation-testing-report (schema
https://github.com/stryker-mutator/mutation-testing-elements, report schema v1/v2) into one record per mutant.

Which predictions a mutant turned red: the "red: ..." line `falsify mutants` writes in statusReason; failing that,
the predictions bound (results.json) to the report's `killedBy` tests, limited to the mutant's `kills`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus, Mutant
from falsify.engines.boundary.catalogue import REPORT_FILE as BOUNDARY_REPORT_FILE
from falsify.evidence.digests import canonical, scrub, sha256_bytes
from falsify.evidence.tree import EvidenceError
from falsify.harness.proven import cannot_show_from_stryker
from falsify.untrusted import safefile
from falsify.untrusted.boundedjson import Field

# Fields that differ between two runs of the same tree; dropped from the bundle's copy of the report.
_TIMING_KEYS = ("duration", "performance", "testsCompleted", "timestamp", "startedAt", "finishedAt")
# Config keys that say how one run got its result, not what it ran: `falsify mutants` names there the stored
# control it reused and when that control ran (config.control, falsify/mutation/semantic/control.py). Whether the
# control was reused must not change the bundle's bytes; the raw report keeps them.
_RUN_PROVENANCE = ("control",)
# Lists that are sets (test ids), filled in the order a runner's workers finish; kept sorted. Mutants and tests
# are listed by id for the same reason.
_SETS = ("killedBy", "coveredBy")


@dataclass(frozen=True, slots=True)
class MutantOutcome:
    id: str
    # Stryker's: Killed, Survived, NoCoverage, Timeout, RuntimeError, CompileError, Ignored, Pending
    status: str
    file: str
    # sha256 of the unified diff the mutant makes to the tree; else of the report's {file, location, replacement}
    diff_sha256: str
    killed: tuple[str, ...]  # prediction ids that turned red
    cannot_show: tuple[
        str, ...
    ] = ()  # a CANNOT SHOW mutant's predictions, which this machine cannot show false

    @property
    def kind(self) -> str:
        """ "boundary" for a boundary mutant (falsify's wrapper around the engine, no file edited), else "source"."""
        return "boundary" if self.file == BOUNDARY_REPORT_FILE else "source"

    def as_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "status": self.status,
            "kind": self.kind,
            "file": self.file,
            "diffDigest": {"sha256": self.diff_sha256},
            "killedPredictions": list(self.killed),
        }
        return out | ({"cannotShowPredictions": list(self.cannot_show)} if self.cannot_show else {})


MAX_REPORT = 256 * 2**20  # bytes of a mutation report


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = safefile.read_json(path, limit=MAX_REPORT, what="mutation report")
    except safefile.FileLayerError as exc:
        raise EvidenceError(f"not a readable mutation report: {exc}") from None
    return check_report(data, str(path))


def check_report(data: Any, what: str) -> dict[str, Any]:
    """DATA when it is a Stryker report with every field the evidence reads of the type it reads it as (the
    report schema's types: ids, statuses, reasons and test ids are strings); else a FieldError naming WHAT (the
    file) and the field."""
    doc = Field(what)
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict) or "schemaVersion" not in data:
        doc.fail("not a Stryker mutation-testing report (needs schemaVersion and files)")
    doc.get(data, "schemaVersion", "str")
    doc.get(data, "projectRoot", "str")
    config = doc.get(data, "config", "dict", {})
    doc["config"].get(config, "engine", "str", null=True)
    for name, entry in data["files"].items():
        at = doc["files"][name]
        at.need_dict(entry)
        at.get(entry, "source", "str")
        for i, mutant in enumerate(at.get(entry, "mutants", "list", [])):
            m = at["mutants"][i]
            m.need_dict(mutant)
            for key in ("id", "status"):
                if key not in mutant:
                    m.fail(f"no {key}")
                m.get(mutant, key, "str")
            for key in ("statusReason", "replacement", "mutatorName", "description"):
                m.get(mutant, key, "str")
            for key in _SETS:
                m.get(mutant, key, "str_list", null=True)
    for name, test_file in (doc.get(data, "testFiles", "dict", null=True) or {}).items():
        at = doc["testFiles"][name]
        at.need_dict(test_file)
        for i, test in enumerate(at.get(test_file, "tests", "list", [])):
            t = at["tests"][i]
            t.need_dict(test)
            if "id" not in test:
                t.fail("no id")
            t.get(test, "id", "str")
            t.get(test, "name", "str")
    return data


def normalise(report: dict[str, Any], root: Path) -> dict[str, Any]:
    """The report as the bundle keeps it: same mutant run -> same bytes. Timings and the control's provenance
    (config.control: reused from which stored entry, recorded when) dropped, lists in a fixed order,
    projectRoot '.', paths and object addresses scrubbed, and each statusReason cut to its first line (`falsify
    mutants` puts the predictions that turned red there; the rest is test output, with reprs and times, kept in the
    raw report)."""

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        out = {}
        # With its kills named in statusReason, a mutant's killedBy (the tests that failed before the runner
        # stopped early) depends on scheduling: dropped here, kept in the raw report.
        named = str(v.get("statusReason", "")).startswith("red: ")
        for k, x in v.items():
            if k in _TIMING_KEYS or (named and k == "killedBy"):
                continue
            if k == "statusReason":
                out[k] = _first_line(x)
            elif k in _SETS and isinstance(x, list):
                out[k] = sorted(map(str, x))
            elif k in ("mutants", "tests") and isinstance(x, list):
                out[k] = sorted((walk(m) for m in x), key=_by_id)
            else:
                out[k] = walk(x)
        return out

    out: dict[str, Any] = scrub(walk(report), root)
    if isinstance(out.get("config"), dict):
        out["config"] = {k: v for k, v in out["config"].items() if k not in _RUN_PROVENANCE}
    if "projectRoot" in out:
        out["projectRoot"] = "."
    return out


def _by_id(entry: Any) -> str:
    return str(entry.get("id", "")) if isinstance(entry, dict) else ""


def _first_line(value: Any) -> Any:
    return value.split("\n", 1)[0] if isinstance(value, str) else value


def outcomes(
    report: dict[str, Any], corpus: Corpus, results: dict[str, Any], root: Path
) -> list[MutantOutcome]:
    test_names: dict[str, str] = {}
    for test_file in (report.get("testFiles") or {}).values():
        for t in test_file.get("tests", []):
            test_names[str(t["id"])] = str(t.get("name", t["id"]))
    bound = {nid: r.get("predictions", []) for nid, r in results.get("tests", {}).items()}
    specs = {m.id: m for m in corpus.mutants}
    out = []
    for file_name, entry in sorted(report["files"].items()):
        for m in entry.get("mutants", []):
            try:
                mid, status = str(m["id"]), str(m["status"])
            except KeyError as exc:
                raise EvidenceError(f"mutation report: a mutant in {file_name} has no {exc}") from None
            digest = diff_digest(root, specs.get(mid)) or sha256_bytes(
                canonical(
                    {
                        "file": file_name,
                        "location": m.get("location"),
                        "replacement": m.get("replacement", ""),
                    }
                ).encode()
            )
            killed: set[str] = set()
            if status == "Killed":
                killed = _red_from_reason(m.get("statusReason", ""))
                if not killed:
                    for test_id in m.get("killedBy", []) or []:
                        for name in (str(test_id), test_names.get(str(test_id), "")):
                            killed |= {name} if name.startswith("FALSIFY-") else set(bound.get(name, []))
                    if mid in specs:  # a failing test may check several predictions: credit only the listed
                        killed &= set(specs[mid].kills)
            machine = cannot_show_from_stryker({"files": {file_name: {"mutants": [m]}}})
            out.append(
                MutantOutcome(mid, status, file_name, digest, tuple(sorted(killed)), tuple(sorted(machine)))
            )
    ids = [o.id for o in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise EvidenceError(f"mutation report: mutant id(s) {', '.join(dupes)} appear more than once")
    return sorted(out, key=lambda o: o.id)


def _red_from_reason(reason: str) -> set[str]:
    """`falsify mutants` writes statusReason as "red: P1, P2; listed but green: P3\n<detail>" for a kill."""
    first = reason.split("\n", 1)[0]
    if not first.startswith("red: "):
        return set()
    return {
        p.strip()
        for p in first[len("red: ") :].split(";", 1)[0].split(",")
        if p.strip().startswith("FALSIFY-")
    }


def diff_digest(root: Path, spec: Mutant | None) -> str | None:
    """sha256 of the unified diff the mutant makes to the tree's file, computed with the mutant runner's own
    edits (falsify.mutation.semantic.edits); None when that is not installed or the mutant does not apply."""
    if spec is None:
        return None
    try:
        from falsify.mutation.semantic.edits import apply, edit_of
    except ImportError:
        return None
    try:
        source = (root / spec.file).read_text(encoding="utf-8")
        applied = apply(source, edit_of(spec), spec.file)
        return sha256_bytes(applied.diff(spec.file).encode())
    except Exception:
        # A stale or broken mutant (or a tampered file) has no diff; the report's edit stands in.
        return None
