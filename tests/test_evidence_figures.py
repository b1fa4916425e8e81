"""The evidence report's figures (falsify/evidence/figures.py): what they draw from the statements, and that the
same statements give the same bytes."""

from __future__ import annotations

from typing import Any

from falsify.evidence.figures import gap_rows, gaps, kill_matrix, mutmut, tolerance_rows, tolerances


def evidence() -> dict[str, Any]:
    return {
        "predictions": [
            {
                "id": "FALSIFY-X-001",
                "formula": "max_err <= 1e-4 * scale",
                "values": {"max_err": 2e-6, "scale": 3.0},
                "mutants": [{"id": "m1"}],
                "mutantsKilled": [{"id": "m1"}],
            },
            {
                "id": "FALSIFY-X-002",
                "formula": "gaps == [1] * len(gaps)",
                "values": {"gaps": [1, 1, 2, 1]},
                "mutants": [{"id": "m2"}],
                "mutantsKilled": [],
            },
            {
                "id": "FALSIFY-X-003",
                "formula": "err < bound",
                "values": {"err": 0.5, "bound": 0.25},
                "mutants": [],
                "mutantsKilled": [],
            },
            {
                "id": "FALSIFY-X-004",
                "formula": "x <= 0",
                "values": {"x": 0},
                "mutants": [],
                "mutantsKilled": [],
            },
        ],
        "mutants": {"results": [{"id": "m1", "status": "Killed"}, {"id": "m2", "status": "Survived"}]},
    }


def test_kill_matrix_marks_killed_and_listed_cells() -> None:
    drawn = kill_matrix(evidence())
    assert drawn is not None
    svg, caption = drawn
    assert svg.count('fill="#cf222e"') == 1  # m1 turned X-001 red
    assert svg.count('stroke="#d4a72c"') == 1  # X-002 lists m2, which did not turn it red
    assert "4 predictions x 2 mutants" in caption and "3 of 4 predictions turned red by no mutant" in caption
    assert kill_matrix({"predictions": [], "mutants": {"results": []}}) is None


def test_tolerances_take_single_comparisons_with_positive_sides() -> None:
    rows = tolerance_rows(evidence())
    assert rows == [
        ("FALSIFY-X-001", "max_err <= 1e-4 * scale", 2e-6, 1e-4 * 3.0),
        ("FALSIFY-X-003", "err < bound", 0.5, 0.25),
    ]  # X-004's measured side is 0: no log scale for it
    drawn = tolerances(evidence())
    assert drawn is not None
    assert "2 predictions" in drawn[1] and "1 over the bound" in drawn[1]
    assert drawn[0].count("<circle") == 2


def test_gaps_and_mutmut() -> None:
    assert gap_rows(evidence()) == [("FALSIFY-X-002", "gaps", [1.0, 1.0, 2.0, 1.0])]
    drawn = gaps(evidence())
    assert drawn is not None and drawn[0].count("<rect") == 4
    bar = mutmut({"killed": 90, "survived": 8, "timeout": 2, "no_tests": 0, "floor": 0.9})
    assert bar is not None and "kill rate 90.0%" in bar[1] and "floor 90%" in bar[0]
    assert "sample" not in bar[1]
    drawn_sample = mutmut(
        {"killed": 9, "survived": 1, "timeout": 0, "no_tests": 0, "floor": 0.9, "sample": [3, 4]}
    )
    assert (
        drawn_sample is not None and "of 10; kill rate 90.0% (sample 3 of 4 of the mutants" in drawn_sample[1]
    )
    assert mutmut(None) is None and mutmut({"killed": 0}) is None


def test_same_statements_same_bytes() -> None:
    for draw in (kill_matrix, tolerances, gaps):
        first, second = draw(evidence()), draw(evidence())
        assert first is not None and first == second
