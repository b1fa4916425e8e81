"""Engines that lie over the wire are caught by name (tests/fixtures/wire/lying_engine.py, the reference server with
one lie each): a copy_state that aliases its original turns FALSIFY-SERVE-PREFILL-020's row red (an ERROR naming
the rule a forward's reported pos broke: the harness, which knows each handle's position, sees the original's
forward move the copy); an engine that refuses nothing fails FALSIFY-SERVE-SAMPLE-005; a state digest that is not
sha256 of the state's bytes is an ERROR row naming the rule on the predictions that read digests
(FALSIFY-SERVE-PREFILL-001); a batch of seeded draws (1.2's sample_draws) that is not the single draws it stands for
fails FALSIFY-SERVE-SAMPLE-003. Issue #48: a constant lane digest (which made every comparison of lane states
pass) is an ERROR on FALSIFY-SERVE-PREFILL-006; each claim the wire can check (lane digests, `finished`, phases,
kept snapshots, token ids) is refused by name, and the same calls on honest engines pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from testkit_gate_cli import PYTEST

ROOT = Path(__file__).resolve().parent.parent
LIAR = ROOT / "tests" / "fixtures" / "wire" / "lying_engine.py"
FALSIFIERS = ROOT / "falsify" / "packs" / "serving" / "falsifiers"


def run(mode: str, tmp_path: Path, target: str, select: str) -> dict[str, Any]:
    env = os.environ.copy()
    env.update(PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    results = tmp_path / "results.json"
    cmd = [*PYTEST, str(FALSIFIERS / target), "-k", select]
    cmd += ["--engine", f"exec:{sys.executable} {LIAR} {mode}", "--falsify-results", str(results)]
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    return {k: v for k, v in tests.items() if str(FALSIFIERS.relative_to(ROOT)) in k}


@pytest.mark.parametrize(
    ("mode", "target", "select", "prediction", "outcome", "named"),
    [
        (
            "alias",
            "test_prefill_steps.py",
            "independent",
            "FALSIFY-SERVE-PREFILL-020",
            "error",
            "[rule: a forward advances the state by its tokens]",
        ),
        (
            "accepts",
            "test_sampling_contract.py",
            "bad_parameters",
            "FALSIFY-SERVE-SAMPLE-005",
            "failed",
            "SAMPLE-005",
        ),
        (
            "draws",
            "test_sampling_contract.py",
            "seeded_draws_fit and row5",
            "FALSIFY-SERVE-SAMPLE-003",
            "failed",
            "batch_mismatch",
        ),
        (
            "lanedigest",
            "test_lanes_host.py",
            "cancel_or_leave",
            "FALSIFY-SERVE-PREFILL-006",
            "error",
            "[rule: a lane's digest is that of the state its reported forwards build]",
        ),
        (
            "digest",
            "test_prefill_steps.py",
            "stepped",
            "FALSIFY-SERVE-PREFILL-001",
            "error",
            "[rule: the digest is sha256 of the state bytes]",
        ),
    ],
)
def test_a_lie_fails_the_prediction_it_breaks(
    tmp_path: Path, mode: str, target: str, select: str, prediction: str, outcome: str, named: str
) -> None:
    tests = run(mode, tmp_path, target, select)
    mine = {k: v for k, v in tests.items() if prediction in v["predictions"]}
    assert mine, sorted(tests)
    bad = [k for k, v in mine.items() if v["outcome"] == outcome and named in v["message"]]
    assert bad, {k: (v["outcome"], v["message"][:300]) for k, v in mine.items()}


def test_a_token_the_harness_sampler_was_not_asked_for_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """`unasked`: a generate with sampler "harness" that sends $/token without $/sample is a ProtocolViolation
    saying the engine never asked, not that the harness's sampler answered None."""
    from falsify.engines.wire.client import WireEngine
    from falsify.engines.wire.errors import ProtocolViolation

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    engine = WireEngine(f"exec:{sys.executable} {LIAR} unasked")
    try:
        session = engine.session(engine.load_model("f32"))
        with pytest.raises(ProtocolViolation) as raised:
            session.generate([1, 2, 3], 2, sampler=lambda logits: 0)
    finally:
        engine.close()
    text = str(raised.value)
    assert "(token 0) without first asking the harness's sampler ($/sample)" in text, text
    assert "None" not in text, text


def exercise(engine: Any) -> None:
    """Every claim issue #48 has the harness check, made once on `engine`: a lane host with a stream that runs to
    its max_tokens, one cancelled at a poll mid-decode and one left paused, each one's digest and status; a generate;
    a stepped prefill that keeps a snapshot at a mark."""
    from falsify.engines.cancel import HarnessCancel

    model = engine.load_model("f32")
    host = engine.lane_host(model, chunk_cap=64, pages=64, page_size=16)
    full = host.submit(list(range(3, 103)), 3)
    cut = host.submit(list(range(7, 37)), 8, cancel=HarnessCancel.with_budget(3))
    paused = host.submit(list(range(11, 151)), 2)
    host.round()
    host.cancel(paused)
    host.run()
    for sid in (full, cut, paused):
        host.stats(sid)
        host.state_digest(sid)
    assert host.stats(full).emitted == 3 and 0 < host.stats(cut).emitted < 8, host.status()
    engine.session(model).generate([5, 6, 7, 8], 3)
    if "prefill" in engine.capabilities:
        pf = engine.prefill(model, model.new_state(), list(range(20, 100)), chunk_cap=64, marks=[64])
        while not pf.step():
            pass
        assert [len(k.tokens) for k in pf.kept] == [64], pf.kept


@pytest.mark.parametrize("mode", ["v1.1", "draws"])
def test_the_checked_claims_hold_on_honest_engines(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The same calls as the lies below, on engines that tell the truth (the reference itself, 1.1 and 1.2): none is
    refused, so each check below refuses only the lie."""
    from falsify.engines.wire.client import WireEngine

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    engine = WireEngine(f"exec:{sys.executable} {LIAR} {mode}")
    try:
        exercise(engine)
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("mode", "named"),
    [
        ("lanedigest", "[rule: a lane's digest is that of the state its reported forwards build]"),
        ("lanedigest-stateless", "[rule: a digest names one state]"),
        (
            "finished",
            "lane_round 5 result finished is []; its events end streams [0, 1] (polls answered cancelled: [1]",
        ),
        ("phase", "phase 'decode' holding 0 pages; its events make it done (3 of 3 tokens, finished)"),
        ("kept", f"prefill_step result kept[0].tokens[63] is {2**62}, outside the vocabulary of 512"),
        ("keptprefix", "[rule: a kept snapshot is the prompt's prefix at a mark, taken at the chunk's end]"),
        ("bigtoken", f"generate result tokens[2] is {2**62}, outside the vocabulary of 512"),
    ],
)
def test_a_claim_the_wire_can_check_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, mode: str, named: str
) -> None:
    """Issue #48, Build 4: each lie is a ProtocolViolation naming the message, the field and the rule it broke, and
    the connection is failed (every later call raises it), never a value a falsifier would judge."""
    from falsify.engines.wire.client import WireEngine
    from falsify.engines.wire.errors import ProtocolViolation

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    engine = WireEngine(f"exec:{sys.executable} {LIAR} {mode}")
    try:
        with pytest.raises(ProtocolViolation) as raised:
            exercise(engine)
        with pytest.raises(ProtocolViolation) as again:
            engine.connection()
    finally:
        engine.close()
    assert named in str(raised.value), str(raised.value)
    assert str(again.value) == str(raised.value)
