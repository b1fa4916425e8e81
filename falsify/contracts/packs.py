"""Built-in contract packs: contracts with their engine-neutral falsifiers, shipped as package data.

A pack is a directory `falsify/packs/<name>/` holding `contracts/*.yaml` and `falsifiers/test_*.py` (plus a
`pack.toml` saying what it is). An adopter runs it against their engine by name (`falsify gate --pack serving`,
or `packs = ["serving"]` in [tool.falsify]), alongside their own contracts.

A pack contract never forces mutant names on another engine: the `mutants:` a pack prediction lists name the bugs
planted in this repo's reference engine. In a project without those mutant files they are not required; the
project's own mutants declare in their `kills` which pack predictions they must turn red.

Evidence names an installed pack's file as its distribution ships it (`PackFile`), never as a path of the project:
`pkg:pypi/falsify-harness@0.1.0#falsify/packs/serving/contracts/x.yaml` (a package URL with the file's path inside
the distribution as its subpath), so `falsify verify` can find it again wherever the environment installed it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

# the RECORD check, below this module: PackError, the distribution's name and the packs' root are defined there
# and re-exported here, where importers name them
from falsify.contracts.pack_record import DISTRIBUTION as DISTRIBUTION
from falsify.contracts.pack_record import PackError as PackError
from falsify.contracts.pack_record import check
from falsify.contracts.pack_record import root as root


def available() -> list[str]:
    return sorted(p.name for p in root().iterdir() if (p / "pack.toml").is_file())


def pack_dir(name: str) -> Path:
    # A pack is named, never a path: `--pack /elsewhere` or `--pack ../..` would load and run falsifiers from
    # outside the project, so only a name `falsify packs` lists resolves.
    installed = available()
    if name not in installed:
        raise PackError(f"unknown pack {name!r}: installed packs are {', '.join(installed) or 'none'}")
    check(name)  # PackTampered unless the installed files are those its RECORD lists (issue #48)
    return root() / name


def contracts_dir(name: str) -> Path:
    return pack_dir(name) / "contracts"


def falsifiers_dir(name: str) -> Path:
    return pack_dir(name) / "falsifiers"


def describe(name: str) -> dict[str, str]:
    """pack.toml: title and requires (the capabilities its contracts need), for `falsify packs`."""
    data = tomllib.loads((pack_dir(name) / "pack.toml").read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.items()}


@cache
def _prediction_ids(name: str) -> frozenset[str]:
    """The prediction ids of an installed pack's contracts (package data falsify ships, read as plain YAML: the
    corpus loader imports this module)."""
    import yaml

    ids: set[str] = set()
    for path in sorted(contracts_dir(name).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        predictions = data.get("predictions", []) if isinstance(data, dict) else []
        ids |= {str(p["id"]) for p in predictions if isinstance(p, dict) and "id" in p}
    return frozenset(ids)


def packs_defining(ids: Iterable[str]) -> list[str]:
    """The installed packs whose contracts define any of `ids`: what a project whose mutants kill pack
    predictions must name in `packs` (lint says so instead of "no contract found", issue #46)."""
    wanted = set(ids)
    return [name for name in available() if wanted & _prediction_ids(name)]


def help_for(ids: Iterable[str]) -> str:
    """ " (predictions of the pack serving: add packs = ["serving"] to [tool.falsify], or pass --pack serving)",
    or "" when no installed pack defines any of `ids`."""
    names = packs_defining(ids)
    if not names:
        return ""
    listed = ", ".join(f'"{n}"' for n in names)
    flags = " ".join(f"--pack {n}" for n in names)
    return f" (predictions of the pack {', '.join(names)}: add packs = [{listed}] to [tool.falsify], or pass {flags})"


def is_pack_file(path: str | Path) -> bool:
    try:
        Path(path).resolve().relative_to(root().resolve())
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class PackFile:
    """One file of an installed pack: the distribution and version it came with, and its path inside the
    distribution (`falsify/packs/<pack>/...`, posix)."""

    distribution: str
    version: str
    path: str

    @property
    def name(self) -> str:
        """A package URL (purl) with the file as its subpath: the name evidence records."""
        return f"pkg:pypi/{self.distribution}@{self.version}#{self.path}"

    @property
    def pack(self) -> str:
        return self.path.split("/")[2]

    @classmethod
    def parse(cls, name: str) -> PackFile | None:
        """The PackFile a recorded name spells; None when it is not a pack file's name."""
        if not name.startswith("pkg:pypi/") or "@" not in name or "#" not in name:
            return None
        head, _, path = name[len("pkg:pypi/") :].partition("#")
        distribution, _, version = head.partition("@")
        parts = path.split("/")
        if (
            len(parts) < 4
            or parts[:2] != ["falsify", "packs"]
            or ".." in parts
            or not distribution
            or not version
        ):
            return None
        return cls(distribution, version, path)


def installed_version() -> str:
    """The installed version of the distribution the packs ship in (the package's own when it is not installed as
    a distribution, e.g. run from a source tree)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        from falsify import __version__

        return __version__


def pack_file(path: str | Path) -> PackFile | None:
    """`path` as its distribution names it, when it is a file of an installed pack; None otherwise."""
    base = root().resolve()
    try:
        inside = Path(path).resolve().relative_to(base.parent.parent)  # the directory holding falsify/
    except ValueError:
        return None
    if not Path(path).resolve().is_relative_to(base):
        return None
    return PackFile(DISTRIBUTION, installed_version(), inside.as_posix())


def locate(file: PackFile) -> Path:
    """Where the installed distribution holds `file`'s path (it may not exist there)."""
    return root().resolve().parent.parent / file.path
