"""Built-in contract packs: contracts with their engine-neutral falsifiers, shipped as package data.

A pack is a directory `falsify/packs/<name>/` holding `contracts/*.yaml` and `falsifiers/test_*.py` (plus a
`pack.toml` saying what it is). An adopter runs it against their engine by name (`falsify gate --pack serving`,
or `packs = ["serving"]` in [tool.falsify]), alongside their own contracts.

A pack contract never forces mutant names on another engine: the `mutants:` a pack prediction lists name the bugs
planted in this repo's reference engine. In a project without those mutant files they are not required; the
project's own mutants declare in their `kills` which pack predictions they must turn red.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from falsify.errors import FalsifyError


class PackError(FalsifyError):
    """A pack name that no installed pack has."""


def root() -> Path:
    return Path(str(resources.files("falsify.packs")))


def available() -> list[str]:
    return sorted(p.name for p in root().iterdir() if (p / "pack.toml").is_file())


def pack_dir(name: str) -> Path:
    path = root() / name
    if not (path / "pack.toml").is_file():
        raise PackError(f"unknown pack {name!r}: installed packs are {', '.join(available()) or 'none'}")
    return path


def contracts_dir(name: str) -> Path:
    return pack_dir(name) / "contracts"


def falsifiers_dir(name: str) -> Path:
    return pack_dir(name) / "falsifiers"


def describe(name: str) -> dict[str, str]:
    """pack.toml: title and requires (the capabilities its contracts need), for `falsify packs`."""
    data = tomllib.loads((pack_dir(name) / "pack.toml").read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.items()}


def is_pack_file(path: str | Path) -> bool:
    try:
        Path(path).resolve().relative_to(root().resolve())
    except ValueError:
        return False
    return True
