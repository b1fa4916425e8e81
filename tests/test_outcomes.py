"""A prediction's outcome comes from all its bound tests: a skipped one makes it NOT RUN (never PASS), a prediction
needing a missing oracle is NOT APPLICABLE by name, and one whose checks all held over nothing is NOT RUN
(vacuous). Real pytest sessions (pytester) read back through the gate's own per_prediction and verdict."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from testkit_engine_texts import ONLY_GENERATE
from testkit_gate_cli import run_gate

from falsify.contracts.corpus import load_corpus
from falsify.harness.gate import verdict
from falsify.harness.results import Outcome, per_prediction

DATA = Path(__file__).parent / "data" / "contracts"  # contract texts the tests write into a project
CONTRACT = (DATA / "outcomes-demo-v1.yaml").read_text(encoding="utf-8")

TESTS = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_runs():
    falsify.check("FALSIFY-DEMO-001", emitted=3)

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_needs_something():
    {second}
    falsify.check("FALSIFY-DEMO-001", emitted=4)

@pytest.mark.falsifies("FALSIFY-DEMO-002")
@pytest.mark.parametrize("gaps", {gaps})
def test_gaps(gaps):
    falsify.check("FALSIFY-DEMO-002", gaps=gaps)

@pytest.mark.falsifies("FALSIFY-DEMO-003")
def test_against_the_oracle():
    falsify.check("FALSIFY-DEMO-003", emitted=3)
"""


def run(pytester: pytest.Pytester, *, second: str = "pass", gaps: str = "[[1, 1], [1]]") -> dict:
    pytester.makefile(".ini", pytest="[pytest]\nfalsify_contracts = contracts\n")
    (pytester.path / "contracts").mkdir(exist_ok=True)
    (pytester.path / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    pytester.makepyfile(test_demo=TESTS.format(second=second, gaps=gaps))
    out = pytester.path / "results.json"
    pytester.runpytest("--falsify-results", str(out), "-p", "no:cacheprovider")
    results = json.loads(out.read_text())
    corpus = load_corpus([Path(pytester.path / "contracts")])
    rows = {r.id: r for r in per_prediction(corpus, results)}
    line, ok = verdict(corpus, list(rows.values()), results, "reference")
    return {"rows": rows, "verdict": line, "ok": ok}


def test_all_run_and_hold(pytester: pytest.Pytester) -> None:
    got = run(pytester)
    rows = got["rows"]
    assert rows["FALSIFY-DEMO-001"].outcome is Outcome.PASS
    assert rows["FALSIFY-DEMO-002"].outcome is Outcome.PASS
    assert got["ok"], got["verdict"]


def test_one_skipped_bound_test_makes_the_prediction_not_run(pytester: pytest.Pytester) -> None:
    got = run(pytester, second="pytest.skip('needs an optional package')")
    row = got["rows"]["FALSIFY-DEMO-001"]
    assert row.outcome is Outcome.NOT_RUN and row.skipped == 1
    assert row.detail.startswith("1 of 2 bound tests not run; first: skipped: needs an optional package")
    assert not got["ok"]
    assert "gate: FAIL" in got["verdict"] and "2 skipped (1 not applicable)" in got["verdict"]


def test_a_missing_oracle_is_not_applicable_by_name(pytester: pytest.Pytester) -> None:
    row = run(pytester)["rows"]["FALSIFY-DEMO-003"]
    assert row.outcome is Outcome.NOT_APPLICABLE
    assert (
        row.detail
        == "FALSIFY-DEMO-003 needs oracle 'no_such_oracle_pkg' (machine): not installed here (tox -e oracle runs it)"
    )


def test_checks_over_nothing_are_vacuous_and_min_checks_counts_the_rest(pytester: pytest.Pytester) -> None:
    got = run(pytester, gaps="[[], [], [1]]")  # min_checks 2, only one check saw a gap
    row = got["rows"]["FALSIFY-DEMO-002"]
    assert (row.outcome, row.checks, row.vacuous) == (Outcome.NOT_RUN, 3, 2)
    assert row.detail.startswith("vacuous: 1 non-vacuous of 3 checks, needs 2")
    assert not got["ok"]


def test_the_gate_exits_non_zero_when_a_bound_test_is_skipped(pytester: pytest.Pytester) -> None:
    """`falsify gate` on a scratch project where one bound test skips: NOT RUN, exit 1."""
    pytester.makefile(".toml", pyproject='[tool.falsify]\ncontracts = "contracts"\ntests = "tests"\n')
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_demo.py").write_text(
        TESTS.format(second="pytest.skip('oracle missing')", gaps="[[1, 1]]")
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    proc, rows = run_gate("reference", pytester.path / "out", cwd=pytester.path, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rows["FALSIFY-DEMO-001"]["outcome"] == "NOT RUN"
    assert rows["FALSIFY-DEMO-003"]["outcome"] == "NOT APPLICABLE"
    assert "2 skipped (1 not applicable)" in proc.stdout and "gate: FAIL" in proc.stdout


CORNERS = (DATA / "outcomes-corners-demo-v1.yaml").read_text(encoding="utf-8")

CORNER_TESTS = """\
import falsify, pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.falsifies("FALSIFY-DEMO-001")
@settings(max_examples=3, database=None)
@falsify.corner_examples("FALSIFY-DEMO-001", extra=0)
@given(n=st.integers(2, 15), extra=st.integers(0, 0))
def test_budget(n, extra):
    falsify.check("FALSIFY-DEMO-001", emitted={emitted}, n=n)
"""


def test_declared_corners_are_drawn_first_and_counted(pytester: pytest.Pytester) -> None:
    """The corners' examples run though random draws (2..15) never reach them; a corner no check reaches (emitted
    == n when the test always emits 0) makes the prediction NOT RUN naming it; reaching every one is PASS."""
    rows = {}
    for emitted in ("0", "n"):
        pytester.makefile(".ini", pytest="[pytest]\nfalsify_contracts = contracts\n")
        (pytester.path / "contracts").mkdir(exist_ok=True)
        (pytester.path / "contracts" / "demo-v1.yaml").write_text(CORNERS)
        pytester.makepyfile(test_demo=CORNER_TESTS.format(emitted=emitted))
        out = pytester.path / "results.json"
        pytester.runpytest("--falsify-results", str(out), "-p", "no:cacheprovider")
        corpus = load_corpus([Path(pytester.path / "contracts")])
        [rows[emitted]] = per_prediction(corpus, json.loads(out.read_text()))
    missed = rows["0"]
    assert (missed.outcome, missed.corners_cell) == (Outcome.NOT_RUN, "2/3")
    assert missed.corners_reached == ("smallest", "largest")
    assert missed.detail == "corners 2/3: no check reached emitted-at-the-limit (emitted == n)"
    full = rows["n"]
    assert (full.outcome, full.corners_cell, full.detail) == (Outcome.PASS, "3/3", "")


SHARED = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001", "FALSIFY-DEMO-002")
def test_both():
    broken = []
    for pid, observed in [("FALSIFY-DEMO-001", {"emitted": 9}), ("FALSIFY-DEMO-002", {"gaps": [1, 2]})]:
        try:
            falsify.check(pid, **observed)
        except falsify.ContractViolation as exc:
            broken.append(exc)
    raise broken[0]

@pytest.mark.falsifies("FALSIFY-DEMO-002")
def test_gaps_again():
    falsify.check("FALSIFY-DEMO-002", gaps=[1])

@pytest.mark.falsifies("FALSIFY-DEMO-003")
def test_against_the_oracle():
    falsify.check("FALSIFY-DEMO-003", emitted=3)
"""


def run_shared(pytester: pytest.Pytester, contract: str, tests: str, *args: str) -> dict[str, Any]:
    pytester.makefile(".ini", pytest="[pytest]\nfalsify_contracts = contracts\n")
    (pytester.path / "contracts").mkdir(exist_ok=True)
    (pytester.path / "contracts" / "demo-v1.yaml").write_text(contract)
    pytester.makepyfile(test_demo=tests)
    out = pytester.path / "results.json"
    pytester.runpytest("--falsify-results", str(out), "-p", "no:cacheprovider", *args)
    corpus = load_corpus([Path(pytester.path / "contracts")])
    return {r.id: r for r in per_prediction(corpus, json.loads(out.read_text()))}


def test_each_prediction_failing_in_one_test_shows_its_own_check(pytester: pytest.Pytester) -> None:
    """One test, two predictions falsified: the test raises DEMO-001's violation, and DEMO-002's row shows its own
    failed check, not DEMO-001's message (issue #24: CANCEL-008's row named CANCEL-002)."""
    rows = run_shared(pytester, CONTRACT, SHARED)
    first, second = rows["FALSIFY-DEMO-001"], rows["FALSIFY-DEMO-002"]
    assert first.outcome is Outcome.FAIL and second.outcome is Outcome.FAIL
    assert first.detail == "FALSIFY-DEMO-001 (demo-v1) falsified: emitted <= 8: emitted was 9"
    assert second.detail == "FALSIFY-DEMO-002 (demo-v1) falsified: gaps == [1] * len(gaps): gaps was [1, 2]"
    assert second.values == {"gaps": [1, 2]}


LANES_CONTRACT = CONTRACT.replace("observables:", "requires: [generate]\nobservables:").replace(
    "    if_fails: too many", "    requires: [lanes]\n    if_fails: too many"
)
LANES_TESTS = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001", "FALSIFY-DEMO-002")
def test_both():
    falsify.check("FALSIFY-DEMO-001", emitted=3)
    falsify.check("FALSIFY-DEMO-002", gaps=[1])

@pytest.mark.falsifies("FALSIFY-DEMO-003")
def test_against_the_oracle():
    falsify.check("FALSIFY-DEMO-003", emitted=3)
"""


def test_a_not_applicable_reason_names_the_predictions_own_need(pytester: pytest.Pytester) -> None:
    """DEMO-001 needs lanes, DEMO-002 does not but shares its test; neither row says the other's need is its own
    (issue #24: PREFILL-009 said "PREFILL-008 needs 'lanes'")."""
    pytester.makepyfile(only_generate=ONLY_GENERATE)
    pytester.syspathinsert()
    rows = run_shared(pytester, LANES_CONTRACT, LANES_TESTS, "--engine", "only_generate:Engine")
    assert rows["FALSIFY-DEMO-001"].outcome is Outcome.NOT_APPLICABLE
    assert rows["FALSIFY-DEMO-001"].detail == "FALSIFY-DEMO-001 needs 'lanes' (engine): no lanes here"
    assert rows["FALSIFY-DEMO-002"].outcome is Outcome.NOT_APPLICABLE
    assert rows["FALSIFY-DEMO-002"].detail == (
        "FALSIFY-DEMO-002's test also falsifies FALSIFY-DEMO-001, which this engine cannot run: "
        "FALSIFY-DEMO-001 needs 'lanes' (engine): no lanes here"
    )


def test_predictions_that_all_lack_a_capability_each_name_their_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(only_generate=ONLY_GENERATE)
    pytester.syspathinsert()
    both = LANES_CONTRACT.replace("requires: [generate]\n", "requires: [generate, quant]\n")
    rows = run_shared(pytester, both, LANES_TESTS, "--engine", "only_generate:Engine")
    assert rows["FALSIFY-DEMO-001"].detail == (
        "FALSIFY-DEMO-001 needs 'quant' (engine): no quant here; needs 'lanes' (engine): no lanes here"
    )
    assert rows["FALSIFY-DEMO-002"].detail == "FALSIFY-DEMO-002 needs 'quant' (engine): no quant here"
