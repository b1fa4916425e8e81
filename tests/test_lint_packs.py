"""lint in a project whose mutants kill a pack's predictions but that names no pack (issue #46: "no contract
found", nothing about `packs`): the verdict and the mutant-kills problem name the pack to add."""

from __future__ import annotations

from pathlib import Path

from falsify.contracts.corpus import load_corpus
from falsify.contracts.lint import EXIT_EMPTY, lint, verdict

MUTANT = """\
id: c-poll-after-forward
description: the poll moved after the forward in a C engine
file: engine.c
op: text
snippet: "poll();"
replacement: "forward();"
kills: [FALSIFY-SERVE-CANCEL-002]
"""
HELP = 'predictions of the pack serving: add packs = ["serving"] to [tool.falsify], or pass --pack serving'


def test_lint_names_the_pack_a_projects_mutants_kill(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "falsify.toml").write_text('[tool.falsify]\nengine = "exec:./engine"\n', encoding="utf-8")
    (tmp_path / "engine.c").write_text("poll();\n", encoding="utf-8")
    mutants = tmp_path / "mutants"
    mutants.mkdir()
    (mutants / "c-poll-after-forward.yaml").write_text(MUTANT, encoding="utf-8")
    corpus, code = lint([mutants])
    assert code == EXIT_EMPTY, corpus.problems
    assert f"(1 mutant, whose kills name {HELP})" in verdict(corpus, [mutants])
    # beside contracts of its own, the unknown kill is a problem naming the pack
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    demo = Path(__file__).parent / "data" / "contracts" / "proven-demo-v1.yaml"
    (contracts / "demo-v1.yaml").write_text(demo.read_text(encoding="utf-8"), encoding="utf-8")
    own = load_corpus([contracts, mutants])
    assert any(HELP in p.message for p in own.problems), own.problems
    # a kill no pack defines gets no such help
    (mutants / "c-poll-after-forward.yaml").write_text(
        MUTANT.replace("SERVE-CANCEL-002", "NOPE-001"), encoding="utf-8"
    )
    corpus, _ = lint([mutants])
    assert "no prediction for them to kill" in verdict(corpus, [mutants])
