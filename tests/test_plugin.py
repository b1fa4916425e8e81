"""The pytest plugin, through pytester: binding in both directions, check() messages, the bound-but-unchecked
defect, and the results the gate reads. Real pytest sessions, no mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testkit_engine_texts import ONLY_GENERATE

DATA = Path(__file__).parent / "data" / "contracts"  # contract texts the tests write into a project
CONTRACT = (DATA / "plugin-demo-v1.yaml").read_text(encoding="utf-8")

BOTH_BOUND = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_forwards():
    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards={forwards})

@pytest.mark.falsifies("FALSIFY-DEMO-002")
def test_budget():
    falsify.check("FALSIFY-DEMO-002", emitted=3, n=4)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".ini", pytest="[pytest]\nfalsify_contracts = contracts\n")
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    return pytester


def test_all_bound_and_holding_passes(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7))
    result = project.runpytest("--falsify-strict")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["falsify: 1 contracts, 2 predictions in *; engine (none configured)"])


def test_violation_prints_formula_and_values(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=8))
    result = project.runpytest("--falsify-strict")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ContractViolation: FALSIFY-DEMO-001 (demo-v1) falsified: "
            "decode_forwards == emitted - 1: decode_forwards was 8, emitted was 8"
        ]
    )


def test_removing_a_marker_fails_strict_session_naming_the_prediction(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7).replace('@pytest.mark.falsifies("FALSIFY-DEMO-002")\n', "")
    )
    result = project.runpytest("--falsify-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*1 binding problem*", "*FALSIFY-DEMO-002 (*demo-v1.yaml:15) is bound to no collected test"]
    )


def test_unknown_marker_id_fails_even_without_strict(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7)
        + """
@pytest.mark.falsifies("FALSIFY-DEMO-999")
def test_ghost():
    pass
"""
    )
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_ghost: marker names 'FALSIFY-DEMO-999', which no contract*"])


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (
            'falsifies(["FALSIFY-DEMO-001"])',
            "*test_odd: falsifies() takes prediction ids as strings*got ?'FALSIFY-DEMO-001'? (list)",
        ),
        ("falsifies(123)", "*test_odd: falsifies() takes prediction ids as strings*got 123 (int)"),
        (
            'falsifies("FALSIFY-DEMO-001", require=["generate"])',
            "*test_odd: falsifies() has no keyword 'require'*",
        ),
        (
            'falsifies("FALSIFY-DEMO-001", requires="generate")',
            "*test_odd: falsifies(requires=...) takes a list*",
        ),
        (
            'falsifies("FALSIFY-DEMO-001", requires=["no-such-capability"])',
            "*test_odd: falsifies(requires=...) names unknown capability 'no-such-capability'*",
        ),
    ],
    ids=["list", "int", "other-keyword", "requires-string", "unknown-capability"],
)
def test_a_marker_falsify_cannot_read_is_a_binding_problem(
    project: pytest.Pytester, marker: str, expected: str
) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7) + f"\n@pytest.mark.{marker}\ndef test_odd():\n    pass\n"
    )
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*1 binding problem*", expected])
    assert "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()


def test_bound_test_that_never_checks_is_a_failure(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7).replace(
            '    falsify.check("FALSIFY-DEMO-002", emitted=3, n=4)', "    assert True"
        )
    )
    result = project.runpytest("--falsify-strict")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*bound to FALSIFY-DEMO-002 but never called falsify.check for it*"])


def test_check_refuses_undeclared_observable(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7).replace("n=4", "n=4, budget=4"))
    result = project.runpytest("--falsify-strict")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ContractError: FALSIFY-DEMO-002: budget not declared in*"])


def test_results_file_records_observations(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=8))
    out = project.path / "results.json"
    project.runpytest("--falsify-strict", "--falsify-results", str(out))
    tests = json.loads(out.read_text())["tests"]
    forwards = tests["test_demo.py::test_forwards"]
    assert forwards["outcome"] == "failed" and forwards["exception"] == "ContractViolation"
    assert forwards["observations"]["FALSIFY-DEMO-001"]["failed_values"] == {
        "emitted": 8,
        "decode_forwards": 8,
    }
    assert tests["test_demo.py::test_budget"]["outcome"] == "passed"


def test_broken_contract_fails_the_session_with_file_and_line(project: pytest.Pytester) -> None:
    (project.path / "contracts" / "demo-v1.yaml").write_text(
        CONTRACT.replace("if_fails: cancel", "iff: cancel")
    )
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7))
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*demo-v1.yaml:20: predictions?1?.iff: unknown key 'iff'*"])


def test_no_skip_option_fails_a_run_with_skips(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7) + "\ndef test_skip():\n    import pytest; "
        "pytest.skip('oracle missing')\n"
    )
    assert project.runpytest("--falsify-no-skip").ret == pytest.ExitCode.TESTS_FAILED
    assert project.runpytest().ret == pytest.ExitCode.OK


def test_capabilities_a_target_lacks_are_not_applicable(project: pytest.Pytester) -> None:
    (project.path / "contracts" / "demo-v1.yaml").write_text(
        CONTRACT.replace("observables:", "requires: [generate, lanes]\nobservables:")
    )
    project.makepyfile(
        only_generate=ONLY_GENERATE,
        test_demo=BOTH_BOUND.format(forwards=7).replace(
            '@pytest.mark.falsifies("FALSIFY-DEMO-002")',
            '@pytest.mark.falsifies("FALSIFY-DEMO-002", requires=["generate"])',
        ),
    )
    project.syspathinsert()
    result = project.runpytest("--falsify-strict", "--engine", "only_generate:Engine", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*NOT APPLICABLE: FALSIFY-DEMO-001 needs 'lanes' (engine): no lanes here*"])


def test_an_engine_that_cannot_load_is_one_usage_error(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7))
    result = project.runpytest("--engine", "no_such_module:Engine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*engine 'no_such_module:Engine': cannot import no_such_module*"])


def test_strict_binding_is_for_whole_suite_runs_not_a_named_file(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo=BOTH_BOUND.format(forwards=7).replace('@pytest.mark.falsifies("FALSIFY-DEMO-002")\n', "")
    )
    assert project.runpytest("--falsify-strict").ret == pytest.ExitCode.USAGE_ERROR
    project.runpytest("--falsify-strict", "test_demo.py").assert_outcomes(passed=2)


def test_a_plain_project_keeps_its_hypothesis_profile_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No contracts configured: the plugin switches no profile and registers no `engine` fixture."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    pytester.makeconftest(
        "from hypothesis import settings\n"
        "settings.register_profile('mine', max_examples=7)\n"
        "settings.load_profile('mine')\n"
    )
    pytester.makepyfile(
        test_plain="""
from hypothesis import settings

def test_profile_is_mine():
    assert settings.default.max_examples == 7

def test_no_engine_fixture(request):
    assert "engine" not in request.fixturenames
    assert request.config.pluginmanager.get_plugin("falsify-core") is None
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_an_engine_claiming_a_capability_without_its_methods_is_a_usage_error(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        claims="""
class Engine:
    name = "claims-generate"
    def supports(self, capability):
        return None if capability == "generate" else "no"
""",
        test_demo=BOTH_BOUND.format(forwards=7),
    )
    project.syspathinsert()
    result = project.runpytest("--engine", "claims:Engine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*claims capabilities it does not implement: generate lacks load_model, session*"]
    )


CANNOT_SHOW = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_forwards():
    {before}falsify.cannot_show("FALSIFY-DEMO-001", "the control  saw nothing", changed={{"2": 0}}, runs=[1, 2])

@pytest.mark.falsifies({marks})
def test_budget():
    falsify.check("FALSIFY-DEMO-002", emitted=3, n=4)
"""


def test_cannot_show_is_not_applicable_on_this_machine(project: pytest.Pytester) -> None:
    """falsify.cannot_show: the plugin records the test NOT APPLICABLE with the reason and the control's values;
    the results mark the prediction cannot_show (for `falsify mutants`), never PASS."""
    from falsify.contracts.corpus import project_corpus
    from falsify.harness.results import Outcome, per_prediction

    project.makepyfile(test_demo=CANNOT_SHOW.format(before="", marks='"FALSIFY-DEMO-002"'))
    out = project.path / "results.json"
    result = project.runpytest("--falsify-strict", "--falsify-results", str(out), "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    reason = "FALSIFY-DEMO-001 cannot be shown on this machine: the control saw nothing"
    result.stdout.fnmatch_lines([f"*NOT APPLICABLE: {reason}"])
    data = json.loads(out.read_text())
    record = data["tests"]["test_demo.py::test_forwards"]
    assert record["outcome"] == "skipped" and record["not_applicable"] == reason
    assert record["cannot_show"] == {"changed": {"2": 0}, "runs": [1, 2]}
    rows = {r.id: r for r in per_prediction(project_corpus(str(project.path / "contracts")), data)}
    assert rows["FALSIFY-DEMO-001"].outcome is Outcome.NOT_APPLICABLE and rows["FALSIFY-DEMO-001"].cannot_show
    assert rows["FALSIFY-DEMO-001"].detail == reason
    assert rows["FALSIFY-DEMO-002"].outcome is Outcome.PASS and not rows["FALSIFY-DEMO-002"].cannot_show


@pytest.mark.parametrize(
    ("before", "marks", "why"),
    [
        (
            'falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=7); ',
            '"FALSIFY-DEMO-002"',
            "the test already checked it 1 time(s)",
        ),
        (
            "",
            '"FALSIFY-DEMO-001", "FALSIFY-DEMO-002"',
            "the test is bound to FALSIFY-DEMO-001, FALSIFY-DEMO-002",
        ),
    ],
)
def test_cannot_show_is_refused_after_a_check_or_beside_another_prediction(
    project: pytest.Pytester, before: str, marks: str, why: str
) -> None:
    """A falsifier cannot retreat from a check it made, nor take another prediction's test with it."""
    source = CANNOT_SHOW.format(before=before, marks=marks)
    if "DEMO-001" in marks:  # the one test bound to both predictions
        source = source.replace(
            '@pytest.mark.falsifies("FALSIFY-DEMO-001")\n', f"@pytest.mark.falsifies({marks})\n"
        )
        source = source.split("\n\n@pytest.mark.falsifies(" + marks + ")\ndef test_budget")[0] + "\n"
    project.makepyfile(test_demo=source)
    out = project.path / "results.json"
    result = project.runpytest("--falsify-results", str(out))
    record = json.loads(out.read_text())["tests"]["test_demo.py::test_forwards"]
    assert record["outcome"] == "error" and "not_applicable" not in record
    result.stdout.fnmatch_lines([f"*falsify.cannot_show('FALSIFY-DEMO-001') refused: {why}"])


def test_cannot_show_needs_a_known_prediction_and_a_reason(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_demo="""\
import falsify, pytest
from falsify.errors import ContractError

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_forwards():
    with pytest.raises(ContractError, match="unknown prediction 'FALSIFY-DEMO-404'"):
        falsify.cannot_show("FALSIFY-DEMO-404", "why")
    with pytest.raises(ContractError, match="needs the reason"):
        falsify.cannot_show("FALSIFY-DEMO-001", "  ")
    with pytest.raises(ContractError, match="whose='weather': give one of 'engine', 'machine', 'config'"):
        falsify.cannot_show("FALSIFY-DEMO-001", "why", whose="weather")
    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=7)
"""
    )
    project.runpytest().assert_outcomes(passed=1)


def test_cannot_show_says_whose_reason_it_is(project: pytest.Pytester) -> None:
    """Issue #46: "cannot be shown on this machine" was printed for a reason that was the engine's (an engine
    that reuses no session state). `whose` names the engine, the machine (the default) or the configuration."""
    from falsify.contracts.corpus import project_corpus
    from falsify.harness.results import per_prediction

    source = CANNOT_SHOW.format(before="", marks='"FALSIFY-DEMO-002"').replace(
        '"the control  saw nothing",', '"it reuses nothing", whose="engine",'
    )
    project.makepyfile(test_demo=source)
    out = project.path / "results.json"
    project.runpytest("--falsify-results", str(out)).assert_outcomes(passed=1, skipped=1)
    data = json.loads(out.read_text())
    rows = {r.id: r for r in per_prediction(project_corpus(str(project.path / "contracts")), data)}
    assert (
        rows["FALSIFY-DEMO-001"].detail
        == "FALSIFY-DEMO-001 cannot be shown on this engine: it reuses nothing"
    )
    assert rows["FALSIFY-DEMO-001"].cannot_show


# A module that names the marker nowhere: --falsify-only does not import it (an import would fail here).
UNMARKED = 'raise RuntimeError("imported")\n\ndef test_plain():\n    pass\n'
HELPER = 'import pytest\n\nbound = pytest.mark.falsifies("FALSIFY-DEMO-001")\n'
VIA_HELPER = 'import falsify\nfrom demo_marks import bound\n\n@bound\ndef test_forwards():\n    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=7)\n'


def test_falsify_only_does_not_import_a_module_that_names_no_marker(project: pytest.Pytester) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7), test_unmarked=UNMARKED)
    result = project.runpytest("--falsify-strict", "--falsify-only", ".")
    result.assert_outcomes(passed=2)
    # Without --falsify-only every module is collected: the unmarked one is imported (its error stops the run).
    project.runpytest("--falsify-strict", ".").assert_outcomes(errors=1)
    # Named on the command line, it is collected even under --falsify-only.
    project.runpytest("--falsify-only", "test_unmarked.py").assert_outcomes(errors=1)


def test_falsify_only_collects_a_module_marked_through_a_helper_or_a_conftest(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_demo=BOTH_BOUND.format(forwards=7), demo_marks=HELPER, test_via_helper=VIA_HELPER)
    project.runpytest("--falsify-strict", "--falsify-only", ".").assert_outcomes(passed=3)
    # A conftest naming the marker could mark any item: then every module is collected.
    project.makepyfile(test_unmarked=UNMARKED, conftest="# adds falsifies markers, say\n")
    project.runpytest("--falsify-strict", "--falsify-only", ".").assert_outcomes(errors=1)


FROZEN = """\
import gc, falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_forwards():
    print("frozen objects:", gc.get_freeze_count())
    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=7)
"""


def test_a_falsifier_only_run_freezes_what_collection_built(project: pytest.Pytester) -> None:
    """--falsify-only (the gate's runs) moves the objects alive after collection out of the garbage collector's
    passes (gc.freeze); a plain pytest run of the same tests leaves the collector as it was. In a subprocess: a
    freeze would reach this test process."""
    project.makepyfile(test_demo=FROZEN)
    frozen = project.runpytest_subprocess("--falsify-only", "-s", "test_demo.py")
    frozen.assert_outcomes(passed=1)
    count = int(frozen.stdout.str().split("frozen objects: ")[1].split()[0])
    assert count > 1000, count  # pytest, the plugin and the corpus: tens of thousands of objects
    plain = project.runpytest_subprocess("-s", "test_demo.py")
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(["*frozen objects: 0*"])
