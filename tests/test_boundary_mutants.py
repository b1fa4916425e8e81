"""Boundary mutants (falsify/engines/boundary, docs/mutants.md "Boundary mutants"): each turns every prediction of
its kill list red on the reference engine, whose unmutated run (the control) is green; the `falsify init` scaffold
with the serving pack reaches GO with no mutant written by hand, and its evidence labels the boundary proofs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from testkit_gate_cli import run_cli

from falsify.contracts.corpus import load_corpus
from falsify.contracts.packs import contracts_dir
from falsify.engines.boundary.catalogue import CATALOGUE, ID_PREFIX
from falsify.engines.boundary.wrappers import BoundaryError, wrap
from falsify.engines.loading import load_engine

ENV = {**os.environ, "PYTHONHASHSEED": "0"}
ENV.pop("FALSIFY_ENGINE", None)
ENV.pop("FALSIFY_BOUNDARY_MUTANT", None)


def falsify(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=root, env=ENV, timeout=1200)


def test_every_boundary_mutant_kills_serving_predictions_that_name_its_class() -> None:
    corpus = load_corpus([contracts_dir("serving")])
    for m in CATALOGUE:
        assert m.kills, m.id
        for pid in m.kills:
            assert m.id in corpus.predictions[pid].catches, (m.id, pid)


def test_an_unknown_boundary_mutant_is_refused_by_name() -> None:
    engine = load_engine("reference")
    try:
        wrap(engine, "no-such-class")
    except BoundaryError as exc:
        assert "unknown boundary mutant 'no-such-class'" in str(exc)
    else:
        raise AssertionError("an unknown boundary mutant was accepted")


def test_each_boundary_mutant_turns_its_predictions_red_on_the_reference(tmp_path: Path) -> None:
    """A project with the serving pack on the reference engine and no mutant of its own: `falsify mutants` runs
    every boundary mutant (no prediction is covered by another), after a green control on the unmutated engine;
    each must be KILLED by its whole kill list (kill lists are enforced)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.falsify]\ncontracts = "contracts"\npacks = ["serving"]\nengine = "reference"\n'
    )
    result = falsify(tmp_path, "mutants", "--fresh-control")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "mutants: control — " in out and re.search(r"control green \(\d+ falsifiers", out), out
    for m in CATALOGUE:
        line = next(
            x for x in out.splitlines() if x.startswith("mutants: [") and f" {ID_PREFIX}{m.id}: " in x
        )
        assert f"{ID_PREFIX}{m.id}: KILLED" in line and "NOT by" not in line, line
        assert set(re.search(r" by ([A-Z0-9, -]+)", line).group(1).split(", ")) == set(m.kills), line  # type: ignore[union-attr]
    assert f"mutants: PASS — {len(CATALOGUE)} mutants: {len(CATALOGUE)} killed" in out
    report = json.loads((tmp_path / ".falsify" / "mutants" / "mutation-report.json").read_text())
    [(name, entry)] = report["files"].items()
    assert name == "<falsify boundary mutants>" and entry["source"] == ""
    assert sorted(m["id"] for m in entry["mutants"]) == sorted(f"{ID_PREFIX}{m.id}" for m in CATALOGUE)


def test_the_init_scaffold_with_the_serving_pack_reaches_go_with_boundary_proofs(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert falsify(root, "init").returncode == 0
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(
        text.replace('contracts = "contracts"\n', 'contracts = "contracts"\npacks = ["serving"]\n', 1)
    )
    result = falsify(root, "evidence", "--out", str(tmp_path / "bundle"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    verdict = next(line for line in out.splitlines() if line.startswith("evidence: GO"))
    found = re.search(r"(\d+) of (\d+) proven", verdict)
    assert found and found.group(1) == found.group(2), verdict
    statements = [
        json.loads(line) for line in (tmp_path / "bundle" / "evidence.intoto.jsonl").read_text().splitlines()
    ]
    predictions = [
        p for s in statements for p in s.get("predicate", {}).get("predictions", []) if isinstance(p, dict)
    ]
    by_id = {p["id"]: p for p in predictions}
    assert by_id["FALSIFY-EXAMPLE-CANCEL-001"]["provenBy"] == "source"
    assert by_id["FALSIFY-SERVE-CANCEL-002"]["provenBy"] == "boundary"
    assert {m["kind"] for m in by_id["FALSIFY-SERVE-CANCEL-002"]["mutantsKilled"]} == {"boundary"}
    report = (tmp_path / "bundle" / "REPORT.md").read_text()
    assert "boundary-poll-after-forward (boundary only: a weaker proof)" in report
