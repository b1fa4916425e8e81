"""Reports: our Stryker-schema JSON validates against the schema file from the npm package
`mutation-testing-report-schema` (tests/data/), and the HTML page renders it with nothing fetched."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from falsify.contracts.corpus import Mutant
from falsify.mutation import stryker
from falsify.mutation.semantic import report
from falsify.mutation.semantic.edits import Span
from falsify.mutation.semantic.runner import Control, MutantOutcome, MutantResult, Run, Settings
from falsify.project import Project

SCHEMA = json.loads(
    (
        Path(__file__).parent
        / "data"
        / "mutation-testing-report-schema"
        / "mutation-testing-report-schema.json"
    ).read_text(encoding="utf-8")
)


def _mutant(mid: str, kills: tuple[str, ...]) -> Mutant:
    return Mutant(
        mid,
        "planted </script> bug",
        "pkg/mod.py",
        "f",
        "delete",
        "x = 1",
        None,
        None,
        None,
        kills,
        f"mutants/{mid}.yaml",
        1,
    )


def _run(tmp_path: Path) -> Run:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    x = 1\n    return x\n", encoding="utf-8")
    project = Project(tmp_path, tmp_path / "contracts", tmp_path / "mutants", tmp_path / "tests")
    from falsify.contracts.corpus import Corpus

    run = Run(project, Corpus(), Settings(), jobs=2, wall=3.0)
    run.control = Control(True, 1.0, {"tests/t.py::a": ("P-001",)}, [], "", {}, ("tests/t.py::a",))
    span = Span(2, 5, 2, 10)
    diff = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,3 +1,2 @@\n def f():\n-    x = 1\n     return x\n"
    run.results = [
        MutantResult(
            _mutant("killed-one", ("P-001", "P-002")),
            MutantOutcome.KILLED,
            ("P-001",),
            ("P-002",),
            ("P-003",),
            {"P-001": "FAIL", "P-002": "PASS", "P-003": "FAIL"},
            ("tests/t.py::a",),
            ("tests/t.py::a",),
            1.5,
            1.2,
            "P-001: falsified",
            diff,
            span,
        ),
        MutantResult(
            _mutant("survivor", ("P-001",)),
            MutantOutcome.SURVIVED,
            (),
            ("P-001",),
            (),
            {"P-001": "PASS"},
            (),
            ("tests/t.py::a",),
            1.0,
            0.8,
            "1 falsifiers stayed green",
            diff,
            span,
        ),
        MutantResult(_mutant("drifted", ("P-001",)), MutantOutcome.STALE, detail="matches 0 statements"),
        MutantResult(_mutant("hangs", ("P-001",)), MutantOutcome.TIMEOUT, seconds=60.0, diff=diff, span=span),
        MutantResult(_mutant("broken", ("P-001",)), MutantOutcome.ERROR, detail="does not compile"),
    ]
    return run


def test_semantic_report_validates_against_the_stryker_schema(tmp_path: Path) -> None:
    data = report.to_stryker(_run(tmp_path))
    jsonschema.validate(data, SCHEMA)
    statuses = {m["id"]: m["status"] for m in data["files"]["pkg/mod.py"]["mutants"]}
    assert statuses == {
        "killed-one": "Killed",
        "survivor": "Survived",
        "drifted": "Ignored",
        "hangs": "Timeout",
        "broken": "RuntimeError",
    }
    _, score = stryker.score(data)
    assert score == pytest.approx(100 * 2 / 3)  # killed + timeout over killed + timeout + survived


def test_a_report_missing_a_required_field_is_rejected_by_the_schema(tmp_path: Path) -> None:
    data = report.to_stryker(_run(tmp_path))
    del data["files"]["pkg/mod.py"]["mutants"][0]["location"]
    with pytest.raises(jsonschema.ValidationError, match="'location' is a required property"):
        jsonschema.validate(data, SCHEMA)


def test_html_is_self_contained_and_embeds_the_report(tmp_path: Path) -> None:
    data = report.to_stryker(_run(tmp_path))
    page = stryker.render_html(data, "t")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert "http://" not in page.replace(json.dumps(data, sort_keys=True), "")
    blob = re.search(r"<script type='application/json' id=report>(.*)</script>", page, re.S)
    assert blob is not None
    assert json.loads(blob.group(1).replace("<\\/", "</")) == json.loads(json.dumps(data, sort_keys=True))
    assert "planted &lt;/script&gt; bug" in page  # escaped in the table, never closing a tag


def test_kill_matrix_and_verdict_state_their_denominators(tmp_path: Path) -> None:
    run = _run(tmp_path)
    matrix = report.kill_matrix(run)
    row = next(line for line in matrix.splitlines() if line.startswith("P-002"))
    assert row.split()[1] == "!"  # listed in kills, stayed green
    assert next(line for line in matrix.splitlines() if line.startswith("P-003")).split()[1] == "x"
    text, ok = report.verdict(run)
    assert not ok
    # its one killed mutant went red on only part of its kill list: PARTLY KILLED, no kill unless --lenient
    assert (
        "5 mutants: 0 killed, 1 partly killed, 1 survived, 1 stale, 1 timeout, 1 error (1 not by every listed "
        "prediction); 1 of 3 applied timed out"
    ) in text
    assert "a timeout is not a kill, and no mutant was killed; killed 0 of 3 applied" in text
    lenient, ok = report.verdict(run, lenient=True)
    assert not ok  # the survivor still fails it
    assert "(1 not by every listed prediction), accepted (--lenient)" in lenient
    assert "a timeout is not a kill; killed 1 of 3 applied" in lenient
    assert report.outcome_word(run.results[0]) == "PARTLY KILLED"
    assert "PARTLY KILLED" in report.render_rows(run) and "(PARTLY KILLED)" in matrix


def test_a_mutant_this_machine_cannot_show_is_counted_apart_and_passes(tmp_path: Path) -> None:
    """CANNOT SHOW (every prediction it kills NOT APPLICABLE on this machine, falsify.cannot_show): not a failure,
    not among the applied ones, reported Ignored with its predictions on statusReason's first line."""
    run = _run(tmp_path)
    run.results = [
        run.results[0],
        MutantResult(
            _mutant("unpinned", ("P-009",)),
            MutantOutcome.CANNOT_SHOW,
            detail="cannot be shown here: P-009\nP-009 cannot be shown on this machine: no change",
        ),
    ]
    text, ok = report.verdict(run, lenient=True)  # its killed mutant is killed by only part of its list
    assert ok, text
    assert (
        "2 mutants: 0 killed, 1 partly killed, 0 survived, 0 stale, 0 timeout, 0 error, 1 cannot show (1 not"
        in text
    )
    assert "killed 1 of 1 applied" in text
    data = report.to_stryker(run)
    jsonschema.validate(data, SCHEMA)
    entry = next(m for m in data["files"]["pkg/mod.py"]["mutants"] if m["id"] == "unpinned")
    assert entry["status"] == "Ignored"
    assert entry["statusReason"].splitlines()[0] == "cannot be shown here: P-009"
    assert report.cannot_show(run) == {"P-009"}


def test_the_bundles_copy_of_a_report_carries_no_time_and_no_control_provenance(tmp_path: Path) -> None:
    """Two runs of the same tree: the first runs the control, the second reuses the stored one and its timed-out
    mutant ran a little longer. The raw reports say so; an evidence bundle's copies are the same bytes."""
    from dataclasses import replace

    from falsify.evidence.digests import canonical
    from falsify.evidence.mutation import normalise

    (tmp_path / "again").mkdir()
    fresh, reused = _run(tmp_path), _run(tmp_path / "again")
    assert reused.control is not None
    reused.control = replace(
        reused.control, reused=".falsify/control/0123abcd.json", recorded="2026-12-03T05:25:33Z"
    )
    for run, seconds in ((fresh, 61.3), (reused, 64.8)):
        run.results = [
            replace(r, seconds=seconds, detail=f"the falsifiers ran past {seconds:.0f} s")
            if r.outcome is MutantOutcome.TIMEOUT
            else r
            for r in run.results
        ]
    raw = [report.to_stryker(run) for run in (fresh, reused)]
    assert raw[1]["config"]["control"].startswith("reused from .falsify/control/0123abcd.json")
    hangs = [
        next(m for m in r["files"]["pkg/mod.py"]["mutants"] if m["id"] == "hangs")["statusReason"]
        for r in raw
    ]
    assert hangs == ["timed out\nthe falsifiers ran past 61 s", "timed out\nthe falsifiers ran past 65 s"]
    kept = [
        canonical(normalise(r, root)) for r, root in zip(raw, (tmp_path, tmp_path / "again"), strict=True)
    ]
    assert kept[0] == kept[1]


def test_not_applicable_predictions_are_not_counted_unproven(tmp_path: Path) -> None:
    """Issue #46: `falsify mutants` said "23 proven, 16 UNPROVEN" where all 16 were NOT APPLICABLE to the
    engine. NOT APPLICABLE comes from the control run, and for predictions the control did not run, from the
    latest gate on the same engine; a gate on another engine says nothing."""
    from falsify.contracts.corpus import load_corpus
    from falsify.harness.results import Outcome, PredictionResult
    from falsify.mutation.semantic.cli import GATE_RESULTS, not_applicable

    contracts = tmp_path / "contracts"
    contracts.mkdir()
    demo = Path(__file__).parent / "data" / "contracts" / "proven-demo-v1.yaml"
    (contracts / "demo-v1.yaml").write_text(demo.read_text(encoding="utf-8"), encoding="utf-8")
    corpus = load_corpus([contracts])
    project = Project(tmp_path, contracts, tmp_path / "mutants", tmp_path / "tests")
    run = Run(project, corpus, Settings(engine="mine:make"), jobs=1, wall=1.0)
    passed = PredictionResult("FALSIFY-DEMO-001", "demo-v1", Outcome.PASS, ("t::a",), (), 0.0, 1, "", None)
    run.control = Control(True, 1.0, {"t::a": ("FALSIFY-DEMO-001",)}, [passed], "", {}, ("t::a",))
    run.results = [
        MutantResult(_mutant("limit-off", ("FALSIFY-DEMO-001",)), MutantOutcome.KILLED, ("FALSIFY-DEMO-001",))
    ]
    assert not_applicable(project, corpus, "mine:make", run) == []  # no gate run: it stays UNPROVEN
    assert "1 proven, 1 unproven with a reviewed reason, 1 UNPROVEN" in report.verdict(run)[0]
    gate = tmp_path / GATE_RESULTS
    gate.parent.mkdir(parents=True)
    record = {
        "predictions": ["FALSIFY-DEMO-002"],
        "outcome": "skipped",
        "not_applicable": "FALSIFY-DEMO-002 needs 'lanes' (engine): no lanes",
    }
    for engine, expected in (("other:make", []), ("mine:make", ["FALSIFY-DEMO-002"])):
        gate.write_text(json.dumps({"engine": engine, "tests": {"t::b": record}}), encoding="utf-8")
        assert not_applicable(project, corpus, "mine:make", run) == expected
    n_a = not_applicable(project, corpus, "mine:make", run)
    text, ok = report.verdict(run, not_applicable=n_a)
    assert ok, text
    assert text.endswith("3 predictions: 1 proven, 1 unproven with a reviewed reason, 1 not applicable")
    lines = report.proof_lines(run, n_a)
    assert "UNPROVEN" not in lines and "1 not applicable by this run" in lines
