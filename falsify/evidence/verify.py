"""`falsify verify DIR`: recompute every digest a bundle records, against the working tree and the bundle's own
files, then build the bundle again from its results and compare, which re-derives the verdict.

Every problem names the file it is about. Nothing here trusts the statements' own claims: outcomes, verdict and
reports are recomputed from results.json, junit.xml and the mutation report, whose digests the statements pin.
"""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from falsify.contracts.corpus import contract_dirs, load_corpus
from falsify.contracts.pack_record import PackTampered
from falsify.errors import FalsifyError
from falsify.evidence import (
    CONTRACT_EVIDENCE_TYPE,
    JUNIT,
    MATRIX,
    MUTATION_REPORT,
    MUTMUT_REPORT,
    RELEASE_REPORT_TYPE,
    RESULTS,
    SIGNATURES,
    STATEMENT_TYPE,
    STATEMENTS,
    TEST_RESULT_TYPE,
)
from falsify.evidence.digests import descriptor, sha256_bytes, sha256_file
from falsify.evidence.render import render_reports
from falsify.evidence.statements import RunResults, build
from falsify.evidence.tree import (
    EvidenceError,
    Inputs,
    configuration_files,
    harness_files,
    pack_files,
    recorded_weights,
    source_files,
)
from falsify.harness.proven import report_engine
from falsify.project import CONFIG_FILES, find_project
from falsify.untrusted import boundedjson, safefile

MAX_JSON_BYTES = 256 << 20  # a bundle's statements, results and reports are parsed whole: bounded first

# The in-toto Statement v1 shape (attestation spec v1, statement.md): what every line must be.
STATEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["_type", "subject", "predicateType", "predicate"],
    "properties": {
        "_type": {"const": STATEMENT_TYPE},
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


def statement_lines(bundle: Path, limit: int = MAX_JSON_BYTES) -> list[bytes]:
    """The lines of BUNDLE's statements file, read through the file layer (at most LIMIT bytes); an EvidenceError
    naming the directory or the file otherwise."""
    path = bundle / STATEMENTS
    if not bundle.is_dir():
        raise EvidenceError(f"{bundle}: not a directory")
    if path.is_symlink():
        raise EvidenceError(f"{path}: a symlink; a bundle holds only regular files")
    if not os.path.lexists(path):
        raise EvidenceError(f"{path}: no such file (is {bundle} an evidence bundle?)")
    try:
        return safefile.read_bytes(path, limit=limit, what="statements file").splitlines()
    except safefile.FileLayerError as exc:
        raise EvidenceError(str(exc)) from None


def read_statements(bundle: Path) -> tuple[list[bytes], dict[str, dict[str, Any]]]:
    lines = statement_lines(bundle)
    by_type: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        try:
            stmt = boundedjson.loads(line, what=f"{STATEMENTS} line {i}", max_bytes=MAX_JSON_BYTES)
        except boundedjson.JsonFormatError as exc:
            raise EvidenceError(str(exc)) from None
        problems = shape_problems(stmt)
        if problems:
            shown = "; ".join(" ".join(p.split())[:160] for p in problems[:3])
            raise EvidenceError(f"{STATEMENTS} line {i}: not an in-toto Statement v1: {shown}")
        if stmt["predicateType"] in by_type:
            raise EvidenceError(f"{STATEMENTS} line {i}: a second {stmt['predicateType']} statement")
        by_type[stmt["predicateType"]] = stmt
    missing = [t for t in (TEST_RESULT_TYPE, CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE) if t not in by_type]
    if missing:
        raise EvidenceError(f"{STATEMENTS}: no statement of type {', '.join(missing)}")
    return lines, by_type


def verify(bundle: Path, root: Path) -> Verification:
    """Every problem with the bundle, never an exception for bad content (a tampered bundle is data too)."""
    v = Verification()
    try:
        _verify(bundle, root, v)
    except EvidenceError:
        raise
    except (
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
        RecursionError,
        ET.ParseError,
    ) as exc:
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        v.problems.append(
            f"{STATEMENTS}: malformed, a field the statements must have is wrong or missing ({what})"
        )
    except OSError as exc:
        v.problems.append(f"{exc.filename or bundle}: cannot read ({exc.strerror})")
    return v


def _verify(bundle: Path, root: Path, v: Verification) -> None:
    lines, by_type = read_statements(bundle)
    test_result, evidence, release = (
        by_type[t] for t in (TEST_RESULT_TYPE, CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE)
    )
    ev = evidence["predicate"]

    # 0. The bundle holds exactly its files: regular files, no link, nothing extra, no name that leaves it.
    allowed = {STATEMENTS, RESULTS, JUNIT}
    allowed |= {d["name"] for d in release["subject"] + ev.get("reports", [])}
    if ev["mutants"]["run"]:
        allowed.add(MUTATION_REPORT)
    if ev.get("mutmut") is not None:
        allowed.add(MUTMUT_REPORT)
    if ev.get("matrix") is not None:
        allowed.add(MATRIX)
    allowed.add(SIGNATURES)  # optional: the DSSE envelopes, checked by `verify --key`
    unsafe = sorted(n for n in allowed if not _plain_name(n))
    for name in unsafe:
        v.problems.append(f"{name}: not a plain file name inside the bundle (a statement names it)")
    allowed -= set(unsafe)
    found = _bundle_listing(bundle, v)
    for name in sorted(set(found) - allowed):
        v.problems.append(f"{name}: in the bundle but not part of it (no statement names it)")

    def bundle_digest(name: str) -> str | None:
        if name not in allowed or found.get(name) != "file":
            return None  # missing, a link, or a name no statement may use: never read
        return sha256_file(bundle / name)

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
    # The weights come from the names the bundle records (in the tree or a declared weights directory), never
    # from the engine: verify imports no project code (issue #27). Read through the file layer: regular files only.
    weights = recorded_weights(root, test_result["subject"])
    weight_digests = {name: _weight_digest(path, v) for name, path in weights}
    now.update({name: ("weights", path) for name, path in weights if path is not None})
    try:  # each installed pack held to its distribution's RECORD again (issue #48)
        now.update({name: (f"pack {role}", path) for name, role, path in pack_files(root)})
    except PackTampered as exc:
        v.problems.append(str(exc))
        return
    now.update({name: (role, path) for name, role, path in harness_files(root) if name not in now})
    renamed = _pack_versions(recorded, now, v)
    for name, d in sorted(recorded.items()):
        if name in renamed:
            continue
        # Only a name the tree itself gives is read: an invented subject (`/etc/hostname`, `../x`) is missing.
        path = now[name][1] if name in now else None
        if name in weight_digests:
            actual = weight_digests[name]
        else:
            actual = sha256_file(path) if path is not None and path.is_file() else None
        v.digest(name, d["digest"]["sha256"], actual, "working tree")
    for name in sorted(set(now) - set(recorded) - set(renamed.values())):
        v.problems.append(f"{name}: {now[name][0]} not in the evidence (added since the bundle was written)")
    # Contract digests inside the evidence predicate must be the files' digests too.
    for c in ev.get("contracts", []):
        if c["file"] in recorded:
            continue
        path = root / c["file"]
        if not _inside(root, c["file"]):
            v.problems.append(f"{c['file']}: contract {c['id']} names a file outside the project")
            continue
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
        return
    readable, report = _recorded(bundle, MUTATION_REPORT, ev["mutants"]["run"], "the mutant outcomes", v)
    if not readable:
        return
    # The corpus `falsify evidence` read: the project's contracts, its packs' (pyproject.toml, which names the
    # packs, is pinned among the configuration digests), and its mutants.
    dirs = (
        contract_dirs(find_project(root))
        if any((root / name).is_file() for name in CONFIG_FILES)
        else [root / inputs.contracts]
    )
    corpus = load_corpus(dirs + ([root / inputs.mutants] if (root / inputs.mutants).is_dir() else []))
    if corpus.problems:
        v.problems += [f"{p} (contracts no longer lint)" for p in corpus.problems]
        return
    results = _json(results_path, v)
    if results is None:
        return
    readable, mutmut_report = _recorded(
        bundle, MUTMUT_REPORT, ev.get("mutmut") is not None, "the mutmut summary", v
    )
    if not readable:
        return
    readable, matrix = _recorded(bundle, MATRIX, ev.get("matrix") is not None, "the engines matrix", v)
    if not readable:
        return
    junit = _bytes(junit_path, v)
    if junit is None:
        return
    # Results and mutants of another engine say nothing about the one the evidence names (`evidence` refuses them).
    made_on = {RESULTS: results.get("engine") if isinstance(results, dict) else None}
    made_on[MUTATION_REPORT] = report_engine(report) if isinstance(report, dict) else None
    for name, engine in made_on.items():
        if isinstance(engine, str) and engine != inputs.engine:
            v.problems.append(
                f"{name}: made on engine {boundedjson.show(engine)}, the evidence names engine "
                f"{boundedjson.show(inputs.engine)}"
            )
    run = RunResults(results, junit, report, ev["mutants"].get("reason", ""), mutmut_report, matrix)
    try:
        rebuilt = build(
            root,
            inputs,
            corpus,
            run,
            ev["environment"],
            release["predicate"]["generatedAt"],
            ev.get("source"),
            (
                [
                    descriptor(
                        name, weight_digests[name] or recorded[name]["digest"]["sha256"], **WEIGHTS_ROLE
                    )
                    if name in recorded
                    else descriptor(name, weight_digests[name] or "", **WEIGHTS_ROLE)
                    for name, _ in weights
                ],
                ev["weights"] if isinstance(ev.get("weights"), str) else "",
            ),
        )
    except (
        FalsifyError
    ) as exc:  # a results file or report of the wrong shape: the message names file and field
        v.problems.append(f"the bundle cannot be rebuilt from its results: {exc}")
        return
    except (KeyError, ValueError, TypeError, AttributeError, ET.ParseError) as exc:
        v.problems.append(f"{STATEMENTS}: the bundle cannot be rebuilt from its results ({exc})")
        return
    fresh = [json.loads(line) for line in rebuilt[STATEMENTS].splitlines()]
    v.verdict = fresh[1]["predicate"]["verdict"]
    if len(lines) != len(fresh):
        v.problems.append(
            f"{STATEMENTS}: {len(lines)} lines, where the bundle's results and the tree give {len(fresh)}"
        )
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
    for name, data in render_reports(test_result, evidence, generated).items():
        path = bundle / name
        named = any(p.startswith(f"{name}:") for p in v.problems)
        if not named and (not path.is_file() or _bytes(path, v) != data):
            v.problems.append(
                f"{name}: does not say what the statements say (rendered again from them, it differs)"
            )


def _pack_versions(
    recorded: dict[str, Any], now: dict[str, tuple[str, Path]], v: Verification
) -> dict[str, str]:
    """A pack file recorded from one installed version that the environment now holds at another: one problem
    naming both versions and whether the file's bytes changed. Returns recorded name -> installed name."""
    from falsify.contracts.packs import PackFile

    installed = {
        (f.distribution, f.path): (name, f) for name in now if (f := PackFile.parse(name)) is not None
    }
    renamed = {}
    for name, d in sorted(recorded.items()):
        was = PackFile.parse(name)
        if was is None or name in now or (was.distribution, was.path) not in installed:
            continue
        current, is_ = installed[(was.distribution, was.path)]
        renamed[name] = current
        v.checked += 1
        same = sha256_file(now[current][1]) == d["digest"]["sha256"]
        v.problems.append(
            f"{was.path}: recorded from {was.distribution} {was.version}, installed is {is_.distribution} "
            f"{is_.version} ({'same bytes' if same else 'sha256 changed'})"
        )
    return renamed


WEIGHTS_ROLE = {"falsify.role": "weights"}


def _weight_digest(path: Path | None, v: Verification) -> str | None:
    """The sha256 of a weights file found by recorded_weights; None (missing) when it was not found or cannot be
    read as a regular file (the cause is a problem of its own)."""
    if path is None:
        return None
    try:
        return safefile.sha256(path, what="weights file")
    except safefile.FileLayerError as exc:
        v.problems.append(str(exc))
        return None


def _bytes(path: Path, v: Verification) -> bytes | None:
    try:
        return safefile.read_bytes(path, limit=MAX_JSON_BYTES, what=path.name)
    except safefile.FileLayerError as exc:
        v.problems.append(f"{exc}; the verdict cannot be re-derived")
        return None


def _recorded(bundle: Path, name: str, recorded: bool, derives: str, v: Verification) -> tuple[bool, Any]:
    """(readable, its JSON) of the bundle's file NAME, which the evidence says the run RECORDED; (True, None) when it
    did not. Missing or unreadable: a problem saying what cannot be re-derived (DERIVES), and (False, None)."""
    if not recorded:
        return True, None
    if not (bundle / name).is_file():
        v.problems.append(f"{name}: missing, cannot re-derive {derives}")
        return False, None
    data = _json(bundle / name, v)
    return data is not None, data


def _json(path: Path, v: Verification) -> Any:
    try:
        return boundedjson.loads(
            safefile.read_bytes(path, limit=MAX_JSON_BYTES, what=path.name),
            what=path.name,
            max_bytes=MAX_JSON_BYTES,
        )
    except (safefile.FileLayerError, boundedjson.JsonFormatError) as exc:
        v.problems.append(f"{exc}; the verdict cannot be re-derived")
        return None


def _covered(path: str) -> bool:
    """Differences the digest checks above already named file by file: a digest's value, and nothing else. A
    subject added, dropped or renamed is a difference here (subject lists are compared exactly)."""
    leaf = path.split(":", 1)[0]
    return leaf.endswith((".digest.sha256", "Digest.sha256")) or leaf.endswith("Digest")


def _inside(root: Path, name: Any) -> bool:
    if not isinstance(name, str) or not name or name.startswith("/") or "\x00" in name:
        return False
    return ".." not in Path(name).parts


def _plain_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
    )


def _bundle_listing(bundle: Path, v: Verification) -> dict[str, str]:
    """name -> "file" | what else it is, for every entry of the bundle directory (never following a link)."""
    out: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(bundle), key=lambda e: e.name)
    except OSError as exc:
        v.problems.append(f"{bundle}: cannot list the bundle ({exc.strerror})")
        return out
    for entry in entries:
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            out[entry.name] = "symlink"
            v.problems.append(f"{entry.name}: a symlink; a bundle holds only regular files")
        elif stat.S_ISREG(mode):
            out[entry.name] = "file"
        else:
            out[entry.name] = "not a file"
            v.problems.append(f"{entry.name}: not a regular file; a bundle holds only regular files")
    return out


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
    if isinstance(a, list) and isinstance(b, list):
        if len(a) == len(b):
            return [
                d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_diff(x, y, f"{path}[{i}]")
            ]
        # another length: name the first item that differs (an added or a dropped file, say), not two long lists
        # that print alike up to where they are cut
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        at_a = _item(a[i]) if i < len(a) else "nothing"
        at_b = _item(b[i]) if i < len(b) else "nothing"
        return [
            f"{path}: recorded {len(a)} items, re-derived {len(b)}; first difference at [{i}]: recorded {at_a}, re-derived {at_b}"
        ]
    if a != b:
        return [f"{path}: recorded {_short(a)}, re-derived {_short(b)}"]
    return []


def _item(value: Any) -> str:
    """A list item by its name when it has one (a subject, a file), else its JSON, shortened."""
    if isinstance(value, dict):
        for key in ("name", "uri", "path", "id"):
            if isinstance(value.get(key), str):
                return f"{key} {_short(value[key])}"
    return _short(value)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
