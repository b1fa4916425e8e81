"""`falsify engine check --conformance` (falsify/engines/wire/conformance.py): on the reference server every probe
passes and every message of the spec and every error a run provokes is exercised; on a lying engine
(tests/fixtures/wire/lying_engine.py) the probe its lie breaks fails by name and the command exits 1; after the engine
crashed no probe is ok; a correct 1 engine passes with 1.1's parts not applicable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIAR = ROOT / "tests" / "fixtures" / "wire" / "lying_engine.py"
BAD = ROOT / "tests" / "fixtures" / "wire" / "bad_engine.py"


def check(engine: str) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "falsify.cli", "engine", "check", "--conformance", "--engine", engine]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_the_reference_server_exercises_every_message_and_error() -> None:
    proc = check(f"exec:{sys.executable} -m reference.serve")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith("8 of 8 probes ok; 40 of 40 messages and errors exercised"), last
    rows = [
        line.split() for line in proc.stdout.splitlines() if line.startswith(("lane_round ", "error -32013"))
    ]
    assert rows == [["lane_round", rows[0][1]], ["error", "-32013", "1"]] and int(rows[0][1]) >= 1, rows
    provoked = [
        line.split() for line in proc.stdout.splitlines() if line.startswith(("error -32700", "error -32602"))
    ]
    assert provoked == [["error", "-32700", "1"], ["error", "-32602", "1"]], provoked


def test_after_the_engine_crashed_no_probe_is_ok() -> None:
    """bad_engine.py crash SIGKILLs itself at its first poll: the generate probe fails with EngineCrashed, and every
    probe after it fails naming that failure (§8), though `$/cancelRequest` to a dead engine raises nothing."""
    proc = check(f"exec:{sys.executable} {BAD} crash")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    rows = out[out.index(next(x for x in out if x.startswith("PROBE"))) + 2 :]
    rows = rows[: rows.index(next(x for x in rows if x.startswith("MESSAGE")))]
    lines = {x.split("  ")[0]: x for x in rows}
    assert (
        "FAIL: EngineCrashed: engine exec:"
        in lines["generate, $/poll, $/forward, $/token, $/sample, refusals"]
    )
    for name in ("$/cancelRequest: the engine goes on serving", "an unknown method is -32601"):
        assert "FAIL: not run: the connection failed earlier: EngineCrashed: engine exec:" in lines[name], (
            lines
        )
    assert not [x for x in rows if x.endswith(" ok")], rows


def test_a_correct_1_engine_passes_with_the_parts_of_1_1_not_applicable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference speaking only falsify-engine/1: it refuses 1.1 (-32001), the harness falls back; every probe 1
    carries is ok, the lane and sampler probes say they are not applicable, and every part 1 carries is exercised."""
    from falsify.engines.wire.client import WireEngine
    from falsify.engines.wire.conformance import probes, spec_parts, unexercised

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    engine = WireEngine(f"exec:{sys.executable} {LIAR} v1")
    try:
        conn = engine.connection()
        results = probes(engine)
    finally:
        engine.close()
    assert engine.version == "falsify-engine/1"
    outcomes = {r.name.split(":")[0]: r.outcome for r in results}
    assert (
        outcomes.pop("lanes")
        == "not applicable: the engine speaks falsify-engine/1, which does not carry 'lanes'"
    )
    assert outcomes.pop("sample").startswith("not applicable: the engine speaks falsify-engine/1")
    assert set(outcomes.values()) == {"ok"}, outcomes
    parts = spec_parts(engine.version)
    assert "lane_round" not in parts and "error -32013" not in parts and "load_model" in parts
    assert conn.seen["error -32001"] == 2 and unexercised(conn.seen, parts) == []  # it refused 1.2, then 1.1
    assert len(spec_parts()) - len(parts) == 9 + 5 + 1 - 1  # 9 lane and 5 sampler messages, -32013; -32001


@pytest.mark.parametrize(
    ("mode", "probe", "says"),
    [
        ("alias", "state: copy independence", "advancing the copy changed the original's bytes"),
        ("accepts", "sample: pick, draw, greedy, refusal", "a NaN temperature was not refused with -32010"),
        (
            "draws",
            "sample: pick, draw, greedy, refusal; 1.2: draws",
            "[rule: sample_draws answers what count successive sample_draw calls would]",
        ),
        ("digest", "state: copy independence", "[rule: the digest is sha256 of the state bytes]"),
    ],
)
def test_a_lie_fails_its_probe(mode: str, probe: str, says: str) -> None:
    proc = check(f"exec:{sys.executable} {LIAR} {mode}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith(probe))
    assert "FAIL:" in line and says in line, line


def test_the_gate_names_what_a_wire_run_left_unexercised(tmp_path: Path) -> None:
    """A gate restricted to the cancellation falsifiers (`-k`) on the reference server: its output has the wire
    coverage line, read from results.json's `wire_coverage`, and the messages those tests never send (the state,
    prefill, lane and sampler messages) are named as unexercised; gate.json carries the same record."""
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", HYPOTHESIS_PROFILE="ci")
    engine = f"exec:{sys.executable} -m reference.serve"
    cmd = [sys.executable, "-m", "falsify.cli", "gate", "--engine", engine, "--out", str(tmp_path)]
    cmd += ["--", "-k", "test_cancel_contract"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("gate: wire protocol: ")]
    assert len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    record = json.loads((tmp_path / "gate.json").read_text(encoding="utf-8"))["wire_coverage"]
    assert record == json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["wire_coverage"]
    exercised, of, missing = record["exercised"], record["of"], record["unexercised"]
    assert 0 < exercised < of and len(missing) == of - exercised, record
    assert {"generate", "new_session"}.isdisjoint(missing), missing  # the cancellation tests do generate
    assert {"forward", "prefill_step", "lane_round", "sample_pick"} <= set(missing), missing
    assert lines[0] == (
        f"gate: wire protocol: {exercised} of {of} messages and errors exercised; unexercised: {', '.join(missing)}"
    )


def test_the_gate_prints_no_wire_line_for_an_engine_that_is_not_a_wire_engine() -> None:
    from falsify.harness.gate import wire_coverage_line

    assert wire_coverage_line({"tests": {}}) is None
    assert wire_coverage_line({"wire_coverage": {"exercised": 3, "of": 3, "unexercised": []}}) == (
        "gate: wire protocol: 3 of 3 messages and errors exercised; none unexercised"
    )


def test_a_correct_1_engine_passes_the_command_with_the_parts_1_carries() -> None:
    """`falsify engine check --conformance` on an engine that refuses 1.1 (-32001) and speaks 1 correctly: exit 0,
    counted over the 26 parts version 1 carries (no lane or sampler message, no -32013; its -32001 counted)."""
    proc = check(f"exec:{sys.executable} {LIAR} v1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith("8 of 8 probes ok; 26 of 26 messages and errors exercised"), last
    counted = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith(("lane_", "sample_"))}
    assert not counted, counted


def test_a_correct_1_1_engine_passes_the_command_without_the_batched_calls() -> None:
    """An engine that refuses 1.2 (-32001) and speaks 1.1 correctly: exit 0, counted over 1.1's parts (no
    sample_draws; its -32001 counted), and its sampler probe draws one call at a time."""
    proc = check(f"exec:{sys.executable} {LIAR} v1.1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith("8 of 8 probes ok; 40 of 40 messages and errors exercised"), last
    counted = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("sample_")}
    assert counted == {"sample_pick", "sample_draw"}, counted
