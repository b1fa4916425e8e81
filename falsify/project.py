"""The project under test: its `[tool.falsify]` table in pyproject.toml or, for a project that has no
pyproject.toml (an engine in C, Rust or Go over `exec:`), in falsify.toml; nothing else.

There is no fallback: a directory with no `[tool.falsify]` at or above it is a `ProjectError` that says what to
add (`falsify init` writes a working starter). Keys (docs/config.md):

    contracts = "contracts"        the project's own contracts (a directory)
    packs = ["serving"]            built-in contract packs run alongside them (falsify/packs/<name>)
    tests = "tests"                the project's falsifiers (pytest tests)
    mutants = "mutants"            semantic mutant files
    engine = "mypkg.engine:make"   the engine under test (--engine and FALSIFY_ENGINE come first)
    sources = ["src/**/*.py"]      the engine's sources (evidence subjects; what mutants may edit)
    weights = ["weights/*.gguf"]   weight files the evidence bundle records
    weights_dirs = ["~/models"]    directories outside the tree where the engine's weights may live (for `verify`)
    copy_exclude = ["data"]        top-level names never copied into a mutant's scratch copy
    [tool.falsify.mutmut]          falsify mutmut's settings
"""

from __future__ import annotations

import copy
import os
import stat
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from falsify.errors import FalsifyError
from falsify.untrusted import safefile

KEYS = (
    "contracts",
    "packs",
    "tests",
    "mutants",
    "engine",
    "sources",
    "weights",
    "weights_dirs",
    "copy_exclude",
)
SUBTABLES = (
    "gate",
    "mutmut",
    "mutmut-contracts",
)  # [tool.falsify.<name>], each checked by the command that reads it
LIST_KEYS = frozenset({"packs", "sources", "weights", "weights_dirs", "copy_exclude"})
PATH_KEYS = frozenset({"contracts", "tests", "mutants", "sources", "weights"})  # inside the project, always
MAX_PYPROJECT = 4 * 2**20  # bytes
STARTER = '[tool.falsify] with contracts = "contracts", tests = "tests", engine = "module:factory"'
CONFIG_FILES = ("pyproject.toml", "falsify.toml")  # where [tool.falsify] may be, in a project's root


class ProjectError(FalsifyError):
    """No `[tool.falsify]` table where one is needed, or one with a bad key; the message says what to add."""


@dataclass(frozen=True, slots=True)
class Project:
    root: Path
    contracts: Path
    mutants: Path
    tests: Path
    packs: tuple[str, ...] = ()
    engine: str | None = None
    sources: tuple[str, ...] = ()
    weights: tuple[str, ...] = ()
    copy_exclude: tuple[str, ...] = ()
    weights_dirs: tuple[str, ...] = ()  # outside the tree on purpose: absolute, `~` or relative to the root
    config_name: str = "pyproject.toml"  # the file holding [tool.falsify]: pyproject.toml or falsify.toml

    @property
    def pyproject(self) -> Path:
        """The file holding [tool.falsify] and its sub-tables (pyproject.toml, or falsify.toml)."""
        return self.root / self.config_name

    @property
    def import_roots(self) -> tuple[Path, ...]:
        """Where the project's own modules import from: the root (as `python -m pytest` sees it) and `src/`."""
        src = self.root / "src"
        return (self.root, src) if src.is_dir() else (self.root,)


def find_project(start: Path | None = None) -> Project:
    """The project whose pyproject.toml or falsify.toml is nearest upward from `start` (default: cwd).

    The search stops at the first directory holding either (or a repository root): a parent checkout is never
    used in its place. There, [tool.falsify] is read from pyproject.toml, else from falsify.toml (a project with
    no Python packaging: an `exec:` engine in any language); both holding it is an error naming them. Raises
    ProjectError naming the file and what to add when there is no `[tool.falsify]`."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        tables: dict[str, dict[str, Any] | None] = {}
        for name in CONFIG_FILES:
            path = candidate / name
            if os.path.lexists(path) and not path.is_file():
                # the nearest configuration is the project's even when it cannot be read: skipping it would run
                # a parent checkout's project instead
                raise ProjectError(
                    f"{path} is {_file_kind(path)}, not a regular file: the project's configuration must be "
                    f"a {name} file"
                )
            if path.is_file():
                tables[name] = _table(path)
        found = {name: table for name, table in tables.items() if table is not None}
        if len(found) > 1:
            raise ProjectError(
                f"{candidate} has [tool.falsify] in both {' and '.join(found)}: keep it in one of them"
            )
        if found:
            name, table = next(iter(found.items()))
            return _project(candidate, table, name)
        if tables:
            shown = " and ".join(str(candidate / name) for name in tables)
            raise ProjectError(f"{shown} has no [tool.falsify] table: run `falsify init`, or add {STARTER}")
        if (candidate / ".git").exists():
            break
    raise ProjectError(
        f"no pyproject.toml or falsify.toml with [tool.falsify] at or above {here}: run `falsify init` there, "
        f"or add {STARTER} to a pyproject.toml (or, for an engine in another language, a falsify.toml)"
    )


def config_file(root: Path) -> Path:
    """The file holding the project's [tool.falsify] at `root` (pyproject.toml, or falsify.toml); pyproject.toml
    where there is none."""
    try:
        project = find_project(root)
    except ProjectError:
        return root / "pyproject.toml"
    return project.pyproject if project.root == root.resolve() else root / "pyproject.toml"


def find_project_or_none(start: Path | None = None) -> Project | None:
    """The project, or None where there is none (the pytest plugin stays passive there)."""
    try:
        return find_project(start)
    except ProjectError:
        return None


def read_toml(path: Path, what: str = "pyproject.toml") -> dict[str, Any]:
    """The TOML document at `path`, read through the file layer (a regular file of at most 4 MiB, no symlink);
    unreadable, not UTF-8, not TOML or nested too deeply is a ProjectError naming the file (issue #27)."""
    try:
        text = safefile.read_text(path, limit=MAX_PYPROJECT, what=what)
    except safefile.FileLayerError as exc:
        raise ProjectError(str(exc)) from None
    return copy.deepcopy(_parsed(path, text))


@lru_cache(maxsize=4)  # a text is at most MAX_PYPROJECT
def _parsed(path: Path, text: str) -> dict[str, Any]:
    """This TOML text parsed once per text: the gate lints 70-odd contract and mutant files, each finding its
    project (issue #28). Keyed by the text itself, so an edited file is parsed again."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise ProjectError(f"{path}: nested too deeply to be a configuration") from None


def subtable(data: dict[str, Any], path: Path, *keys: str) -> dict[str, Any] | None:
    """data[keys[0]][keys[1]]...: None where a key is absent, a ProjectError where a value on the way is not a
    table (`tool = 1`)."""
    here: Any = data
    for i, key in enumerate(keys):
        here = here.get(key)
        if here is None:
            return None
        if not isinstance(here, dict):
            raise ProjectError(f"{path}: [{'.'.join(keys[: i + 1])}] must be a table")
    return here


def _table(pyproject: Path) -> dict[str, Any] | None:
    return subtable(read_toml(pyproject), pyproject, "tool", "falsify")


def _project(root: Path, table: dict[str, Any], name: str = "pyproject.toml") -> Project:
    where = root / name
    for key, value in table.items():
        if key in SUBTABLES:  # read by their command ([tool.falsify.mutmut], [tool.falsify.gate])
            if not isinstance(value, dict):
                raise ProjectError(f"{where}: [tool.falsify] {key} must be a table ([tool.falsify.{key}])")
            continue
        if key not in KEYS:
            raise ProjectError(
                f"{where}: [tool.falsify] has an unknown key {key!r} "
                f"(allowed: {', '.join(KEYS)}; tables: {', '.join(SUBTABLES)})"
            )
        if key in LIST_KEYS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ProjectError(
                    f"{where}: [tool.falsify] {key} must be a list of strings, got {_kind(value)} {value!r}"
                )
        elif not isinstance(value, str) or not value:
            raise ProjectError(
                f"{where}: [tool.falsify] {key} must be a non-empty string, got {_kind(value)} {value!r}"
            )
        if key in PATH_KEYS:
            for item in value if isinstance(value, list) else [value]:
                problem = glob_problem(item)
                if problem:
                    raise ProjectError(f"{where}: [tool.falsify] {key}: {problem}")
        if key == "weights_dirs" and any(not item or "\x00" in item for item in value):
            raise ProjectError(f"{where}: [tool.falsify] weights_dirs: an entry is empty or holds a NUL")
    return Project(
        root,
        root / table.get("contracts", "contracts"),
        root / table.get("mutants", "mutants"),
        root / table.get("tests", "tests"),
        tuple(table.get("packs", ())),
        table.get("engine"),
        tuple(table.get("sources", ())),
        tuple(table.get("weights", ())),
        tuple(table.get("copy_exclude", ())),
        tuple(table.get("weights_dirs", ())),
        name,
    )


def _file_kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:  # gone or unreadable since it was seen
        return f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return "a dangling symlink" if not path.exists() else "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a special file"


def _kind(value: object) -> str:
    """The TOML type of a parsed value, as the error names it."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"  # dates and times


def glob_problem(pattern: str) -> str | None:
    """Why a configured path or glob could name something outside the project; None when it cannot."""
    if not pattern or "\x00" in pattern:
        return f"{pattern!r} is empty or holds a NUL"
    if os.path.isabs(pattern) or pattern.startswith("~") or "\\" in pattern:
        return f"{pattern!r} is absolute; give a path or glob relative to the project root"
    if ".." in Path(pattern).parts:
        return f"{pattern!r} climbs out with '..'; give a path or glob inside the project"
    return None


def schema_path(name: str) -> Path:
    """The JSON Schema `name` (e.g. contract-v1), shipped in the package (falsify/contracts/schema/)."""
    path = resources.files("falsify.contracts") / "schema" / f"{name}.schema.json"
    return Path(str(path))


def source_problem(root: Path, relative: str) -> str | None:
    """Why `relative` is not a regular file inside `root` reached without a symlink; None when it is.

    Mutants edit the file they name (in a scratch copy): an absolute path, a `..` or a symlink anywhere on the
    way could make the edit land outside the project, so each is refused (issue #19)."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        return "file must be a non-empty path relative to the project root"
    if "\\" in relative or os.path.isabs(relative) or relative.startswith("~"):
        return f"{relative} is absolute; give a path relative to the project root"
    parts = Path(relative).parts
    if ".." in parts:
        return f"{relative} climbs out with '..'; give a path inside the project"
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return f"{relative} does not exist under {root}"
        if stat.S_ISLNK(mode):
            return (
                f"{here.relative_to(root)} is a symlink; a mutant edits only regular files inside the project"
            )
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            return f"{relative} does not exist under {root}"
        if i == len(parts) - 1 and not stat.S_ISREG(mode):
            return f"{relative} is not a regular file"
    return None
