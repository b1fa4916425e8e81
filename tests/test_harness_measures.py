"""The harness measures what it judges: an engine whose run record miscounts is falsified, not trusted.

tests/testkit_miscounting_engine.py is the reference engine with a run record reporting one decode forward fewer than it
ran. The cancellation falsifiers count forwards with the harness's model proxy and polls with its own token, so
FALSIFY-SERVE-CANCEL-011 (record == measurement) must turn red on it, while the reference engine passes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from testkit_gate_cli import failing_budget_cancel_gate

import falsify
from falsify.harness.instruments import CountingCancel, CountingModel

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _observe(engine, budget: int) -> dict:
    sys.path.insert(0, str(TESTS))
    try:
        from falsify.packs.serving.falsifiers.test_cancel_contract import REPORTED, measured
    finally:
        sys.path.remove(str(TESTS))
    model = CountingModel(engine.load_model("f32"))
    cancel = CountingCancel.with_budget(budget)
    run = engine.session(model).generate([1, 2, 3, 4], 10, cancel=cancel)
    f = measured(run, model, cancel, 4)
    return {k: f[k] for k in REPORTED}


def test_the_miscounting_record_is_falsified_in_process() -> None:
    sys.path.insert(0, str(TESTS))
    try:
        from testkit_miscounting_engine import MiscountingEngine
    finally:
        sys.path.remove(str(TESTS))
    from falsify.engines.loading import load_engine

    honest = _observe(load_engine("reference"), 3)
    falsify.check("FALSIFY-SERVE-CANCEL-011", **honest)
    lying = _observe(MiscountingEngine(), 3)
    assert (lying["decode_forwards"], lying["reported_decode_forwards"]) == (2, 1)  # measured 2, reported 1
    with pytest.raises(falsify.ContractViolation, match="FALSIFY-SERVE-CANCEL-011"):
        falsify.check("FALSIFY-SERVE-CANCEL-011", **lying)


def test_the_gate_fails_the_miscounting_engine_on_the_agreement_prediction(tmp_path: Path) -> None:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH", "")]))
    _, rows = failing_budget_cancel_gate(
        "testkit_miscounting_engine:MiscountingEngine", tmp_path, ROOT, env={"PYTHONPATH": path}
    )
    assert rows["FALSIFY-SERVE-CANCEL-011"]["outcome"] == "FAIL"
    failed = rows["FALSIFY-SERVE-CANCEL-011"]["values"]
    assert failed["reported_decode_forwards"] == failed["decode_forwards"] - 1, failed
    # the behaviour is the reference engine's: the claims judged on the harness's counts still hold
    for pid in ("FALSIFY-SERVE-CANCEL-001", "FALSIFY-SERVE-CANCEL-002", "FALSIFY-SERVE-CANCEL-003"):
        assert rows[pid]["outcome"] == "PASS", (pid, rows[pid])
