"""Which predictions are shown able to fail (falsify/harness/proven.py): from a `falsify mutants` report to
PROVEN / UNPROVEN / EXCUSED / NOT MEASURED per prediction, and the gate's PROVEN column that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from falsify.contracts.corpus import load_corpus
from falsify.harness.gate import mutant_proofs, render
from falsify.harness.proven import (
    Proof,
    cannot_show_from_stryker,
    proofs,
    red_from_stryker,
    report_engine,
    shown_here,
    stale_files,
    summary,
)
from falsify.harness.results import Outcome, PredictionResult
from falsify.project import Project

DATA = Path(__file__).parent / "data" / "contracts"  # contract texts the tests write into a project
CONTRACT = (DATA / "proven-demo-v1.yaml").read_text(encoding="utf-8")

MUTANT = """\
id: limit-off
description: the limit is one too high
file: demo/loop.py
function: run
op: replace
statement: "limit = 8"
replacement: "limit = 9"
kills: [FALSIFY-DEMO-001]
"""

SOURCE = "def run():\n    limit = 8\n    return limit\n"


def project(tmp_path: Path) -> Project:
    for name, text in {
        "contracts/demo-v1.yaml": CONTRACT,
        "mutants/limit-off.yaml": MUTANT,
        "demo/loop.py": SOURCE,
        "pyproject.toml": '[tool.falsify]\ncontracts = "contracts"\n',
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return Project(tmp_path, tmp_path / "contracts", tmp_path / "mutants", tmp_path / "tests")


ENGINE = "demo.engine:make_engine"


def stryker(status: str, reason: str, source: str = SOURCE, engine: str | None = ENGINE) -> dict:
    """A `falsify mutants` report of the demo project, made on `engine` (None: a report that records none)."""
    mutant = {"id": "limit-off", "mutatorName": "replace", "status": status, "statusReason": reason}
    return {
        "schemaVersion": "2",
        "files": {"demo/loop.py": {"language": "python", "source": source, "mutants": [mutant]}},
        **({"config": {"scope": "kills", "engine": engine, "jobs": 1}} if engine is not None else {}),
    }


def test_each_prediction_gets_its_proof(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    p = project(tmp_path)
    corpus = load_corpus([p.contracts, p.mutants])
    assert not corpus.problems, corpus.problems
    red = red_from_stryker(stryker("Killed", "red: FALSIFY-DEMO-001; listed but green: \nassert 9 <= 8"))
    assert red == {"limit-off": {"FALSIFY-DEMO-001"}}
    proved = proofs(corpus, red)
    assert {pid: pr.status for pid, pr in proved.items()} == {
        "FALSIFY-DEMO-001": Proof.PROVEN,
        "FALSIFY-DEMO-002": Proof.UNPROVEN,
        "FALSIFY-DEMO-003": Proof.EXCUSED,
    }
    assert proved["FALSIFY-DEMO-001"].expected == ("limit-off",)
    assert summary(proved) == "1 proven, 1 unproven with a reviewed reason, 1 UNPROVEN"
    # a survived mutant proves nothing; no run at all measures nothing (a reviewed reason still shows)
    assert (
        proofs(corpus, red_from_stryker(stryker("Survived", "")))["FALSIFY-DEMO-001"].status is Proof.UNPROVEN
    )
    none = proofs(corpus, None)
    assert none["FALSIFY-DEMO-001"].status is Proof.NOT_MEASURED
    assert none["FALSIFY-DEMO-003"].status is Proof.EXCUSED


def test_the_gate_reads_a_current_report_and_refuses_a_stale_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    p = project(tmp_path)
    corpus = load_corpus([p.contracts, p.mutants])
    report = tmp_path / ".falsify" / "mutants" / "mutation-report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps(stryker("Killed", "red: FALSIFY-DEMO-001")), encoding="utf-8")
    proved, source = mutant_proofs(p, corpus, None, ENGINE)
    assert source == f"mutant report {report}"
    rows = [PredictionResult(pid, "demo-v1", Outcome.PASS, ("t",), (), 0.0, 1, "", None) for pid in proved]
    table = render(rows, proved)
    assert "PROVEN" in table.splitlines()[0]
    assert [line.split()[3] for line in table.splitlines()[2:]] == ["yes", "NO", "no:"]
    (tmp_path / "demo" / "loop.py").write_text(SOURCE.replace("8", "10"), encoding="utf-8")
    assert stale_files(json.loads(report.read_text()), tmp_path) == ["demo/loop.py"]
    stale, why = mutant_proofs(p, corpus, None, ENGINE)
    assert "stale (demo/loop.py changed since)" in why
    assert stale["FALSIFY-DEMO-001"].status is Proof.NOT_MEASURED


@pytest.mark.parametrize(
    ("made_on", "why"),
    [
        (
            "other.engine:make",
            "stale: made on engine 'other.engine:make', this run is on engine 'exec:/bin/false'",
        ),
        (ENGINE, f"stale: made on engine {ENGINE!r}, this run is on engine 'exec:/bin/false'"),
        (None, "stale: made on an engine it does not record, this run is on engine 'exec:/bin/false'"),
    ],
)
def test_a_report_made_on_another_engine_proves_nothing_about_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made_on: str | None, why: str
) -> None:
    """Mutants killed under one engine say nothing of another's falsifiers (the files they mutated may be ones it
    never imports): after switching the engine, or with a report that records none, PROVEN is not measured."""
    monkeypatch.chdir(tmp_path)
    p = project(tmp_path)
    corpus = load_corpus([p.contracts, p.mutants])
    path = tmp_path / ".falsify" / "mutants" / "mutation-report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(stryker("Killed", "red: FALSIFY-DEMO-001", engine=made_on)), encoding="utf-8")
    assert report_engine(json.loads(path.read_text())) == made_on
    for report_path in (None, path):  # the default report and one named by --mutants-report
        proved, source = mutant_proofs(p, corpus, report_path, "exec:/bin/false")
        assert source.startswith(f"no current mutant run: mutant report {path} is {why};"), source
        assert {pid: pr.status for pid, pr in proved.items()} == {
            "FALSIFY-DEMO-001": Proof.NOT_MEASURED,
            "FALSIFY-DEMO-002": Proof.NOT_MEASURED,
            "FALSIFY-DEMO-003": Proof.EXCUSED,
        }
        assert summary(proved) == "proven not measured (no current mutant run)"
    # the engine it was made on still reads it, unless it records none
    proved, source = mutant_proofs(p, corpus, None, ENGINE)
    assert (proved["FALSIFY-DEMO-001"].status is Proof.PROVEN) is (made_on == ENGINE), source


def test_a_prediction_this_machine_cannot_show_is_not_unproven(tmp_path: Path, monkeypatch) -> None:
    """A CANNOT SHOW mutant (its predictions' sensitivity control found nothing to see on this machine): its
    predictions are CANNOT SHOW, counted apart from the provable ones, never PROVEN, and only after a run."""
    monkeypatch.chdir(tmp_path)
    p = project(tmp_path)
    corpus = load_corpus([p.contracts, p.mutants])
    report = stryker("Ignored", "cannot be shown on this machine: FALSIFY-DEMO-001\nthe control saw nothing")
    assert cannot_show_from_stryker(report) == {"FALSIFY-DEMO-001"}
    assert red_from_stryker(report) == {"limit-off": set()}
    # another Ignored reason, or the words on another status, name nothing
    assert cannot_show_from_stryker(stryker("Ignored", "source drifted")) == set()
    assert (
        cannot_show_from_stryker(stryker("Survived", "cannot be shown on this machine: FALSIFY-DEMO-001"))
        == set()
    )
    proved = proofs(corpus, red_from_stryker(report), cannot_show_from_stryker(report))
    assert {pid: pr.status for pid, pr in proved.items()} == {
        "FALSIFY-DEMO-001": Proof.CANNOT_SHOW,
        "FALSIFY-DEMO-002": Proof.UNPROVEN,
        "FALSIFY-DEMO-003": Proof.EXCUSED,
    }
    assert proved["FALSIFY-DEMO-001"].cell == "n/a here"
    assert summary(proved) == (
        "0 proven of 2 provable here, 1 cannot be shown here, 1 unproven with a reviewed reason, 1 UNPROVEN"
    )
    # killed elsewhere in the same run wins; without a run, nothing is judged
    killed = proofs(corpus, {"limit-off": {"FALSIFY-DEMO-001"}}, {"FALSIFY-DEMO-001"})
    assert killed["FALSIFY-DEMO-001"].status is Proof.PROVEN
    assert proofs(corpus, None, {"FALSIFY-DEMO-001"})["FALSIFY-DEMO-001"].status is Proof.NOT_MEASURED
    path = tmp_path / ".falsify" / "mutants" / "mutation-report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(report), encoding="utf-8")
    from_report = mutant_proofs(p, corpus, None, ENGINE)[0]
    assert from_report["FALSIFY-DEMO-001"].status is Proof.CANNOT_SHOW
    # the gate keeps it only where its own run found the prediction unshowable too (same machine and kernel)
    assert shown_here(from_report, {"FALSIFY-DEMO-001"}) == from_report
    elsewhere = shown_here(from_report, set())
    assert elsewhere["FALSIFY-DEMO-001"].status is Proof.UNPROVEN
    assert elsewhere["FALSIFY-DEMO-003"] == from_report["FALSIFY-DEMO-003"]


def test_not_applicable_is_never_counted_unproven(tmp_path: Path, monkeypatch) -> None:
    """Issue #46: the gate said "1 proven, 1 UNPROVEN" where the unproven one was NOT APPLICABLE to the engine.
    A prediction NOT APPLICABLE in the run is neither proven nor UNPROVEN: its PROVEN cell is n/a and the verdict
    counts it apart; one that is applicable and unproven still says UNPROVEN."""
    from falsify.harness.gate import not_applicable, verdict

    monkeypatch.chdir(tmp_path)
    p = project(tmp_path)
    corpus = load_corpus([p.contracts, p.mutants])
    proved = proofs(corpus, red_from_stryker(stryker("Killed", "red: FALSIFY-DEMO-001")))

    def row(pid: str, outcome: Outcome) -> PredictionResult:
        return PredictionResult(pid, "demo-v1", outcome, ("t",), (), 0.0, 1, "", None)

    rows = [
        row("FALSIFY-DEMO-001", Outcome.PASS),
        row("FALSIFY-DEMO-002", Outcome.NOT_APPLICABLE),
        row("FALSIFY-DEMO-003", Outcome.PASS),
    ]
    assert not_applicable(rows, proved) == ["FALSIFY-DEMO-002"]
    lines = render(rows, proved).splitlines()
    at = lines[0].index("PROVEN")  # the column starts where its header does
    assert [line[at:].split()[0] for line in lines[2:]] == ["yes", "n/a", "no:"]
    line, ok = verdict(corpus, rows, {}, ENGINE, proved)
    assert ok
    assert "1 proven, 1 unproven with a reviewed reason, 1 not applicable;" in line
    assert "UNPROVEN" not in line
    # applicable, it is UNPROVEN again
    rows[1] = row("FALSIFY-DEMO-002", Outcome.PASS)
    assert (
        "1 proven, 1 unproven with a reviewed reason, 1 UNPROVEN;"
        in verdict(corpus, rows, {}, ENGINE, proved)[0]
    )
    assert summary(proved, not_applicable=["FALSIFY-DEMO-002"]) == (
        "1 proven, 1 unproven with a reviewed reason, 1 not applicable"
    )


def test_a_packs_reviewed_reason_applies_only_where_its_mutants_are_planted(tmp_path: Path) -> None:
    """OAI-009's `unproven_because` is about the reference server (no prefix cache): an adopter's project, which
    holds none of the pack's mutant files, gets no excuse from it (UNPROVEN until its own mutant turns it red);
    falsify's own tree, which holds them, keeps it."""
    from falsify.contracts.packs import contracts_dir

    pack = contracts_dir("openai-serving")
    adopter = proofs(load_corpus([pack]), {})
    assert adopter["FALSIFY-OAI-009"].status is Proof.UNPROVEN
    assert adopter["FALSIFY-OAI-009"].because is None
    assert all(p.status is not Proof.EXCUSED for p in adopter.values())
    mutants = tmp_path / "mutants"
    mutants.mkdir()
    seed = (
        Path(__file__).parent.parent / "mutants" / "openai-seed-ignored.yaml"
    )  # one of the pack's, as planted
    (mutants / seed.name).write_text(seed.read_text(encoding="utf-8"), encoding="utf-8")
    planted = load_corpus([pack, mutants])
    assert any(m.id == "openai-seed-ignored" for m in planted.mutants), planted.problems
    here = proofs(planted, {})
    assert here["FALSIFY-OAI-009"].status is Proof.EXCUSED
    assert "prefix cache" in (here["FALSIFY-OAI-009"].because or "")
