"""The one place a falsifier run's pytest arguments are built (the gate, bindings and the mutant runner share it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


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
