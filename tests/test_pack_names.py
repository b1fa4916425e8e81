"""A pack is named, never a path: only a pack `falsify packs` lists resolves (docs/hardening.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from falsify.contracts import packs
from falsify.contracts.packs import PackError


def _a_pack_outside(tmp_path: Path) -> Path:
    outside = tmp_path / "evilpack"
    (outside / "contracts").mkdir(parents=True)
    (outside / "pack.toml").write_text('title = "evil"\n', encoding="utf-8")
    return outside


def test_an_installed_pack_resolves_by_name() -> None:
    assert packs.pack_dir("serving") == packs.root() / "serving"


def test_an_absolute_path_is_no_pack_name(tmp_path: Path) -> None:
    outside = _a_pack_outside(tmp_path)
    with pytest.raises(PackError, match=r"unknown pack .*installed packs are .*serving"):
        packs.pack_dir(str(outside))


def test_a_relative_path_climbing_out_of_the_packs_is_no_pack_name(tmp_path: Path) -> None:
    outside = _a_pack_outside(tmp_path)
    climb = "../" * len(packs.root().resolve().parts) + str(outside).lstrip("/")
    with pytest.raises(PackError, match="unknown pack"):
        packs.contracts_dir(climb)


@pytest.mark.parametrize("name", ["", ".", "..", "serving/", "serving/../serving", "__pycache__"])
def test_a_name_that_only_resolves_to_a_pack_directory_is_no_pack_name(name: str) -> None:
    with pytest.raises(PackError, match="unknown pack"):
        packs.pack_dir(name)
