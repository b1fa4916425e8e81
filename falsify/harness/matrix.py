"""`falsify matrix --engine a,b,c`: the same falsifiers on several engines, one table of predictions × engines.

Like web-platform-tests' results across browsers: every engine runs the whole gate (lint, falsifiers, one row per
prediction) into OUT/<engine>/, then one table shows each prediction's outcome on each engine, with a per-engine
line of denominators. The table is a report, not a verdict: a FAIL in it is a finding about that engine.

Exit codes: 0 every engine's gate ran and wrote its rows; 1 an engine could not be loaded, a wire engine could not
start, or its gate wrote no results (its column reads "not run" and the reason is printed): an engine that could
not be checked is no pass; 2 bad usage, no contract found, or a matrix.json or matrix.md in --out that this command
did not write (never written over).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from falsify.contracts.lint import EXIT_EMPTY
from falsify.engines.loading import EngineError, engine_forms, is_openai, load_engine, probe_wire
from falsify.errors import FalsifyError, terminal_safe
from falsify.harness.gate import check_environment, gate, lint_project
from falsify.harness.results import Outcome
from falsify.project import Project, find_project
from falsify.table import table
from falsify.untrusted import safefile

SHORT = {
    "PASS": "PASS",
    "FAIL": "FAIL",
    "ERROR": "ERROR",
    "TIMEOUT": "TIMEOUT",
    "NOT RUN": "not run",
    "NOT APPLICABLE": "n/a",
}

HELP = "run the gate on several engines; print one table of predictions x engines"
EPILOG = (
    "exit codes: 0 every engine's gate ran (FAILs are findings, shown in the table); 1 an engine could not be "
    "loaded or started, or its gate wrote no results; 2 bad usage, no contract found, or a matrix.json or "
    "matrix.md in --out that matrix did not write"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", help=HELP, description=HELP, epilog=EPILOG)
    p.add_argument(
        "--engine",
        required=True,
        help="comma-separated engines, e.g. reference,hf,llamacpp,llamacpp-q4k,broken; each "
        + engine_forms(None).removeprefix("engine under test: "),
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(".falsify/matrix"),
        help="each engine's gate output goes to OUT/<engine>/; matrix.json and matrix.md to OUT",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to every pytest run")


def run(args: argparse.Namespace) -> int:
    engines = [e.strip() for e in args.engine.split(",") if e.strip()]
    if not engines or len(set(engines)) != len(engines):
        print(f"matrix: --engine needs distinct comma-separated engine names, got {args.engine!r}")
        return 2
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    project = find_project()
    check_environment()  # HYPOTHESIS_PROFILE, the FALSIFY_* numbers: one line before any engine runs
    out = args.out if args.out.is_absolute() else project.root / args.out
    return matrix(project, engines, out, extra)


def matrix(project: Project, engines: list[str], out: Path, pytest_args: list[str]) -> int:
    corpus, problems = lint_project(project)
    if problems or not corpus.contracts:
        print("\n".join(problems) or f"matrix: no contract found in {project.contracts}")
        return 1 if problems else 2
    # --out is a directory (or a new path made one) before any engine runs: `--out pyproject.toml` or a symlink
    # there is named, exit 2, and no project file is written over (only OUT/matrix.* and OUT/<engine>/ are).
    safefile.make_dirs(out, what="--out directory")
    for name in ("matrix.json", "matrix.md"):
        ours_or_absent(out / name)
    columns: dict[str, dict[str, Any]] = {}
    dirs = engine_dirs(engines)
    for engine in engines:
        print(f"\n=== matrix: engine {terminal_safe(engine)}", flush=True)
        columns[engine] = run_one(project, engine, out / dirs[engine], pytest_args)
    ids = [(c.id, p.id) for c in corpus.contracts for p in c.predictions]
    document = {
        "engines": engines,
        "predictions": [
            {
                "id": pid,
                "contract": contract,
                "outcomes": {e: columns[e]["rows"].get(pid, {}).get("outcome", "NOT RUN") for e in engines},
                "details": {e: columns[e]["rows"].get(pid, {}).get("detail", "") for e in engines},
            }
            for contract, pid in ids
        ],
        "summaries": {e: columns[e]["summary"] for e in engines},
    }
    safefile.make_dirs(out, what="--out directory")
    safefile.replace(out / "matrix.json", (json.dumps(document, indent=1) + "\n").encode(), what="matrix")
    text = render(document)
    safefile.replace(out / "matrix.md", markdown(document).encode(), what="matrix")
    print()
    print(text)
    print(f"matrix: {len(ids)} predictions x {len(engines)} engines; matrix.json and matrix.md in {out}")
    return 1 if any(columns[e]["failed_to_run"] for e in engines) else 0


def ours_or_absent(path: Path) -> None:
    """Refuse (exit 2, naming it) a file at `path` that is not a matrix this command wrote: `--out` a directory
    of the user's with a matrix.json or matrix.md of its own is not written over. A matrix of an earlier run is
    replaced (the default --out is rerun every time)."""
    if not os.path.lexists(path):
        return
    try:
        if path.suffix == ".json":
            data = safefile.read_json(path, limit=256 * 2**20, what="matrix")
            ours = isinstance(data, dict) and {"engines", "predictions", "summaries"} <= set(data)
        else:
            ours = safefile.read_bytes(path, limit=256 * 2**20, what="matrix").startswith(b"| prediction |")
    except safefile.FileLayerError as exc:
        raise FalsifyError(f"--out: {exc}; not written over") from None
    if not ours:
        raise FalsifyError(
            f"--out: {path} is not a matrix falsify wrote; not written over (give another --out)"
        )


def run_one(project: Project, engine: str, out: Path, pytest_args: list[str]) -> dict[str, Any]:
    try:  # module:factory engines import from the project root or src/, as under `falsify gate`
        made = load_engine(engine, project.import_roots)
        if is_openai(engine):  # it started (openai+exec:) or reached its server; the gate's run does again
            made.close()
        # a wire engine that cannot start is not run: it was never checked, so it is no column of ERRORs
        probe_wire(engine)
    except EngineError as exc:
        print(f"matrix: engine {engine!r} not run: {exc}")
        return {"rows": {}, "summary": f"not run: {exc}", "failed_to_run": True}
    (out / "gate.json").unlink(missing_ok=True)
    code = gate(project, engine=engine, out=out, pytest_args=pytest_args)
    if not (out / "gate.json").is_file() or code == EXIT_EMPTY:
        return {
            "rows": {},
            "summary": f"not run: the gate exited {code} with no results",
            "failed_to_run": True,
        }
    data = safefile.read_json(out / "gate.json", limit=256 * 2**20, what="gate.json")
    rows = {r["id"]: r for r in data["predictions"]}
    counts = Counter(r["outcome"] for r in rows.values())
    parts = ", ".join(f"{counts[o.value]} {SHORT[o.value]}" for o in Outcome)
    return {"rows": rows, "summary": f"{len(rows)} predictions: {parts}", "failed_to_run": False}


def engine_dirs(engines: list[str]) -> dict[str, str]:
    """Each engine's directory under --out: its safe name, made unique (`a:b` and `a_b` both made `a_b`, and the
    second engine's gate wrote over the first's)."""
    taken: set[str] = set()
    dirs = {}
    for engine in engines:
        name = base = safe_name(engine)
        n = 1
        while name.lower() in taken:  # lower: a case-insensitive file system holds one of `A` and `a`
            n += 1
            name = f"{base}-{n}"
        taken.add(name.lower())
        dirs[engine] = name
    return dirs


def safe_name(engine: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in engine)[:80]


def render(document: dict[str, Any]) -> str:
    engines = document["engines"]
    rows = [
        [p["id"], *(SHORT.get(p["outcomes"][e], p["outcomes"][e]) for e in engines)]
        for p in document["predictions"]
    ]
    lines = [table(["prediction", *engines], rows), ""]
    lines += [f"{e}: {document['summaries'][e]}" for e in engines]
    return "\n".join(lines)


def markdown(document: dict[str, Any]) -> str:
    engines = document["engines"]
    head = "| prediction | " + " | ".join(engines) + " |\n|---|" + "---|" * len(engines) + "\n"
    body = "".join(
        f"| {p['id']} | "
        + " | ".join(SHORT.get(p["outcomes"][e], p["outcomes"][e]) for e in engines)
        + " |\n"
        for p in document["predictions"]
    )
    foot = "".join(f"\n- {e}: {document['summaries'][e]}" for e in engines)
    return head + body + foot + "\n"
