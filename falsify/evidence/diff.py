"""`falsify evidence diff OLD NEW`: what changed between two evidence bundles, release to release.

Both bundles are read as data (their contract-evidence statements); neither is trusted to be well formed, and
neither is verified here: run `falsify verify` (with `--key`) on each first when they come from elsewhere.

Regressions (exit 1): a prediction whose outcome was PASS or NOT APPLICABLE and is now anything else, or that is
gone; a prediction proven (turned red by a mutant) that no longer is; a mutant KILLED before and not now, or gone;
a verdict that went from GO to NO-GO. Changes listed without failing: other outcome changes (e.g. FAIL -> PASS),
new predictions and mutants, a changed engine identity (engine name, source or weights digests), and every
numeric observed value that moved by more than a factor of FACTOR (either way; 0 to non-zero counts as moved).

Exit codes: 0 no regression, 1 at least one regression, 2 a bundle that cannot be read.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from falsify.evidence import CONTRACT_EVIDENCE_TYPE, STATEMENTS
from falsify.evidence.tree import EvidenceError
from falsify.evidence.verify import statement_lines
from falsify.untrusted import boundedjson

FACTOR = 2.0
HELP = "compare two evidence bundles (OLD NEW): changed outcomes, proofs, mutants, engine; exit 1 on a regression"
MAX_STATEMENTS_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Diff:
    regressions: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)


def load_evidence(bundle: Path) -> tuple[dict[str, Any], list[Any]]:
    """(predicate, subjects) of a bundle's contract-evidence statement, or EvidenceError naming the file."""
    path = bundle / STATEMENTS
    for number, line in enumerate(statement_lines(bundle, MAX_STATEMENTS_BYTES), 1):
        try:
            statement = boundedjson.loads(line, what=f"{path}:{number}", max_bytes=MAX_STATEMENTS_BYTES)
        except boundedjson.JsonFormatError as exc:
            raise EvidenceError(str(exc)) from None
        if isinstance(statement, dict) and statement.get("predicateType") == CONTRACT_EVIDENCE_TYPE:
            predicate = statement.get("predicate")
            if not isinstance(predicate, dict) or not isinstance(predicate.get("predictions"), list):
                raise EvidenceError(f"{path}:{number}: contract evidence without a predictions list")
            subject = statement.get("subject")
            return predicate, subject if isinstance(subject, list) else []
    raise EvidenceError(f"{path}: no contract-evidence statement")


def _predictions(evidence: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(p["id"]): p for p in evidence["predictions"] if isinstance(p, dict) and "id" in p}


def _proven(p: dict[str, Any]) -> bool:
    if isinstance(p.get("proven"), bool):
        return bool(p["proven"])
    return bool(p.get("mutantsKilled"))


def _mutants(evidence: dict[str, Any]) -> dict[str, str]:
    mutants = evidence.get("mutants")
    results = mutants.get("results", []) if isinstance(mutants, dict) else []
    return {str(m["id"]): str(m.get("status")) for m in results if isinstance(m, dict) and "id" in m}


def _identity(evidence: dict[str, Any], subjects: list[Any]) -> dict[str, str]:
    raw = evidence.get("inputs")
    inputs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out = {"engine": str(inputs.get("engine"))}
    for d in subjects:
        if isinstance(d, dict) and isinstance(d.get("digest"), dict):
            out[str(d.get("name"))] = str(d["digest"].get("sha256"))
    return out


def _numbers(values: Any, prefix: str = "") -> dict[str, float]:
    """Every finite int/float leaf of an observed-values record, by dotted name (bools are not numbers)."""
    out: dict[str, float] = {}
    if isinstance(values, dict):
        for k, v in values.items():
            out.update(_numbers(v, f"{prefix}{k}."))
    elif isinstance(values, int | float) and not isinstance(values, bool) and math.isfinite(values):
        out[prefix[:-1]] = float(values)
    return out


def _moved(old: float, new: float, factor: float) -> bool:
    if old == new:
        return False
    if old == 0 or new == 0:
        return True
    if (old < 0) != (new < 0):
        return True
    ratio = abs(new / old)
    return ratio > factor or ratio < 1 / factor


GOOD = ("PASS", "NOT APPLICABLE")


def diff(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    factor: float = FACTOR,
    old_subjects: Sequence[Any] = (),
    new_subjects: Sequence[Any] = (),
) -> Diff:
    d = Diff()
    a, b = _predictions(old), _predictions(new)
    d.compared = {
        "predictions": len(set(a) | set(b)),
        "mutants": len(set(_mutants(old)) | set(_mutants(new))),
    }
    for pid in sorted(set(a) | set(b)):
        if pid not in b:
            d.regressions.append(f"{pid}: gone (was {a[pid].get('outcome')})")
            continue
        if pid not in a:
            d.changes.append(f"{pid}: new ({b[pid].get('outcome')})")
            continue
        was, now = a[pid].get("outcome"), b[pid].get("outcome")
        if was != now:
            line = f"{pid}: {was} -> {now}"
            (d.regressions if was in GOOD and now not in GOOD else d.changes).append(line)
        if _proven(a[pid]) and not _proven(b[pid]):
            d.regressions.append(f"{pid}: proven -> UNPROVEN (no mutant turns it red any more)")
        elif not _proven(a[pid]) and _proven(b[pid]):
            d.changes.append(f"{pid}: UNPROVEN -> proven")
        old_numbers, new_numbers = _numbers(a[pid].get("values")), _numbers(b[pid].get("values"))
        for name in sorted(set(old_numbers) & set(new_numbers)):
            x, y = old_numbers[name], new_numbers[name]
            if _moved(x, y, factor):
                d.moved.append(f"{pid}: {name} {x:.6g} -> {y:.6g}")
    ma, mb = _mutants(old), _mutants(new)
    for mid in sorted(set(ma) | set(mb)):
        if mid not in mb:
            (d.regressions if ma[mid] == "Killed" else d.changes).append(
                f"mutant {mid}: gone (was {ma[mid]})"
            )
        elif mid not in ma:
            d.changes.append(f"mutant {mid}: new ({mb[mid]})")
        elif ma[mid] != mb[mid]:
            line = f"mutant {mid}: {ma[mid]} -> {mb[mid]}"
            (d.regressions if ma[mid] == "Killed" else d.changes).append(line)
    va, vb = (
        e.get("verdict", {}).get("decision") if isinstance(e.get("verdict"), dict) else None
        for e in (old, new)
    )
    if va != vb:
        (d.regressions if va == "GO" else d.changes).append(f"verdict: {va} -> {vb}")
    ia, ib = _identity(old, list(old_subjects)), _identity(new, list(new_subjects))
    for key in sorted(set(ia) | set(ib)):
        if ia.get(key) != ib.get(key):
            what = "engine" if key == "engine" else f"subject {key}"
            d.changes.append(f"engine identity: {what}: {ia.get(key, 'absent')} -> {ib.get(key, 'absent')}")
    return d


def render(d: Diff, old: Path, new: Path, factor: float) -> str:
    lines = [f"evidence diff: {old} -> {new}"]
    for title, items in (
        ("REGRESSIONS", d.regressions),
        ("changes", d.changes),
        (f"values moved by more than x{factor:g}", d.moved),
    ):
        lines.append(f"{title} ({len(items)}):")
        lines += [f"  {item}" for item in items] or ["  none"]
    lines.append(
        f"diff: {d.compared.get('predictions', 0)} predictions and {d.compared.get('mutants', 0)} mutants compared; "
        f"{len(d.regressions)} regression(s), {len(d.changes)} other change(s), {len(d.moved)} value(s) moved"
    )
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help=HELP,
        description=HELP,
        epilog="exit codes: 0 no regression, 1 at least one regression, 2 a bundle that cannot be read. "
        "Also spelt `falsify evidence diff OLD NEW`.",
    )
    p.add_argument("old", type=Path, help="the previous release's evidence directory")
    p.add_argument("new", type=Path, help="this release's evidence directory")
    p.add_argument(
        "--factor",
        type=float,
        default=FACTOR,
        help=f"list observed values that moved by more than this factor (default {FACTOR:g})",
    )


def run(args: argparse.Namespace) -> int:
    if not (args.factor > 1 and math.isfinite(args.factor)):
        raise EvidenceError(f"--factor must be a finite number > 1, got {args.factor}")
    (old, old_subjects), (new, new_subjects) = load_evidence(args.old), load_evidence(args.new)
    d = diff(old, new, factor=args.factor, old_subjects=old_subjects, new_subjects=new_subjects)
    print(render(d, args.old, args.new, args.factor))
    return 1 if d.regressions else 0
