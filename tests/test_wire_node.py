"""The Node.js example engine (examples/node-engine/engine.js, standard library only) over the wire: the
cancellation falsifiers pass on it, and on its twin with the poll moved after the forward (the bug the contract
comes from, planted by an exact-snippet text edit that must match once) the predictions that guard it fail."""

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

POLL = """    polls += 1;
    const { cancelled } = await request("$/poll", { request: rid });
    if (cancelled) break;
"""
FORWARD = """    if (tokens.length === 0) {
      forward(0, prompt); // no prefix reuse: the state starts over at 0 for each prompt
      prefillForwards += 1;
    } else {
      forward(session.history.length, [tokens[tokens.length - 1]]);
      decodeForwards += 1;
    }
"""


def run(engine: Path, results: Path) -> tuple[int, dict[str, dict[str, object]]]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cancel_contract.py"]
    cmd += ["--engine", f"exec:{NODE} {engine}", "--falsify-results", str(results)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    return proc.returncode, tests


def red_predictions(tests: dict[str, dict[str, object]]) -> set[str]:
    red = set()
    for record in tests.values():
        for pid, ob in record["observations"].items():  # type: ignore[union-attr]
            if ob["failed_values"] is not None:
                red.add(pid)
    return red


def test_node_engine_passes_the_cancellation_falsifiers(tmp_path: Path) -> None:
    code, tests = run(ENGINE, tmp_path / "results.json")
    assert code == 0 and len(tests) >= 9 and all(r["outcome"] == "passed" for r in tests.values()), tests


def test_its_twin_with_the_poll_after_the_forward_is_red(tmp_path: Path) -> None:
    source = ENGINE.read_text(encoding="utf-8")
    assert source.count(POLL + FORWARD) == 1, "the snippet drifted from engine.js (stale twin)"
    twin = tmp_path / "engine.js"
    twin.write_text(source.replace(POLL + FORWARD, FORWARD + POLL), encoding="utf-8")
    code, tests = run(twin, tmp_path / "results.json")
    assert code == 1
    red = red_predictions(tests)
    # the mutant poll-after-forward's kills on the reference engine
    assert {"FALSIFY-SERVE-CANCEL-002", "FALSIFY-SERVE-CANCEL-004", "FALSIFY-SERVE-CANCEL-010"} <= red, red
