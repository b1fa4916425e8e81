"""`falsify verify DIR`: recompute every digest a bundle records, against the working tree and the bundle's own
files, then build the bundle again from its results and compare, which re-derives the verdict.

Every problem names the file it is about. Nothing here trusts the statements' own claims: outcomes, verdict and
reports are recomputed from results.json, junit.xml and the mutation report, whose digests the statements pin.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from falsify.contracts.corpus import load_corpus
from falsify.evidence import (
    CONTRACT_EVIDENCE_TYPE,
    JUNIT,
    MUTATION_REPORT,
    MUTMUT_REPORT,
    RELEASE_REPORT_TYPE,
    REPORT_HTML,
    REPORT_MD,
    RESULTS,
    STATEMENTS,
    TEST_RESULT_TYPE,
)
from falsify.evidence.digests import sha256_bytes, sha256_file
from falsify.evidence.render import figures, render_html, render_markdown
from falsify.evidence.statements import RunResults, build
from falsify.evidence.tree import EvidenceError, Inputs, configuration_files, source_files, weights_files

# The in-toto Statement v1 shape (attestation spec v1, statement.md): what every line must be.
STATEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["_type", "subject", "predicateType", "predicate"],
    "properties": {
        "_type": {"const": "https://in-toto.io/Statement/v1"},
        "subject": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "digest"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "digest": {
                        "type": "object",
                        "minProperties": 1,
                        "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]+$"},
                        "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                    },
                    "annotations": {"type": "object"},
                },
            },
        },
        "predicateType": {"type": "string", "format": "uri", "pattern": "^https://"},
        "predicate": {"type": "object"},
    },
}


def shape_problems(statement: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(STATEMENT_SCHEMA)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(statement)'}: {e.message}"
        for e in sorted(validator.iter_errors(statement), key=lambda e: list(map(str, e.absolute_path)))
    ]


@dataclass(slots=True)
class Verification:
    problems: list[str] = field(default_factory=list)
    checked: int = 0  # files whose digest was recomputed
    verdict: dict[str, Any] | None = None  # re-derived

    def digest(self, name: str, recorded: str, actual: str | None, where: str) -> None:
        self.checked += 1
        if actual is None:
            self.problems.append(f"{name}: missing ({where} records sha256 {recorded[:16]}…)")
        elif actual != recorded:
            self.problems.append(
                f"{name}: sha256 changed ({where}): recorded {recorded[:16]}…, now {actual[:16]}…"
            )


def read_statements(bundle: Path) -> tuple[list[bytes], dict[str, dict[str, Any]]]:
    path = bundle / STATEMENTS
    if not path.is_file():
        raise EvidenceError(f"{path}: no such file (is {bundle} an evidence bundle?)")
    lines = path.read_bytes().splitlines()
    by_type: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        try:
            stmt = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvidenceError(f"{STATEMENTS} line {i}: not JSON ({exc})") from None
        problems = shape_problems(stmt)
        if problems:
            raise EvidenceError(f"{STATEMENTS} line {i}: not an in-toto Statement v1: {'; '.join(problems)}")
        if stmt["predicateType"] in by_type:
            raise EvidenceError(f"{STATEMENTS} line {i}: a second {stmt['predicateType']} statement")
        by_type[stmt["predicateType"]] = stmt
    missing = [t for t in (TEST_RESULT_TYPE, CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE) if t not in by_type]
    if missing:
        raise EvidenceError(f"{STATEMENTS}: no statement of type {', '.join(missing)}")
    return lines, by_type


def verify(bundle: Path, root: Path) -> Verification:
    lines, by_type = read_statements(bundle)
    test_result, evidence, release = (
        by_type[t] for t in (TEST_RESULT_TYPE, CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE)
    )
    ev = evidence["predicate"]
    v = Verification()

    # 1. The bundle's own files, and the statement lines the release statement pins.
    def bundle_digest(name: str) -> str | None:
        path = bundle / name
        return sha256_file(path) if path.is_file() else None

    for d in release["subject"] + ev.get("reports", []):
        v.digest(d["name"], d["digest"]["sha256"], bundle_digest(d["name"]), "bundle file")
    for entry in release["predicate"].get("statements", []):
        n = entry["line"]
        actual = sha256_bytes(lines[n - 1]) if 0 < n <= len(lines) else None
        v.digest(f"{STATEMENTS} line {n}", entry["digest"]["sha256"], actual, "release-report statement")

    # 2. The working tree: engine sources, weights, contracts and the rest of the configuration.
    inputs = Inputs.from_json(ev["inputs"])
    recorded = {d["name"]: d for d in test_result["subject"] + test_result["predicate"]["configuration"]}
    now: dict[str, tuple[str, Path]] = {
        name: ("engine source", root / name) for name in source_files(root, inputs.sources)
    }
    now.update({name: ("configuration", root / name) for name, _ in configuration_files(root, inputs)})
    try:
        weights, _ = weights_files(root, inputs.engine)
    except EvidenceError as exc:
        v.problems.append(f"weights: cannot locate them through engine {inputs.engine!r}: {exc}")
        weights = [
            (d["name"], root / "\0missing")
            for d in test_result["subject"]
            if d.get("annotations", {}).get("falsify.role") == "weights"
        ]
    now.update({name: ("weights", path) for name, path in weights})
    for name, d in sorted(recorded.items()):
        path = now[name][1] if name in now else root / name
        v.digest(name, d["digest"]["sha256"], sha256_file(path) if path.is_file() else None, "working tree")
    for name in sorted(set(now) - set(recorded)):
        v.problems.append(f"{name}: {now[name][0]} not in the evidence (added since the bundle was written)")
    # Contract digests inside the evidence predicate must be the files' digests too.
    for c in ev.get("contracts", []):
        if c["file"] in recorded:
            continue
        path = root / c["file"]
        v.digest(
            c["file"],
            c["digest"]["sha256"],
            sha256_file(path) if path.is_file() else None,
            f"contract {c['id']}",
        )

    # 3. Build the bundle again from its results and the tree; it must come out byte for byte the same.
    results_path, junit_path = bundle / RESULTS, bundle / JUNIT
    if not (results_path.is_file() and junit_path.is_file()):
        v.problems.append(
            f"{RESULTS if not results_path.is_file() else JUNIT}: missing, cannot re-derive the verdict"
        )
        return v
    report = None
    if ev["mutants"]["run"]:
        if not (bundle / MUTATION_REPORT).is_file():
            v.problems.append(f"{MUTATION_REPORT}: missing, cannot re-derive the mutant outcomes")
            return v
        report = _json(bundle / MUTATION_REPORT, v)
        if report is None:
            return v
    corpus = load_corpus(
        [root / inputs.contracts] + ([root / inputs.mutants] if (root / inputs.mutants).is_dir() else [])
    )
    if corpus.problems:
        v.problems += [f"{p} (contracts no longer lint)" for p in corpus.problems]
        return v
    results = _json(results_path, v)
    if results is None:
        return v
    mutmut_report = None
    if ev.get("mutmut") is not None:
        if not (bundle / MUTMUT_REPORT).is_file():
            v.problems.append(f"{MUTMUT_REPORT}: missing, cannot re-derive the mutmut summary")
            return v
        mutmut_report = _json(bundle / MUTMUT_REPORT, v)
        if mutmut_report is None:
            return v
    run = RunResults(results, junit_path.read_bytes(), report, ev["mutants"].get("reason", ""), mutmut_report)
    try:
        rebuilt = build(
            root,
            inputs,
            corpus,
            run,
            ev["environment"],
            release["predicate"]["generatedAt"],
            ev.get("source"),
        )
    except (EvidenceError, KeyError, ValueError, TypeError, AttributeError, ET.ParseError) as exc:
        v.problems.append(f"{STATEMENTS}: the bundle cannot be rebuilt from its results ({exc})")
        return v
    fresh = [json.loads(line) for line in rebuilt[STATEMENTS].splitlines()]
    v.verdict = fresh[1]["predicate"]["verdict"]
    for i, (old, new) in enumerate(zip(lines, rebuilt[STATEMENTS].splitlines(), strict=False), 1):
        if old != new:
            where = [p for p in json_diff(json.loads(old), json.loads(new)) if not _covered(p)]
            if where:
                v.problems.append(
                    f"{STATEMENTS} line {i}: differs from the statement the bundle's results and the "
                    f"tree give: {'; '.join(where[:5])}" + (" …" if len(where) > 5 else "")
                )
    # The reports must say what the recorded statements say (the tree's part is checked above, by digest).
    generated = release["predicate"]["generatedAt"]
    drawn = figures(ev)
    expected = {
        REPORT_MD: render_markdown(test_result, evidence, generated, drawn).encode(),
        REPORT_HTML: render_html(test_result, evidence, generated, drawn).encode(),
        **{name: svg.encode() for name, (svg, _) in drawn.items()},
    }
    for name, data in expected.items():
        path = bundle / name
        named = any(p.startswith(f"{name}:") for p in v.problems)
        if not named and (not path.is_file() or path.read_bytes() != data):
            v.problems.append(
                f"{name}: does not say what the statements say (rendered again from them, it differs)"
            )
    return v


def _json(path: Path, v: Verification) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        v.problems.append(f"{path.name}: not valid JSON ({exc}); the verdict cannot be re-derived")
        return None


def _covered(path: str) -> bool:
    """Differences that the digest checks above already named file by file."""
    return (
        path.startswith(("subject", "predicate.configuration", "predicate.statements", "predicate.contracts"))
        or "Digest" in path
        or ".digest" in path
    )


def json_diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as `path: recorded X, re-derived Y`."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                out.append(f"{sub}: {'only recorded' if k in a else 'only re-derived'}")
            else:
                out += json_diff(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_diff(x, y, f"{path}[{i}]")]
    if a != b:
        return [f"{path}: recorded {_short(a)}, re-derived {_short(b)}"]
    return []


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
