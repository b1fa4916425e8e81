"""Run every semantic mutant: a green control first, then each mutant in its own scratch copy, in parallel.

    control: all falsifiers on an unmutated scratch copy, HYPOTHESIS_PROFILE=mutation -> must be green, and the
             edited modules must be imported from that copy (the probe)
    mutant:  apply the edit (libcst) to a fresh copy -> run the selected falsifiers under a timeout -> which
             predictions turned red, and was the mutated file the one imported

Which falsifiers a mutant runs (`scope`): `kills` (the default) runs the tests bound to the predictions its file
says it kills; `contract` also runs every other falsifier of those predictions' contracts, so the kill matrix
shows what else the planted bug breaks; `all` runs every falsifier. The tests of `kills` run first, and the run
stops as soon as every prediction in `kills` is red (unless `full`): a killed mutant costs only the examples
that kill it, a mutant that escapes one of its predictions runs everything selected. The control runs every
selected falsifier in full.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus, Mutant
from falsify.engines.boundary.catalogue import ENV as BOUNDARY_ENV
from falsify.harness.command import falsifier_args, falsifier_dirs, target
from falsify.harness.proven import CANNOT_SHOW_REASON
from falsify.harness.results import Outcome, per_prediction
from falsify.mutation import executors
from falsify.mutation.executors import available_cores
from falsify.mutation.semantic import edits, probe
from falsify.mutation.semantic.boundary import OP as BOUNDARY_OP
from falsify.mutation.semantic.control import Control, green_text, reuse_or_run
from falsify.mutation.semantic.edits import Applied, MutantSpecError, Span, StaleMutant, apply
from falsify.mutation.semantic.scratch import Finished, Interrupted, Scratch
from falsify.mutation.semantic.spec import read_target, split_line
from falsify.project import Project, find_project, source_problem

SCOPES = ("kills", "contract", "all")
RED = (Outcome.FAIL, Outcome.ERROR, Outcome.TIMEOUT)


class MutantOutcome(StrEnum):
    KILLED = "KILLED"
    SURVIVED = "SURVIVED"
    STALE = "STALE"
    TIMEOUT = "TIMEOUT"
    ERROR = "ERROR"
    CANNOT_SHOW = "CANNOT SHOW"  # every prediction it kills is one this machine cannot show false: not run


FAILING = (MutantOutcome.SURVIVED, MutantOutcome.STALE, MutantOutcome.ERROR)


@dataclass(frozen=True, slots=True)
class MutantResult:
    mutant: Mutant
    outcome: MutantOutcome
    killed_by: tuple[str, ...] = ()  # predictions of `kills` that turned red
    missed: tuple[str, ...] = ()  # predictions of `kills` that did not (held, or were never reached)
    also_red: tuple[str, ...] = ()  # predictions outside `kills` that turned red
    predictions: dict[str, str] = field(default_factory=dict)  # prediction -> Outcome, for those that ran
    failing_tests: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    seconds: float = 0.0  # the falsifier run, wall clock
    cpu: float | None = None  # the falsifier run, CPU seconds (user + system) as the probe measured it
    detail: str = ""
    diff: str = ""
    span: Span | None = None

    @property
    def partly(self) -> bool:
        """Killed, but not by every prediction the mutant file lists."""
        return self.outcome is MutantOutcome.KILLED and bool(self.missed)


@dataclass(frozen=True, slots=True)
class Settings:
    engine: str = "reference"
    jobs: int = 0  # 0: one per available core
    scope: str = "kills"
    full: bool = False  # run every selected falsifier, even once all of `kills` is red
    forkserver: bool = True  # fork each pytest run from a process that imported pytest/hypothesis/numpy once
    timeout: float | None = None  # per mutant; None: 60 s or 5x the control run, whichever is longer
    control_timeout: float = 1800.0
    executor: str = "local"  # falsify/mutation/executors.py: local threads, or one Ray task per mutant
    address: str | None = None  # the Ray cluster (ray.init address: "auto", "HOST:PORT")
    reuse_control: bool = True  # read a stored green control of the same tree and engine (control.py)


@dataclass(slots=True)
class Run:
    project: Project
    corpus: Corpus
    settings: Settings
    control: Control | None = None
    results: list[MutantResult] = field(default_factory=list)
    wall: float = 0.0
    jobs: int = 1
    control_wall: float = 0.0  # seconds this run spent on the control: running it, or reading a stored one


def module_name(file: str, src_layout: bool = False) -> str:
    """reference/session.py -> reference.session; pkg/__init__.py -> pkg; src/pkg/x.py -> pkg.x (a src layout)."""
    parts = list(Path(file).with_suffix("").parts)
    if src_layout and len(parts) > 1 and parts[0] == "src":
        parts.pop(0)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Runner:
    def __init__(
        self, project: Project, corpus: Corpus, settings: Settings, progress: Callable[[str], None] = print
    ) -> None:
        self.project = project
        self.corpus = corpus
        self.settings = settings
        self._progress = progress
        self._print_lock = threading.Lock()
        self.src_layout = (project.root / "src").is_dir()
        # op text edits a program the falsifiers start (its `engine`), not a module they import: no probe for it
        self.modules = sorted({self.module_of(m.file) for m in corpus.mutants if m.op != "text"})
        self.control: Control | None = None

    def module_of(self, file: str) -> str:
        return module_name(file, self.src_layout)

    def say(self, line: str) -> None:
        with self._print_lock:
            self._progress(line)

    # -- one pytest run in a scratch copy ------------------------------------------------------------------------
    def pytest(
        self,
        scratch: Scratch,
        tree: Path,
        targets: list[str],
        *,
        timeout: float | None,
        stop_when_red: tuple[str, ...] = (),
        engine: str | None = None,
        boundary: str | None = None,
    ) -> tuple[Finished, dict[str, Any] | None, dict[str, Any]]:
        rel = lambda p: p.relative_to(self.project.root)  # noqa: E731
        results, probe_out = tree / ".falsify-results.json", tree / ".falsify-probe.json"
        known = self.control.targets if self.control is not None else {}
        argv = falsifier_args(
            [known.get(t, t) for t in targets],
            contracts=tree / rel(self.project.contracts),
            results=results,
            engine=engine or self.settings.engine,
            plugins=["falsify.mutation.semantic.probe"],
            extra=["--tb=line", "-o", "addopts="],
            rootdir=tree,  # the copy is the project (its pyproject names the packs), whatever the run names
            packs=self.project.packs,  # and `falsify mutants --pack NAME`'s, which its pyproject does not name
        )
        env = os.environ.copy()
        # The copy's packages must win over any editable install of the working tree: cwd and PYTHONPATH both
        # point at the copy, and the probe checks the outcome.
        roots = [str(tree), *([str(tree / "src")] if self.src_layout else [])]
        env["PYTHONPATH"] = os.pathsep.join([*roots, *filter(None, [env.get("PYTHONPATH")])])
        env["HYPOTHESIS_PROFILE"] = "mutation"
        env[probe.MODULES_ENV] = ",".join(self.modules)
        env[probe.OUT_ENV] = str(probe_out)
        env[probe.STOP_ENV] = ",".join(stop_when_red)
        env.pop(BOUNDARY_ENV, None)  # only a boundary mutant's own run wraps the engine
        env.update({BOUNDARY_ENV: boundary} if boundary else {})
        finished = scratch.run_pytest(argv, cwd=tree, env=env, timeout=timeout)
        return finished, _json(results), _json(probe_out) or {}

    # -- the control --------------------------------------------------------------------------------------------
    def control_for(self, scratch: Scratch, mutants: list[Mutant]) -> Control:
        """A stored green control of this tree, engine and mutant set (control.py), else the control run here."""
        if not self.settings.reuse_control:
            return self.run_control(scratch, mutants)
        where = (self.project.root, scratch.exclude, self.settings.engine, self.settings.scope)
        return reuse_or_run(
            *where, [m.id for m in mutants], lambda: self.run_control(scratch, mutants), self.say
        )

    def run_control(self, scratch: Scratch, mutants: list[Mutant]) -> Control:
        """Collect the falsifiers, then run the ones the mutants will run, on an unmutated copy."""
        tree = scratch.copy("control")
        try:
            where = falsifier_dirs(self.project, tree)  # as the gate and `falsify bindings` collect them
            if not where:
                why = f"no falsifier to run: no {self.project.tests} and no packs in [tool.falsify]"
                return Control(False, 0.0, {}, [], why, {})
            finished, data, _ = self.pytest(
                scratch, tree, [*where, "--collect-only"], timeout=self.settings.control_timeout
            )
            if data is None or data.get("binding_problems"):
                problems = (data or {}).get("binding_problems") or [
                    finished.tail("pytest could not collect the falsifiers")
                ]
                return Control(False, finished.seconds, {}, [], "\n".join(problems), {})
            found = data.get("collected", [])
            tests = {c["nodeid"]: tuple(c["predictions"]) for c in found}
            targets = {c["nodeid"]: target(c["nodeid"], c.get("path"), tree) for c in found}
            selected = sorted({t for m in mutants for t in self.selected_tests(m, tests)})
            if not selected:
                return Control(
                    False,
                    finished.seconds,
                    tests,
                    [],
                    "no falsifier is bound to any prediction the mutants list in `kills`",
                    {},
                )
            # built as each text mutant's copies are (docs/engine-protocol.md §10): it runs their falsifiers too
            for build in dict.fromkeys(m.build for m in mutants if m.op == "text" and m.build):
                failed = self._build(
                    scratch, build, tree, self.settings.timeout or self.settings.control_timeout
                )
                if failed:
                    return Control(False, finished.seconds, tests, [], f"control copy: {failed}", {})
            finished, data, probed = self.pytest(
                scratch, tree, [targets[t] for t in selected], timeout=self.settings.control_timeout
            )
            imported = probed.get("modules", {})
            # Resolved while the copy exists: a removed path resolves to itself, hiding a link out of it.
            outside = {
                name: file
                for name, file in imported.items()
                if file is not None and not Path(file).resolve().is_relative_to(tree.resolve())
            }
        finally:
            scratch.remove(tree)
        if data is None:
            return Control(
                False,
                finished.seconds,
                tests,
                [],
                finished.tail("pytest wrote no results"),
                imported,
            )
        rows = per_prediction(self.corpus, data)
        problems = [
            f"{r.id} is {r.outcome} on the unmutated tree: {r.detail}" for r in rows if r.outcome in RED
        ]
        if finished.returncode is None:
            problems.append(f"the control run timed out after {self.settings.control_timeout:.0f} s")
        elif finished.returncode != 0 and not problems:
            problems.append(finished.tail(f"pytest exited {finished.returncode}"))
        problems += [
            f"the falsifiers imported {name} from {file}, not from the scratch copy {tree}: an installed copy "
            "or a symlink leads out of it (mutants would run against the wrong code)"
            for name, file in outside.items()
        ]
        durations = {nid: float(r.get("duration", 0.0)) for nid, r in data.get("tests", {}).items()}
        return Control(
            not problems,
            finished.seconds,
            tests,
            rows,
            "\n".join(problems),
            imported,
            tuple(selected),
            durations,
            targets,
        )

    # -- one mutant --------------------------------------------------------------------------------------------
    def selected_tests(self, m: Mutant, tests: dict[str, tuple[str, ...]] | None = None) -> list[str]:
        if tests is None:
            assert self.control is not None
            tests = self.control.tests
        if self.settings.scope == "all":
            wanted = set(self.corpus.predictions)
        elif self.settings.scope == "contract":
            contracts = {self.corpus.contract_of(pid).id for pid in m.kills if pid in self.corpus.predictions}
            wanted = {p.id for c in self.corpus.contracts if c.id in contracts for p in c.predictions}
        else:
            wanted = set(m.kills)
        # The tests of the predictions it must kill first, quickest first (by the control's durations): with
        # early stop, the run ends at the first red test of the last prediction still green.
        cost = self.control.durations if self.control is not None else {}
        first = sorted(
            (nid for nid, preds in tests.items() if set(m.kills) & set(preds)),
            key=lambda nid: cost.get(nid, 0.0),
        )
        return first + [nid for nid, preds in tests.items() if wanted & set(preds) and nid not in first]

    def run_mutant(self, scratch: Scratch, m: Mutant, timeout: float) -> MutantResult:
        """The mutant's result; whatever goes wrong in falsify itself is this mutant's ERROR, one line naming
        the mutant file, never a traceback that ends the other mutants' runs."""
        try:
            return self._run_mutant(scratch, m, timeout)
        except Interrupted:
            raise
        except Exception as exc:  # reported as the mutant's ERROR, with its type
            return MutantResult(m, MutantOutcome.ERROR, detail=f"{m.path}: {type(exc).__name__}: {exc}")

    def _run_mutant(self, scratch: Scratch, m: Mutant, timeout: float) -> MutantResult:
        applied: Applied | None = None  # a boundary mutant (boundary.py) edits nothing: it wraps the engine
        try:  # lint refuses these too; checked again where the file is used
            if m.op != BOUNDARY_OP:
                applied = apply(read_target(self.project.root, m), edits.edit_of(m), m.file)
        except StaleMutant as exc:
            return MutantResult(m, MutantOutcome.STALE, detail=str(exc))
        except MutantSpecError as exc:
            return MutantResult(m, MutantOutcome.ERROR, detail=f"{m.path}: {exc.field or 'mutant'}: {exc}")
        diff, span = (applied.diff(m.file), applied.span) if applied is not None else ("", None)
        assert self.control is not None
        if m.op == "text" and applied is not None:  # its own control run, under its own `engine`, first
            return self._run_text(scratch, m, applied, diff, timeout)
        error = partial(MutantResult, m, MutantOutcome.ERROR, diff=diff, span=span)
        machine = [r for r in self.control.rows if r.id in m.kills and r.cannot_show]
        if m.kills and len(machine) == len(m.kills):
            why = f"{CANNOT_SHOW_REASON}{', '.join(r.id for r in machine)}\n" + "; ".join(
                r.detail for r in machine
            )
            return MutantResult(m, MutantOutcome.CANNOT_SHOW, diff=diff, span=span, detail=why)
        not_run = [pid for pid in m.kills if _control_outcome(self.control, pid) is not Outcome.PASS]
        if not_run:
            return error(detail=f"{', '.join(not_run)} did not pass in the control run, so cannot kill")
        if applied is not None and self.control.imported.get(self.module_of(m.file)) is None:
            return error(
                detail=f"no falsifier imports {self.module_of(m.file)}: nothing could see this mutant"
            )
        tests = self.selected_tests(m)
        if not tests:
            return error(detail="no falsifier is bound to the predictions in `kills`")
        tree = scratch.copy(m.id)
        try:
            # _judge compares the imported file with the mutated one while the copy still exists.
            return self._judge(m, span, diff, tests, *self._run_in(scratch, tree, m, applied, tests, timeout))
        except MutantSpecError as exc:
            return error(detail=str(exc))
        finally:
            scratch.remove(tree)

    def _run_in(
        self,
        scratch: Scratch,
        tree: Path,
        m: Mutant,
        applied: Applied | None,
        tests: list[str],
        timeout: float,
    ) -> tuple[Finished, dict[str, Any] | None, dict[str, Any], Path]:
        """The mutant's falsifiers in `tree`: the edit written first, or (a boundary mutant, `applied` None) the
        engine wrapped by FALSIFY_BOUNDARY_MUTANT."""
        stop = () if self.settings.full else m.kills
        if applied is None:
            finished, data, probed = self.pytest(
                scratch, tree, tests, timeout=timeout, stop_when_red=stop, boundary=m.plants
            )
            return finished, data, probed, tree
        bad = source_problem(tree, m.file)
        target = tree / m.file
        if bad or not target.resolve().is_relative_to(tree.resolve()):
            raise MutantSpecError(f"{m.file} is not a regular file inside the scratch copy: {bad}")
        # O_NOFOLLOW: even a link planted between the check and the write is not written through.
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(applied.mutated)
        finished, data, probed = self.pytest(scratch, tree, tests, timeout=timeout, stop_when_red=stop)
        return finished, data, probed, target

    def _judge(
        self,
        m: Mutant,
        span: Span | None,
        diff: str,
        tests: list[str],
        finished: Finished,
        data: dict[str, Any] | None,
        probed: dict[str, Any],
        target: Path,
    ) -> MutantResult:
        imported: dict[str, str | None] = probed.get("modules", {})
        # the fields every outcome shares; functools.partial keeps them type-checked
        result = partial(
            MutantResult,
            diff=diff,
            span=span,
            tests=tuple(tests),
            seconds=finished.seconds,
            cpu=probed.get("cpu"),
        )
        if finished.returncode is None:
            return result(
                m, MutantOutcome.TIMEOUT, detail=f"the falsifiers ran past {finished.seconds:.0f} s"
            )
        name = self.module_of(m.file) if m.op not in ("text", BOUNDARY_OP) else None
        file = imported.get(name) if name is not None else None
        if file is not None and Path(file).resolve() != target.resolve():
            return result(
                m,
                MutantOutcome.ERROR,
                detail=f"the falsifiers imported {name} from {file}, not the mutated copy {target}",
            )
        if data is None or finished.returncode not in (0, 1):
            return result(
                m,
                MutantOutcome.ERROR,
                detail=finished.tail(f"pytest exited {finished.returncode}"),
            )
        rows = [r for r in per_prediction(self.corpus, data) if r.outcome is not Outcome.NOT_RUN or r.tests]
        ran = [
            nid
            for nid, r in data.get("tests", {}).items()
            if r.get("outcome") in ("passed", "failed", "error")
        ]
        if not ran:
            return result(m, MutantOutcome.ERROR, detail=finished.tail("no falsifier ran"))
        red = {r.id for r in rows if r.outcome in RED}
        killed_by = tuple(p for p in m.kills if p in red)
        missed = tuple(p for p in m.kills if p not in red)
        also = tuple(sorted(red - set(m.kills)))
        failing = tuple(sorted({t for r in rows if r.outcome in RED for t in r.failing_tests}))
        outcomes = {r.id: str(r.outcome) for r in rows}
        if red:
            why = "; ".join(f"{r.id}: {r.detail}" for r in rows if r.outcome in RED)
            return result(m, MutantOutcome.KILLED, killed_by, missed, also, outcomes, failing, detail=why)
        if file is None and name is not None:
            detail = f"no selected falsifier imported {name}"
        elif finished.returncode == 1:
            detail = finished.tail("pytest failed, but no prediction turned red")
            return result(m, MutantOutcome.ERROR, (), missed, (), outcomes, detail=detail)
        else:
            detail = f"{len(ran)} falsifiers stayed green"
        return result(m, MutantOutcome.SURVIVED, (), missed, (), outcomes, detail=detail)

    def _run_text(
        self, scratch: Scratch, m: Mutant, applied: Applied, diff: str, timeout: float
    ) -> MutantResult:
        """Op text: the edited file belongs to a program the falsifiers start (`engine`, after `build`), which no
        import probe sees. So the falsifiers first run on an unmutated copy under that engine, where every
        prediction in `kills` must pass (the engine is started from the copy: its paths resolve there), then on
        the mutated copy."""
        tests = self.selected_tests(m)
        error = partial(MutantResult, m, MutantOutcome.ERROR, diff=diff, span=applied.span)
        if not tests:
            return error(detail="no falsifier is bound to the predictions in `kills`")
        engine = m.engine or self.settings.engine
        for stage in ("control", "mutant"):
            tree = scratch.copy(f"{m.id}-{stage}")
            try:
                if stage == "mutant":
                    (tree / m.file).write_text(applied.mutated, encoding="utf-8")
                failed = self._build(scratch, m.build, tree, timeout)
                if failed:
                    return error(detail=f"{stage} copy: {failed}")
                stop = m.kills if stage == "mutant" and not self.settings.full else ()
                finished, data, probed = self.pytest(
                    scratch, tree, tests, timeout=timeout, stop_when_red=stop, engine=engine
                )
                if stage == "mutant":
                    return self._judge(m, applied.span, diff, tests, finished, data, probed, tree / m.file)
                rows = {r.id: r for r in per_prediction(self.corpus, data)} if data is not None else {}
                green = [pid for pid in m.kills if pid in rows and rows[pid].outcome is Outcome.PASS]
                if len(green) != len(m.kills):
                    why = "; ".join(
                        f"{pid} is {rows[pid].outcome}: {rows[pid].detail}"
                        if pid in rows
                        else f"{pid}: no result"
                        for pid in m.kills
                        if pid not in green
                    )
                    tail = "" if data is not None else " " + finished.tail("pytest wrote no results")
                    return error(detail=f"the unmutated copy under engine {engine} is not green: {why}{tail}")
            finally:
                scratch.remove(tree)
        raise AssertionError("unreachable")

    def _build(self, scratch: Scratch, build: str | None, tree: Path, timeout: float) -> str | None:
        """Run a text mutant's `build` command in `tree` within `timeout`; a one-line failure, or None."""
        if not build:
            return None
        try:
            finished = scratch.run(
                split_line(build, "build"), cwd=tree, env=os.environ.copy(), timeout=timeout
            )
        except MutantSpecError as exc:
            return f"build: {exc}"
        except OSError as exc:  # no such program, not executable
            return f"build `{build}` cannot start: {exc.strerror}"
        if finished.returncode == 0:
            return None
        status = (
            f"timed out after {timeout:g} s"
            if finished.returncode is None
            else f"exited {finished.returncode}"
        )
        return finished.tail(f"build `{build}` {status}")

    # -- everything ---------------------------------------------------------------------------------------------
    def run(self, mutants: list[Mutant]) -> Run:
        run = Run(self.project, self.corpus, self.settings)
        run.jobs = min(self.settings.jobs or available_cores(), max(len(mutants), 1))
        start = time.perf_counter()
        with Scratch(self.project.root, exclude=self.project.copy_exclude) as scratch:
            try:
                if self.settings.forkserver and not any(m.file.startswith("falsify/") for m in mutants):
                    scratch.start_forkserver()
                self.say(
                    "mutants: control — the mutants' falsifiers on an unmutated copy (HYPOTHESIS_PROFILE=mutation)"
                )
                self.control = run.control = self.control_for(scratch, mutants)
                run.control_wall = time.perf_counter() - start
                if not self.control.ok:
                    run.wall = time.perf_counter() - start
                    return run
                self.say(
                    f"mutants: control {green_text(self.control, run.control_wall)}; running {len(mutants)} mutants on {run.jobs} workers "
                    f"(scope {self.settings.scope})"
                )
                timeout = self.settings.timeout or max(60.0, 5 * self.control.seconds)
                stream = self.results(scratch, mutants, timeout, run.jobs)
                for done, result in enumerate(stream, 1):
                    run.results.append(result)
                    self.say(f"mutants: [{done}/{len(mutants)}] {progress_line(result)}")
            except Interrupted:
                raise KeyboardInterrupt from None
        order = {m.id: i for i, m in enumerate(mutants)}
        run.results.sort(key=lambda r: order[r.mutant.id])
        run.wall = time.perf_counter() - start
        return run

    def results(
        self, scratch: Scratch, mutants: list[Mutant], timeout: float, jobs: int
    ) -> Iterator[MutantResult]:
        """Each mutant's result, in completion order, from the settings' executor: `jobs` local threads over
        copies under `scratch`, or one Ray task per mutant (remote.run_mutant_in, in a snapshot of the project)."""
        if self.settings.executor == "ray":
            assert self.control is not None
            # a boundary mutant is in no mutant file the worker's snapshot holds: it goes as its record
            tasks = [
                (self.settings, self.control, m if m.op == BOUNDARY_OP else m.id, timeout) for m in mutants
            ]
            root, address = self.project.root, self.settings.address or "auto"
            task = "falsify.mutation.semantic.remote:run_mutant_in"  # by name: remote.py imports this module
            return executors.ray_tasks(task, tasks, root, address, scratch.exclude, self.say)
        if self.settings.executor != "local":
            raise executors.ExecutorError(
                f"unknown executor {self.settings.executor!r} (choose from {', '.join(executors.EXECUTORS)})"
            )
        return self._threads(scratch, mutants, timeout, jobs)

    def _threads(
        self, scratch: Scratch, mutants: list[Mutant], timeout: float, jobs: int
    ) -> Iterator[MutantResult]:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(self.run_mutant, scratch, m, timeout) for m in mutants]
            try:
                for future in as_completed(futures):
                    yield future.result()
            except BaseException:
                scratch.stop()
                pool.shutdown(wait=True, cancel_futures=True)
                raise


def progress_line(r: MutantResult) -> str:
    text = f"{r.mutant.id}: {'PARTLY KILLED' if r.partly else r.outcome}"
    if r.outcome is MutantOutcome.CANNOT_SHOW:  # the lines below the first say whose reason each is
        return f"{text} — {'; '.join(r.detail.splitlines())[:300]}"
    if r.seconds:
        text += f" in {r.seconds:.1f} s" + (f" (CPU {r.cpu:.1f} s)" if r.cpu is not None else "")
    if r.outcome is MutantOutcome.KILLED:
        text += f" by {', '.join(r.killed_by) or 'none of its listed predictions'}"
        if r.missed:
            text += f"; NOT by {', '.join(r.missed)}"
        if r.also_red:
            text += f"; also red: {', '.join(r.also_red)}"
    elif r.detail:
        text += f" — {' '.join(r.detail.split())[:200]}"
    return text


def _control_outcome(control: Control, pid: str) -> Outcome | None:
    return next((r.outcome for r in control.rows if r.id == pid), None)


def _json(path: Path) -> Any:
    """A results or probe file the run wrote, or None: absent, or cut short by the timeout's kill."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def load(project: Project | None = None) -> tuple[Project, Corpus, list[str]]:
    """The project's contracts and mutants, linted together."""
    from falsify.harness.gate import lint_project

    project = project or find_project()
    corpus, problems = lint_project(project)
    return project, corpus, problems
