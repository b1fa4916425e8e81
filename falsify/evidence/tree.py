"""The files of the working tree that evidence is about, found the same way by `evidence` and by `verify`.

Subjects: the engine's sources (glob patterns, default reference/**/*.py) and the weights the engine uses (the
tiny model's config.json + model.safetensors, located through the engine object by `evidence`; `verify` finds
them again from the names the bundle records, in the tree or a declared weights directory, never through the
engine: it imports no project code).
Configuration: every contract and mutant file, every file under the tests directory (falsifiers and their data,
not what runs leave there), tox.ini and pyproject.toml, and every file of the packs the project uses (pack_files:
an installed pack's file is named by distribution, version and path inside the package).
Harness: the code that decides outcomes (every module of the falsify package that ran: the formula evaluator,
the loader, the plugin, results, gate, verdict) and the JSON Schemas contracts and mutants are checked against;
named relative to the project root when they live in it, else `falsify-harness/<path in the package's parent>`.
Every other name is a path relative to the project root (posix), never absolute.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import YAML_SUFFIXES
from falsify.engines.loading import EngineError, load_engine
from falsify.errors import FalsifyError
from falsify.evidence.digests import descriptor, sha256_file
from falsify.project import Project, glob_problem
from falsify.untrusted import safefile
from falsify.untrusted.boundedjson import Field

DEFAULT_SOURCES = ("reference/**/*.py",)
WEIGHT_FILES = ("config.json", "model.safetensors")
# Directories test runs write into; their files are outputs, not configuration.
GENERATED = frozenset({"__pycache__", ".falsify", ".hypothesis", ".pytest_cache", ".benchmarks"})


class EvidenceError(FalsifyError):
    """An evidence bundle cannot be written or read; the message names the file."""


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a bundle records about where things are, so that `verify` can find them again."""

    engine: str
    sources: tuple[str, ...]  # glob patterns, relative to the project root
    contracts: str
    mutants: str
    tests: str

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "sources": list(self.sources),
            "contracts": self.contracts,
            "mutants": self.mutants,
            "tests": self.tests,
        }

    @classmethod
    def from_json(cls, data: Any) -> Inputs:
        at = Field("contract-evidence statement", "predicate.inputs")
        inputs = at.need_dict(data)
        missing = [key for key in ("engine", "sources", "contracts", "mutants", "tests") if key not in inputs]
        if missing:
            at.fail(f"no {', '.join(missing)}")
        return cls(
            at["engine"].need_str(inputs["engine"]),
            tuple(at["sources"].need_str_list(inputs["sources"])),
            at["contracts"].need_str(inputs["contracts"]),
            at["mutants"].need_str(inputs["mutants"]),
            at["tests"].need_str(inputs["tests"]),
        )

    @classmethod
    def of(cls, project: Project, engine: str, sources: tuple[str, ...]) -> Inputs:
        return cls(
            engine,
            sources,
            _rel(project.contracts, project.root),
            _rel(project.mutants, project.root),
            _rel(project.tests, project.root),
        )


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise EvidenceError(
            f"{path} is outside the project root {root}: evidence names files relative to the root"
        ) from None


def source_files(root: Path, patterns: tuple[str, ...]) -> list[str]:
    """The files the source globs match inside `root` (a bundle's recorded globs too: absolute or `..` ones are
    refused by name, and a match through a symlinked directory out of the tree is never read)."""
    found: set[str] = set()
    for pattern in patterns:
        problem = glob_problem(pattern)
        if problem:
            raise EvidenceError(f"sources: {problem}")
        for path in root.glob(pattern):
            if path.is_file() and "__pycache__" not in path.parts and _within(root, path):
                found.add(path.relative_to(root).as_posix())
    return sorted(found)


def configuration_files(root: Path, inputs: Inputs) -> list[tuple[str, str]]:
    """(name, role) of every file that configures the run, sorted by name."""
    out: list[tuple[str, str]] = []
    for directory, role in ((inputs.contracts, "contract"), (inputs.mutants, "mutant")):
        base = root / directory
        if base.is_dir():
            out += [
                (p.relative_to(root).as_posix(), role)
                for p in base.rglob("*")
                if p.suffix in YAML_SUFFIXES and p.is_file() and "schema" not in p.relative_to(base).parts
            ]
    tests = root / inputs.tests
    if tests.is_dir():  # the falsifiers and the data they compare against (golden bytes), not what runs leave
        out += [
            (p.relative_to(root).as_posix(), "falsifier-tests" if p.suffix == ".py" else "test-data")
            for p in tests.rglob("*")
            if p.is_file() and not GENERATED.intersection(p.relative_to(tests).parts)
        ]
    out += [
        (name, "project") for name in ("tox.ini", "pyproject.toml", "falsify.toml") if (root / name).is_file()
    ]
    return sorted(set(out))


def pack_files(root: Path) -> list[tuple[str, str, Path]]:
    """(name, role, path) of every file of the project's packs: named relative to the root when the pack lives in
    the tree (falsify's own checkout), else as its distribution ships it (packs.PackFile: distribution, version,
    path inside the package), never as a path of this machine."""
    from falsify.contracts.pack_record import PackTampered
    from falsify.contracts.packs import PackError, pack_dir, pack_file
    from falsify.project import find_project_or_none

    project = find_project_or_none(root)
    out: list[tuple[str, str, Path]] = []
    for name in project.packs if project else ():
        try:
            base = pack_dir(name).resolve()
        except PackTampered:
            raise  # never skipped: evidence is refused, verify names it
        except PackError:
            continue  # lint names the unknown pack; evidence is not written for a corpus that does not lint
        for p in sorted(base.rglob("*")):
            if not p.is_file() or GENERATED.intersection(p.relative_to(base).parts) or p.suffix == ".pyc":
                continue
            role = (
                "contract"
                if p.suffix in YAML_SUFFIXES
                else "falsifier-tests"
                if p.suffix == ".py"
                else "test-data"
            )
            if p.is_relative_to(root.resolve()):
                out.append((p.relative_to(root.resolve()).as_posix(), role, p))
            else:
                shipped = pack_file(p)
                assert shipped is not None  # p is under the packs' root
                out.append((shipped.name, role, p))
    return out


def file_name(root: Path, file: str | Path) -> str:
    """The name evidence gives a contract file: relative to the root, or a pack file as its distribution ships
    it; an EvidenceError (not a traceback) for anything else."""
    from falsify.contracts.packs import pack_file

    path = Path(file)
    if not path.is_absolute():
        return path.as_posix()
    if path.resolve().is_relative_to(root.resolve()):
        return path.resolve().relative_to(root.resolve()).as_posix()
    shipped = pack_file(path)
    if shipped is not None:
        return shipped.name
    raise EvidenceError(f"{path}: outside the project root {root} and in no installed pack")


HARNESS_PREFIX = "falsify-harness/"


def harness_files(root: Path) -> list[tuple[str, str, Path]]:
    """(name, role, path) of the harness code and schemas that decide a run's outcomes (issue #19)."""
    package = Path(__file__).resolve().parent.parent  # .../falsify
    # The packs are recorded as the project uses them (pack_files), not as harness code.
    found = [
        (p, "harness")
        for p in sorted(package.rglob("*.py"))
        if "__pycache__" not in p.parts and not p.is_relative_to(package / "packs")
    ]
    # contract-v1, mutant-v1 and the wire protocol's message schemas
    found += [(p, "schema") for p in sorted(package.rglob("*.schema.json"))]
    out = []
    real_root = root.resolve()
    for path, role in found:
        if not path.is_file():
            continue
        if path.is_relative_to(real_root):
            name = path.relative_to(real_root).as_posix()
        else:
            name = HARNESS_PREFIX + path.relative_to(package.parent).as_posix()
        out.append((name, role, path))
    return sorted(set(out))


def digest_files(root: Path, names: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [descriptor(name, sha256_file(root / name), **{"falsify.role": role}) for name, role in names]


def engine_object(root: Path, spec: str) -> Any:
    """The engine `spec` names, imported the way pytest sees it from the project root (root first on sys.path)."""
    here = str(root)
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return load_engine(spec)
    finally:
        if added:
            sys.path.remove(here)


def weights_files(root: Path, spec: str) -> tuple[list[tuple[str, Path]], str]:
    """(name, path) of the weights: the files [tool.falsify] weights names, and those the engine says it uses
    (tiny_model_path()); a note when the engine has none to show."""
    found, note = _engine_weights(root, spec)
    configured = configured_weights(root)
    names = {name for name, _ in found}
    return found + [(n, p) for n, p in configured if n not in names], "" if configured else note


def _engine_weights(root: Path, spec: str) -> tuple[list[tuple[str, Path]], str]:
    """(name, path) of the weights the engine uses, and a note when it has none to show."""
    try:
        engine = engine_object(root, spec)
    except EngineError as exc:
        raise EvidenceError(str(exc)) from None
    except (
        Exception
    ) as exc:  # the engine's own code is what evidence is about: a broken file must not crash us
        raise EvidenceError(f"engine {spec!r} cannot be made: {type(exc).__name__}: {exc}") from None
    locate = getattr(engine, "tiny_model_path", None)
    if locate is None:
        return [], f"engine {spec!r} has no tiny_model_path(): no weights recorded"
    try:
        directory = Path(locate())
    except Exception as exc:
        raise EvidenceError(
            f"engine {spec!r}: tiny_model_path() raised {type(exc).__name__}: {exc}"
        ) from None
    missing = [f for f in WEIGHT_FILES if not (directory / f).is_file()]
    if missing:
        raise EvidenceError(
            f"engine {spec!r}: tiny_model_path() gave a directory without {', '.join(missing)}"
        )
    real = directory.resolve()
    if real.is_relative_to(root.resolve()):
        prefix = real.relative_to(root.resolve()).as_posix()
    else:  # outside the tree (a cache dir): the directory's own name, never its location
        dirs = weights_dirs(root)
        if real.parent not in dirs:
            raise EvidenceError(
                f"engine {spec!r}: its weights ({real}) are outside the project and outside every weights "
                f"directory `verify` may read ({', '.join(map(str, dirs))}): add {real.parent} to "
                "[tool.falsify] weights_dirs"
            )
        prefix = real.name
    return [(f"{prefix}/{f}", real / f) for f in WEIGHT_FILES], ""


def weights_dirs(root: Path) -> list[Path]:
    """Where an engine's weights may live outside the tree, resolved: [tool.falsify] weights_dirs (absolute, `~`
    or relative to the root) and falsify's cache ($FALSIFY_CACHE, else ~/.cache/falsify), where the reference
    engine keeps its tiny model. The verifier's own configuration names them, never the bundle."""
    from falsify.project import find_project_or_none

    project = find_project_or_none(root)
    cache = os.environ.get("FALSIFY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "falsify")
    out: list[Path] = []
    for entry in (*(project.weights_dirs if project else ()), cache):
        path = Path(os.path.expanduser(entry))
        path = (path if path.is_absolute() else root / path).resolve()
        if path not in out:
            out.append(path)
    return out


def recorded_weights(root: Path, subjects: list[dict[str, Any]]) -> list[tuple[str, Path | None]]:
    """(name, path) of the weights a bundle records, found without importing the engine (issue #27): a configured
    weight, a file of the tree (the name a path relative to the root), or `DIR/FILE` inside one of
    weights_dirs(root); no symlink on the way below either. Any other name is (name, None): missing, never read.
    The configured weights the bundle does not record follow, so `verify` names them as added."""
    configured = dict(configured_weights(root))
    names = [
        d.get("name")
        for d in subjects
        if isinstance(d, dict) and (d.get("annotations") or {}).get("falsify.role") == "weights"
    ]
    dirs = weights_dirs(root)
    out: list[tuple[str, Path | None]] = []
    for name in names:
        if not isinstance(name, str):
            continue
        out.append((name, configured.get(name) or _find_weight(root, dirs, name)))
    return out + [(n, p) for n, p in configured.items() if n not in names]


def _find_weight(root: Path, dirs: list[Path], name: str) -> Path | None:
    if glob_problem(name):  # absolute, `~`, `..`, a backslash or a NUL: never looked up
        return None
    bases = [root] + (dirs if len(Path(name).parts) == 2 else [])
    for base in bases:
        path = base / name
        try:
            safefile.inside(base, path)
            if stat.S_ISREG(os.lstat(path).st_mode):
                return path
        except (safefile.FileLayerError, OSError):
            continue
    return None


def configured_weights(root: Path) -> list[tuple[str, Path]]:
    """(name, path) of the files matching [tool.falsify] weights, relative to the project root."""
    from falsify.project import find_project_or_none

    project = find_project_or_none(root)
    found = {
        p.relative_to(root).as_posix(): p
        for pattern in (project.weights if project else ())
        for p in root.glob(pattern)
        if p.is_file() and _within(root, p)
    }
    return sorted(found.items())


def _within(root: Path, path: Path) -> bool:
    """`path` is inside `root` once links are resolved: a glob through a symlinked directory reads nothing
    outside the tree (the configuration itself refuses absolute and `..` patterns)."""
    return path.resolve().is_relative_to(root.resolve())


def tree_digests(root: Path, inputs: Inputs) -> dict[str, str]:
    """name -> sha256 of every file the statements will name from the tree: sources, configuration, weights."""
    names = [(n, root / n) for n in source_files(root, inputs.sources)]
    names += [(n, root / n) for n, _ in configuration_files(root, inputs)]
    names += weights_files(root, inputs.engine)[0]
    names += [(n, path) for n, _, path in pack_files(root)]
    names += [(n, path) for n, _, path in harness_files(root)]
    return {name: sha256_file(path) for name, path in names}
