"""Getting the run results a bundle is made of: run the gate (and the mutant runner), or read their output."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from falsify.evidence import JUNIT, MUTATION_REPORT, RESULTS
from falsify.evidence.mutation import load_report
from falsify.evidence.tree import EvidenceError
from falsify.harness.results import load_results
from falsify.project import Project
from falsify.untrusted import safefile
from falsify.untrusted.boundedjson import show

# A bundle's statements must be the same bytes for the same tree: hypothesis runs derandomized with no database
# (the plugin's "ci" profile), and hashing is seeded. A caller's explicit settings win.
MAX_JUNIT = 256 * 2**20  # bytes of a junit.xml
DETERMINISTIC_ENV = {"HYPOTHESIS_PROFILE": "ci", "PYTHONHASHSEED": "0"}


def read_gate_dir(directory: Path) -> tuple[dict[str, Any], bytes]:
    """results.json and junit.xml of a `falsify gate --out DIR` run."""
    missing = [name for name in (RESULTS, JUNIT) if not (directory / name).is_file()]
    if missing:
        raise EvidenceError(
            f"{directory}: no {' or '.join(missing)} (expected the --out directory of `falsify gate`)"
        )
    try:
        return load_results(directory / RESULTS), safefile.read_bytes(
            directory / JUNIT, limit=MAX_JUNIT, what="JUnit report"
        )
    except safefile.FileLayerError as exc:
        raise EvidenceError(str(exc)) from None


def run_gate(
    project: Project, engine: str, pytest_args: list[str], out: Path
) -> tuple[dict[str, Any], bytes, int]:
    """Run `falsify gate` into `out` (kept: the raw results, with durations, for whoever wants to look)."""
    from falsify.harness.gate import gate, jobs

    for key, value in DETERMINISTIC_ENV.items():
        os.environ.setdefault(key, value)
    (out / RESULTS).unlink(missing_ok=True)
    code = gate(project, engine=engine, out=out, pytest_args=pytest_args, jobs=jobs(project, None, engine))
    if not (out / RESULTS).is_file():
        raise EvidenceError("the gate wrote no results (see its output above): no evidence bundle written")
    results, junit = read_gate_dir(out)
    return results, junit, code


def find_mutation_report(directory: Path) -> Path | None:
    for candidate in (directory / MUTATION_REPORT, directory / "mutants" / MUTATION_REPORT):
        if candidate.is_file():
            return candidate
    return None


def runner_available() -> bool:
    return importlib.util.find_spec("falsify.mutation.semantic") is not None


def run_mutants(project: Project, engine: str, out: Path) -> tuple[dict[str, Any] | None, str]:
    """Run `falsify mutants --out OUT` and read its Stryker report; (None, why) when it cannot run."""
    if not runner_available():
        return None, "the mutant runner (falsify mutants) is not installed"
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in DETERMINISTIC_ENV.items()}}
    (out / MUTATION_REPORT).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "falsify.cli", "mutants", "--engine", engine, "--out", str(out)]
    print(f"evidence: running the mutants: falsify mutants --engine {engine} --out {out}", flush=True)
    proc = subprocess.run(cmd, cwd=project.root, env=env, check=False)
    report = find_mutation_report(out)
    if report is None:
        return None, f"`falsify mutants` exited {proc.returncode} without writing {MUTATION_REPORT}"
    return load_report(report), ""


def same_engine(made_on: str | None, path: Path, what: str, engine: str) -> None:
    """Refuse results or a mutant report made on another engine than this evidence run's: they would be claimed for
    an engine they say nothing about. A file that records no engine (older or other tools' reports) is taken as
    it is."""
    if made_on is not None and made_on != engine:
        raise EvidenceError(
            f"{path}: {what} on engine {show(made_on)}, this evidence run is on {show(engine)}; "
            f"pass --engine {show(made_on)} or run it again on this engine"
        )
