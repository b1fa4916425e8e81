"""The one place a falsifier run's pytest arguments are built (the gate, bindings and the mutant runner share it),
and what such a run collects: the project's tests and its packs' falsifiers, wherever the packs are installed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from falsify.errors import FalsifyError
from falsify.project import Project
from falsify.untrusted.safefile import link_out_of


def falsifier_args(
    targets: Sequence[str],
    *,
    contracts: Path | None,
    results: Path,
    engine: str,
    strict: bool = False,
    plugins: Sequence[str] = (),
    extra: Sequence[str] = (),
    packs: Sequence[str] = (),
    rootdir: Path | None = None,
) -> list[str]:
    """pytest's arguments (after `python -m pytest`) for a run of the falsifiers in `targets`.

    Only falsifiers run (`--falsify-only`), against `contracts`, with per-test results written to `results` and
    the engine named by `engine`; pytest's cache stays off so a run leaves nothing in the tree it ran in.
    strict: a prediction bound to no collected test fails the run (whole-suite runs only).
    plugins: further pytest plugins to load with `-p`.
    contracts: None (or a directory that does not exist) leaves them to the project's [tool.falsify]; packs are
    added to the project's own (`--falsify-pack`); rootdir pins pytest's rootdir to the project root.
    """
    args = [*targets]
    if strict:
        args.append("--falsify-strict")
    args.append("--falsify-only")
    if contracts is not None and contracts.is_dir():
        args.append(f"--falsify-contracts={contracts}")
    for name in packs:
        args += ["--falsify-pack", name]
    if rootdir is not None:
        args += ["--rootdir", str(rootdir)]
    # One token each: pytest finds its ini file from the paths among the arguments before this plugin's options
    # are known, so a separate value outside the project (--out /tmp/x) took the ini file (pythonpath, markers) away.
    args.append(f"--falsify-results={results}")
    args += ["--engine", engine, "-p", "no:cacheprovider"]
    for plugin in plugins:
        args += ["-p", plugin]
    return [*args, "-q", *extra]


def falsifier_dirs(project: Project, tree: Path, packs: Sequence[str] = ()) -> list[str]:
    """What a whole-suite run collects, for the gate, bindings and the mutants' control alike: the tests directory
    (relative, as it is in `tree`, the project or a copy of it) and the falsifiers of every pack, wherever the pack
    is installed; a project without tests/ still runs its packs."""
    from falsify.contracts.packs import falsifiers_dir

    tests = tree / project.tests.relative_to(project.root)
    problem = link_out_of(tree, tests) if os.path.lexists(tests) else None
    if problem:  # before pytest starts: the plugin refuses a link out below it too, file by file
        raise FalsifyError(f"[tool.falsify] tests {tests}: {problem}")
    own = [str(project.tests.relative_to(project.root))] if tests.is_dir() else []
    found = []
    for name in dict.fromkeys([*project.packs, *packs]):
        path = falsifiers_dir(name).resolve()
        # a pack inside the project (falsify's own checkout) runs from `tree`, like every project file
        inside = path.is_relative_to(project.root.resolve())
        found.append(str(path.relative_to(project.root.resolve())) if inside else str(path))
    return own + found


def target(nodeid: str, path: str | None, tree: Path) -> str:
    """How pytest is told to run the falsifier `nodeid` from `tree`: its node id when its file is in the tree
    (`path` relative to the rootdir), else (a pack installed outside the project) the file's path with the node
    id's test part."""
    if path is None or not Path(path).is_absolute() or Path(path).resolve().is_relative_to(tree.resolve()):
        return nodeid
    _, sep, rest = nodeid.partition("::")
    return f"{path}{sep}{rest}"
