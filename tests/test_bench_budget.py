"""benchmarks/gate.py --budget: issue #28's budget as a fraction of the issue's tree's cost, side by side (the
arithmetic only; the figures themselves are measured, never asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "bench_gate", Path(__file__).parent.parent / "benchmarks" / "gate.py"
)
assert spec and spec.loader
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)


def comparison(before: list[float], after: list[float]) -> dict:
    return {
        "runs": {
            gate.BUDGET_REV: [{"cpu_s": c} for c in before],
            "this tree": [{"cpu_s": c} for c in after],
        }
    }


def test_the_budget_is_the_median_of_the_pairs_ratios_against_15_over_the_issue_s_figure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert gate.budget(comparison([20.0, 40.0, 30.0], [10.0, 22.0, 15.0])) == {
        "ratio": 0.5,
        "allowed": round(15 / 28.9, 4),
        "met": True,
    }
    assert "costs 0.500 of 0f29f37's" in capsys.readouterr().out
    # Pair by pair (0.8, 0.35, 0.5333): the two sides' medians, 14 / 30 = 0.467, would meet the budget.
    result = gate.budget(comparison([10.0, 40.0, 30.0], [8.0, 14.0, 16.0]))
    assert result["ratio"] == 0.5333 and not result["met"]
    assert "NOT met" in capsys.readouterr().out
