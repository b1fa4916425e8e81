"""`falsify mutants --executor ray` on a real two-node Ray cluster on this machine (tox -e scale).

The cluster lives in a network namespace of its own (`unshare -n`: only loopback exists there), so every Ray
server listens on 127.0.0.1 and nothing leaves the machine; it is stopped by the run. The merged report must equal
a local run's, and a worker node killed mid-run must lose no mutant and duplicate none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit_mutmut_toy import copy_toy, set_up_mutmut

pytest.importorskip("ray")
pytestmark = pytest.mark.scale

HERE = Path(__file__).parent
ENGINE = "toy.engine:ToyEngine"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_netns = pytest.mark.skipif(not _unshare_works(), reason="needs `unshare -n` (root) and iproute2's `ip`")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return copy_toy(tmp_path / "toy")


def normalised_report(root: Path) -> dict:
    from falsify.evidence.mutation import normalise

    data = json.loads((root / ".falsify" / "mutants" / "mutation-report.json").read_text(encoding="utf-8"))
    return normalise(data, root)


def local_run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutants", "--engine", ENGINE, "-j", "2"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


def ray_run(root: Path, kill_worker: bool, command: str = "mutants", *extra: str) -> dict:
    cmd = [
        "unshare",
        "-n",
        sys.executable,
        str(HERE / "scale" / "cluster_run.py"),
        str(root),
        "--engine",
        ENGINE,
    ]
    proc = subprocess.run(
        [*cmd, *(["--kill-worker"] if kill_worker else []), "--command", command, "--", *extra],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@needs_netns
def test_ray_gives_the_local_report_and_a_killed_worker_loses_nothing(toy: Path, tmp_path: Path) -> None:
    local = local_run(toy)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr
    expected = normalised_report(toy)
    (toy / ".falsify").rename(tmp_path / "local-out")

    ran = ray_run(toy, True, "mutants", "-j", "2")
    assert ran["killed_worker"], ran["output"][-3000:]
    assert ran["exit"] == 0, ran["output"][-3000:]
    out = ran["output"]
    mutants = sorted(p.stem for p in (toy / "mutants").glob("*.yaml"))
    # every mutant reported exactly once: nothing lost to the dead node, nothing run twice into the report
    for mid in mutants:
        assert out.count(f"] {mid}: ") == 1, out[-3000:]
    assert normalised_report(toy) == expected


@needs_netns
def test_a_ray_campaign_merges_shards_and_prints_a_replayable_failure(toy: Path) -> None:
    """Every prediction x 2 seeds under the thorough profile on the cluster, with a bug that only n == 7 shows."""
    loop = toy / "toy" / "loop.py"
    source = loop.read_text(encoding="utf-8")
    planted = source.replace(
        "return self.n is not None and self.polls > self.n",
        "return self.n is not None and self.polls > self.n + (self.n == 7)",
    )
    assert planted != source
    loop.write_text(planted, encoding="utf-8")
    ran = ray_run(toy, False, "campaign", "--seeds", "2")
    out = ran["output"]
    assert ran["exit"] == 1, out[-3000:]
    assert "6 shards (3 predictions x 2 seeds), profile thorough" in out, out[-3000:]
    for pid in ("FALSIFY-TOY-001", "FALSIFY-TOY-002", "FALSIFY-TOY-003"):
        assert out.count(f"] {pid} seed ") == 2, out[-3000:]
    assert "FALSIFY-TOY-001 seed 0: FAIL" in out and "FALSIFY-TOY-003 seed 0: PASS" in out, out[-3000:]
    assert "@reproduce_failure(" in out and "n=7" in out, out[-3000:]


@needs_netns
def test_mutmut_over_ray_gives_the_local_report(toy: Path, tmp_path: Path) -> None:
    """`falsify mutmut --executor ray` on the two-node cluster: the same mutants with the same statuses, the same
    kill rate and verdict as mutmut's own local run. One module (toy/loop.py, ~29 mutants, a function no test
    reaches among them), short per-mutant time limits so the infinite-loop mutants time out in seconds."""
    set_up_mutmut(toy, "timeout = 600\ntimeout_multiplier = 2\ntimeout_constant = 2\n")
    env = {**os.environ, "FALSIFY_ENGINE": ENGINE, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    local = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutmut", "-j", "2"],
        cwd=toy,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=env,
    )
    assert local.returncode == 1, local.stdout[-3000:] + local.stderr  # the uncovered function's survivors
    report = toy / ".falsify" / "mutmut" / "mutation-report.json"
    expected = normalise_mutmut(report, toy)
    statuses = {m["status"] for m in expected["files"]["toy/loop.py"]["mutants"]}
    assert {"Killed", "NoCoverage"} <= statuses, statuses
    report.unlink()

    started = time.time()
    ran = ray_run(toy, False, "mutmut")
    out = ran["output"]
    assert ran["exit"] == 1, out[-3000:]
    assert "shards on executor ray" in out and "Traceback" not in out, out[-3000:]
    assert normalise_mutmut(report, toy) == expected
    # the same verdict line (counts, kill rate, survivors), but for the run's seconds
    verdicts = [
        next(line for line in text.splitlines() if line.startswith("mutmut: FAIL")).rsplit(";", 1)[0]
        for text in (local.stdout, out)
    ]
    assert verdicts[0] == verdicts[1], verdicts
    assert list((tmp_path / "tmp").iterdir()) == []  # the local run's scratch copies are gone
    # and the Ray workers' mutmut trees (in the cluster's own temp directory: the default one)
    from falsify.mutation.semantic.scratch import scratch_root

    left = [p for p in scratch_root().glob("falsify-mutmut-shard-*") if p.stat().st_mtime >= started]
    assert left == []


def normalise_mutmut(report: Path, root: Path) -> dict:
    from falsify.evidence.mutation import normalise

    return normalise(json.loads(report.read_text(encoding="utf-8")), root)


@needs_netns
def test_a_task_whose_worker_dies_is_run_again_on_a_live_one(tmp_path: Path) -> None:
    """Warm workers on the two-node cluster, where the first attempt of task 0 ends its worker process: the task
    is re-run on the other worker, every task comes back exactly once, and the run says a worker was lost."""
    (tmp_path / "pyproject.toml").write_text("[tool.falsify]\n", encoding="utf-8")
    cmd = ["unshare", "-n", sys.executable, str(HERE / "scale" / "cluster_run.py"), str(tmp_path)]
    proc = subprocess.run(
        [*cmd, "--engine", "-", "--command", "lose-workers", "--", "6", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    out = ran["output"]
    assert ran["exit"] == 0, out[-3000:]
    assert "a worker was lost (" in out, out[-3000:]
    done = [line.split()[1] for line in out.splitlines() if line.startswith("task ")]
    assert sorted(done, key=int) == [str(i) for i in range(6)], out[-3000:]
    died = int((tmp_path / "first-attempts" / "0").read_text(encoding="utf-8"))
    assert f"task 0 done in worker {died}" not in out  # not the worker that died
