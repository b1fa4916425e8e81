"""Engines that lie over the wire are caught by name (tests/fixtures/wire/lying_engine.py, the reference server with
one lie each): a copy_state that aliases its original turns FALSIFY-SERVE-PREFILL-020's row red (an ERROR naming
the rule a forward's reported pos broke: the harness, which knows each handle's position, sees the original's
forward move the copy); an engine that refuses nothing fails FALSIFY-SERVE-SAMPLE-005; a state digest that is not
sha256 of the state's bytes is an ERROR row naming the rule on the predictions that read digests
(FALSIFY-SERVE-PREFILL-001); a batch of seeded draws (1.2's sample_draws) that is not the single draws it stands for
fails FALSIFY-SERVE-SAMPLE-003."""

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
