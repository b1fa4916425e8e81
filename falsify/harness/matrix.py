"""`falsify matrix --engine a,b,c`: the same falsifiers on several engines, one table of predictions × engines.

Like web-platform-tests' results across browsers: every engine runs the whole gate (lint, falsifiers, one row per
prediction) into OUT/<engine>/, then one table shows each prediction's outcome on each engine, with a per-engine
line of denominators. The table is a report, not a verdict: a FAIL in it is a finding about that engine.

Exit codes: 0 every engine's gate ran and wrote its rows; 1 an engine could not be loaded or its gate wrote no
results (its column reads "not run" and the reason is printed); 2 bad usage or no contract found.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from falsify import safefile
from falsify.engines.loading import EngineError, engine_forms, load_engine
from falsify.harness.gate import gate, lint_project
from falsify.harness.results import Outcome
from falsify.project import Project, find_project
from falsify.table import table

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
    "loaded or its gate wrote no results; 2 bad usage or no contract found"
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
    columns: dict[str, dict[str, Any]] = {}
    for engine in engines:
        print(f"\n=== matrix: engine {engine}", flush=True)
        columns[engine] = run_one(project, engine, out / safe_name(engine), pytest_args)
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


def run_one(project: Project, engine: str, out: Path, pytest_args: list[str]) -> dict[str, Any]:
    try:  # module:factory engines import from the project root or src/, as under `falsify gate`
        load_engine(engine, project.import_roots)
    except EngineError as exc:
        print(f"matrix: engine {engine!r} not run: {exc}")
        return {"rows": {}, "summary": f"not run: {exc}", "failed_to_run": True}
    (out / "gate.json").unlink(missing_ok=True)
    gate(project, engine=engine, out=out, pytest_args=pytest_args)
    if not (out / "gate.json").is_file():
        return {"rows": {}, "summary": "not run: the gate wrote no results", "failed_to_run": True}
    data = safefile.read_json(out / "gate.json", limit=256 * 2**20, what="gate.json")
    rows = {r["id"]: r for r in data["predictions"]}
    counts = Counter(r["outcome"] for r in rows.values())
    parts = ", ".join(f"{counts[o.value]} {SHORT[o.value]}" for o in Outcome)
    return {"rows": rows, "summary": f"{len(rows)} predictions: {parts}", "failed_to_run": False}


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
