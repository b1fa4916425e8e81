"""`falsify packs show NAME`: a pack's predictions as an adopter reads them before running it: each one's id, claim,
domain, the capabilities it requires and the bug classes it exists to catch (its `catches`), marking the classes a
boundary mutant falsify ships plants (given by the caller: falsify/engines/boundary, which this layer does not
import), which `falsify mutants` can prove on any engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from falsify.contracts.corpus import Contract, Prediction, load_corpus
from falsify.contracts.packs import contracts_dir, describe
from falsify.errors import terminal_safe

FORMATS = ("text", "json")


def domain_text(domain: dict[str, Any]) -> str:
    """`n int 1..16, max_tokens int 2..32 (optional)`: each parameter's type and range or values."""
    parts = []
    for name, spec in domain.items():
        text = f"{name} {spec.get('type', '?')}"
        if "values" in spec:
            text += " in " + ", ".join(map(str, spec["values"]))
        elif "min" in spec or "max" in spec:
            text += f" {spec.get('min', '')}..{spec.get('max', '')}"
        if spec.get("optional"):
            text += " (optional)"
        parts.append(text)
    return ", ".join(parts) or "(none: fixed scenarios)"


def _requires(p: Prediction, c: Contract) -> list[str]:
    return list(dict.fromkeys([*c.requires, *p.requires]))


def rows(name: str, boundary: Mapping[str, list[str]]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The pack's description and one record per prediction (PackError for an unknown name). `boundary`:
    prediction id -> the boundary mutants that must turn it red."""
    folder = contracts_dir(name)  # PackError first: an unknown name is never read as a path
    info = describe(name)
    corpus = load_corpus([folder])
    out = []
    for c in corpus.contracts:
        for p in c.predictions:
            out.append(
                {
                    "id": p.id,
                    "contract": c.id,
                    "claim": " ".join(p.claim.split()),
                    "domain": p.domain,
                    "requires": _requires(p, c),
                    "catches": list(p.catches),
                    "boundary": list(boundary.get(p.id, ())),
                    "unproven_because": p.unproven_because,
                }
            )
    return info, out


def render(name: str, boundary: Mapping[str, list[str]], fmt: str = "text") -> str:
    info, records = rows(name, boundary)
    with_boundary = sum(1 for r in records if r["boundary"])
    if fmt == "json":
        return json.dumps({"pack": name, **info, "predictions": records}, indent=2)
    lines = [f"{name}: {info.get('title', '')}", ""]
    for r in records:
        catches = [f"{c} (boundary mutant)" if c in r["boundary"] else c for c in r["catches"]]
        lines += [
            f"{r['id']}  ({r['contract']})",
            f"  claim:    {r['claim']}",
            f"  domain:   {domain_text(r['domain'])}",
            f"  requires: {', '.join(r['requires']) or '(nothing beyond the engine)'}",
            f"  catches:  {', '.join(catches) or '(not named)'}",
        ]
        if r["unproven_because"]:
            lines.append(f"  unproven: {' '.join(r['unproven_because'].split())}")
        lines.append("")
    contracts = sorted({r["contract"] for r in records})
    lines.append(
        f"packs: {name}: {len(records)} predictions in {len(contracts)} contracts; {with_boundary} of them with a "
        "boundary mutant falsify runs on any engine (falsify mutants)"
    )
    return "\n".join(terminal_safe(line) for line in lines)
