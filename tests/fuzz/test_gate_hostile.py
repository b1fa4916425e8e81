"""The gate against hung and lying falsifiers (issue #19), on a copy of the toy project, through the real CLI:
a falsifier that never returns is a TIMEOUT row (per test, and per gate when it will not stop); a test that skips
itself as "NOT APPLICABLE" is NOT RUN; a second gate on the same --out is refused; `latest` names the run."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TOY = ROOT / "tests" / "fixtures" / "mutants" / "toy"

SLEEPS = """
import time
import pytest
import falsify

@pytest.mark.falsifies("FALSIFY-TOY-003")
def test_sleeps_forever():
    time.sleep(10_000)
    falsify.check("FALSIFY-TOY-003", emitted=1, max_tokens=1)
"""

STUBBORN = """
import time
import pytest
import falsify

@pytest.mark.falsifies("FALSIFY-TOY-003")
def test_swallows_everything():
    while True:
        try:
            time.sleep(10_000)
        except BaseException:
            pass
"""

LIES = """
import pytest
import falsify

@pytest.mark.falsifies("FALSIFY-TOY-003")
def test_claims_not_applicable():
    pytest.skip("NOT APPLICABLE: FALSIFY-TOY-003 needs 'generate': trust me")
"""


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests" / "check_toy.py").write_text(
        (root / "tests" / "check_toy.py").read_text(encoding="utf-8").split('@pytest.mark.falsifies("FALSIFY-TOY-003")')[0],
        encoding="utf-8",
    )  # fmt: skip
    return root


def gate(root: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "gate", "--engine", "toy.engine:ToyEngine", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{root}", "PYTHONHASHSEED": "0"},
        timeout=timeout,
    )
    return done, time.monotonic() - start


def rows(root: Path) -> dict[str, str]:
    data = json.loads((root / ".falsify" / "gate" / "gate.json").read_text(encoding="utf-8"))
    return {p["id"]: p["outcome"] for p in data["predictions"]}


def test_a_falsifier_that_sleeps_forever_is_a_timeout_row(toy: Path) -> None:
    (toy / "tests" / "check_hang.py").write_text(SLEEPS, encoding="utf-8")
    done, seconds = gate(toy, "--test-timeout", "3", "--timeout", "200")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows(toy)["FALSIFY-TOY-003"] == "TIMEOUT", done.stdout
    assert rows(toy)["FALSIFY-TOY-001"] == "PASS"
    assert "1 timeout" in done.stdout
    assert seconds < 150


def test_a_falsifier_that_will_not_stop_is_stopped_by_the_gate_timeout(toy: Path) -> None:
    (toy / "tests" / "check_zz_hang.py").write_text(STUBBORN, encoding="utf-8")  # runs last
    done, seconds = gate(toy, "--test-timeout", "0", "--timeout", "25")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stopped at its 25 s timeout" in done.stdout
    assert rows(toy)["FALSIFY-TOY-003"] == "TIMEOUT", done.stdout
    # What finished before the stop is kept (the plugin writes its results after each test).
    assert rows(toy)["FALSIFY-TOY-001"] in ("PASS", "TIMEOUT")
    assert seconds < 25 + 30 + 60  # the timeout, the grace before the kill, start-up on a loaded machine


def test_a_test_cannot_skip_itself_into_not_applicable(toy: Path) -> None:
    (toy / "tests" / "check_lie.py").write_text(LIES, encoding="utf-8")
    done, _ = gate(toy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows(toy)["FALSIFY-TOY-003"] == "NOT RUN", done.stdout
    assert "gate: FAIL" in done.stdout


def test_one_gate_per_output_dir_and_latest_names_the_run(toy: Path) -> None:
    done, _ = gate(toy)
    assert done.returncode == 1  # TOY-003 has no falsifier left in this copy: bound to nothing
    out = toy / ".falsify" / "gate"
    (toy / "tests" / "check_toy.py").write_text(
        (TOY / "tests" / "check_toy.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    done, _ = gate(toy)
    assert done.returncode == 0, done.stdout + done.stderr
    latest = out / "latest"
    assert latest.is_symlink() and (latest / "gate.json").read_bytes() == (out / "gate.json").read_bytes()
    fd = os.open(out / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another gate, as far as the next one can tell
        done, _ = gate(toy)
    finally:
        os.close(fd)
    assert done.returncode == 2, done.stdout
    assert "another gate is writing" in done.stdout
    assert (out / "gate.json").is_file()  # the refused run touched nothing
