"""The semantic runner's Ray task: one mutant in a warm worker (falsify/mutation/executors.py). The node's unpacked
snapshot never changes, so a worker lints it once and keeps one scratch directory, with its fork server, for all
its mutants, as a local run does. Named by string in runner.py (this module imports it)."""

from __future__ import annotations

from pathlib import Path

from falsify.contracts.corpus import Corpus, Mutant
from falsify.mutation import executors
from falsify.mutation.semantic.runner import Control, MutantResult, Runner, Settings, load
from falsify.mutation.semantic.scratch import Scratch
from falsify.project import Project, find_project


def run_mutant_in(
    root: Path, settings: Settings, control: Control, mutant_id: str | Mutant, timeout: float
) -> MutantResult:
    """One mutant's falsifiers in a scratch copy of the project at `root` (a node's unpacked snapshot); a boundary
    mutant, which no file of the snapshot holds, comes as its record."""
    project, corpus = executors.kept(("corpus", root), lambda: _linted(root))
    runner = Runner(project, corpus, settings, progress=lambda _line: None)
    runner.control = control
    if isinstance(mutant_id, Mutant):
        mutant = mutant_id
    else:
        mutant = next(m for m in corpus.mutants if m.id == mutant_id)
    # A mutant of falsify/ itself must not run in a fork of a server that imported the unmutated falsify.
    forked = settings.forkserver and not mutant.file.startswith("falsify/")
    scratch = executors.kept(("scratch", root, forked), lambda: _scratch(project, forked), Scratch.close)
    return runner.run_mutant(scratch, mutant, timeout)


def _linted(root: Path) -> tuple[Project, Corpus]:
    project, corpus, problems = load(find_project(root))
    if problems:
        raise executors.ExecutorError(f"the snapshot does not lint on the worker: {problems[0]}")
    return project, corpus


def _scratch(project: Project, forked: bool) -> Scratch:
    scratch = Scratch(project.root, exclude=project.copy_exclude)
    if forked:
        scratch.start_forkserver()
    return scratch
