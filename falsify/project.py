"""Where the project's contracts, mutants, tests and schemas live ([tool.falsify] in pyproject.toml)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Project:
    root: Path
    contracts: Path
    mutants: Path
    tests: Path

    @property
    def schema_dir(self) -> Path:
        return self.contracts / "schema"


def find_project(start: Path | None = None) -> Project:
    """The nearest directory upward from `start` (default: cwd) whose pyproject.toml has [tool.falsify];
    failing that, the source checkout this package lives in; failing that, `start` with default names."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        project = _read(candidate)
        if project is not None:
            return project
    source_root = Path(__file__).resolve().parent.parent
    return _read(source_root) or Project(here, here / "contracts", here / "mutants", here / "tests")


def _read(root: Path) -> Project | None:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("falsify")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return None
    if table is None:
        return None
    return Project(
        root,
        root / table.get("contracts", "contracts"),
        root / table.get("mutants", "mutants"),
        root / table.get("tests", "tests"),
    )


def schema_path(name: str, start: Path | None = None) -> Path:
    """The JSON Schema `name` (e.g. contract-v1): from the project's contracts/schema, else from this checkout."""
    own = find_project(start).schema_dir / f"{name}.schema.json"
    if own.is_file():
        return own
    return Path(__file__).resolve().parent.parent / "contracts" / "schema" / f"{name}.schema.json"
