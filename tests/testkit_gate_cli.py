"""falsify in a child process, as a user runs it: `run_cli` for any command, `run_gate` for tests that judge the
gate's exit code, its output and the rows of OUT/gate.json; `PYTEST` for a pack's falsifiers run by pytest itself,
`run_serving_falsifiers` for the serving pack's on an engine of a scratch project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FALSIFY = (sys.executable, "-m", "falsify.cli")
# pytest in a child process, quiet, writing no .pytest_cache into the tree
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")


def run_cli(
    *args: str, cwd: Path | None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`falsify ARGS` in `cwd` (environment: `env`, else this process's), output captured, never raising."""
    return subprocess.run(
        [*FALSIFY, *args],
        cwd=cwd,
        env=os.environ.copy() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def init_project(root: Path, env: dict[str, str]) -> Path:
    """A fresh git repository at root (created) with `falsify init` run in it, as an adopter starts; root."""
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    init = run_cli("init", cwd=root, env=env)
    assert init.returncode == 0, init.stdout + init.stderr
    return root


def run_gate(
    engine: str,
    out: Path,
    *pytest_args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """`falsify gate --engine ENGINE --out OUT [-- PYTEST_ARGS]` run in `cwd`, and gate.json's rows by prediction
    id ({} when the gate wrote no gate.json)."""
    args = ["gate", "--engine", engine, "--out", str(out), *(["--", *pytest_args] if pytest_args else [])]
    proc = run_cli(*args, cwd=cwd, env=env, timeout=timeout)
    gate_json = out / "gate.json"
    rows = (
        {r["id"]: r for r in json.loads(gate_json.read_text(encoding="utf-8"))["predictions"]}
        if gate_json.is_file()
        else {}
    )
    return proc, rows


def run_serving_falsifiers(
    root: Path, engine: str, *pytest_args: str, timeout: float = 900
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """The serving pack's falsifiers run by pytest in the project at `root` (its modules importable, this checkout's
    reference too) on `engine`, and results.json's test records; PYTEST_ARGS pick the files (by path) or tests."""
    results = root / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [*pytest_args, "--rootdir", str(root), "--engine", engine, "--falsify-results", str(results)]
    proc = subprocess.run(
        [*PYTEST, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"] if results.is_file() else {}
    return proc, tests


def failing_budget_cancel_gate(
    engine: str, out: Path, cwd: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """`run_gate` restricted to the budget-cancel falsifier (quick), under Hypothesis' mutation profile (first
    counterexample, no shrinking) and ENV over this process's environment; the gate must exit 1 (FAIL)."""
    proc, rows = run_gate(
        engine,
        out,
        *("-k", "test_a_budget_cancelled_run"),
        cwd=cwd,
        env={**os.environ, "HYPOTHESIS_PROFILE": "mutation", **(env or {})},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, rows
