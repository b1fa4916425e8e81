"""`falsify mutmut`'s configuration ([tool.falsify.mutmut]), the records of a run (MutmutMutant, MutmutRun) and
the reviewed baseline of equivalent mutants and known survivors (read and rendered); the file formats are
described in falsify/mutation/mutmut/__init__.py.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field

from falsify.errors import FalsifyError
from falsify.project import Project, ProjectError, read_toml, subtable
from falsify.subcommand import MAX_SECONDS, seconds_problem

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
# A mutant the baseline lists (as equivalent or as a known survivor) that a whole run did not run (`falsify mutmut`
# skips them unless --run-listed or --write-baseline): counted as surviving, so the kill rate is what it would be if
# it survived as listed, and a listed survivor now killed is found only by --recheck or --run-listed.
LISTED_NOT_RUN = "listed (not run)"
# A mutant outside the sample a `--sample K/N` run draws (running.in_sample): not run, out of every count but the
# total; the next K's run draws it.
NOT_SAMPLED = "not in the sample (not run)"
SURVIVING = ("survived", "no tests", LISTED_NOT_RUN)
STRYKER_STATUS = {
    "killed": "Killed",
    "timeout": "Timeout",
    "caught by type check": "CompileError",
    "survived": "Survived",
    "no tests": "NoCoverage",
    LISTED_NOT_RUN: "Survived",
    NOT_SAMPLED: "Ignored",
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
    sample: tuple[int, int] | None = None  # (K, N): only the mutants of sample K of N were run (--sample)
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

    @property
    def not_run(self) -> list[MutmutMutant]:
        """Mutants the baseline lists that this run did not run (LISTED_NOT_RUN)."""
        return [m for m in self.mutants if m.status == LISTED_NOT_RUN]

    @property
    def not_sampled(self) -> list[MutmutMutant]:
        """Mutants outside this run's --sample (NOT_SAMPLED)."""
        return [m for m in self.mutants if m.status == NOT_SAMPLED]

    def stale(self) -> list[tuple[str, BaselineEntry]]:
        """Baseline entries this run does not bear out: a listed survivor now killed (remove it: the list
        shrinks), a listed equivalent mutant killed (it was not equivalent), or an entry whose mutant this run
        did not produce with that mutated line. Not read in a --since or --recheck run, which mutates a subset;
        a listed mutant this run did not run (LISTED_NOT_RUN) is not known to be killed, and one outside a
        --sample (NOT_SAMPLED) is not known at all (whether it still exists is: every mutant is generated)."""
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
                elif all(m.status == NOT_SAMPLED for m in found):
                    continue
                elif not any(m.status in SURVIVING for m in found):
                    out.append((f"listed as {kind}, now {found[0].status}", e))
        return out


def read_baseline(project: Project, config: MutmutConfig) -> Baseline:
    """The baseline file named by `baseline` (absent: empty); a bad entry is a one-line MutmutError."""
    path = project.root / config.baseline
    if not os.path.lexists(path):
        return Baseline(config.baseline)
    try:  # a regular file inside the project, bounded (a FIFO or /dev/zero is named, not read as empty)
        data = read_toml(path, "mutmut baseline")
    except ProjectError as exc:
        raise MutmutError(str(exc)) from None
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
    path = project.pyproject
    try:
        table_ = subtable(read_toml(path), path, "tool", "falsify", "mutmut") or {}
    except ProjectError as exc:
        raise MutmutError(str(exc)) from None
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
    problem = seconds_problem(timeout, zero_is_none=False)
    if problem:
        raise MutmutError(f"{where} timeout {problem}")
    args = table_.get("pytest_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise MutmutError(f"{where} pytest_args must be a list of strings, got {args!r}")
    multiplier = table_.get("timeout_multiplier", DEFAULT_TIMEOUT_MULTIPLIER)
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 1 <= multiplier <= 1000:
        raise MutmutError(f"{where} timeout_multiplier must be a number in [1, 1000], got {multiplier!r}")
    constant = table_.get("timeout_constant", DEFAULT_TIMEOUT_CONSTANT)
    if (
        isinstance(constant, bool)
        or not isinstance(constant, int | float)
        or not 0 <= constant <= MAX_SECONDS
    ):
        raise MutmutError(f"{where} timeout_constant must be in [0, {MAX_SECONDS}] seconds, got {constant!r}")
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
