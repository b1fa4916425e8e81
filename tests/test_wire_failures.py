"""A wire engine that crashes, hangs, or sends a line that is not JSON or is 100 MB long during the run: each is a
named ERROR row for the predictions it touches and a non-zero gate exit, within the timeout, never a hang and never
a PASS. The engine is started afresh after each break, MAX_RESTARTS times a run; the rows after that name the budget
and the last break (issue #46). The gate runs the cancellation contract's falsifiers
(falsify/packs/serving/falsifiers/test_cancel_contract.py through `-k`) against tests/fixtures/wire/bad_engine.py.

An engine that cannot start at all (the command exits, answers `initialize` in another protocol version, or nothing
listens at the URL) is refused before any test runs: one line naming the cause, exit 2 (docs/cli.md)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from testkit_canned_http import CannedServer
from testkit_gate_cli import run_cli

from falsify.engines.wire.client import MAX_RESTARTS

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "fixtures" / "wire" / "bad_engine.py"
TIMEOUT = 3  # FALSIFY_WIRE_TIMEOUT for these runs, seconds


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("crash", "EngineCrashed"),
        ("not-json", "MalformedMessage"),
        ("huge-line", "OversizedMessage"),
        ("hang", "EngineTimeout"),
    ],
)
def test_a_broken_engine_is_a_named_error_row(mode: str, error: str, tmp_path: Path) -> None:
    cancel = gate_names_the_error(f"exec:{sys.executable} {BAD} {mode}", error, tmp_path)
    # a fresh engine after each break, MAX_RESTARTS times; then the later rows name the budget, in one line
    budget = f"broke {MAX_RESTARTS + 1} times in this run, not started again (at most {MAX_RESTARTS} restarts a run)"
    assert any(budget in r["detail"] for r in cancel), [r["detail"] for r in cancel]
    assert sum(r["detail"].startswith(f"{error} while falsifying ") for r in cancel) >= MAX_RESTARTS + 1, (
        cancel
    )


def test_an_http_server_that_is_not_an_engine_is_a_named_error_row(tmp_path: Path) -> None:
    with CannedServer(b"<html>not the engine you are looking for</html>\n") as server:
        gate_names_the_error(server.url, "MalformedMessage", tmp_path)


@pytest.mark.parametrize(
    ("command", "cause"),
    [
        (f"{sys.executable} {BAD} wrong-version", "ProtocolVersionMismatch"),
        (f"{sys.executable} -c 'raise SystemExit(3)'", "exited with code 3"),
        (f"{sys.executable} -c 'print(\"ready\")'", "not JSON"),
        ("/nonexistent/engine-binary --serve", "No such file or directory"),
    ],
    ids=["wrong-version", "exits", "prints-junk", "no-such-command"],
)
def test_an_engine_that_cannot_start_is_one_line_and_exit_2(command: str, cause: str, tmp_path: Path) -> None:
    gate_refuses_the_engine(f"exec:{command}", cause, tmp_path)


def test_nothing_listening_at_the_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gate_refuses_the_engine(f"http://127.0.0.1:{port}", "cannot connect", tmp_path)


def gate_refuses_the_engine(engine: str, cause: str, tmp_path: Path) -> None:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), FALSIFY_WIRE_TIMEOUT=str(TIMEOUT))
    proc = run_cli("gate", "--engine", engine, "--out", str(tmp_path / "out"), cwd=ROOT, env=env, timeout=120)
    said = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(said) == 1 and engine in said[0] and cause in said[0], said
    assert "Traceback" not in said[0]
    assert not (tmp_path / "out" / "gate.json").exists()  # no test ran


def gate_names_the_error(engine: str, error: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The gate on ENGINE over the cancellation contract: every row of it an ERROR naming ERROR, none PASS; its
    rows."""
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), FALSIFY_WIRE_TIMEOUT=str(TIMEOUT), HYPOTHESIS_PROFILE="ci")
    started = time.monotonic()
    args = ["gate", "--engine", engine, "--out", str(tmp_path), "--", "-k", "test_cancel_contract"]
    proc = run_cli(*args, cwd=ROOT, env=env, timeout=300)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-3000:]
    rows = json.loads((tmp_path / "gate.json").read_text(encoding="utf-8"))["predictions"]
    outcomes = {r["id"]: r["outcome"] for r in rows}
    assert "PASS" not in outcomes.values(), outcomes
    cancel = [r for r in rows if r["id"].startswith("FALSIFY-SERVE-CANCEL-")]
    assert len(cancel) >= 10 and all(r["outcome"] == "ERROR" for r in cancel), cancel
    assert all(error in r["detail"] for r in cancel), [r["detail"] for r in cancel]
    # one timeout at most, then every later call fails at once; the rest is pytest collecting the suite
    assert elapsed < 120, f"gate took {elapsed:.0f} s"
    return cancel
