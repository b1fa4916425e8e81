"""After a wire break the engine is started afresh and the next falsifiers run (issue #46): one ProtocolViolation
made every later prediction an ERROR row, no row named the claim that broke, and a break inside the lane state
machine showed as hypothesis `FlakyStrategyDefinition` rows. The serving pack's falsifiers run against the
reference server behind a proxy that breaks the protocol once (tests/fixtures/wire/breaks_once.py); an engine
that breaks every time ends, after its restart budget, in one line naming it (tests/fixtures/wire/bad_engine.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from testkit_gate_cli import run_serving_falsifiers

from falsify.contracts.corpus import project_corpus
from falsify.contracts.packs import falsifiers_dir
from falsify.engines.wire import errors
from falsify.engines.wire.client import MAX_RESTARTS, WireConfig, WireEngine

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT / "tests" / "fixtures" / "wire" / "breaks_once.py"
BAD = ROOT / "tests" / "fixtures" / "wire" / "bad_engine.py"
SERVING = falsifiers_dir("serving")


def run_breaking_once(tmp_path: Path, method: str, nth: str, *pytest_args: str) -> tuple[Any, dict[str, Any]]:
    """The falsifiers PYTEST_ARGS pick, on the proxy breaking at its NTH METHOD (NTH: "3", or "3 hang"); each
    test's record by name."""
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\npacks = ["serving"]\n', encoding="utf-8")
    engine = f"exec:{sys.executable} {PROXY} {tmp_path / 'marker'} {method} {nth}"
    proc, tests = run_serving_falsifiers(tmp_path, engine, *pytest_args)
    assert (tmp_path / "marker").is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, {nid.split("::")[-1]: record for nid, record in tests.items()}


def claim_start(pid: str) -> str:
    """The first words of a prediction's claim, as the contracts say it."""
    corpus = project_corpus(str(SERVING.parent / "contracts"))
    return " ".join(corpus.predictions[pid].claim.split())[:40]


def test_a_broken_generate_is_one_named_error_and_the_engine_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    picked = "test_an_uncancelled_run or test_a_stop_token_ends_the_run or test_a_run_cancelled_before"
    proc, tests = run_breaking_once(
        tmp_path, "generate", "3", str(SERVING / "test_cancel_contract.py"), "-k", picked
    )
    outcomes = {name: r["outcome"] for name, r in tests.items()}
    broken = [r for r in tests.values() if r["outcome"] != "passed"]
    assert len(broken) == 1, (outcomes, proc.stdout[-3000:])
    record = broken[0]
    assert record["outcome"] == "error" and record["exception"] == "ProtocolViolation", record
    # the break itself, not hypothesis' replay of it, what the engine sent last, and the claims it was falsifying
    ids = record["predictions"]
    assert record["message"].startswith(f"ProtocolViolation while falsifying {', '.join(ids)}: "), record
    assert "$/forward at position 999" in record["message"]
    assert 'the engine\'s last message: {"method": "$/forward"' in record["message"], record["message"]
    assert f"Claims: {ids[0]}: {claim_start(ids[0])}" in record["message"], record["message"]
    assert "Flaky" not in record["message"]
    # the falsifiers after it ran on a fresh engine, and passed
    assert sorted(outcomes.values()) == ["error", "passed", "passed"], outcomes
    coverage = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["wire_coverage"]
    assert coverage["restarts"] == 1, coverage


def test_a_break_inside_the_lane_state_machine_is_the_violation_not_flaky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane host's state machine (hypothesis.stateful) breaks at its 4th lane_round, inside its first
    example: hypothesis then replays the program on the dead connection, which fails elsewhere. The row is the
    violation on the machine's predictions; the test after it runs on a fresh engine."""
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    picked = "test_lane_host_state_machine or test_two_long_prompts_take_turns"
    proc, tests = run_breaking_once(
        tmp_path, "lane_round", "4", str(SERVING / "test_lanes_host.py"), "-k", picked
    )
    machine = tests["test_lane_host_state_machine"]
    assert machine["outcome"] == "error" and machine["exception"] == "ProtocolViolation", machine
    assert machine["message"].startswith("ProtocolViolation while falsifying FALSIFY-SERVE-PREFILL-008, "), (
        machine
    )
    assert "$/token during lane_round names stream 999, which the host does not hold" in machine["message"]
    assert "Flaky" not in machine["message"], machine["message"]
    after = {name: r["outcome"] for name, r in tests.items() if name.startswith("test_two_long_prompts")}
    assert after and set(after.values()) == {"passed"}, (after, proc.stdout[-3000:])


def test_a_falsifier_that_times_out_mid_call_is_its_own_timeout_and_the_next_runs_on_a_fresh_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine stops answering at its 3rd generate; the falsifier's timeout leaves the call. The engine is
    mid-call, so the next falsifier gets a fresh one, not the old one's silence (or its stale messages) blamed on it;
    the falsifier that left is its own TIMEOUT row, and no restart is counted against the engine."""
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    # the one that hangs, then two single runs (well under the timeout at load 5)
    picked = (
        "test_a_run_cancelled_before or test_a_run_reuses_only_the_prefix or test_a_run_on_a_used_session"
    )
    cancel = str(SERVING / "test_cancel_contract.py")
    proc, tests = run_breaking_once(
        tmp_path, "generate", "3 hang", cancel, "-k", picked, "--falsify-test-timeout", "10"
    )
    outcomes = sorted(r["outcome"] for r in tests.values())
    assert outcomes == ["passed", "passed", "timeout"], (tests, proc.stdout[-3000:])
    coverage = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["wire_coverage"]
    assert coverage["restarts"] == 0, coverage


def test_a_falsifier_callback_that_raises_mid_call_leaves_the_engine_for_a_fresh_one() -> None:
    class Stop(Exception):
        pass

    def stop(token: int) -> None:
        raise Stop(f"the falsifier's callback at token {token}")

    engine = WireEngine(f"exec:{sys.executable} -m reference.serve")
    try:
        model = engine.load_model("f32")
        alone = engine.session(model).generate([1, 2, 3], 8).tokens
        with pytest.raises(Stop):
            engine.session(model).generate([1, 2, 3], 8, on_token=stop)
        assert isinstance(engine.failure, errors.CallAbandoned), engine.failure
        # the engine was mid-call: the next call runs on a fresh process, not into the old call's $/poll
        assert engine.session(model).generate([1, 2, 3], 8).tokens == alone
        assert engine.generation == 1 and engine.restarts == 0
    finally:
        engine.close()


def test_an_engine_that_breaks_every_time_ends_in_one_line_naming_the_budget() -> None:
    engine = WireEngine(f"exec:{sys.executable} {BAD} crash")
    started = time.monotonic()
    breaks = 0
    try:
        while True:
            model = engine.load_model("f32")
            with pytest.raises(errors.EngineCrashed):
                engine.session(model).generate([1, 2, 3], 4)
            breaks += 1
            if not engine.restart():
                break
        with pytest.raises(errors.EngineCrashed) as ended:
            engine.connection()
    finally:
        engine.close()
    assert breaks == MAX_RESTARTS + 1 and engine.restarts == MAX_RESTARTS
    said = str(ended.value)
    assert "\n" not in said and said.startswith(
        f"EngineCrashed: engine exec:{sys.executable} {BAD} crash: "
    ), said
    assert (
        f"broke {MAX_RESTARTS + 1} times in this run, not started again (at most {MAX_RESTARTS} restarts"
        in said
    )
    assert "the last break: EngineCrashed:" in said and "killed by signal SIGKILL" in said, said
    assert time.monotonic() - started < 60  # four engine starts, each crashing at once


def test_a_model_is_loaded_again_after_a_restart_and_must_keep_its_config() -> None:
    engine = WireEngine(f"exec:{sys.executable} {BAD} crash")
    try:
        model = engine.load_model("f32")
        with pytest.raises(errors.EngineCrashed):
            engine.session(model).generate([1, 2, 3], 4)
        assert engine.restart()
        assert model.handle == "m" and model.generation == engine.generation == 1  # loaded in the new process
        assert engine.wire_seen()["load_model"] == 2
        assert not engine.restart() and engine.generation == 1  # nothing broke: nothing to restart
        with pytest.raises(errors.EngineCrashed):
            engine.session(model).generate([1, 2, 3], 4)
        assert engine.restart()
        model.config = WireConfig(
            vocab_size=1000, max_position_embeddings=4096, chunk_size=1
        )  # not the engine's
        with pytest.raises(errors.ProtocolViolation, match="restarted, it loaded the model with config"):
            _ = model.handle
        assert engine.failure is not None  # a violation ends the connection
    finally:
        engine.close()
