"""`falsify campaign` on the local executor (the Ray executor: tests/test_scale.py), on the toy project."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testkit_gate_cli import run_cli

TOY = Path(__file__).parent / "fixtures" / "mutants" / "toy"


def campaign(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("campaign", "--engine", "toy.engine:ToyEngine", *args, cwd=root, env=None)


def test_campaign_shards_by_prediction_and_seed_and_replays_a_failure(tmp_path: Path) -> None:
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    green = campaign(root, "--seeds", "2", "FALSIFY-TOY-001", "FALSIFY-TOY-003")
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr
    assert "4 shards (2 predictions x 2 seeds), profile thorough" in green.stdout
    assert "campaign: PASS — 4 shards: 4 passed, 0 not passed" in green.stdout
    loop = root / "toy" / "loop.py"
    loop.write_text(
        loop.read_text(encoding="utf-8").replace(
            "return self.n is not None and self.polls > self.n",
            "return self.n is not None and self.polls > self.n + (self.n == 7)",
        ),
        encoding="utf-8",
    )
    red = campaign(root, "--seeds", "1", "FALSIFY-TOY-001")
    assert red.returncode == 1, red.stdout[-3000:]
    assert "FALSIFY-TOY-001 seed 0: FAIL" in red.stdout
    assert "@reproduce_failure(" in red.stdout and "n=7" in red.stdout, red.stdout[-3000:]


def test_unknown_prediction_and_bad_seeds_are_usage_errors(tmp_path: Path) -> None:
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    proc = campaign(root, "FALSIFY-NOPE-001")
    assert proc.returncode == 2 and "no prediction FALSIFY-NOPE-001" in proc.stderr, proc.stderr
    proc = campaign(root, "--seeds", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr


def test_a_pack_prediction_is_run_and_judged_like_the_projects_own() -> None:
    """This repository's serving contracts live in a pack (falsify/packs/serving): a shard must read them too."""
    root = Path(__file__).resolve().parent.parent
    proc = run_cli("campaign", "--seeds", "1", "--profile", "ci", "FALSIFY-SERVE-CANCEL-002", cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "FALSIFY-SERVE-CANCEL-002 seed 0: PASS" in proc.stdout, proc.stdout[-3000:]
