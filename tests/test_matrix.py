"""`falsify matrix` (falsify/harness/matrix.py): one gate per engine, one table of predictions x engines."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from gate_cli import run_cli

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
