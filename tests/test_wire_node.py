"""The Node.js example engine (examples/node-engine/engine.js, standard library only, protocol 1.1) over the wire:
every falsifier of the serving pack passes on it, none NOT APPLICABLE but FALSIFY-SERVE-CANCEL-012's (it starts
every run at position 0, so it reuses nothing a prompt could diverge from: that prediction cannot be shown false
on it, and says so); its twin with the poll moved after the
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
from testkit_gate_cli import PYTEST

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "examples" / "node-engine" / "engine.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js 20) is not on PATH")


def run(engine: Path, results: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0")
    cmd = [*PYTEST, "falsify/packs/serving/falsifiers"]
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
    reuse = "falsify/packs/serving/falsifiers/test_cancel_contract.py::test_a_run_reuses_only_the_prefix_its_prompt"
    reuse += "_shares_with_the_session"
    skipped = not_passed.pop(reuse, None)
    assert skipped == "skipped" and "reuses none" in tests[reuse]["message"], tests.get(reuse)
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


def _lines(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


INIT = {"id": 1, "method": "initialize", "params": {"protocolVersion": "falsify-engine/1.1"}}
LOAD = {"id": 2, "method": "load_model", "params": {"weights": "f32", "path": None}}
SESSION = {"id": 3, "method": "new_session", "params": {"model": "?"}}


def _engines() -> list[list[str]]:
    return [[NODE or "node", str(ENGINE)], [sys.executable, "-m", "reference.serve"]]


@pytest.mark.parametrize("argv", _engines(), ids=["node", "reference"])
def test_stdin_closed_between_requests_answers_them_and_exits_0(argv: list[str]) -> None:
    """docs/engine-protocol.md §2: the requests read are answered, then status 0, with or without shutdown."""
    proc = subprocess.run(
        argv, cwd=ROOT, input=_lines(INIT, LOAD), capture_output=True, timeout=60, check=False
    )
    replies = [json.loads(x) for x in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["id"] for r in replies] == [1, 2] and "model" in replies[1]["result"], replies


@pytest.mark.parametrize("argv", _engines(), ids=["node", "reference"])
def test_stdin_closed_while_the_engine_waits_for_its_poll_reply_exits_1(argv: list[str]) -> None:
    """§2: a generate read just before stdin closed sends its $/poll, whose reply never comes: status 1."""
    engine = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert engine.stdin is not None and engine.stdout is not None
        engine.stdin.write(_lines(INIT, LOAD))
        engine.stdin.flush()
        model = [json.loads(engine.stdout.readline()) for _ in range(2)][1]["result"]["model"]
        engine.stdin.write(_lines({**SESSION, "params": {"model": model}}))
        engine.stdin.flush()
        session = json.loads(engine.stdout.readline())["result"]["session"]
        generate = {
            "session": session,
            "prompt": [1, 2],
            "max_tokens": 2,
            "stop_tokens": [],
            "sampler": "greedy",
        }
        engine.stdin.write(_lines({"id": 4, "method": "generate", "params": generate}))
        engine.stdin.close()
        rest = [json.loads(x) for x in engine.stdout.read().splitlines()]
        assert engine.wait(60) == 1
        assert [m.get("method") for m in rest] == ["$/poll"], rest  # never answered generate
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()


def test_the_node_engine_refuses_q4_k_weights_it_does_not_have() -> None:
    """§4.3: an engine without quantized weights refuses q4_k with -32010 rather than serve f32 under its name."""
    q4k = {"id": 2, "method": "load_model", "params": {"weights": "q4_k", "path": None}}
    argv = [NODE or "node", str(ENGINE)]
    proc = subprocess.run(
        argv, cwd=ROOT, input=_lines(INIT, q4k), capture_output=True, timeout=60, check=False
    )
    replies = [json.loads(x) for x in proc.stdout.splitlines()]
    assert replies[1]["id"] == 2 and replies[1]["error"]["code"] == -32010, replies
