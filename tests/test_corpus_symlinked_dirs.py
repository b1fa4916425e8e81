"""A symlinked directory is never walked, the contracts directory itself included (docs/hardening.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

from falsify.contracts.lint import EXIT_CLEAN, lint

GOOD = Path(__file__).parent / "fixtures" / "contracts" / "good" / "demo-serve-v1.yaml"


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(GOOD, outside / GOOD.name)
    return outside


def test_a_contracts_directory_that_is_a_symlink_out_of_the_project_is_named_not_loaded(
    tmp_path: Path,
) -> None:
    contracts = tmp_path / "project" / "contracts"
    contracts.parent.mkdir()
    contracts.symlink_to(_outside(tmp_path))
    corpus, code = lint([contracts])
    assert code != EXIT_CLEAN
    assert corpus.contracts == []
    assert [(p.file, p.message) for p in corpus.problems] == [
        (str(contracts), "symlinked directory: not followed")
    ]


def test_a_symlinked_directory_deeper_in_the_walk_is_named_not_loaded(tmp_path: Path) -> None:
    contracts = tmp_path / "project" / "contracts"
    (contracts / "sub").mkdir(parents=True)
    (contracts / "sub" / "link").symlink_to(_outside(tmp_path))
    corpus, code = lint([contracts])
    assert code != EXIT_CLEAN
    assert corpus.contracts == []
    assert [p.message for p in corpus.problems] == ["symlinked directory: not followed"]


def test_a_real_contracts_directory_is_walked(tmp_path: Path) -> None:
    corpus, code = lint([_outside(tmp_path)])
    assert code == EXIT_CLEAN and len(corpus.contracts) == 1
