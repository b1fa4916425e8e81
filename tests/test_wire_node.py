"""The Node.js example engine (examples/node-engine/engine.js, standard library only) over the wire: the
cancellation falsifiers pass on it, and its twin with the poll moved after the forward (the bug the contract comes
from, planted by the text mutant mutants/node-poll-after-forward.yaml) is killed by `falsify mutants`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "examples" / "node-engine" / "engine.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js 20) is not on PATH")


def run(engine: Path, results: Path) -> tuple[int, dict[str, dict[str, object]]]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "falsify/packs/serving/falsifiers/test_cancel_contract.py",
    ]
    cmd += ["--engine", f"exec:{NODE} {engine}", "--falsify-results", str(results)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    return proc.returncode, tests


def test_node_engine_passes_the_cancellation_falsifiers(tmp_path: Path) -> None:
    code, tests = run(ENGINE, tmp_path / "results.json")
    assert code == 0 and len(tests) >= 9 and all(r["outcome"] == "passed" for r in tests.values()), tests


def test_its_poll_after_forward_mutant_is_killed(tmp_path: Path) -> None:
    """mutants/node-poll-after-forward.yaml (op text: the poll moved after the forward in engine.js), run by
    `falsify mutants`: green on an unmutated copy under the Node engine, then KILLED by every prediction it lists."""
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "falsify.cli", "mutants", "node-poll-after-forward", "--strict"]
    cmd += ["--no-forkserver", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((tmp_path / "mutation-report.json").read_text(encoding="utf-8"))
    statuses = [m["status"] for f in report["files"].values() for m in f["mutants"]]
    assert statuses == ["Killed"], statuses
    assert "node-poll-after-forward: KILLED" in proc.stdout and "by 4/4 listed" in proc.stdout, proc.stdout[
        -3000:
    ]
