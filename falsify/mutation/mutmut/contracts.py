"""`falsify mutmut --judge contracts`: mutmut's mutants judged by the contract falsifiers alone, not the unit suite.

mutmut only generates the mutants here (its trampolined copy of the sources in the scratch copy's mutants/); each
mutant is then judged by `falsify gate` runs, one per engine of its file's group in [tool.falsify.mutmut-contracts],
in order, stopping at the first that is not green. Every gate runs with its working directory and PYTHONPATH in
mutants/ and MUTANT_UNDER_TEST naming the mutant, so the gate's own pytest and every server it starts (a wire
engine over stdio, an OpenAI-compatible server on a loopback port) import the trampolined copy and run the mutant.
mutmut's in-process "which tests reach which function" stats are not used: a function that only a server runs
would have no test there. Every mutant drawn runs its group's gates whole; none is "no tests".

Before any mutant, each gate runs twice unmutated: with no mutant (it must be green, or the run stops: a red clean
gate would kill every mutant) and with MUTANT_UNDER_TEST=fail (mutmut's forced failure: every mutated function
raises; the gate must turn red, or its engine does not run the copy mutmut made and no mutant there could die).

A mutant is killed when a gate exits non-zero (a prediction failed or errored, the engine could not start: what a
release's gate would show), timeout when a gate runs past gate_timeout, survived when every gate is green.

Configuration, [tool.falsify.mutmut-contracts] in pyproject.toml:
    paths = ["reference/*.py"]          # files mutated
    baseline = "mutmut-contracts-baseline.toml"   # reviewed [[equivalent]] / [[survivor]] entries (as mutmut's)
    kill_rate_floor = 0.0               # percent
    gate_timeout = 600                  # seconds per gate run of one mutant
    [[tool.falsify.mutmut-contracts.group]]    # first group whose files match a mutant's file judges it
    name = "openai"
    files = ["reference/openai_*.py"]
    engines = ["openai+exec:python -m reference.serve --openai --port {port} --slots 1"]   # "" the project's own
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import random
import shlex
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.mutation.mutmut.config import NOT_SAMPLED, MutmutConfig, MutmutError, MutmutMutant, MutmutRun
from falsify.mutation.mutmut.running import generate, locate, prepare, read_results
from falsify.mutation.semantic.scratch import Scratch
from falsify.project import Project, ProjectError, read_toml, subtable

TABLE = "mutmut-contracts"
DEFAULT_BASELINE = "mutmut-contracts-baseline.toml"
DEFAULT_GATE_TIMEOUT = 600.0
# The gate's pytest runs the "ci" hypothesis profile (derandomized): a mutant's verdict does not depend on a seed.
PROFILE = "ci"
FALSIFY = "import sys; from falsify.cli import main; sys.exit(main())"  # the package in mutants/, not site's


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    files: tuple[str, ...]  # glob patterns of project-relative paths
    engines: tuple[str, ...]  # one gate per engine, in order; "" the project's own engine


@dataclass(frozen=True, slots=True)
class ContractsConfig:
    mutmut: MutmutConfig  # paths, baseline and floor, in the record every mutmut report reads
    groups: tuple[Group, ...]
    gate_timeout: float = DEFAULT_GATE_TIMEOUT

    def group_of(self, file: str) -> Group | None:
        return next((g for g in self.groups if any(fnmatch.fnmatchcase(file, p) for p in g.files)), None)


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the gates said of one mutant: its status, and the gate (engine) that turned red, with its exit code."""

    status: str
    engine: str = ""
    returncode: int | None = None
    seconds: float = 0.0


def read_contracts_config(project: Project) -> ContractsConfig:
    """[tool.falsify.mutmut-contracts]; a bad value is a one-line MutmutError naming the key."""
    path = project.pyproject
    try:
        table_ = subtable(read_toml(path), path, "tool", "falsify", TABLE) or {}
    except ProjectError as exc:
        raise MutmutError(str(exc)) from None
    where = f"{path}: [tool.falsify.{TABLE}]"
    if not table_:
        raise MutmutError(f"{where} is missing: --judge contracts needs its paths and groups")
    known = ("paths", "baseline", "kill_rate_floor", "gate_timeout", "group")
    unknown = sorted(set(table_) - set(known))
    if unknown:
        raise MutmutError(f"{where} has unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    paths = table_.get("paths")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise MutmutError(f"{where} paths must be a non-empty list of paths, got {paths!r}")
    baseline = table_.get("baseline", DEFAULT_BASELINE)
    if not isinstance(baseline, str) or not baseline:
        raise MutmutError(f"{where} baseline must be a path relative to the project root, got {baseline!r}")
    floor = table_.get("kill_rate_floor", 0.0)
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 100:
        raise MutmutError(f"{where} kill_rate_floor must be a percentage in [0, 100], got {floor!r}")
    timeout = table_.get("gate_timeout", DEFAULT_GATE_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 86400:
        raise MutmutError(f"{where} gate_timeout must be seconds in (0, 86400], got {timeout!r}")
    raw = table_.get("group")
    if not isinstance(raw, list) or not raw:
        raise MutmutError(f"{where} needs at least one [[tool.falsify.{TABLE}.group]]")
    groups = []
    for i, g in enumerate(raw):
        at = f"{where} group #{i + 1}"
        if not isinstance(g, dict):
            raise MutmutError(f"{at} is not a table")
        extra = sorted(set(g) - {"name", "files", "engines"})
        if extra:
            raise MutmutError(f"{at} has unknown key(s) {', '.join(extra)} (known: name, files, engines)")
        name = g.get("name")
        if not isinstance(name, str) or not name.strip():
            raise MutmutError(f"{at} needs a non-empty string 'name'")
        for key, empty_ok in (("files", False), ("engines", True)):
            value = g.get(key)
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(v, str) and (v or empty_ok) for v in value)
            ):
                raise MutmutError(f"{at} ({name}) {key} must be a non-empty list of strings, got {value!r}")
        groups.append(Group(name, tuple(g["files"]), tuple(g["engines"])))
    for g in groups:
        for engine in g.engines:
            module = run_as_main(engine)
            main_file = module.replace(".", "/") + ".py" if module else ""
            if main_file and any(fnmatch.fnmatchcase(main_file, p) for p in paths):
                raise MutmutError(
                    f"{where} group {g.name}: engine {engine!r} runs {main_file} as __main__ (python -m), where mutmut's "
                    f'trampolines never run a mutant of it; start it as python -c "from {module} import main; '
                    '..." instead'
                )
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise MutmutError(f"{where}: group names must differ, got {names}")
    config = MutmutConfig(
        kill_rate_floor=float(floor), baseline=baseline, paths=tuple(paths), tests=("(the contract gate)",)
    )
    return ContractsConfig(config, tuple(groups), float(timeout))


def run_as_main(engine: str) -> str:
    """The module an exec: engine command runs with `python -m MODULE` ("" none, or not an exec: command)."""
    command = engine.partition("exec:")[2] if engine.split(":", 1)[0] in ("exec", "openai+exec") else ""
    try:
        argv = shlex.split(command)
    except ValueError:
        return ""  # the gate names a command it cannot split
    return next((argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "-m"), "")


def draw(
    located: list[MutmutMutant], config: ContractsConfig, per_group: int | None, seed: int
) -> dict[str, str]:
    """The mutants to run, by name, each with its group: `per_group` drawn uniformly at random (random.Random(seed))
    from each group's mutants, or all of them (None). A mutant whose file no group matches is an error."""
    by_group: dict[str, list[str]] = {g.name: [] for g in config.groups}
    for m in located:
        group = config.group_of(m.file)
        if group is None:
            raise MutmutError(
                f"{m.file}: no [tool.falsify.{TABLE}] group lists it; add it to one group's files"
            )
        by_group[group.name].append(m.name)
    rng = random.Random(seed)
    chosen: dict[str, str] = {}
    for name, members in by_group.items():
        picked = members if per_group is None else rng.sample(sorted(members), min(per_group, len(members)))
        chosen.update((n, name) for n in picked)
    return chosen


def gate_command(engine: str, out: Path) -> list[str]:
    """`falsify gate` on `engine` ("" the project's own), its results in `out`, pytest stopping at the first
    failure (a killed mutant needs one red prediction)."""
    cmd = [sys.executable, "-c", FALSIFY, "gate", "--out", str(out)]
    if engine:
        cmd += ["--engine", engine]
    return [*cmd, "--", "-x"]


def gate_env(mutants_dir: Path, mutant: str) -> dict[str, str]:
    """The environment of one gate run: mutants/ first on the import path (the gate, and every server it starts,
    import the trampolined copy), MUTANT_UNDER_TEST set for every process, the "ci" hypothesis profile, and this
    interpreter's bin first on PATH (an engine command's `python`), one BLAS thread unless the caller chose."""
    env = os.environ.copy()
    env["PYTHONPATH"] = str(mutants_dir)
    env["MUTANT_UNDER_TEST"] = mutant
    env["HYPOTHESIS_PROFILE"] = PROFILE
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("FALSIFY_ENGINE", None)  # the group's engine decides, not the caller's environment
    env.setdefault(
        "OPENBLAS_NUM_THREADS", "1"
    )  # as tox sets: two gates at once on two cores, no BLAS threads
    return env


class Judge:
    """Runs a mutant's gates in a prepared tree; each run gets an --out of its own (a gate locks its --out)."""

    def __init__(self, tree: Path, scratch: Scratch, timeout: float) -> None:
        self.mutants_dir = tree / "mutants"
        self.scratch = scratch
        self.timeout = timeout
        self._count = 0
        self._lock = threading.Lock()

    def _out(self) -> Path:
        with self._lock:
            self._count += 1
            return self.mutants_dir.parent / f".falsify-gate-{self._count}"

    def gate(self, engine: str, mutant: str) -> tuple[int | None, float, str]:
        """One gate run: (exit code, None on timeout; seconds; the output's tail)."""
        start = time.perf_counter()
        finished = self.scratch.run(
            gate_command(engine, self._out()),
            cwd=self.mutants_dir,
            env=gate_env(self.mutants_dir, mutant),
            timeout=self.timeout,
        )
        return finished.returncode, time.perf_counter() - start, finished.output[-2000:]

    def judge(self, mutant: str, engines: tuple[str, ...]) -> Judgement:
        spent = 0.0
        for engine in engines:
            code, seconds, _ = self.gate(engine, mutant)
            spent += seconds
            if code is None:
                return Judgement("timeout", engine, None, spent)
            if code != 0:
                return Judgement("killed", engine, code, spent)
        return Judgement("survived", "", 0, spent)


def check_setup(judge: Judge, config: ContractsConfig, jobs: int, progress: Callable[[str], None]) -> None:
    """Every engine of every group: green unmutated, red under mutmut's forced failure; else a MutmutError."""
    engines = list(dict.fromkeys(e for g in config.groups for e in g.engines))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda e: _check_engine(judge, e, progress), engines))


def _check_engine(judge: Judge, engine: str, progress: Callable[[str], None]) -> None:
    label = engine or "(the project's engine)"
    code, seconds, tail = judge.gate(engine, "")
    if code != 0:
        raise MutmutError(
            f"the unmutated gate on {label} is not green (exit {code}, {seconds:.0f} s): every mutant would "
            f"count as killed. Its output ends:\n{tail}"
        )
    forced, forced_s, tail = judge.gate(engine, "fail")
    if forced == 0:
        raise MutmutError(
            f"the gate on {label} stays green with every mutated function raising (MUTANT_UNDER_TEST=fail): "
            f"its engine does not run mutmut's copy. Its output ends:\n{tail}"
        )
    progress(
        f"mutmut contracts: {label}: green unmutated ({seconds:.0f} s), red under the forced failure "
        f"(exit {forced}, {forced_s:.0f} s)"
    )


def run_contracts(
    project: Project,
    config: ContractsConfig,
    *,
    per_group: int | None,
    seed: int,
    jobs: int,
    progress: Callable[[str], None] = print,
) -> tuple[MutmutRun, dict[str, Judgement]]:
    """Generate mutmut's mutants of the configured paths in a scratch copy, draw `per_group` of each group (all:
    None), check each gate's setup, and judge each drawn mutant by its group's gates on `jobs` threads. The run's
    mutants not drawn are NOT_SAMPLED."""
    files = sorted(
        {
            str(p.relative_to(project.root))
            for pattern in config.mutmut.paths
            for p in project.root.glob(pattern)
            if p.suffix == ".py"
        }
    )
    if not files:
        raise MutmutError(f"[tool.falsify.{TABLE}] paths {list(config.mutmut.paths)} match no Python file")
    run = MutmutRun(config.mutmut, files)
    if per_group is not None:
        run.sample = (
            per_group,
            len(config.groups),
        )  # shown as a sample by the verdict; details in the progress
    start = time.perf_counter()
    judgements: dict[str, Judgement] = {}
    with Scratch(project.root, prefix="falsify-mutmut-contracts-", exclude=project.copy_exclude) as scratch:
        tree = scratch.copy("project")
        prepare(tree, project, config.mutmut, files)
        progress(f"mutmut contracts: generating mutmut's mutants of {len(files)} files in {tree}")
        generate(tree, scratch, timeout=1800, jobs=max(jobs, 1))
        generated = read_results(tree, files, [])
        chosen = draw(generated, config, per_group, seed)
        # only the drawn mutants are located (mutmut's diff of each: 8,798 of them take many minutes)
        located = locate(tree, [m for m in generated if m.name in chosen], scratch, timeout=1800)
        located += [m for m in generated if m.name not in chosen]
        for g in config.groups:
            total = sum(config.group_of(m.file) == g for m in generated)
            picked = sum(1 for n in chosen.values() if n == g.name)
            progress(f"mutmut contracts: group {g.name}: {picked} of {total} mutants drawn (seed {seed})")
        judge = Judge(tree, scratch, config.gate_timeout)
        check_setup(judge, config, max(jobs, 1), progress)
        groups = {g.name: g for g in config.groups}
        # round robin over the groups, each group's in mutmut's order: any prefix of the run is stratified too
        queues = [[m for m in located if chosen.get(m.name) == g.name] for g in config.groups]
        order = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
        names = [m.name for m in order]
        where = {m.name: m for m in order}
        done = 0
        lock = threading.Lock()

        def one(name: str) -> None:
            nonlocal done
            j = judge.judge(name, groups[chosen[name]].engines)
            with lock:
                judgements[name] = j
                done += 1
                m = where[name]
                by = (
                    f" by {j.engine or '(the project engine)'} (exit {j.returncode})"
                    if j.status == "killed"
                    else ""
                )
                progress(
                    f"mutmut contracts: {done}/{len(names)} {name}: {j.status}{by}, {j.seconds:.0f} s; "
                    f"{m.file}:{m.line} {m.original!r} -> {m.mutated!r}"
                )

        with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
            list(pool.map(one, names))
    run.mutants = [
        dataclasses.replace(m, status=judgements[m.name].status, duration=judgements[m.name].seconds)
        if m.name in judgements
        else dataclasses.replace(m, status=NOT_SAMPLED, duration=None)
        for m in located
    ]
    run.seconds = time.perf_counter() - start
    return run, judgements


def per_group_counts(run: MutmutRun, config: ContractsConfig) -> dict[str, dict[str, Any]]:
    """Per group: each status's count over the drawn mutants, and how many the group has in all."""
    out: dict[str, dict[str, Any]] = {}
    for g in config.groups:
        members = [m for m in run.mutants if config.group_of(m.file) == g]
        counts: dict[str, int] = {}
        for m in members:
            if m.status != NOT_SAMPLED:
                counts[m.status] = counts.get(m.status, 0) + 1
        out[g.name] = {"mutants": len(members), "drawn": sum(counts.values()), **counts}
    return out
