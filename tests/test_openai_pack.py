"""Pack openai-serving proven on the reference's OpenAI-compatible server (python -m reference.serve --openai):
`falsify gate` is green on it with one slot and with four, and each planted bug (mutants/openai-*.yaml, text
mutants of reference/openai_server.py and openai_batcher.py) turns every prediction it lists red.

The servers listen on a free loopback port and are stopped by the PID this test started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = sorted(p.stem for p in (ROOT / "mutants").glob("openai-*.yaml"))


def env() -> dict[str, str]:
    e = os.environ.copy()
    # the mutants' `engine` runs `python`: this interpreter's
    e.update(
        PYTHONPATH=str(ROOT),
        PYTHONHASHSEED="0",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}",
        OPENBLAS_NUM_THREADS="1",
    )
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(slots: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [sys.executable, "-m", "reference.serve", "--openai", "--port", str(port), "--slots", str(slots)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until it answers (a pipe nobody drains could block it later)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as reply:
                assert json.loads(reply.read())["data"][0]["id"] == "reference-tiny"
                return proc, port
        except OSError:
            assert proc.poll() is None, f"the server exited with {proc.returncode}"
            time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    raise AssertionError("the reference server did not answer /v1/models in 120 s")


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[int]:
    proc, port = start(request.param)
    try:
        yield port
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)


def outcomes(stdout: str) -> dict[str, str]:
    return dict(
        re.findall(r"^(FALSIFY-OAI-\d{3})\s+\S+\s+(PASS|FAIL|ERROR|NOT RUN|NOT APPLICABLE)", stdout, re.M)
    )


ONE_SLOT = {f"FALSIFY-OAI-{i:03d}": "PASS" for i in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14)} | {
    f"FALSIFY-OAI-{i:03d}": "NOT APPLICABLE" for i in (8, 15, 16)
}
# Four slots: a probe does not wait for a hung-up request, so the server's own counters and gauge judge the
# hang-ups (OAI-002, 015, 016); the probe's wait (OAI-001, 003) needs one slot.
FOUR_SLOTS = {f"FALSIFY-OAI-{i:03d}": "PASS" for i in (2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)} | {
    f"FALSIFY-OAI-{i:03d}": "NOT APPLICABLE" for i in (1, 3)
}


@pytest.mark.parametrize(
    ("served", "expected"), [(1, ONE_SLOT), (4, FOUR_SLOTS)], indirect=["served"], ids=["1-slot", "4-slots"]
)
def test_the_gate_is_green_on_the_reference_server(
    served: int, expected: dict[str, str], tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "falsify.cli", "gate", "--pack", "openai-serving"]
    cmd += ["--engine", f"openai+http://127.0.0.1:{served}", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert outcomes(proc.stdout) == expected, proc.stdout[-4000:]


def test_each_reference_server_mutant_turns_its_predictions_red(tmp_path: Path) -> None:
    assert len(MUTANTS) == 22, MUTANTS
    cmd = [
        sys.executable,
        "-m",
        "falsify.cli",
        "mutants",
        *MUTANTS,
        "--strict",
        "--no-forkserver",
        "--timeout",
        "600",
    ]
    cmd += ["--out", str(tmp_path)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    report = json.loads((tmp_path / "mutation-report.json").read_text(encoding="utf-8"))
    statuses = {m["id"]: m["status"] for f in report["files"].values() for m in f["mutants"]}
    assert statuses == dict.fromkeys(MUTANTS, "Killed"), statuses
    for mutant in MUTANTS:
        assert re.search(rf"{mutant}\s+KILLED .* by (\d+)/\1 listed", proc.stdout), proc.stdout[-4000:]
    print(f"{len(MUTANTS)} mutants in {time.monotonic() - start:.0f} s")
