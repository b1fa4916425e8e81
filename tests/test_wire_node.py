"""The Node.js example engine (examples/node-engine/engine.js, standard library only, protocol 1.1) over the wire:
every falsifier of the serving pack passes on it, none NOT APPLICABLE; its twin with the poll moved after the
forward (the bug the cancellation contract comes from, planted by mutants/node-poll-after-forward.yaml) and its
lane host's twin with a stream's poll moved after its decode forward (mutants/node-lane-poll-after-forward.yaml)
are killed by `falsify mutants`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "examples" / "node-engine" / "engine.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js 20) is not on PATH")


def run(engine: Path, results: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "falsify/packs/serving/falsifiers",
    ]
    cmd += ["--engine", f"exec:{NODE} {engine}", "--falsify-results", str(results)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    # the serving pack's tests (the plugin also collects other packs' bound tests, which the wire does not carry)
    return proc.returncode, {k: v for k, v in tests.items() if k.startswith("falsify/packs/serving/")}


def test_node_engine_passes_every_serving_falsifier(tmp_path: Path) -> None:
    code, tests = run(ENGINE, tmp_path / "results.json")
    not_passed = {
        k: r["outcome"] for k, r in tests.items() if r["outcome"] != "passed"
    }  # a skip: NOT APPLICABLE
    assert code == 0 and len(tests) >= 100 and not not_passed, not_passed
    checked = {p for r in tests.values() for p in r["predictions"]}
    contracts = (ROOT / "falsify" / "packs" / "serving" / "contracts").glob("*.yaml")
    want = {p for c in contracts for p in re.findall(r"^  - id: (FALSIFY-[A-Z0-9-]+)$", c.read_text(), re.M)}
    assert len(want) >= 30 and want <= checked, sorted(want - checked)


@pytest.mark.parametrize(
    ("mutant", "listed"), [("node-poll-after-forward", 4), ("node-lane-poll-after-forward", 3)]
)
def test_its_text_mutants_are_killed(tmp_path: Path, mutant: str, listed: int) -> None:
    """mutants/node-poll-after-forward.yaml (op text: the poll moved after the forward in engine.js) and
    mutants/node-lane-poll-after-forward.yaml (a stream's poll moved after its decode forward in lanes.js), run by
    `falsify mutants`: green on an unmutated copy under the Node engine, then KILLED by every prediction listed."""
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "falsify.cli", "mutants", mutant, "--strict"]
    cmd += ["--no-forkserver", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((tmp_path / "mutation-report.json").read_text(encoding="utf-8"))
    statuses = [m["status"] for f in report["files"].values() for m in f["mutants"]]
    assert statuses == ["Killed"], statuses
    assert f"{mutant}: KILLED" in proc.stdout and f"by {listed}/{listed} listed" in proc.stdout, proc.stdout[
        -3000:
    ]
