"""`falsify mutmut --executor ray`: mutmut's mutants as executor tasks (falsify/mutation/executors.py), with the
report a local run gives.

The driver makes the scratch copy a local run makes, lets mutmut generate its mutants there (no test runs), and
reads their names from the .meta files: the same mutants a local run reads back. It cuts them into shards of
whole functions, in mutmut's order, and hands each shard to the executor as a task. A worker keeps one mutmut tree
of its own for the whole run (a scratch copy of its node's snapshot, prepared as the driver's was): its first
shard pays mutmut's generation and its stats run (every selected test once, traced); every later shard runs
`mutmut run --max-children 1 NAME ...`, which re-checks that the shard's tests pass and that a forced failure is
seen, then runs each mutant against the tests that reach its function, as a local run does. The shard's exit
codes and durations come back from the worker's .meta files; the driver locates each mutant (file:line, original
and mutated line) in its own tree, so the report is built exactly as a local run's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from falsify.mutation import executors
from falsify.mutation.mutmut.config import Baseline, MutmutConfig, MutmutError, MutmutMutant, MutmutRun
from falsify.mutation.mutmut.running import (
    _clean_tail,
    _env,
    generate,
    locate,
    mutmut_command,
    prepare,
    read_results,
    set_listed_aside,
    sets_aside,
    with_results,
)
from falsify.mutation.semantic.scratch import Scratch
from falsify.project import Project, find_project

SHARDS = (
    16  # at least about this many shards per run (2 per worker slot on a larger cluster): each pays ~3 pytest
)
# starts (collect, clean run, forced failure)
MIN_SHARD = 12  # mutants: a smaller shard would spend more on those starts than on its mutants


def shards(names: list[str], count: int = SHARDS) -> list[list[str]]:
    """Mutant names cut into at most about `count` shards of whole functions, in the given order, each of at
    least MIN_SHARD mutants (but the last)."""
    size = max(MIN_SHARD, -(-len(names) // count))
    out: list[list[str]] = []
    function = None
    for name in names:
        fn = name.partition("__mutmut_")[0]
        if not out or (fn != function and len(out[-1]) >= size):
            out.append([])
        out[-1].append(name)
        function = fn
    return out


def _tree(root: Path, config: MutmutConfig, files: list[str]) -> tuple[Scratch, Path]:
    """A mutmut tree of this worker's own: a scratch copy of the node's snapshot, prepared as the driver's."""
    project = find_project(root)
    scratch = Scratch(root, prefix="falsify-mutmut-shard-", exclude=project.copy_exclude)
    tree = scratch.copy("project")
    prepare(tree, project, config, files)
    return scratch, tree


def run_shard(
    root: Path, config: MutmutConfig, files: list[str], names: list[str], timeout: float
) -> list[MutmutMutant]:
    """A task: `mutmut run` over the named mutants in this worker's mutmut tree; their results from its .meta
    files, each mutant exactly once."""
    # one tree per worker, kept for its later shards (local threads each need their own)
    key = ("mutmut", root, tuple(files), threading.get_ident())
    scratch, tree = executors.kept(key, lambda: _tree(root, config, files), lambda kept: kept[0].close())
    finished = scratch.run(
        mutmut_command("run", "--max-children", "1", *names), cwd=tree, env=_env(), timeout=timeout
    )
    if finished.returncode is None:
        raise MutmutError(f"a mutmut shard of {len(names)} mutants ran past {timeout:.0f} s")
    if finished.returncode != 0:
        raise MutmutError(f"mutmut exited {finished.returncode} on a shard:\n{_clean_tail(finished.output)}")
    wanted = set(names)
    got = [m for m in read_results(tree, files, []) if m.name in wanted]
    if sorted(m.name for m in got) != sorted(names):
        raise MutmutError(f"a shard of {len(names)} mutants came back with {len(got)} results")
    return got


def run_sharded(
    project: Project,
    config: MutmutConfig,
    run: MutmutRun,
    *,
    executor: str,
    address: str | None,
    jobs: int,
    progress: Callable[[str], None],
    skip_listed: Baseline | None = None,
) -> MutmutRun:
    """run.files' mutants (those matching run.patterns, if any) as shards on the executor; run filled in. With
    `skip_listed`, a whole run leaves out the mutants the baseline lists, as a local run does."""
    start = time.perf_counter()
    with Scratch(project.root, prefix="falsify-mutmut-", exclude=project.copy_exclude) as scratch:
        tree = scratch.copy("project")
        prepare(tree, project, config, run.files)
        generate(tree, scratch, config.timeout)
        order = [m.name for m in read_results(tree, run.files, run.patterns)]
        if not order:
            raise MutmutError("mutmut generated no mutant")
        located: dict[str, MutmutMutant] = {}
        listed: set[str] = set()
        names = order
        if skip_listed is not None and sets_aside(run, skip_listed):
            located, listed = set_listed_aside(tree, scratch, run, skip_listed, progress)
            names = [n for n in order if n not in listed]
        parts: list[list[str]] = []

        def cut(slots: int) -> list[tuple[object, ...]]:
            """SHARDS shards, or two per worker slot on a larger cluster (so every slot has work to the end)."""
            parts.extend(shards(names, max(SHARDS, 2 * slots)))
            progress(
                f"mutmut: {len(names)} mutants of {', '.join(run.files)} in {len(parts)} shards on executor "
                f"{executor} ({slots} worker slots), tests {', '.join(config.tests)}"
            )
            return [(config, run.files, part, config.timeout) for part in parts]

        deadline = start + config.timeout
        results: dict[str, MutmutMutant] = {}
        stream = (
            executors.run_tasks(run_shard, cut, project.root, executor, address, jobs, project.copy_exclude)
            if names
            else iter(())  # every mutant is listed: nothing to run
        )
        for done, part in enumerate(stream, 1):
            results.update((m.name, m) for m in part)
            progress(
                f"mutmut: {time.perf_counter() - start:.0f} s: shard {done}/{len(parts)} back, "
                f"{len(results)}/{len(names)} mutants checked"
            )
            if time.perf_counter() > deadline:
                raise MutmutError(
                    f"mutmut ran past its timeout of {config.timeout:.0f} s ([tool.falsify.mutmut] timeout)"
                )
        if located:  # every mutant located before the run; the listed ones did not run
            run.mutants = with_results(located, listed, [results.get(n, located[n]) for n in order])
        else:
            run.mutants = locate(tree, [results[n] for n in names], scratch, timeout=600)
    run.seconds = time.perf_counter() - start
    return run
