"""`falsify matrix` (falsify/harness/matrix.py): one gate per engine, one table of predictions x engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testkit_gate_cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


def matrix(tmp_path: Path, engines: str, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}  # first counterexample, no shrinking
    args = ["matrix", "--engine", engines, "--out", str(tmp_path), "--", *pytest_args]
    return run_cli(*args, cwd=ROOT, env=env, timeout=900)


def test_matrix_shows_each_engines_outcome_per_prediction(tmp_path: Path) -> None:
    """Restricted to the budget-cancel falsifier to stay quick: the reference passes the emitted - 1 claim, the
    broken adapter (poll after the forward) fails it, and an engine that cannot load is a column of 'not run'."""
    proc = matrix(tmp_path, "reference,broken,no.such.module:Engine", "-k", "test_a_budget_cancelled_run")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # one engine could not be loaded
    doc = json.loads((tmp_path / "matrix.json").read_text())
    assert doc["engines"] == ["reference", "broken", "no.such.module:Engine"]
    rows = {p["id"]: p["outcomes"] for p in doc["predictions"]}
    assert rows["FALSIFY-SERVE-CANCEL-002"] == {
        "reference": "PASS",
        "broken": "FAIL",
        "no.such.module:Engine": "NOT RUN",
    }
    assert rows["FALSIFY-SERVE-CANCEL-001"]["broken"] == "PASS"  # the broken claim is named, not everything
    assert all(outcomes["reference"] != "FAIL" for outcomes in rows.values())
    assert "cannot import no.such.module" in doc["summaries"]["no.such.module:Engine"]
    assert (tmp_path / "reference" / "gate.json").is_file() and (tmp_path / "broken" / "gate.json").is_file()
    table = proc.stdout[proc.stdout.rindex("PREDICTION") :]
    line = next(ln for ln in table.splitlines() if ln.startswith("FALSIFY-SERVE-CANCEL-002 "))
    assert line.split() == ["FALSIFY-SERVE-CANCEL-002", "PASS", "FAIL", "not", "run"]
    assert f"{len(rows)} predictions x 3 engines" in proc.stdout
    assert "| FALSIFY-SERVE-CANCEL-002 | PASS | FAIL | not run |" in (tmp_path / "matrix.md").read_text()


def test_matrix_refuses_bad_engine_lists(tmp_path: Path) -> None:
    proc = matrix(tmp_path, "reference,reference")
    assert proc.returncode == 2 and "distinct comma-separated engine names" in proc.stdout
    proc = matrix(tmp_path, " , ")
    assert proc.returncode == 2


def test_matrix_imports_a_module_factory_engine_from_the_project_root(tmp_path: Path) -> None:
    """As the `falsify` script runs it (-P: the working directory is not on sys.path), in a fresh `falsify init`
    project: its example_engine imports from the project root, as under `falsify gate`."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "FALSIFY_ENGINE"}
    assert run_cli("init", cwd=root, env=env).returncode == 0
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "falsify.cli", "matrix", "--engine", "example_engine:make_engine"],
        cwd=root,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((root / ".falsify" / "matrix" / "matrix.json").read_text())
    assert [p["outcomes"] for p in doc["predictions"]] == [{"example_engine:make_engine": "PASS"}]
