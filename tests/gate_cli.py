"""`falsify gate` in a child process, as a user runs it: for tests that judge its exit code, its output and the
rows of OUT/gate.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


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
    cmd = [sys.executable, "-m", "falsify.cli", "gate", "--engine", engine, "--out", str(out)]
    if pytest_args:
        cmd += ["--", *pytest_args]
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=os.environ.copy() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    gate_json = out / "gate.json"
    rows = (
        {r["id"]: r for r in json.loads(gate_json.read_text(encoding="utf-8"))["predictions"]}
        if gate_json.is_file()
        else {}
    )
    return proc, rows
