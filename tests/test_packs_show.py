"""`falsify packs show NAME` (docs/packs.md), the predictions' `catches` lists, and lint's `catches-unkilled`
warning (docs/contracts.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from testkit_gate_cli import run_cli

from falsify.contracts.corpus import load_corpus
from falsify.contracts.lint import unkilled_classes
from falsify.contracts.packs import available, contracts_dir
from falsify.engines.boundary.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def falsify(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    result = run_cli(*args, cwd=cwd, env=ENV, timeout=120)
    assert "Traceback" not in result.stdout + result.stderr
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize("name", available())
def test_every_built_in_prediction_names_what_it_catches(name: str) -> None:
    corpus = load_corpus([contracts_dir(name)])
    assert corpus.problems == []
    unnamed = [p.id for p in corpus.predictions.values() if not p.catches]
    assert unnamed == []


def test_every_prediction_of_this_repositorys_contracts_names_what_it_catches() -> None:
    corpus = load_corpus([ROOT / "contracts"])
    assert corpus.predictions and [p.id for p in corpus.predictions.values() if not p.catches] == []


@pytest.mark.parametrize("name", available())
def test_show_prints_each_prediction_with_its_claim_domain_requires_and_catches(name: str) -> None:
    code, out, _ = falsify("packs", "show", name)
    assert code == 0
    corpus = load_corpus([contracts_dir(name)])
    for pid, p in corpus.predictions.items():
        block = out.split(f"{pid}  (", 1)[1].split("\n\n", 1)[0]
        assert f"claim:    {' '.join(p.claim.split())}" in block
        assert "domain:   " in block and "requires: " in block
        for cls in p.catches:
            assert cls in block.split("catches:  ", 1)[1]
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(
            f"packs: {name}: {len(corpus.predictions)} predictions in {len(corpus.contracts)} contracts; "
        )
    )


def test_show_marks_the_classes_a_boundary_mutant_plants() -> None:
    code, out, _ = falsify("packs", "show", "serving", "--format", "json")
    assert code == 0
    records = {r["id"]: r for r in json.loads(out)["predictions"]}
    assert records["FALSIFY-SERVE-CANCEL-002"]["boundary"] == ["poll-after-forward"]
    assert records["FALSIFY-SERVE-CANCEL-002"]["requires"] == ["generate"]
    assert records["FALSIFY-SERVE-CANCEL-002"]["domain"]["n"] == {
        "type": "int",
        "min": 1,
        "max": 16,
        "description": "cancel budget",
    }
    for m in CATALOGUE:  # every boundary mutant is listed where it must turn a prediction red
        for pid in m.kills:
            assert m.id in records[pid]["boundary"], (m.id, pid)
    code, text, _ = falsify("packs", "show", "serving")
    assert "  catches:  poll-after-forward (boundary mutant)\n" in text


def test_an_unknown_pack_is_one_line_and_exit_2() -> None:
    code, out, err = falsify("packs", "show", "no-such-pack")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"falsify: unknown pack 'no-such-pack': installed packs are {', '.join(available())}"
    ]


@pytest.mark.parametrize(
    "args", [["packs", "show"], ["packs", "serving"]], ids=["show-no-name", "name-no-show"]
)
def test_show_needs_its_name(args: list[str]) -> None:
    code, _, err = falsify(*args)
    assert code == 2 and "falsify packs show NAME" in err


CONTRACT = """contract: demo-v1
version: 1.0.0
title: t
description: d
references: [https://example.org]
observables:
  emitted: {meaning: tokens emitted, type: int}
predictions:
  - id: FALSIFY-DEMO-001
    claim: c
    formula: emitted == 1
    domain: {}
    if_fails: f
    catches: [poll-after-forward, drops-the-last-token]
    mutants: [{mutants}]
"""


def _mutant(mid: str, extra: str = "") -> str:
    return (
        f"id: {mid}\ndescription: d\nfile: engine.py\nfunction: run\nop: delete\n{extra}"
        'statement: "x = 1"\nkills: [FALSIFY-DEMO-001]\n'
    )


def _project(tmp_path: Path, mutants: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\ncontracts = "contracts"\nengine = "e:make"\n')
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "demo-v1.yaml").write_text(CONTRACT.replace("{mutants}", ", ".join(mutants)))
    (tmp_path / "engine.py").write_text("def run():\n    x = 1\n    return x\n")
    (tmp_path / "mutants").mkdir()
    for mid, text in mutants.items():
        (tmp_path / "mutants" / f"{mid}.yaml").write_text(text)
    return tmp_path


def test_lint_warns_about_a_class_no_mutant_plants_and_exits_0(tmp_path: Path) -> None:
    project = _project(tmp_path, {"drops-last": _mutant("drops-last")})
    code, out, _ = falsify("lint", cwd=project)
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert code == 0, out
    assert len(warnings) == 1, out
    assert "FALSIFY-DEMO-001: catches poll-after-forward, drops-the-last-token, but no mutant" in warnings[0]
    assert warnings[0].endswith("[catches-unkilled]")
    code, out, _ = falsify("lint", "--format", "json", cwd=project)
    [warning] = json.loads(out)["warnings"]
    assert warning["rule"] == "catches-unkilled" and warning["line"] == 9


def test_a_mutant_of_the_class_that_kills_the_prediction_silences_the_warning(tmp_path: Path) -> None:
    """A class counts as planted by a mutant file whose `class` (or id) it is and whose kills name the
    prediction; the boundary mutant poll-after-forward plants its class only for the pack predictions it kills."""
    corpus = load_corpus(
        [
            _project(
                tmp_path,
                {
                    "drops-last": _mutant("drops-last", "class: drops-the-last-token\n"),
                    "poll-after-forward": _mutant("poll-after-forward"),
                },
            )
            / "contracts",
            tmp_path / "mutants",
        ]
    )
    assert corpus.problems == []
    assert unkilled_classes(corpus, {}) == []
    corpus.mutants = [m for m in corpus.mutants if m.id == "drops-last"]
    [warning] = unkilled_classes(corpus, {m.id: m.kills for m in CATALOGUE})
    assert "catches poll-after-forward, but no mutant of that class" in warning.message
    assert unkilled_classes(corpus, {"poll-after-forward": ("FALSIFY-DEMO-001",)}) == []
