"""`falsify mutmut`: operator-level mutants (mutmut 3) over reference/, in a scratch copy, with a kill-rate floor
and a reviewed baseline of survivors that may only shrink.

mutmut works in ./mutants/, the directory our semantic mutants live in, so it never runs in the working tree:
the project is copied to a scratch directory, our mutants/ moved aside (into mutmut's directory, where the
copied pyproject.toml finds it), and mutmut configured there through setup.cfg. mutmut exits 0 with survivors,
so the verdict comes from its per-file .meta results. A survivor is a mutant that survived, or that no selected
test covers. The run fails when the kill rate of the non-equivalent mutants is below `kill_rate_floor`, or when
a survivor is not in the baseline file: its [[equivalent]] entries (each with the reviewer's reason) leave the
kill rate's denominator, its [[survivor]] entries are the survivors known so far. An entry matches a mutant of
the same function with the same original and mutated line (mutmut renumbers a function's mutants when it
changes, and lines move). Every survivor is
listed by file:line with the original and mutated line.

Configuration, [tool.falsify.mutmut] in pyproject.toml (all optional):
    kill_rate_floor = 90.0    # percent of the non-equivalent mutants that must be killed (or time out)
    baseline = "mutmut-baseline.toml"   # reviewed [[equivalent]] and [[survivor]] entries; absent: none
    paths = ["reference/session.py", ...]   # files mutated (default: the .py files of [tool.falsify] sources)
    tests = ["tests/test_session_unit.py", ...]   # the tests mutmut runs (default: the tests directory)
    timeout = 1500            # seconds for the whole mutmut run
    pytest_args = ["-k", "not slow"]   # added to each pytest run mutmut makes
    timeout_multiplier = 4    # a mutant's run stops after (its tests' time + timeout_constant) x this
    timeout_constant = 10     # seconds

`--recheck` runs only the mutants the baseline lists as survivors (after tests were added); with
`--write-baseline` it drops the ones now killed.

Exit codes: 0 the kill rate is at or above the floor and every survivor is listed in the baseline; 1 below the
floor, or a survivor the baseline does not list; 2 mutmut missing, bad configuration or baseline, no project,
or mutmut could not run; 130 interrupted.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from falsify import __version__
from falsify.errors import FalsifyError
from falsify.mutation import stryker
from falsify.mutation.executors import sigterm_interrupts
from falsify.mutation.semantic.scratch import Scratch
from falsify.project import Project, find_project
from falsify.table import table

HELP = "run mutmut over the engine's sources in a scratch copy; fail below the kill-rate floor or on an unlisted survivor"

DEFAULT_FLOOR = 0.0
DEFAULT_BASELINE = "mutmut-baseline.toml"
DEFAULT_TIMEOUT = 1500.0
DEFAULT_TIMEOUT_MULTIPLIER = 4.0
DEFAULT_TIMEOUT_CONSTANT = 10.0

# mutmut.stats.status_by_exit_code, restated: reading results must not depend on importing mutmut's CLI module.
STATUS_BY_EXIT_CODE = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    2: "interrupted",
    None: "not checked",
    33: "no tests",
    34: "skipped",
    35: "suspicious",
    36: "timeout",
    37: "caught by type check",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "segfault",
}
SURVIVING = ("survived", "no tests")
STRYKER_STATUS = {
    "killed": "Killed",
    "timeout": "Timeout",
    "caught by type check": "CompileError",
    "survived": "Survived",
    "no tests": "NoCoverage",
    "skipped": "Ignored",
    "not checked": "Pending",
    "suspicious": "RuntimeError",
    "segfault": "RuntimeError",
    "interrupted": "Pending",
}
CLASS_SEPARATOR = "ǁ"  # mutmut's mangling: module.xǁClassǁmethod__mutmut_3, module.x_function__mutmut_3


class MutmutError(FalsifyError):
    """mutmut could not run, or its configuration is bad."""


@dataclass(frozen=True, slots=True)
class MutmutConfig:
    kill_rate_floor: float = DEFAULT_FLOOR  # percent
    baseline: str = DEFAULT_BASELINE  # relative to the project root
    paths: tuple[str, ...] = ()
    tests: tuple[str, ...] = ("tests",)
    timeout: float = DEFAULT_TIMEOUT
    pytest_args: tuple[str, ...] = ()  # added to every pytest run mutmut makes, e.g. ["-k", "not slow"]
    # mutmut stops a mutant's run after (its tests' time + constant) x multiplier seconds of wall clock (twice
    # that of CPU). Its defaults (1 s, 15) let each hanging mutant (an off-by-one in a bound check) hold a worker
    # for minutes; a small constant turns every mutant of a fast test into a TIMEOUT on a loaded machine (pytest's
    # own start is not in the tests' time), which would count as detected. Measured: README, Mutants.
    timeout_multiplier: float = DEFAULT_TIMEOUT_MULTIPLIER
    timeout_constant: float = DEFAULT_TIMEOUT_CONSTANT


@dataclass(frozen=True, slots=True)
class MutmutMutant:
    name: str  # mutmut's key, e.g. reference.session.xǁSessionǁgenerate__mutmut_12
    file: str
    status: str
    line: int = 0  # of the mutated line in the original file; 0 when unknown
    original: str = ""
    mutated: str = ""
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    mutant: str  # mutmut's name when listed; its function part (before __mutmut_) is what matches
    original: str  # the original line, stripped
    mutated: str  # the mutated line, stripped
    where: str = ""  # file:line when it was listed (lines move; informative only)
    reason: str = ""  # why it is equivalent (required for [[equivalent]])

    def matches(self, m: MutmutMutant) -> bool:
        """Same function, same original line, same mutated line: mutmut renumbers a function's mutants when
        the function changes, and lines move, so neither the number nor the line decides."""
        return (
            _function_key(self.mutant) == _function_key(m.name)
            and self.original == m.original.strip()
            and self.mutated == m.mutated.strip()
        )


def _function_key(name: str) -> str:
    return name.partition("__mutmut_")[0]


@dataclass(frozen=True, slots=True)
class Baseline:
    """The reviewed baseline file: equivalent mutants (out of the kill rate) and the survivors known so far."""

    path: str
    equivalent: tuple[BaselineEntry, ...] = ()
    survivors: tuple[BaselineEntry, ...] = ()

    def _find(self, entries: tuple[BaselineEntry, ...], m: MutmutMutant) -> BaselineEntry | None:
        return next((e for e in entries if e.matches(m)), None)

    def is_equivalent(self, m: MutmutMutant) -> bool:
        return self._find(self.equivalent, m) is not None

    def is_known_survivor(self, m: MutmutMutant) -> bool:
        return self._find(self.survivors, m) is not None


@dataclass(slots=True)
class MutmutRun:
    config: MutmutConfig
    files: list[str]
    mutants: list[MutmutMutant] = field(default_factory=list)
    seconds: float = 0.0
    since: str | None = None
    patterns: list[str] = field(default_factory=list)
    recheck: bool = False  # only the baseline's [[survivor]] mutants were run
    baseline: Baseline = field(default_factory=lambda: Baseline(DEFAULT_BASELINE))

    @property
    def counts(self) -> Counter[str]:
        return Counter(m.status for m in self.mutants)

    @property
    def survivors(self) -> list[MutmutMutant]:
        return [m for m in self.mutants if m.status in SURVIVING]

    @property
    def partial(self) -> bool:
        """A run over a subset of the mutants (--since, --recheck): the floor is not applied to it."""
        return bool(self.since) or self.recheck

    @property
    def new_survivors(self) -> list[MutmutMutant]:
        """Survivors the baseline lists neither as equivalent nor as known: each one fails the run."""
        b = self.baseline
        return [m for m in self.survivors if not b.is_equivalent(m) and not b.is_known_survivor(m)]

    @property
    def equivalent(self) -> list[MutmutMutant]:
        """Surviving mutants the baseline lists as equivalent (a killed one is not equivalent: see stale)."""
        return [m for m in self.survivors if self.baseline.is_equivalent(m)]

    def stale(self) -> list[tuple[str, BaselineEntry]]:
        """Baseline entries this run does not bear out: a listed survivor now killed (remove it: the list
        shrinks), a listed equivalent mutant killed (it was not equivalent), or an entry whose mutant this run
        did not produce with that mutated line. Not read in a --since or --recheck run, which mutates a subset."""
        if self.partial:
            return []
        out = []
        for kind, entries in (
            ("equivalent", self.baseline.equivalent),
            ("survivor", self.baseline.survivors),
        ):
            for e in entries:
                found = [m for m in self.mutants if e.matches(m)]
                if not found:
                    out.append(("no such mutant (the code changed)", e))
                elif not any(m.status in SURVIVING for m in found):
                    out.append((f"listed as {kind}, now {found[0].status}", e))
        return out


def read_baseline(project: Project, config: MutmutConfig) -> Baseline:
    """The baseline file named by `baseline` (absent: empty); a bad entry is a one-line MutmutError."""
    path = project.root / config.baseline
    if not path.is_file():
        return Baseline(config.baseline)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MutmutError(f"{path}: {exc}") from None
    unknown = sorted(set(data) - {"equivalent", "survivor"})
    if unknown:
        raise MutmutError(f"{path}: unknown table(s) {', '.join(unknown)} (known: equivalent, survivor)")
    lists: dict[str, list[BaselineEntry]] = {"equivalent": [], "survivor": []}
    for kind, entries in lists.items():
        raw = data.get(kind, [])
        if not isinstance(raw, list):
            raise MutmutError(f"{path}: {kind} must be an array of tables ([[{kind}]])")
        for i, item in enumerate(raw):
            where = f"{path}: [[{kind}]] #{i + 1}"
            if not isinstance(item, dict):
                raise MutmutError(f"{where} is not a table")
            extra = sorted(set(item) - {"mutant", "original", "mutated", "where", "reason"})
            if extra:
                raise MutmutError(f"{where} has unknown key(s) {', '.join(extra)}")
            for key in ("mutant",) + (("reason",) if kind == "equivalent" else ()):
                if not isinstance(item.get(key), str) or not item[key].strip():
                    raise MutmutError(f"{where} needs a non-empty string {key!r}")
            for key in ("original", "mutated"):  # a line mutmut removed or added may be empty
                if not isinstance(item.get(key), str):
                    raise MutmutError(f"{where} needs a string {key!r} (the line, stripped)")
            entries.append(
                BaselineEntry(
                    item["mutant"],
                    item["original"].strip(),
                    item["mutated"].strip(),
                    str(item.get("where", "")),
                    str(item.get("reason", "")),
                )
            )
    names = [e.mutant for e in lists["equivalent"] + lists["survivor"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise MutmutError(f"{path}: listed more than once: {', '.join(twice)}")
    return Baseline(config.baseline, tuple(lists["equivalent"]), tuple(lists["survivor"]))


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def render_baseline(run: MutmutRun, baseline: Baseline) -> str:
    """The baseline file with [[survivor]] rewritten from this run's survivors; [[equivalent]] kept as reviewed."""
    lines = [
        "# falsify mutmut baseline, read by `falsify mutmut` ([tool.falsify.mutmut] baseline).",
        "# [[equivalent]]: mutants no test can kill because the mutated program means the same; each entry gives",
        "# the reviewer's reason, and they leave the kill rate's denominator.",
        "# [[survivor]]: mutants no test kills yet. The list may only shrink: a survivor not listed fails the run.",
        "# An entry matches a mutant of the same function with the same original and mutated line (mutmut's",
        "# numbers and the lines move when code changes); `where` is where it was when listed.",
        "",
    ]
    for e in baseline.equivalent:
        lines += [
            "[[equivalent]]",
            f"mutant = {_toml_string(e.mutant)}",
            f"where = {_toml_string(e.where)}",
            f"original = {_toml_string(e.original)}",
            f"mutated = {_toml_string(e.mutated)}",
            f"reason = {_toml_string(e.reason)}",
            "",
        ]
    if run.recheck:  # keep the listed survivors this run did not kill, as listed
        killed = {m.name for m in run.mutants if m.status not in SURVIVING}
        for e in baseline.survivors:
            if e.mutant not in killed:
                lines += [
                    "[[survivor]]",
                    f"mutant = {_toml_string(e.mutant)}",
                    f"where = {_toml_string(e.where)}",
                    f"original = {_toml_string(e.original)}",
                    f"mutated = {_toml_string(e.mutated)}",
                    "",
                ]
        return "\n".join(lines)
    for m in sorted(run.survivors, key=lambda m: (m.file, m.line, m.name)):
        if baseline.is_equivalent(m):
            continue
        lines += [
            "[[survivor]]",
            f"mutant = {_toml_string(m.name)}",
            f"where = {_toml_string(f'{m.file}:{m.line}')}",
            f"original = {_toml_string(m.original.strip())}",
            f"mutated = {_toml_string(m.mutated.strip())}",
            "",
        ]
    return "\n".join(lines)


def read_config(project: Project) -> MutmutConfig:
    """[tool.falsify.mutmut] from pyproject.toml, with defaults; a bad value is a one-line MutmutError."""
    path = project.root / "pyproject.toml"
    try:
        table_ = (
            tomllib.loads(path.read_text(encoding="utf-8"))
            .get("tool", {})
            .get("falsify", {})
            .get("mutmut", {})
        )
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MutmutError(f"{path}: {exc}") from None
    where = f"{path}: [tool.falsify.mutmut]"
    known = (
        "kill_rate_floor",
        "baseline",
        "paths",
        "tests",
        "timeout",
        "pytest_args",
        "timeout_multiplier",
        "timeout_constant",
    )
    if "survivor_budget" in table_:
        raise MutmutError(
            f"{where} survivor_budget is gone: set kill_rate_floor (percent) and list the known survivors in "
            f"the baseline file ({DEFAULT_BASELINE}; falsify mutmut --write-baseline writes them)"
        )
    unknown = sorted(set(table_) - set(known))
    if unknown:
        raise MutmutError(f"{where} has unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    floor = table_.get("kill_rate_floor", DEFAULT_FLOOR)
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 100:
        raise MutmutError(f"{where} kill_rate_floor must be a percentage in [0, 100], got {floor!r}")
    baseline = table_.get("baseline", DEFAULT_BASELINE)
    if not isinstance(baseline, str) or not baseline:
        raise MutmutError(f"{where} baseline must be a path relative to the project root, got {baseline!r}")
    lists = {}
    defaults = {
        "paths": default_paths(project),
        "tests": [project.tests.relative_to(project.root).as_posix()],
    }
    for key in ("paths", "tests"):
        if key not in table_ and not defaults[key]:
            continue  # no sources either: reported once every given value is checked
        value = table_.get(key, defaults[key])
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise MutmutError(f"{where} {key} must be a non-empty list of paths, got {value!r}")
        lists[key] = tuple(value)
    timeout = table_.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise MutmutError(f"{where} timeout must be a number of seconds > 0, got {timeout!r}")
    args = table_.get("pytest_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise MutmutError(f"{where} pytest_args must be a list of strings, got {args!r}")
    multiplier = table_.get("timeout_multiplier", DEFAULT_TIMEOUT_MULTIPLIER)
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or multiplier < 1:
        raise MutmutError(f"{where} timeout_multiplier must be a number >= 1, got {multiplier!r}")
    constant = table_.get("timeout_constant", DEFAULT_TIMEOUT_CONSTANT)
    if isinstance(constant, bool) or not isinstance(constant, int | float) or constant < 0:
        raise MutmutError(f"{where} timeout_constant must be a number of seconds >= 0, got {constant!r}")
    if "paths" not in lists:
        raise MutmutError(
            f"{where}: no paths to mutate: set paths there, or sources = [...] in [tool.falsify]"
        )
    return MutmutConfig(
        float(floor),
        baseline,
        lists["paths"],
        lists["tests"],
        float(timeout),
        tuple(args),
        float(multiplier),
        float(constant),
    )


def default_paths(project: Project) -> list[str]:
    """The Python files of the engine's sources ([tool.falsify] sources), when [tool.falsify.mutmut] names none."""
    found = {
        p.relative_to(project.root).as_posix()
        for pattern in project.sources
        for p in project.root.glob(pattern)
        if p.suffix == ".py" and p.is_file()
    }
    return sorted(found)


# -- what to mutate ---------------------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MutmutError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def changed_lines(root: Path, ref: str, files: list[str]) -> dict[str, set[int] | None]:
    """Lines of `files` changed since `ref` (committed or not); None for a file git does not know at `ref`."""
    _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    out: dict[str, set[int] | None] = {}
    for line in _git(root, "ls-files", "--others", "--exclude-standard", "--", *files).splitlines():
        out[line] = None
    current: str | None = None
    for line in _git(root, "diff", "-U0", "--no-color", ref, "--", *files).splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("--- /dev/null") and current is None:
            pass
        elif line.startswith("@@") and current:
            match = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", line)
            if match:
                start, count = int(match[1]), int(match[2] or 1)
                lines = out.setdefault(current, set())
                if lines is not None:
                    lines.update(range(start, start + max(count, 1)))
    return out


def function_patterns(root: Path, changed: dict[str, set[int] | None]) -> list[str]:
    """mutmut mutant-name patterns for every function or method whose lines changed."""
    patterns = []
    for file, lines in sorted(changed.items()):
        path = root / file
        if not path.is_file():
            continue
        module = ".".join(Path(file).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            defs: list[tuple[str, ast.AST]] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defs.append((f"x_{node.name}", node))
            elif isinstance(node, ast.ClassDef):
                defs += [
                    (f"x{CLASS_SEPARATOR}{node.name}{CLASS_SEPARATOR}{f.name}", f)
                    for f in node.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
            for mangled, fn in defs:
                span = set(range(fn.lineno, (fn.end_lineno or fn.lineno) + 1))  # type: ignore[attr-defined]
                if lines is None or span & lines:
                    patterns.append(f"{module}.{mangled}__mutmut_*")
    return patterns


# -- running mutmut in a scratch copy ---------------------------------------------------------------------------


def prepare(tree: Path, project: Project, config: MutmutConfig, files: list[str]) -> None:
    """Make the scratch copy a mutmut project whose ./mutants/ is free for mutmut."""
    ours = str(project.mutants.relative_to(project.root))
    copy_also = [str(project.contracts.relative_to(project.root))]
    if ours == "mutants":
        if (tree / "mutants").exists():
            # mutmut runs pytest in ./mutants/ on the copied pyproject.toml: our mutants are found there again.
            aside = tree / ".falsify-mutants-aside"
            (tree / "mutants").rename(aside)
            (tree / "mutants").mkdir()
            aside.rename(tree / "mutants" / "mutants")
    elif (tree / ours).exists():
        copy_also.append(ours)
    pyproject = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    if "mutmut" in pyproject.get("tool", {}):
        raise MutmutError(
            "pyproject.toml has a [tool.mutmut] table; configure mutmut in [tool.falsify.mutmut]"
        )
    sources = sorted({Path(f).parts[0] for f in files})
    lines = [
        "[mutmut]",
        "source_paths =",
        *(f"    {d}" for d in sources),
        "only_mutate =",
        *(f"    {f}" for f in files),
        "pytest_add_cli_args_test_selection =",
        *(f"    {t}" for t in config.tests),
        "also_copy =",
        *(f"    {c}" for c in copy_also),
        f"timeout_multiplier = {config.timeout_multiplier}",
        f"timeout_constant = {config.timeout_constant}",
        "pytest_add_cli_args =",
        *(f"    {a}" for a in ("-p", "no:cacheprovider", *config.pytest_args)),
        "",
    ]
    setup_cfg = tree / "setup.cfg"
    previous = setup_cfg.read_text(encoding="utf-8") + "\n" if setup_cfg.is_file() else ""
    if "[mutmut]" in previous:
        raise MutmutError("setup.cfg has a [mutmut] section; configure mutmut in [tool.falsify.mutmut]")
    setup_cfg.write_text(previous + "\n".join(lines), encoding="utf-8")


def mutmut_command(*args: str) -> list[str]:
    # `python -m mutmut` re-executes mutmut.__main__ (mutmut warns); import its click group instead.
    return [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())", *args]


def read_results(tree: Path, files: list[str], patterns: list[str]) -> list[MutmutMutant]:
    out = []
    for file in files:
        meta = tree / "mutants" / f"{file}.meta"
        if not meta.is_file():
            continue
        data = json.loads(meta.read_text(encoding="utf-8"))
        durations = data.get("durations_by_key", {})
        for name, code in data["exit_code_by_key"].items():
            if patterns and not any(_fnmatch(name, p) for p in patterns):
                continue
            status = STATUS_BY_EXIT_CODE.get(code, "suspicious")
            out.append(MutmutMutant(name, file, status, duration=durations.get(name)))
    return out


def _fnmatch(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


_DIFFS_SCRIPT = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
names = json.load(open(sys.argv[1]))
out = {}
for name, path in names.items():
    try:
        out[name] = get_diff_for_mutant(name, path=path)
    except Exception as exc:  # one unreadable mutant must not lose the others' diffs
        out[name] = ""
json.dump(out, open(sys.argv[2], "w"))
"""


def locate(tree: Path, mutants: list[MutmutMutant], scratch: Scratch, timeout: float) -> list[MutmutMutant]:
    """file:line, original and mutated line of each mutant, from mutmut's own diffs (read in one process)."""
    if not mutants:
        return mutants
    names, diffs_path = tree / ".falsify-names.json", tree / ".falsify-diffs.json"
    names.write_text(json.dumps({m.name: m.file for m in mutants}), encoding="utf-8")
    finished = scratch.run(
        [sys.executable, "-c", _DIFFS_SCRIPT, str(names), str(diffs_path)],
        cwd=tree,
        env=_env(),
        timeout=timeout,
    )
    diffs = json.loads(diffs_path.read_text(encoding="utf-8")) if diffs_path.is_file() else {}
    if finished.returncode != 0:
        print(
            f"mutmut: could not read mutmut's diffs (exit {finished.returncode}); survivors listed without lines"
        )
    sources: dict[str, list[str]] = {}
    out = []
    for m in mutants:
        lines = sources.setdefault(m.file, (tree / m.file).read_text(encoding="utf-8").splitlines())
        out.append(_with_line(m, diffs.get(m.name, ""), lines))
    return out


def _with_line(m: MutmutMutant, diff: str, lines: list[str]) -> MutmutMutant:
    removed = [d[1:] for d in diff.splitlines() if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
    if not removed and not added:
        return m
    original = removed[0] if removed else ""
    start = _function_line(m, lines)
    line = 0
    if original.strip():
        # The diff is of the function alone: find its removed line in the file, from the function's first line on.
        for i in range(max(start - 1, 0), len(lines)):
            if lines[i].strip() == original.strip():
                line = i + 1
                break
    return MutmutMutant(
        m.name,
        m.file,
        m.status,
        line or start,
        original.strip(),
        (added[0] if added else "").strip(),
        m.duration,
    )


def _function_line(m: MutmutMutant, lines: list[str]) -> int:
    mangled = m.name.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("x" + CLASS_SEPARATOR):
        cls, _, fn = mangled[2:].partition(CLASS_SEPARATOR)
        start = next((i for i, t in enumerate(lines) if re.match(rf"class {re.escape(cls)}\b", t)), 0)
    else:
        fn, start = mangled.removeprefix("x_"), 0
    for i in range(start, len(lines)):
        if re.match(rf"\s*(async\s+)?def {re.escape(fn)}\(", lines[i]):
            return i + 1
    return 1


def _env() -> dict[str, str]:
    import os

    env = os.environ.copy()
    env["HYPOTHESIS_PROFILE"] = "mutation"
    env.pop("PYTHONPATH", None)  # mutmut puts ./mutants first itself; nothing else may shadow it
    return env


def run_mutmut(
    project: Project,
    config: MutmutConfig,
    *,
    since: str | None,
    jobs: int,
    progress: Any = print,
    recheck: Baseline | None = None,
) -> MutmutRun:
    files = sorted(
        {
            str(p.relative_to(project.root))
            for pattern in config.paths
            for p in project.root.glob(pattern)
            if p.suffix == ".py"
        }
    )
    if not files:
        raise MutmutError(f"[tool.falsify.mutmut] paths {list(config.paths)} match no Python file")
    run = MutmutRun(config, files, since=since)
    if recheck is not None:
        # mutmut's names are the current code's right after a whole run; an entry whose name no longer exists is
        # simply not run (and a whole run reports it as gone).
        run.recheck = True
        run.patterns = sorted({e.mutant for e in recheck.survivors})
        modules = {".".join(Path(f).with_suffix("").parts): f for f in files}
        run.files = sorted({modules[m] for m in (p.rpartition(".")[0] for p in run.patterns) if m in modules})
        if not run.patterns:
            progress(f"mutmut: {recheck.path} lists no survivor; nothing to recheck")
            return run
        progress(f"mutmut: rechecking the {len(run.patterns)} survivors {recheck.path} lists")
    elif since:
        changed = changed_lines(project.root, since, files)
        run.patterns = function_patterns(project.root, changed)
        run.files = sorted({f for f in changed if f in files})
        if not run.patterns:
            progress(f"mutmut: no function of {', '.join(files)} changed since {since}; nothing to mutate")
            return run
        progress(f"mutmut: {len(run.patterns)} functions changed since {since} in {', '.join(run.files)}")
    start = time.perf_counter()
    with Scratch(project.root, prefix="falsify-mutmut-", exclude=project.copy_exclude) as scratch:
        tree = scratch.copy("project")
        prepare(tree, project, config, run.files)
        progress(f"mutmut: mutating {', '.join(run.files)} in {tree}, tests {', '.join(config.tests)}")
        args = ["run", "--max-children", str(jobs), *run.patterns]
        done = threading.Event()
        watcher = threading.Thread(target=_report_progress, args=(tree, run, done, progress), daemon=True)
        watcher.start()
        try:
            finished = scratch.run(mutmut_command(*args), cwd=tree, env=_env(), timeout=config.timeout)
        finally:
            done.set()
            watcher.join()
        log = finished.output
        if finished.returncode is None:
            raise MutmutError(
                f"mutmut ran past its timeout of {config.timeout:.0f} s ([tool.falsify.mutmut] "
                "timeout); narrow paths or tests"
            )
        if finished.returncode != 0:
            raise MutmutError(f"mutmut exited {finished.returncode}:\n{_clean_tail(log)}")
        mutants = read_results(tree, run.files, run.patterns)
        if not mutants:
            raise MutmutError(f"mutmut reported no mutant:\n{_clean_tail(log)}")
        run.mutants = locate(tree, mutants, scratch, timeout=600)
    run.seconds = time.perf_counter() - start
    return run


def _report_progress(
    tree: Path, run: MutmutRun, done: threading.Event, progress: Any, every: float = 30.0
) -> None:
    """A line every `every` seconds while mutmut runs, from its .meta files: mutmut's own spinner is not a log."""
    start = time.perf_counter()
    while not done.wait(every):
        try:
            mutants = read_results(tree, run.files, run.patterns)
        except (OSError, ValueError):  # a .meta file being rewritten
            continue
        counts = Counter(m.status for m in mutants)
        checked = len(mutants) - counts["not checked"]
        phase = (
            f"{checked}/{len(mutants)} mutants checked"
            if mutants
            else "generating mutants, running clean tests"
        )
        detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "not checked")
        progress(f"mutmut: {time.perf_counter() - start:.0f} s: {phase}" + (f" ({detail})" if detail else ""))


def _clean_tail(log: str, n: int = 20) -> str:
    lines = [line for line in re.split(r"[\r\n]+", log) if line.strip()]
    return "\n".join(lines[-n:])


# -- reporting --------------------------------------------------------------------------------------------------


def kill_rate(run: MutmutRun) -> tuple[int, int]:
    """(detected, judged) over the non-equivalent mutants: killed, timed out or caught by the type check, over
    every mutant that ran (not skipped, not left unchecked) and is not listed as equivalent."""
    counts = run.counts
    detected = counts["killed"] + counts["timeout"] + counts["caught by type check"]
    judged = len(run.mutants) - counts["skipped"] - counts["not checked"] - len(run.equivalent)
    return detected, judged


def verdict(run: MutmutRun) -> tuple[str, bool]:
    counts = run.counts
    total = len(run.mutants)
    detected, judged = kill_rate(run)
    rate = 100.0 * detected / judged if judged else 0.0
    floor = run.config.kill_rate_floor
    new = len(run.new_survivors)
    # A --since or --recheck run mutates a subset: the floor is a property of the whole run, not of a sample.
    floor_ok = run.partial or rate >= floor
    ok = judged > 0 and floor_ok and new == 0
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    known = len(run.survivors) - new - len(run.equivalent)
    return (
        f"mutmut: {'PASS' if ok else 'FAIL'} — {total} mutants over {len(run.files)} files ({parts}); "
        f"{len(run.equivalent)} listed as equivalent; kill rate {detected}/{judged} = "
        f"{f'{rate:.1f}%' if judged else 'n/a'} of the non-equivalent mutants against a floor of {floor:g}%"
        f"{' (not applied to a partial run)' if run.partial else ''}; {len(run.survivors) - len(run.equivalent)} "
        f"survivors (survived or no test): {known} listed in {run.baseline.path}, {new} not listed; "
        f"{run.seconds:.0f} s"
    ), ok


def render_survivors(run: MutmutRun) -> str:
    def listed(m: MutmutMutant) -> str:
        if run.baseline.is_equivalent(m):
            return "equivalent"
        return "known" if run.baseline.is_known_survivor(m) else "NEW"

    rows = [
        [
            f"{m.file}:{m.line}",
            m.status,
            listed(m),
            m.original[:60],
            m.mutated[:60],
            m.name.rpartition(".")[2],
        ]
        for m in sorted(run.survivors, key=lambda m: (m.file, m.line, m.name))
    ]
    return table(["where", "status", "baseline", "original", "mutated", "mutant"], rows)


def to_stryker(run: MutmutRun, root: Path) -> dict[str, Any]:
    files: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for m in run.mutants:
        if m.file not in files:
            files[m.file] = ((root / m.file).read_text(encoding="utf-8"), [])
        line = max(m.line, 1)
        source_line = files[m.file][0].splitlines()[line - 1] if m.line else ""
        indent = len(source_line) - len(source_line.lstrip())
        loc = stryker.Location(line, indent + 1, line, max(len(source_line), indent + 1) + 1)
        equivalent = run.baseline.is_equivalent(m)
        files[m.file][1].append(
            stryker.mutant(
                m.name,
                "mutmut",
                loc,
                "Ignored" if equivalent else STRYKER_STATUS.get(m.status, "RuntimeError"),
                description=f"mutmut: {m.status}" + (" (listed as equivalent)" if equivalent else ""),
                replacement=m.mutated or None,
                reason=m.status,
                duration_ms=m.duration * 1000 if m.duration is not None else None,
            )
        )
    return stryker.report(
        files,
        framework="falsify mutmut",
        version=__version__,
        project_root=str(root),
        config={
            "paths": list(run.config.paths),
            "tests": list(run.config.tests),
            "kill_rate_floor": run.config.kill_rate_floor,
            "baseline": run.config.baseline,
            "since": run.since,
        },
    )


# -- the command ------------------------------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mutmut",
        help=HELP,
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    p.add_argument(
        "--since", metavar="REF", help="mutate only functions changed since this git ref (pull requests)"
    )
    p.add_argument("-j", "--jobs", type=int, default=0, help="mutmut workers (default: one per core)")
    p.add_argument(
        "--kill-rate-floor", type=float, help="override [tool.falsify.mutmut] kill_rate_floor (percent)"
    )
    p.add_argument(
        "--write-baseline",
        action="store_true",
        help="rewrite the baseline file's [[survivor]] list from this run (review the diff: it may only shrink)",
    )
    p.add_argument(
        "--recheck",
        action="store_true",
        help="run only the baseline's [[survivor]] mutants (after adding tests; with --write-baseline, drop "
        "the ones now killed)",
    )
    p.add_argument("--timeout", type=float, help="override [tool.falsify.mutmut] timeout (seconds)")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(".falsify/mutmut"),
        help="where mutation-report.json (Stryker schema) and .html go (default: .falsify/mutmut)",
    )


def run(args: argparse.Namespace) -> int:
    from falsify.mutation.executors import available_cores

    if shutil.which("git") is None and args.since:
        raise MutmutError("--since needs git on PATH")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise MutmutError("mutmut is not installed: pip install 'mutmut>=3'") from None
    project = find_project()
    config = read_config(project)
    if args.kill_rate_floor is not None:
        if not 0 <= args.kill_rate_floor <= 100:
            raise MutmutError(
                f"--kill-rate-floor must be a percentage in [0, 100], got {args.kill_rate_floor}"
            )
        config = dataclasses.replace(config, kill_rate_floor=args.kill_rate_floor)
    if args.write_baseline and args.since:
        raise MutmutError("--write-baseline needs a whole run or --recheck, not --since")
    if args.recheck and args.since:
        raise MutmutError("--recheck and --since each pick the mutants: give one")
    baseline = read_baseline(project, config)
    if args.timeout is not None:
        if args.timeout <= 0:
            raise MutmutError(f"--timeout must be > 0, got {args.timeout}")
        config = dataclasses.replace(config, timeout=args.timeout)
    with sigterm_interrupts():
        result = run_mutmut(
            project,
            config,
            since=args.since,
            jobs=args.jobs or available_cores(),
            progress=lambda line: print(line, flush=True),
            recheck=baseline if args.recheck else None,
        )
    result.baseline = baseline
    if (args.since or args.recheck) and not result.patterns:
        return 0
    if result.survivors:
        print()
        print(render_survivors(result))
    stale = result.stale()
    if stale:
        print()
        print(
            f"mutmut: {len(stale)} entries of {baseline.path} this run does not bear out (remove or review them):"
        )
        for why, e in stale:
            print(f"  {e.where or '?'} {e.mutant}: {why}")
    out = args.out if args.out.is_absolute() else project.root / args.out
    out.mkdir(parents=True, exist_ok=True)
    data = to_stryker(result, project.root)
    (out / "mutation-report.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (out / "mutation-report.html").write_text(
        stryker.render_html(data, "falsify mutmut: operator mutants"), encoding="utf-8"
    )
    summary, ok = verdict(result)
    print()
    print(summary)
    print(f"mutmut: report in {out / 'mutation-report.json'} and {out / 'mutation-report.html'}")
    if args.write_baseline:
        path = project.root / config.baseline
        path.write_text(render_baseline(result, baseline), encoding="utf-8")
        listed = len(read_baseline(project, config).survivors)
        print(
            f"mutmut: wrote {path} ({len(baseline.equivalent)} equivalent, {listed} survivors); review the diff"
        )
    return 0 if ok else 1
