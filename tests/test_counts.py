"""One set of counts: for one gate run, pytest's summary line, gate.json, the JUnit XML and the evidence verdict
give the same test numbers (issue 20: the gate said "101 tests run of 118" where pytest said "120 tests ... 19
skipped", missing the module skipped at collection).

The tiny project of tests/test_evidence.py, plus falsifiers that land in every pytest category: failed, error
(in setup), xfailed, skipped (plainly, NOT APPLICABLE by name, and a whole module at collection) and deselected
(an unbound test, which the gate's --falsify-only drops).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_evidence import ENGINE, evidence_args, falsify_cli, make_project

from falsify.evidence import STATEMENTS
from falsify.evidence.verdict import junit_totals, junit_view
from falsify.harness.results import PYTEST_COUNTS, counts_text

NOT_APPLICABLE_PREDICTION = """
  - id: FALSIFY-TINY-ADD-003
    claim: Generating costs no extra operation.
    formula: extra_ops <= 0
    domain: {}
    requires: [generate]
    if_fails: the engine does work it throws away
    unproven_because: the tiny engine cannot generate, so no planted bug can show here
"""

MORE_FALSIFIERS = """
import falsify
import pytest


@pytest.mark.falsifies("FALSIFY-TINY-ADD-003")
def test_generate_is_not_applicable(engine):
    falsify.check("FALSIFY-TINY-ADD-003", extra_ops=0)


@pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
def test_skipped():
    pytest.skip("skipped on purpose")


@pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
@pytest.mark.xfail(reason="a known wrong sum", strict=True)
def test_known_wrong_sum():
    falsify.check("FALSIFY-TINY-ADD-001", total=4, a=1, b=2)


@pytest.fixture
def broken():
    raise RuntimeError("the fixture cannot start")


@pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
def test_setup_error(broken):
    falsify.check("FALSIFY-TINY-ADD-001", total=3, a=1, b=2)


@pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
def test_wrong_sum():
    falsify.check("FALSIFY-TINY-ADD-001", total=4, a=1, b=2)


def test_unbound():
    pass
"""

SKIPPED_MODULE = """
import pytest

pytest.importorskip("no_such_module_falsify_counts", reason="skipped at collection")


# a falsifier module (it names the marker), so --falsify-only collects it and counts the skip
@pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
def test_never_collected():
    pass
"""


def pytest_summary(stdout: str) -> dict[str, int]:
    """pytest's own numbers: `collected N items` and the last summary line (`1 failed, 2 passed, ... in 0.5s`)."""
    collected = re.search(r"^collected (\d+) items?", stdout, re.M)
    lines = [
        line for line in stdout.splitlines() if re.search(r"\d+ (passed|failed|skipped).* in [\d.]+s", line)
    ]
    assert collected and lines, f"no pytest summary in:\n{stdout}"
    found = {"collected": int(collected.group(1))}
    for n, word in re.findall(r"(\d+) (\w+)", lines[-1].split(" in ")[0]):
        found[{"error": "errors", "warning": "warnings"}.get(word, word)] = int(n)
    return {k: found.get(k, 0) for k in ("collected", *PYTEST_COUNTS)}


def test_gate_junit_pytest_and_evidence_give_the_same_counts(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    contract = root / "contracts" / "tiny-add-v1.yaml"
    text = contract.read_text(encoding="utf-8")
    contract.write_text(text.replace("costs:", NOT_APPLICABLE_PREDICTION.lstrip("\n") + "costs:"), "utf-8")
    (root / "tests" / "test_more.py").write_text(MORE_FALSIFIERS, encoding="utf-8")
    (root / "tests" / "test_skipped_module.py").write_text(SKIPPED_MODULE, encoding="utf-8")

    # -rN: no short summary, so the last "... in Ns" line is pytest's count; not -q: the "collected" line.
    gate = falsify_cli(root, "gate", "--engine", ENGINE, "--out", ".falsify/gate", "--", "-v", "-rN")
    assert gate.returncode == 1, gate.stdout + gate.stderr  # a falsified prediction and an ERROR
    pytest_counts = pytest_summary(gate.stdout)
    gate_json = json.loads((root / ".falsify" / "gate" / "gate.json").read_text(encoding="utf-8"))
    tests = gate_json["tests"]
    # What the project holds, counted by hand: 8 items (test_add, test_add_any and the six above); the
    # unbound one deselected; skipped: the plain skip, the NOT APPLICABLE one and the module at collection.
    assert tests == {
        "collected": 8,
        "passed": 2,
        "failed": 1,
        "errors": 1,
        "skipped": 3,
        "xfailed": 1,
        "xpassed": 0,
        "deselected": 1,
        "not_applicable": 1,
    }
    assert {k: v for k, v in tests.items() if k != "not_applicable"} == pytest_counts
    junit = junit_totals((root / ".falsify" / "gate" / "junit.xml").read_bytes())
    assert junit == junit_view(tests) == {"tests": 8, "failures": 1, "errors": 1, "skipped": 4}
    phrase = counts_text(tests)
    assert phrase == (
        "8 tests collected: 2 passed, 1 failed, 1 errors, 3 skipped (1 not applicable), 1 xfailed, 1 deselected"
    )
    assert f"; {phrase}; engine {ENGINE}" in gate_json["verdict"]
    assert gate_json["verdict"] in gate.stdout

    evidence = falsify_cli(root, *evidence_args("evidence"))
    assert evidence.returncode == 1, evidence.stdout + evidence.stderr  # NO-GO, with a bundle
    lines = (root / "evidence" / STATEMENTS).read_text(encoding="utf-8").splitlines()
    (verdict,) = [s["predicate"]["verdict"] for s in map(json.loads, lines) if "verdict" in s["predicate"]]
    assert verdict["pytest"] == tests
    assert verdict["tests"] == junit
    assert f"; {phrase}; " in verdict["summary"]
    assert not [r for r in verdict["reasons"] if "differ from pytest" in r]


def test_junit_totals_that_differ_from_pytests_count_are_no_go() -> None:
    from falsify.evidence.verdict import decide

    counts = dict.fromkeys(("collected", *PYTEST_COUNTS, "not_applicable"), 0) | {"collected": 3, "passed": 3}
    mutants = {"run": False, "declared": []}
    same = decide(
        ["PASS"], {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}, mutants, pytest_counts=counts
    )
    assert same["decision"] == "GO" and same["pytest"] == counts
    assert (
        "; 3 tests collected: 3 passed, 0 failed, 0 errors, 0 skipped (0 not applicable); " in same["summary"]
    )
    fewer = decide(
        ["PASS"], {"tests": 2, "failures": 0, "errors": 0, "skipped": 0}, mutants, pytest_counts=counts
    )
    assert fewer["decision"] == "NO-GO"
    assert fewer["reasons"] == [
        "JUnit totals {'tests': 2, 'failures': 0, 'errors': 0, 'skipped': 0} differ from pytest's count of the "
        "same run {'tests': 3, 'failures': 0, 'errors': 0, 'skipped': 0}"
    ]
