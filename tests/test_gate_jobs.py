"""`falsify gate --jobs N` (falsify/harness/shards.py): the falsifiers split over N pytest processes give the same
records, counts and verdict as one process on the same seed; falsify_serial falsifiers run alone, after."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from testkit_gate_cli import ROOT, init_project, run_cli

from falsify.harness import shards

# A part of this repository's gate that draws with hypothesis (sampling, GDN) and holds not-applicable rows (OpenAI)
SUBSET = "test_sampling_contract or test_gdn_contract or test_openai_fields"


def test_every_file_lands_in_exactly_one_share_the_same_in_every_process() -> None:
    ids = [f"f{i % 9}.py::t{i}" for i in range(40)]
    costs = {nodeid: float(i % 7) for i, nodeid in enumerate(ids[:35])}  # five without: the median stands in
    median = sorted(costs.values())[len(costs) // 2]
    file_cost: dict[str, float] = {}
    for nodeid in ids:
        f = nodeid.split("::")[0]
        file_cost[f] = file_cost.get(f, 0.0) + costs.get(nodeid, median)
    for n in (1, 2, 3, 8):
        share = shards.assign(ids, costs, n)
        assert share == shards.assign(list(ids), dict(costs), n)
        where: dict[str, set[int]] = {}
        for nodeid, k in zip(ids, share, strict=True):
            where.setdefault(nodeid.split("::")[0], set()).add(k)
        assert all(len(ks) == 1 for ks in where.values())  # a file's tests stay together
        assert sorted(set(share)) == list(range(n))
        load = [sum(c for f, c in file_cost.items() if k in where[f]) for k in range(n)]
        # longest first to the least loaded: no share exceeds another by more than the longest file
        assert max(load) - min(load) <= max(file_cost.values())
    assert shards.assign(ids, {}, 3) == [(i % 9) % 3 for i in range(40)]


def test_shares_and_exit_codes() -> None:
    assert shards.parse("2/3") == (2, 3)
    assert shards.parse("serial") == shards.SERIAL
    for bad in ("0/2", "3/2", "1/9", "2", "a/b", ""):
        with pytest.raises(ValueError, match="expected K/N"):
            shards.parse(bad)
    assert shards.merge_codes([0, 5]) == 0  # a share with nothing to run
    assert shards.merge_codes([5, 5]) == 5
    assert shards.merge_codes([0, 1, 0]) == 1
    assert shards.merge_codes([1, 4]) == 4


def test_wire_coverage_is_the_union_of_the_shares() -> None:
    def part(unexercised: list[str], restarts: int) -> dict[str, object]:
        coverage = {"of": 5, "unexercised": unexercised, "restarts": restarts}
        return {"tests": {}, "counts": {}, "wire_coverage": coverage}

    merged = shards.merge_results([part(["a", "b", "c"], 1), part(["b", "c", "d"], 2)])
    assert merged["wire_coverage"] == {"exercised": 3, "of": 5, "unexercised": ["b", "c"], "restarts": 3}


def _gate(jobs: int, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = run_cli(
        "gate",
        "--jobs",
        str(jobs),
        "--out",
        str(out),
        "--",
        "-k",
        SUBSET,
        "--hypothesis-seed=20261207",
        cwd=ROOT,
    )
    return proc, json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_two_processes_judge_as_one(tmp_path: Path) -> None:
    one, alone = _gate(1, tmp_path / "one")
    two, shared = _gate(2, tmp_path / "two")
    assert "2 pytest processes" in two.stdout and "gate: pytest process 2 of 2:" in two.stdout
    assert alone["counts"] == shared["counts"]
    assert alone["tests"].keys() == shared["tests"].keys() and alone["tests"]
    for nodeid, record in alone["tests"].items():
        other = shared["tests"][nodeid]
        for field in ("outcome", "observations", "message", "not_applicable"):
            assert record.get(field) == other.get(field), (nodeid, field)
    assert one.returncode == two.returncode  # the subset leaves predictions NOT RUN: FAIL, in both
    verdict = [line for line in one.stdout.splitlines() if line.startswith("gate: ")]
    assert [line for line in two.stdout.splitlines() if line.startswith("gate: FAIL")] == [
        line for line in verdict if line.startswith("gate: FAIL")
    ]
    junit = (tmp_path / "two" / "junit.xml").read_text(encoding="utf-8")
    single = (tmp_path / "one" / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<testcase") == single.count("<testcase")

    def totals(text: str) -> list[int]:
        suites = list(ET.fromstring(text).iter("testsuite"))
        return [sum(int(s.get(a, "0")) for s in suites) for a in ("tests", "skipped", "errors", "failures")]

    assert totals(junit) == totals(single)  # evidence compares these with pytest's count


def test_a_serial_falsifier_runs_alone_after_the_rest(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FALSIFY_GATE_JOBS", None)
    root = init_project(tmp_path / "p", env)
    source = (root / "tests" / "test_example_cancel.py").read_text(encoding="utf-8")
    serial = source.replace("def test_a_budget_cancelled_run(", "def test_a_budget_cancelled_run_alone(")
    serial += "\n\npytestmark = pytest.mark.falsify_serial\n"
    (root / "tests" / "test_example_cancel_alone.py").write_text(serial, encoding="utf-8")
    proc = run_cli("gate", "--jobs", "2", "--out", str(tmp_path / "out"), cwd=root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gate: 1 falsifier(s) marked falsify_serial, alone:" in proc.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    outcomes = {nodeid.split("::")[-1]: r["outcome"] for nodeid, r in results["tests"].items()}
    assert outcomes == {
        "test_a_budget_cancelled_run": "passed",
        "test_a_budget_cancelled_run_alone": "passed",
    }
    assert results["counts"]["passed"] == 2


def test_jobs_out_of_range_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("gate", "--jobs", "0", "--out", str(tmp_path / "o"), cwd=ROOT)
    assert proc.returncode == 2 and "argument --jobs: must be between 1 and 8, not 0" in proc.stderr
    env = {**os.environ, "FALSIFY_GATE_JOBS": "many"}
    proc = run_cli("gate", "--out", str(tmp_path / "o"), cwd=ROOT, env=env)
    assert (
        proc.returncode == 2
        and "FALSIFY_GATE_JOBS='many' must be a whole number" in proc.stdout + proc.stderr
    )
    assert "Traceback" not in proc.stdout + proc.stderr
