"""From normalised run results and the working tree to the bundle's bytes: statements, then reports.

`build` is a function of its arguments and the tree's files only: the same tree, results, environment and time
give the same bytes, which is what `verify` relies on when it builds the bundle again and compares.
Statements carry no durations and no absolute path; the one time field is `generatedAt` in the release-report
statement (and the reports that show it). Set SOURCE_DATE_EPOCH to pin it too.
"""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from falsify import evidence as layout  # the bundle's file names and statement types
from falsify.contracts.corpus import Corpus
from falsify.errors import FormulaError
from falsify.evidence import junit
from falsify.evidence.digests import (
    canonical,
    descriptor,
    plain_json,
    pretty,
    scrub,
    sha256_bytes,
    sha256_file,
)
from falsify.evidence.mutation import MutantOutcome, check_report, normalise, outcomes
from falsify.evidence.render import render_reports
from falsify.evidence.tree import (
    EvidenceError,
    Inputs,
    configuration_files,
    digest_files,
    file_name,
    harness_files,
    pack_files,
    source_files,
    weights_files,
)
from falsify.evidence.verdict import decide, junit_totals
from falsify.harness.proven import PredictionProof, expected_killers, proofs
from falsify.harness.results import PredictionResult, check_results, per_prediction, test_counts
from falsify.project import ProjectError, config_file, read_toml, subtable
from falsify.untrusted.boundedjson import Field

# Packages whose versions the environment block names: the harness, the engine's numerics, the oracles. These are
# distribution names, as importlib.metadata looks them up, not import names: the harness imports as `falsify` but
# is distributed as falsify-harness (pyproject.toml: "falsify" on the index is another project), PyYAML as `yaml`.
PACKAGES = (
    "falsify-harness",
    "numpy",
    "pytest",
    "hypothesis",
    "jsonschema",
    "PyYAML",
    "safetensors",
    "libcst",
    "torch",
    "transformers",
    "gguf",
)


@dataclass(frozen=True, slots=True)
class RunResults:
    """One gate run (and optionally one mutant run), normalised: what the bundle's statements are derived from."""

    results: dict[str, Any]  # falsify plugin results.json, durations dropped, paths relative
    junit: bytes  # JUnit XML, durations/timestamp/hostname dropped
    mutation_report: dict[str, Any] | None  # Stryker report, timings dropped; None when no mutant run
    mutants_reason: str  # why there is no mutation report ("" when there is one)
    mutmut_report: dict[str, Any] | None = (
        None  # Stryker report of a `falsify mutmut` run; None when not given
    )
    matrix: dict[str, Any] | None = None  # a `falsify matrix` run's matrix.json; None when not given


def normalise_results(results: dict[str, Any], root: Path, contracts: str) -> dict[str, Any]:
    """Durations dropped; the contracts directory (absolute where the gate ran, maybe elsewhere) made `contracts`,
    relative to the root; the root's absolute path scrubbed from every message."""
    out = scrub(results, root)
    for record in out.get("tests", {}).values():
        record.pop("duration", None)
    if "contracts" in out:
        out["contracts"] = contracts
    result: dict[str, Any] = plain_json(out)
    return result


def normalise_junit(xml: bytes, root: Path, what: str = layout.JUNIT) -> bytes:
    """Drop what differs between two runs of the same tree: time, timestamp, hostname, hypothesis' statistics;
    make paths relative. WHAT names the file in an error (falsify.evidence.junit: bounded, no DOCTYPE)."""
    tree = junit.parse(xml, what)
    junit.totals_of(tree, what)  # the counts the verdict reads: refused here, naming the file given
    for element in tree.iter():
        for key in ("time", "timestamp", "hostname"):
            element.attrib.pop(key, None)
        # Hypothesis records per-test statistics (run times, base64) as properties: timings, not results.
        for properties in element.findall("properties"):
            for prop in properties.findall("property"):
                if prop.get("name", "").startswith("hypothesis-statistics-"):
                    properties.remove(prop)
            if len(properties) == 0:
                element.remove(properties)
    text = ET.tostring(tree, encoding="unicode")
    text = scrub(text, root)
    return ('<?xml version="1.0" encoding="utf-8"?>\n' + text + "\n").encode()


def environment() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": versions,
        "machine": {"system": platform.system(), "release": platform.release(), "arch": platform.machine()},
    }


def statement(
    subject: list[dict[str, Any]], predicate_type: str, predicate: dict[str, Any]
) -> dict[str, Any]:
    return {
        "_type": layout.STATEMENT_TYPE,
        "subject": subject,
        "predicateType": predicate_type,
        "predicate": predicate,
    }


def build(
    root: Path,
    inputs: Inputs,
    corpus: Corpus,
    run: RunResults,
    env: dict[str, Any],
    generated_at: str,
    source: dict[str, Any] | None = None,
    weights: tuple[list[dict[str, Any]], str] | None = None,
) -> dict[str, bytes]:
    """Every file of the bundle, name -> bytes.

    source: the git commit, tag and dirty flag the run was made on (`git_source`); recorded, not re-derived, like
    generated_at, so a bundle verifies after later commits.
    weights: the weights' descriptors and note as `verify` found them from the bundle's names; None locates them
    through the engine (`evidence`)."""
    # `verify` builds from the bundle's own files: every field read below is type-checked first, by file and field.
    check_results(run.results, layout.RESULTS)
    for name, raw in (
        (layout.MUTATION_REPORT, run.mutation_report),
        (layout.MUTMUT_REPORT, run.mutmut_report),
    ):
        if raw is not None:
            check_report(raw, name)
    files: dict[str, bytes] = {layout.JUNIT: run.junit, layout.RESULTS: pretty(run.results).encode()}
    # Outcomes come from the report as the bundle keeps it, so that `verify` reads exactly what `evidence` read.
    report = normalise(run.mutation_report, root) if run.mutation_report is not None else None
    if report is not None:
        files[layout.MUTATION_REPORT] = pretty(report).encode()
    mutmut_report = normalise(run.mutmut_report, root) if run.mutmut_report is not None else None
    if mutmut_report is not None:
        files[layout.MUTMUT_REPORT] = pretty(mutmut_report).encode()
    matrix = normalise_matrix(run.matrix, root) if run.matrix is not None else None
    if matrix is not None:
        files[layout.MATRIX] = pretty(matrix).encode()
    reports = [descriptor(name, sha256_bytes(files[name])) for name in sorted(files)]

    rows = per_prediction(corpus, run.results)
    mutants = outcomes(report, corpus, run.results, root) if report is not None else []
    declared = sorted(m.id for m in corpus.mutants)
    mutant_summary = {
        "run": report is not None,
        "reason": run.mutants_reason,
        "declared": declared,
        "results": [m.as_json() for m in mutants],
    }
    proved = proofs(
        corpus,
        {m.id: m.killed for m in mutants} if report is not None else None,
        {p for m in mutants for p in m.cannot_show},
    )
    proof_input = {
        r.id: {
            "outcome": r.outcome.value,
            "proven": proved[r.id].status.value,
            "because": proved[r.id].because,
        }
        for r in rows
    }
    verdict = decide(
        [r.outcome.value for r in rows],
        junit_totals(run.junit),
        mutant_summary,
        proof_input,
        pytest_counts=test_counts(run.results),
    )

    if weights is None:
        located, weights_note = weights_files(root, inputs.engine)
        weights = (
            [descriptor(name, sha256_file(path), **{"falsify.role": "weights"}) for name, path in located],
            weights_note,
        )
    weight_subjects, weights_note = weights
    subjects = digest_files(root, [(name, "engine-source") for name in source_files(root, inputs.sources)])
    subjects += weight_subjects
    configuration = digest_files(root, configuration_files(root, inputs))
    configuration += [
        descriptor(name, sha256_file(path), **_pack_annotations(name, role))
        for name, role, path in pack_files(root)
    ]
    configuration += [
        descriptor(name, sha256_file(path), **{"falsify.role": role})
        for name, role, path in harness_files(root)
        if name not in {d["name"] for d in configuration}
    ]
    configuration.sort(key=lambda d: d["name"])

    tests = run.results.get("tests", {})
    by_outcome: dict[str, list[str]] = {"passed": [], "failed": [], "error": [], "skipped": [], "not run": []}
    for nid, record in sorted(tests.items()):
        by_outcome.setdefault(record.get("outcome", "not run"), []).append(nid)
    gate_ok = _gate_ok(verdict)
    test_result = statement(
        subjects,
        layout.TEST_RESULT_TYPE,
        {
            "result": "PASSED" if gate_ok else "FAILED",
            "configuration": configuration,
            "passedTests": by_outcome["passed"],
            "warnedTests": [],
            "failedTests": by_outcome["failed"] + by_outcome["error"] + by_outcome.get("timeout", []),
            # Extension fields (consumers ignore unknown fields, in-toto parsing rules):
            "skippedTests": by_outcome["skipped"],
            "reports": [d for d in reports if d["name"] in (layout.JUNIT, layout.RESULTS)],
        },
    )

    contract_evidence = statement(
        subjects,
        layout.CONTRACT_EVIDENCE_TYPE,
        {
            "inputs": inputs.as_json(),
            "verdict": verdict,
            "contracts": [_contract_entry(root, c) for c in corpus.contracts],
            "source": source if source is not None else {"commit": None, "tag": None, "dirty": None},
            "predictions": [
                _prediction_entry(root, corpus, r, mutants, tests) | _proof_entry(proved[r.id]) for r in rows
            ],
            "mutants": {
                "run": mutant_summary["run"],
                "reason": run.mutants_reason,
                "declared": declared,
                "results": mutant_summary["results"],
            },
            "mutmut": mutmut_summary(mutmut_report, root) if mutmut_report is not None else None,
            "matrix": matrix_summary(matrix) if matrix is not None else None,
            "weights": weights_note,
            "reports": reports,
            "environment": env,
        },
    )
    lines = [canonical(test_result), canonical(contract_evidence)]
    # Reports are rendered from the statements as written (keys sorted), exactly what `verify` reads back.
    test_result, contract_evidence = (json.loads(line) for line in lines)
    rendered = render_reports(test_result, contract_evidence, generated_at)
    files.update(rendered)
    release = statement(
        [descriptor(name, sha256_bytes(data)) for name, data in rendered.items()],
        layout.RELEASE_REPORT_TYPE,
        {
            "generatedAt": generated_at,
            "decision": verdict["decision"],
            "summary": verdict["summary"],
            "statements": [
                {"line": i + 1, "predicateType": t, "digest": {"sha256": sha256_bytes(line.encode())}}
                for i, (t, line) in enumerate(
                    zip((layout.TEST_RESULT_TYPE, layout.CONTRACT_EVIDENCE_TYPE), lines, strict=True)
                )
            ],
        },
    )
    lines.append(canonical(release))
    files[layout.STATEMENTS] = ("\n".join(lines) + "\n").encode()
    return files


def normalise_matrix(document: Any, root: Path) -> dict[str, Any]:
    """A `falsify matrix` document as the bundle keeps it: engines, per-prediction outcomes and details, per-engine
    summaries; paths scrubbed. Anything else is an EvidenceError naming the field."""
    if not isinstance(document, dict):
        raise EvidenceError("matrix: not a JSON object (expected a falsify matrix matrix.json)")
    engines = document.get("engines")
    predictions = document.get("predictions")
    if not isinstance(engines, list) or not all(isinstance(e, str) for e in engines):
        raise EvidenceError("matrix: `engines` must be a list of engine names")
    if not isinstance(predictions, list):
        raise EvidenceError("matrix: `predictions` must be a list")
    rows = []
    for i, p in enumerate(predictions):
        if (
            not isinstance(p, dict)
            or not isinstance(p.get("id"), str)
            or not isinstance(p.get("outcomes"), dict)
        ):
            raise EvidenceError(f"matrix: predictions[{i}] needs an `id` and `outcomes`")
        details = Field("matrix", f"predictions[{i}]").get(p, "details", "dict", null=True) or {}
        rows.append(
            {
                "id": p["id"],
                "contract": str(p.get("contract", "")),
                "outcomes": {e: str(p["outcomes"].get(e, "NOT RUN")) for e in engines},
                "details": {e: str(details.get(e, "")) for e in engines},
            }
        )
    raw = document.get("summaries")
    summaries: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: dict[str, Any] = scrub(
        {
            "engines": engines,
            "predictions": rows,
            "summaries": {e: str(summaries.get(e, "")) for e in engines},
        },
        root,
    )
    return out


def matrix_summary(matrix: dict[str, Any]) -> dict[str, Any]:
    """Predictions x engines outcomes and per-engine counts, for the report's table."""
    engines = matrix["engines"]
    counts: dict[str, dict[str, int]] = {e: {} for e in engines}
    for p in matrix["predictions"]:
        for e in engines:
            o = p["outcomes"][e]
            counts[e][o] = counts[e].get(o, 0) + 1
    return {
        "engines": engines,
        "outcomes": {p["id"]: p["outcomes"] for p in matrix["predictions"]},
        "counts": counts,
    }


def mutmut_summary(report: dict[str, Any], root: Path) -> dict[str, Any]:
    """Counts of a mutmut Stryker report's statuses and the project's kill-rate floor, for the report's figure.

    killed = Killed; survived = Survived; timeout = Timeout; no_tests = NoCoverage; other = anything else.
    floor: [tool.falsify.mutmut] kill_rate_floor (a fraction, or a percentage above 1) in pyproject.toml, or None.
    sample: [K, N] when the run drew sample K of N (falsify mutmut --sample; the mutants outside it are Ignored,
    so the counts are the sample's), else None.
    """

    names = {"Killed": "killed", "Survived": "survived", "Timeout": "timeout", "NoCoverage": "no_tests"}
    counts = {"killed": 0, "survived": 0, "timeout": 0, "no_tests": 0, "other": 0}
    raw_files = report.get("files")
    files: dict[str, Any] = raw_files if isinstance(raw_files, dict) else {}
    for entry in files.values():
        for m in entry.get("mutants", []) if isinstance(entry, dict) else []:
            counts[names.get(str(m.get("status")) if isinstance(m, dict) else "", "other")] += 1
    floor = None
    try:
        path = config_file(root)
        raw = (subtable(read_toml(path), path, "tool", "falsify", "mutmut") or {}).get("kill_rate_floor")
        if isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= 100:
            floor = raw / 100 if raw > 1 else raw
    except ProjectError:
        floor = None
    config = report.get("config")
    drawn = config.get("sample") if isinstance(config, dict) else None
    sample = None
    if isinstance(drawn, list) and len(drawn) == 2 and all(type(x) is int for x in drawn):
        sample = drawn if 1 <= drawn[0] <= drawn[1] else None
    return {**counts, "floor": floor, "sample": sample}


def git_source(root: Path) -> dict[str, Any]:
    """The commit, an exact tag and whether tracked or untracked-but-not-ignored files differ from it."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "tag": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=normal")
    return {
        "commit": commit,
        "tag": git("describe", "--tags", "--exact-match", "HEAD") or None,
        "dirty": None if status is None else bool(status),
    }


def _proof_entry(proof: PredictionProof) -> dict[str, Any]:
    entry: dict[str, Any] = {"proven": proof.status.value, "expectedMutants": list(proof.expected)}
    if proof.because:
        entry["unprovenBecause"] = proof.because
    return entry


def _gate_ok(verdict: dict[str, Any]) -> bool:
    """The falsifier side of the verdict alone (test-result's PASSED/FAILED): predictions and JUnit, not mutants."""
    p, t = verdict["predictions"], verdict["tests"]
    return (
        p["total"] > 0
        and p["PASS"] > 0
        and not (p["FAIL"] or p["ERROR"] or p["NOT RUN"])
        and not (t["failures"] or t["errors"])
    )


def _pack_annotations(name: str, role: str) -> dict[str, str]:
    """A pack file's role, and for an installed pack the distribution, version and path inside the package."""
    from falsify.contracts.packs import PackFile

    shipped = PackFile.parse(name)
    out = {"falsify.role": role}
    if shipped is not None:
        from falsify.contracts.pack_record import check

        out |= {
            "falsify.distribution": shipped.distribution,
            "falsify.version": shipped.version,
            "falsify.path": shipped.path,
            "falsify.record": check(shipped.pack).record,  # the RECORD check (issue #48); verify repeats it
        }
    return out


def _contract_entry(root: Path, c: Any) -> dict[str, Any]:
    return {
        "id": c.id,
        "version": c.version,
        "title": c.title,
        "file": file_name(root, c.file),
        "digest": {"sha256": c.sha256},
    }


def _prediction_entry(
    root: Path,
    corpus: Corpus,
    r: PredictionResult,
    mutants: list[MutantOutcome],
    tests: dict[str, Any],
) -> dict[str, Any]:
    p = corpus.predictions[r.id]
    contract = corpus.contract_of(r.id)
    values = scrub(plain_json(r.values), root) if r.values is not None else None
    costs = []
    for c in contract.costs:
        if c.checked_by != r.id:
            continue
        measured = {n: values[n] for n in c.formula.names if values and n in values}
        held: bool | None = None
        if len(measured) == len(c.formula.names):
            try:
                result = c.formula.evaluate(measured)
                held = result if isinstance(result, bool) else None
            except FormulaError:
                held = None
        costs.append(
            {
                "name": c.name,
                "formula": c.formula.source,
                "per": c.per,
                "unit": c.unit,
                "measured": measured,
                "held": held,
            }
        )
    by_id = {m.id: m for m in mutants}
    declared = []
    # The mutants that must turn it red here: a pack prediction's `mutants:` name bugs planted in falsify's
    # reference, which an adopter's project holds none of (issue #46: its kill matrix carried the reference's 33
    # pack mutants as NOT RUN columns); the project's own that list it in `kills` are its mutants.
    for mid in expected_killers(corpus, r.id):
        m = by_id.get(mid)
        declared.append(
            {
                "id": mid,
                "status": m.status if m else "NOT RUN",
                "diffDigest": {"sha256": m.diff_sha256} if m else None,
            }
        )
    killed = [
        {"id": m.id, "diffDigest": {"sha256": m.diff_sha256}, "kind": m.kind}
        for m in mutants
        if r.id in m.killed
    ]
    # A boundary mutant (falsify's wrapper around the engine) shows the check reaches this engine and fails on the
    # bug class, not that the engine's source is tested: the weaker proof is named as such.
    proven_by = (
        {}
        if not killed
        else {"provenBy": "source" if any(k["kind"] == "source" for k in killed) else "boundary"}
    )
    return {
        "id": r.id,
        "contract": contract.id,
        "contractDigest": {"sha256": contract.sha256},
        "claim": p.claim,
        "formula": p.formula.source,
        "domain": plain_json(p.domain),
        "tests": list(r.tests),
        "skippedTests": [
            {"test": nid, "reason": scrub(str(tests[nid].get("message", "")), root)}
            for nid in r.tests
            if isinstance(tests.get(nid), dict) and tests[nid].get("outcome") == "skipped"
        ],
        "failingTests": list(r.failing_tests),
        "outcome": r.outcome.value,
        "detail": scrub(r.detail, root),
        "checks": r.checks,
        "corners": {"declared": list(r.corners), "reached": list(r.corners_reached)},
        "values": values,
        "costs": costs,
        "mutants": declared,
        "mutantsKilled": killed,
        **proven_by,
    }
