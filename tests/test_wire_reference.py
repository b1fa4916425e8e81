"""The reference engine served over the wire protocol judges the same as in process.

`python -m reference.serve` (stdio, and HTTP) runs every falsifier of the serving pack (cancellation, stepped
prefill, the lane host, sampling: protocol 1.1) through falsify's wire client; the results files of those runs
and of the in-process run are diffed test by test: outcome, message, how many checks ran and held, and the
observed values. Every test passes on each run, so none is NOT APPLICABLE (a skip), and every prediction of the
serving pack's contracts is among those the passing tests checked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from testkit_gate_cli import PYTEST

ROOT = Path(__file__).resolve().parent.parent
SERVE = f"{sys.executable} -m reference.serve"
FILES = ("falsify/packs/serving/falsifiers",)  # generate; prefill (and state); lanes; sample
SERVING = "falsify/packs/serving/"


def env() -> dict[str, str]:
    e = os.environ.copy()
    e.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "fixtures" / "wire")]),
        HYPOTHESIS_PROFILE="ci",
        PYTHONHASHSEED="0",
        OPENBLAS_NUM_THREADS="1",
    )
    e.pop("FALSIFY_WIRE_TIMEOUT", None)
    return e


def falsifiers(engine: str, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -p same_modules: both runs load the same local modules, so Hypothesis draws the same examples (its docstring)
    cmd = [*PYTEST, "-p", "same_modules", "--engine", engine]
    cmd += ["--falsify-results", str(results), *args]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=1800, check=False)
    print(f"serving pack on {engine}: {time.monotonic() - began:.1f} s wall, load average {os.getloadavg()}")
    return proc


def records(path: Path) -> dict[str, Any]:
    """The serving pack's tests of a results file (the plugin also collects other packs' bound tests, which need
    capabilities the wire does not carry), without their durations."""
    tests = json.loads(path.read_text(encoding="utf-8"))["tests"]
    return {
        nid: {k: v for k, v in r.items() if k != "duration"}
        for nid, r in tests.items()
        if nid.startswith(SERVING)
    }


def serving_predictions() -> set[str]:
    ids = set()
    for contract in (ROOT / SERVING / "contracts").glob("*.yaml"):
        ids |= set(re.findall(r"^  - id: (FALSIFY-[A-Z0-9-]+)$", contract.read_text(encoding="utf-8"), re.M))
    return ids


def all_passed(run: dict[str, Any]) -> None:
    """Every test passed (none skipped: NOT APPLICABLE is a skip), and together they checked every prediction."""
    outcomes = {nid: r["outcome"] for nid, r in run.items() if r["outcome"] != "passed"}
    assert not outcomes, outcomes
    checked = {p for r in run.values() for p in r["predictions"]}
    want = serving_predictions()
    assert len(want) >= 30 and want <= checked, sorted(want - checked)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("inproc") / "results.json"
    proc = falsifiers("reference", out, *FILES)
    assert proc.returncode == 0, proc.stdout[-2000:]
    run = records(out)
    all_passed(run)
    return run


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    lines = [f"only in one run: {nid}" for nid in sorted(set(a) ^ set(b))]
    for nid in sorted(set(a) & set(b)):
        if a[nid] != b[nid]:
            lines.append(f"{nid}:\n  in process: {a[nid]}\n  wire:       {b[nid]}")
    return lines


def test_stdio_engine_judges_like_the_in_process_one(in_process: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = falsifiers(f"exec:{SERVE}", out, *FILES)
    assert proc.returncode == 0, proc.stdout[-2000:]
    wire = records(out)
    assert len(wire) == len(in_process) >= 100
    all_passed(wire)
    assert not diff(in_process, wire), "\n".join(diff(in_process, wire))


def test_http_engine_judges_like_the_in_process_one(in_process: dict[str, Any], tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "reference.serve", "--http", "0"],
        cwd=ROOT,
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        banner = server.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", banner)
        assert found, banner
        out = tmp_path / "results.json"
        proc = falsifiers(found.group(0), out, *FILES)
        assert proc.returncode == 0, proc.stdout[-2000:]
        wire = records(out)
        assert len(wire) == len(in_process) >= 100
        all_passed(wire)
        assert not diff(in_process, wire), "\n".join(diff(in_process, wire))
        assert server.wait(30) == 0  # the harness ended it: shutdown, then exit
    finally:
        server.kill()
        server.wait()
