"""`falsify evidence diff OLD NEW` (falsify/evidence/diff.py): release-to-release regressions, exit 1 on any."""

from __future__ import annotations

import json
from pathlib import Path

from test_evidence import built, copy, falsify_cli, red_bundle

from falsify.evidence.diff import diff


def test_same_bundle_twice_is_no_regression(copy: Path) -> None:
    proc = falsify_cli(copy / "proj", "evidence", "diff", "evidence", "evidence")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REGRESSIONS (0):" in proc.stdout
    assert "diff: 2 predictions and 1 mutants compared; 0 regression(s)" in proc.stdout, proc.stdout


def test_a_surviving_mutant_and_a_falsified_prediction_are_regressions(copy: Path) -> None:
    root = red_bundle(copy)
    proc = falsify_cli(root, "evidence", "diff", "evidence", "red")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FALSIFY-TINY-ADD-001: PASS -> FAIL" in out, out
    assert "mutant add-off-by-one: Killed -> Survived" in out, out
    assert "verdict: GO -> NO-GO" in out, out
    assert "engine identity: subject tinyengine/engine.py:" in out, out  # the edited source
    assert "FALSIFY-TINY-ADD-001: total 3 -> 4" not in out  # 3 -> 4 is within the default factor of 2
    # Backwards (red -> green) is an improvement, not a regression.
    back = falsify_cli(root, "evidence", "diff", "red", "evidence")
    assert back.returncode == 0, back.stdout
    assert "FALSIFY-TINY-ADD-001: FAIL -> PASS" in back.stdout


def test_unreadable_bundles_are_one_line_errors(copy: Path, tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "evidence.intoto.jsonl").write_text("{not json\n")
    for target, message in ((tmp_path / "none", "not a directory"), (tmp_path / "junk", ":1: not JSON")):
        proc = falsify_cli(copy / "proj", "evidence", "diff", "evidence", str(target))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def _evidence(outcome: str, value: float, killed: bool, status: str = "Killed") -> dict:
    return {
        "predictions": [
            {
                "id": "P-1",
                "outcome": outcome,
                "values": {"err": value, "ok": True},
                "mutantsKilled": [{"id": "m"}] if killed else [],
            },
        ],
        "mutants": {"results": [{"id": "m", "status": status}]},
        "verdict": {"decision": "GO"},
        "inputs": {"engine": "e"},
    }


def test_proof_lost_and_values_moved() -> None:
    d = diff(_evidence("PASS", 1e-6, True), _evidence("PASS", 5e-6, False), factor=2.0)
    assert d.regressions == ["P-1: proven -> UNPROVEN (no mutant turns it red any more)"]
    assert d.moved == ["P-1: err 1e-06 -> 5e-06"]  # bools are not measurements
    same = diff(_evidence("PASS", 1e-6, True), _evidence("PASS", 1.9e-6, True), factor=2.0)
    assert not same.regressions and not same.moved and not same.changes
