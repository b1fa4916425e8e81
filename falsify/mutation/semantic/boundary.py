"""Which boundary mutants a `falsify mutants` run adds (falsify/engines/boundary), as Mutant records the runner
runs like any other: no edit, a scratch copy, the falsifiers of its `kills` with FALSIFY_BOUNDARY_MUTANT set.

    auto (the default)  each boundary mutant, for the pack predictions of its kill list that apply to the engine
                        (it supports the capability the mutant wraps) and that no mutant of the project lists in
                        its `kills`: the project's own mutants prove the rest, with a stronger proof;
    all                 each boundary mutant the engine supports, for every pack prediction of its kill list in
                        the run (this repository's tests run them on the reference engine this way);
    none                no boundary mutant.
"""

from __future__ import annotations

from typing import Any

from falsify.contracts.corpus import Corpus, Mutant
from falsify.contracts.packs import is_pack_file
from falsify.engines.boundary.catalogue import CATALOGUE, ID_PREFIX, REPORT_FILE, BoundaryMutant

MODES = ("auto", "all", "none")
OP = "boundary"


def record(b: BoundaryMutant, kills: tuple[str, ...]) -> Mutant:
    """The Mutant record the runner, the report and evidence carry for boundary mutant `b`."""
    return Mutant(
        f"{ID_PREFIX}{b.id}",
        f"boundary mutant (wraps the engine's {b.capability}): {b.description}",
        REPORT_FILE,
        "",
        OP,
        "",
        None,
        None,
        None,
        kills,
        f"{REPORT_FILE}: {b.id}",
        0,
        bug_class=b.id,
    )


def boundary_mutants(corpus: Corpus, engine: Any, mode: str = "auto") -> tuple[list[Mutant], list[str]]:
    """The boundary mutants to run, and one line per boundary mutant left out and why (for the progress)."""
    if mode == "none":
        return [], []
    pack = {pid for pid, p in corpus.predictions.items() if is_pack_file(p.file)}
    covered = {pid for m in corpus.mutants for pid in m.kills}
    out, skipped = [], []
    for b in CATALOGUE:
        kills = tuple(pid for pid in b.kills if pid in pack and (mode == "all" or pid not in covered))
        if not kills:
            continue
        why = _unsupported(engine, b.capability)
        if why:
            skipped.append(f"{ID_PREFIX}{b.id}: not run, the engine does not support {b.capability}: {why}")
            continue
        out.append(record(b, kills))
    return out, skipped


def _unsupported(engine: Any, capability: str) -> str | None:
    try:
        return engine.supports(capability)
    except Exception as exc:  # the engine's own code: its answer is a reason, not a traceback
        return f"supports({capability!r}) raised {type(exc).__name__}: {exc}"
