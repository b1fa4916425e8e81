"""Hostile wire engines against the client itself (issue #27): each is a named WireError within its deadline, or
the engine's refusal as EngineRefusal, and nothing else. Real subprocesses and a real HTTP server on 127.0.0.1;
each test is bounded by SIGALRM so a regression fails instead of hanging the suite."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit_hang_bound import hang_bound

from falsify.engines.wire import errors
from falsify.engines.wire.client import WireEngine
from falsify.engines.wire.connection import Connection
from falsify.engines.wire.messages import ErrorCode
from falsify.engines.wire.transports import StdioTransport, open_transport

SCRIPTED = Path(__file__).resolve().parent / "fixtures" / "wire" / "scripted_engine.py"


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    with hang_bound(30, "the client"):
        yield


def scripted(tmp_path: Path, script: dict[str, list[dict[str, object]]], timeout: float = 3.0) -> Connection:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    spec = f"exec:{sys.executable} {SCRIPTED} {path}"
    return Connection(
        open_transport(spec, max_line=1 << 20, timeout=timeout), timeout=timeout, max_line=1 << 20
    )


def test_a_5000_digit_integer_is_a_malformed_message_not_a_refusal(tmp_path: Path) -> None:
    conn = scripted(tmp_path, {"load_model": [{"raw": '{"id": 1, "result": {"model": ' + "9" * 5000 + "}}"}]})
    with pytest.raises(errors.MalformedMessage, match="an integer of 5000 digits") as caught:
        conn.request("load_model", {"weights": "f32"})
    assert not isinstance(
        caught.value, ValueError
    )  # a falsifier's `except ValueError` cannot take it as a refusal
    conn.close()


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"id": 1, "result": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper than 64"),
        ('{"id": 1, "result": ' + "[" * 40 + "]" * 40 + "}", "not a message of"),  # within the bound: schema
        ('{"id": 1, "result": {"model": NaN}}', "NaN is not JSON"),
        ('{"id": 1, "result": {"model": 1e999}}', "overflows a double"),
        ('{"id": 1, "result": {"model": 0.' + "1" * 200 + "}}", "number literal of 202 characters"),
        ('{"id": 1, "result": {}} {}', "not JSON .Extra data"),
        ('{"id": 1, "result": {"model": -' + "1" * 41 + "}}", "an integer of 41 digits"),
    ],
)
def test_an_unbounded_or_invalid_line_is_a_malformed_message(tmp_path: Path, line: str, named: str) -> None:
    conn = scripted(tmp_path, {"load_model": [{"raw": line}]})
    with pytest.raises(errors.MalformedMessage, match=named):
        conn.request("load_model", {"weights": "f32"})
    conn.close()


def test_an_invalid_input_reply_is_the_only_refusal(tmp_path: Path) -> None:
    conn = scripted(tmp_path, {"load_model": [{"error": [int(ErrorCode.INVALID_INPUT), "no such weights"]}]})
    with pytest.raises(errors.EngineRefusal, match="no such weights") as caught:
        conn.request("load_model", {"weights": "f32"})
    assert isinstance(caught.value, ValueError) and not isinstance(caught.value, errors.WireError)
    assert conn.failure is None  # a refusal leaves the connection usable
    conn.close()


def test_logits_whose_bytes_and_shape_disagree_are_malformed_not_refused(tmp_path: Path, monkeypatch) -> None:
    bad = {"logits": {"dtype": "float32", "shape": [1, 4], "data": "AAAA"}, "pos": 1}
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"forward": [{"reply": bad}]}), encoding="utf-8")
    monkeypatch.setenv("FALSIFY_WIRE_TIMEOUT", "3")
    engine = WireEngine(f"exec:{sys.executable} {SCRIPTED} {path}")
    model = engine.load_model()
    state = model.new_state()
    with pytest.raises(errors.MalformedMessage, match=r"3 bytes of data for float32 shape \[1, 4\]"):
        model.forward([1], state)
    engine.close()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon"])
def test_a_wire_variable_that_is_not_a_finite_positive_number_is_named(monkeypatch, value: str) -> None:
    monkeypatch.setenv("FALSIFY_WIRE_TIMEOUT", value)
    with pytest.raises(errors.EngineStartError, match=f"FALSIFY_WIRE_TIMEOUT='{value}'"):
        WireEngine("exec:true")
    monkeypatch.delenv("FALSIFY_WIRE_TIMEOUT")
    monkeypatch.setenv("FALSIFY_WIRE_MAX_LINE", value)
    with pytest.raises(errors.EngineStartError, match=f"FALSIFY_WIRE_MAX_LINE='{value}'"):
        WireEngine("exec:true")


def test_a_long_request_to_an_engine_blocked_on_stderr_does_not_deadlock(tmp_path: Path) -> None:
    # after its reply the engine writes 512 KiB to stderr (a pipe holds 64 KiB) before reading stdin again; the
    # next request is 512 KiB too: both sides would block writing if the harness did not read while it writes
    conn = scripted(tmp_path, {"new_session": [{"reply": {"session": "s"}}, {"stderr": 512 * 1024}]})
    conn.request("new_session", {})
    started = time.monotonic()
    assert conn.request("release_session", {"session": "x" * (512 * 1024)}) == {}
    assert time.monotonic() - started < 10
    assert len(conn.transport.stderr_tail()) <= 4096  # the ring keeps the tail only
    conn.close()


def test_an_engine_that_reads_nothing_times_out_a_long_request(tmp_path: Path) -> None:
    conn = scripted(tmp_path, {"new_session": [{"reply": {"session": "s"}}, {"sleep": 60}]}, timeout=2)
    conn.request("new_session", {})
    started = time.monotonic()
    with pytest.raises(errors.EngineTimeout, match="timed out after 2 s"):
        conn.request("release_session", {"session": "x" * (1 << 20)})
    assert time.monotonic() - started < 6


def test_an_endless_log_is_silence_and_shutdown_has_a_deadline(tmp_path: Path) -> None:
    conn = scripted(
        tmp_path, {"load_model": [{"log_forever": 1}], "shutdown": [{"log_forever": 1}]}, timeout=2
    )
    started = time.monotonic()
    with pytest.raises(errors.EngineTimeout, match=r"no message but \$/log for 2 s"):
        conn.request("load_model", {"weights": "f32"})
    assert time.monotonic() - started < 6
    conn2 = scripted(tmp_path, {"shutdown": [{"log_forever": 1}]}, timeout=20)
    started = time.monotonic()
    conn2.close(grace=1)
    assert time.monotonic() - started < 5  # shutdown's bound is the grace, not the 20 s timeout
    assert isinstance(conn2.transport, StdioTransport) and conn2.transport.proc.poll() is not None


class _Hostile:
    """A one-connection-at-a-time HTTP server on 127.0.0.1 that answers every POST with `reply(conn)`."""

    def __init__(self, reply) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(0.2)
                try:
                    conn.recv(1 << 16)
                    self.reply(conn, self.stop)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _drip(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n")
    for byte in b'{"id": 1, "result": {}}\n':
        if stop.wait(1.0):
            return
        conn.sendall(bytes([byte]))


def _continues(conn: socket.socket, stop: threading.Event) -> None:
    while not stop.wait(0.2):
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")


def _drip_headers(conn: socket.socket, stop: threading.Event) -> None:
    for byte in b"HTTP/1.0 200 OK\r\nX-Slow: " + b"a" * 100:
        if stop.wait(0.5):
            return
        conn.sendall(bytes([byte]))


@pytest.mark.parametrize(
    "reply", [_drip, _continues, _drip_headers], ids=["drip-body", "100-continue", "drip-headers"]
)
def test_http_has_one_deadline_per_request(reply) -> None:
    server = _Hostile(reply)
    try:
        transport = open_transport(f"http://127.0.0.1:{server.port}", max_line=1 << 20, timeout=2)
        conn = Connection(transport, timeout=2, max_line=1 << 20)
        started = time.monotonic()
        with pytest.raises(errors.EngineTimeout):
            conn.request("initialize", {})
        assert time.monotonic() - started < 5, "the deadline was per recv, not per request"
    finally:
        server.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie waiting for its reaper is gone
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_gate_ends_pytest_and_the_engine(tmp_path: Path, sig: signal.Signals) -> None:
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    pids = tmp_path / "pids"
    engine = f"exec:{sys.executable} {root / 'tests' / 'fixtures' / 'wire' / 'stubborn_engine.py'} {pids}"
    env = {**os.environ, "PYTHONPATH": str(root), "FALSIFY_WIRE_TIMEOUT": "600", "HYPOTHESIS_PROFILE": "ci"}
    argv = [sys.executable, "-m", "falsify.cli", "gate", "--engine", engine, "--out", str(tmp_path / "out")]
    gate = subprocess.Popen(
        [*argv, "--", "-k", "test_cancel_contract"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def started() -> list[tuple[int, int]]:  # (engine, its parent) for each engine started so far
        text = pids.read_text() if pids.exists() else ""
        lines = [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]
        return [(int(a), int(b)) for a, b in lines]

    try:
        deadline = time.monotonic() + 25
        # the gate's probe starts the engine once (its parent is the gate), then pytest starts the run's
        while not [p for p in started() if p[1] != gate.pid] and time.monotonic() < deadline:
            time.sleep(0.2)
        runs = [p for p in started() if p[1] != gate.pid]
        assert runs, f"the run's engine never started: {started()}"
        engine_pid, pytest_pid = runs[0]
        time.sleep(1.0)  # the engine is at generate, hanging
        gate.send_signal(sig)
        code = gate.wait(15)
        assert code in (-sig, 128 + sig, 130 if sig == signal.SIGINT else 143), code
        for _ in range(50):
            if not (_alive(engine_pid) or _alive(pytest_pid)):
                break
            time.sleep(0.1)
        assert not _alive(pytest_pid), "pytest outlived the gate"
        assert not _alive(engine_pid), "the engine outlived the gate"
        assert not [e for e, _ in started() if _alive(e)], f"an engine outlived the gate: {started()}"
    finally:
        if gate.poll() is None:
            os.killpg(gate.pid, signal.SIGKILL)
            gate.wait()
        for pid in map(int, pids.read_text().split() if pids.exists() else ()):  # a regression leaks nothing
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_gates_probe_stops_the_probed_engine(tmp_path: Path, sig: signal.Signals) -> None:
    """`falsify gate` starts a wire engine once before the run (docs/engine-protocol.md §8); a stubborn engine
    answers `initialize`, then ignores `shutdown`, so the probe waits on it: a signal then ends the gate and the
    engine it started, which ignores SIGTERM and SIGINT itself."""
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    pids = tmp_path / "pids"
    engine = f"exec:{sys.executable} {root / 'tests' / 'fixtures' / 'wire' / 'stubborn_engine.py'} {pids}"
    env = {**os.environ, "PYTHONPATH": str(root), "FALSIFY_WIRE_TIMEOUT": "600"}
    argv = [sys.executable, "-m", "falsify.cli", "gate", "--engine", engine, "--out", str(tmp_path / "out")]
    gate = subprocess.Popen(
        argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 25
        while not (pids.exists() and pids.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        probed, parent = map(int, pids.read_text().split()[:2])
        assert parent == gate.pid, "the first engine is the probe's, started by the gate itself"
        gate.send_signal(sig)
        code = gate.wait(15)
        assert code in (-sig, 128 + sig, 130 if sig == signal.SIGINT else 143), code
        for _ in range(50):
            if not _alive(probed):
                break
            time.sleep(0.1)
        assert not _alive(probed), "the probed engine outlived the gate"
    finally:
        if gate.poll() is None:
            os.killpg(gate.pid, signal.SIGKILL)
            gate.wait()
        for pid in map(int, pids.read_text().split()[0::2] if pids.exists() else ()):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("method", "actions"),
    [
        ("generate", [{"poll_forever": 1}]),
        ("lane_round", [{"poll_forever": 1}]),
        ("generate", [{"notify_forever": "$/forward"}]),
        ("prefill_step", [{"notify_forever": "$/forward"}]),
    ],
)
def test_one_deadline_bounds_a_call_whatever_the_engine_sends_meanwhile(
    tmp_path: Path, method: str, actions: list[dict[str, object]]
) -> None:
    """Issue #48: each message restarted the message timeout, so an engine repeating $/poll (or $/forward) held
    the call for ever; the call's own deadline ends it, and the error says what came meanwhile."""
    conn = scripted(tmp_path, {method: actions}, timeout=30)
    conn.request("load_model", {"weights": "f32"})  # the engine is up (a loaded machine starts python slowly)
    conn.timeout, conn.call_timeout = (
        3.0,
        4.0,
    )  # a message at least every 3 s: only the call's deadline ends it
    started = time.monotonic()
    with pytest.raises(
        errors.EngineTimeout, match=r"no reply within 4 s .*one deadline per call.* messages meanwhile"
    ):
        conn.request(method, {"request": 1}, lambda m, p: {"cancelled": False} if m == "$/poll" else None)
    assert (
        time.monotonic() - started < 20
    )  # 4 s, with room for a loaded machine; the alarm's 30 s bounds a hang
    assert isinstance(conn.transport, StdioTransport) and conn.transport.proc.poll() is not None
    with pytest.raises(errors.EngineTimeout):  # final: the next call raises the same error at once
        conn.request("load_model", {"weights": "f32"})


@pytest.mark.parametrize("code", [int(ErrorCode.INVALID_INPUT), int(ErrorCode.LANE_REFUSED), -32603, 7])
def test_a_refused_initialize_is_final_and_the_engine_is_stopped(tmp_path: Path, code: int) -> None:
    """Issue #48: an engine answering initialize with an error was started again for every call (an
    INVALID_INPUT or LANE_REFUSED reply was no WireError), and the refused engine kept running."""
    counter = tmp_path / "starts"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"initialize": [{"error": [code, "no"]}]}), encoding="utf-8")
    wrapper = tmp_path / "engine.py"
    wrapper.write_text(
        f"import os, runpy, sys\nopen({str(counter)!r}, 'a').write(f'{{os.getpid()}} ')\n"
        f"sys.argv = [{str(SCRIPTED)!r}, {str(script)!r}]\nrunpy.run_path({str(SCRIPTED)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    engine = WireEngine(f"exec:{sys.executable} {wrapper}")
    for _ in range(3):
        with pytest.raises(errors.WireError, match="initialize") as caught:
            engine.connection()
    pids = counter.read_text().split()
    assert len(pids) == 1  # started once, not once per call
    assert "no" in str(caught.value)
    with pytest.raises(ProcessLookupError):  # stopped (and reaped) when refused, not at the harness's exit
        os.kill(int(pids[0]), 0)


SLEEPER = f"{sys.executable} -c 'import time; time.sleep(600)'"


@pytest.mark.parametrize(
    "wrapper",
    [
        "setsid {sleeper} & exec {engine}",  # a child that leaves the group for a session of its own
        "(setsid {sleeper} &); exec {engine}",  # a daemon: double-forked, reparented away from the engine
        "{sleeper} & {engine}",  # the engine behind a wrapper shell, beside a plain child
    ],
    ids=["setsid-child", "daemon", "wrapper"],
)
def test_every_process_a_wire_engine_starts_ends_with_it(wrapper: str) -> None:
    """Issue #48: an engine's `setsid` child outlived `falsify engine check` and `gate` (only the engine's group
    was killed). Whatever carries the engine's FALSIFY_ENGINE_MARK is ended with it."""
    from falsify.engines import process_tree

    shell = wrapper.format(sleeper=SLEEPER, engine=f"{sys.executable} -m reference.serve")
    engine = WireEngine(f"exec:sh -c {shlex.quote(shell)}")
    conn = engine.connection()
    transport = conn.transport
    assert isinstance(transport, StdioTransport)
    while (
        len(process_tree.marked(transport.mark)) < 2
    ):  # the engine and its sleeper are up (the alarm bounds it)
        time.sleep(0.05)
    engine.close()
    while process_tree.marked(transport.mark):  # SIGKILLed: gone once the kernel has ended them
        time.sleep(0.05)
