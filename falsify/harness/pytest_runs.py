"""The gate's pytest runs: the falsifiers in a pytest of their own process group (run_pytest_timed), or split over
several at once (run_pytest_shared, `falsify gate --jobs`; falsify/harness/shards.py), under one deadline; every
process group they and the engines they start made is ended when they end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.engines import process_tree
from falsify.harness import shards
from falsify.harness.command import falsifier_args, falsifier_dirs
from falsify.harness.results import load_results
from falsify.project import Project
from falsify.untrusted import safefile

GRACE = 30.0  # seconds between the interrupt that lets pytest write its results and the kill


@dataclass(frozen=True, slots=True)
class Ran:
    code: int
    timed_out: bool
    seconds: float


def run_pytest_timed(
    project: Project,
    results: Path,
    args: list[str],
    *,
    engine: str,
    junit: Path | None = None,
    collect_only: bool = False,
    quiet: bool = False,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    test_timeout: float | None = None,
    packs: tuple[str, ...] = (),
) -> Ran:
    """pytest in its own process group. Past `timeout` it is interrupted (SIGINT: pytest stops the running test
    and still writes its results), then killed as a group GRACE seconds later if it has not exited."""
    cmd = _pytest_command(project, results, args, engine, junit, test_timeout, packs)
    if collect_only:
        cmd.append("--collect-only")
    start = time.monotonic()
    (code,), timed_out = _run_group(
        [(cmd, subprocess.DEVNULL if quiet else None)], project.root, env, timeout
    )
    return Ran(code, timed_out, time.monotonic() - start)


def _pytest_command(
    project: Project,
    results: Path,
    args: list[str],
    engine: str,
    junit: Path | None,
    test_timeout: float | None,
    packs: tuple[str, ...],
    *extra: str,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *falsifier_args(
            falsifier_dirs(project, project.root, packs),
            contracts=project.contracts,
            results=results,
            engine=engine,
            strict=True,
            packs=packs,
            rootdir=project.root,
        ),
    ]
    if test_timeout:
        cmd += ["--falsify-test-timeout", f"{test_timeout:g}"]
    if junit:
        cmd += ["--junitxml", str(junit)]
    return [*cmd, *extra, *args]


def _run_group(
    runs: list[tuple[list[str], Any]], cwd: Path, env: dict[str, str] | None, timeout: float | None
) -> tuple[list[int], bool]:
    """Each command in its own process group, all at once, with one deadline for them all: past it each still
    running is interrupted (SIGINT: pytest stops the running test and still writes its results), then killed as a
    group GRACE seconds later. Returns the exit codes, in order, and whether the deadline passed."""
    env = dict(env or os.environ)
    # Wire engines the run starts get process groups of their own; each records its group here
    # (falsify/engines/wire/transports.py), so the gate can end them even when pytest was killed before it could.
    groups_fd, groups = tempfile.mkstemp(prefix="falsify-engine-groups-")
    os.close(groups_fd)
    env[ENGINE_GROUPS] = groups
    procs: list[subprocess.Popen[bytes]] = []
    timed_out = False
    restore = terminate_as_exit()
    try:
        for cmd, out in runs:
            procs.append(
                subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=out, env=env, start_new_session=True)
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(timeout=None if deadline is None else max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
        if timed_out:
            running = [p for p in procs if p.poll() is None]
            for proc in running:
                _signal_group(proc.pid, signal.SIGINT)
            grace = time.monotonic() + GRACE
            for proc in running:
                try:
                    proc.wait(timeout=max(grace - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
    except BaseException:  # Ctrl-C, SIGTERM (as SystemExit 143): nothing the run started outlives the gate
        for proc in procs:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        _end_engine_groups(groups)
        raise
    finally:
        restore()
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)  # anything the run left behind in its group
    _end_engine_groups(groups)
    return [p.returncode for p in procs], timed_out


def run_pytest_shared(
    project: Project,
    run_dir: Path,
    args: list[str],
    *,
    engine: str,
    jobs: int,
    costs: dict[str, float],
    env: dict[str, str] | None,
    timeout: float | None,
    test_timeout: float | None,
    packs: tuple[str, ...],
) -> Ran:
    """The falsifiers split over `jobs` pytest processes at once (shards.py), then those marked falsify_serial alone;
    their results and JUnit XML merged into run_dir's results.json and junit.xml, as one process writes them. The
    first share prints to the terminal as it runs, the others' output follows when they end."""
    start = time.monotonic()
    extra: list[str] = []
    if costs:
        costs_file = run_dir / "durations.json"
        doc = {"tests": {nodeid: {"duration": d} for nodeid, d in costs.items()}}
        safefile.replace(costs_file, json.dumps(doc).encode(), what="durations file")
        extra.append(f"{shards.COSTS_OPTION}={costs_file}")

    def share(tag: str, name: str) -> list[str]:
        return _pytest_command(
            project,
            run_dir / f"results-{name}.json",
            args,
            engine,
            run_dir / f"junit-{name}.xml",
            test_timeout,
            packs,
            f"{shards.SHARD_OPTION}={tag}",
            *extra,
        )

    names = [str(k) for k in range(1, jobs + 1)]
    logs = [open(run_dir / f"pytest-{name}.log", "wb") for name in names[1:]]  # noqa: SIM115 closed below
    try:
        runs = [
            (share(f"1/{jobs}", "1"), None),
            *((share(f"{n}/{jobs}", n), f) for n, f in zip(names[1:], logs, strict=True)),
        ]
        codes, timed_out = _run_group(runs, project.root, env, timeout)
    finally:
        for f in logs:
            f.close()
    for name in names[1:]:
        print(f"gate: pytest process {name} of {jobs}:", flush=True)
        with open(run_dir / f"pytest-{name}.log", "rb") as log:
            shutil.copyfileobj(log, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    parts = [load_results(p) for n in names if (p := run_dir / f"results-{n}.json").is_file()]
    serial = shards.held_back(parts)
    if serial and not timed_out:
        print(f"gate: {serial} falsifier(s) marked {shards.SERIAL_MARK}, alone:", flush=True)
        left = None if timeout is None else max(timeout - (time.monotonic() - start), 1.0)
        (code,), timed_out = _run_group(
            [(share(shards.SERIAL, shards.SERIAL), None)], project.root, env, left
        )
        codes.append(code)
        names.append(shards.SERIAL)
        if (p := run_dir / f"results-{shards.SERIAL}.json").is_file():
            parts.append(load_results(p))
    if parts:
        merged = json.dumps(shards.merge_results(parts), sort_keys=True, default=repr)
        safefile.replace(run_dir / "results.json", merged.encode(), what="results file")
    shards.merge_junit([run_dir / f"junit-{n}.xml" for n in names], run_dir / "junit.xml")
    return Ran(shards.merge_codes(codes), timed_out, time.monotonic() - start)


ENGINE_GROUPS = "FALSIFY_ENGINE_GROUPS"


def _end_engine_groups(path: str) -> None:
    """Kill each engine's process group the run recorded, and every process carrying a recorded mark (pytest ends them itself when it exits normally;
    a killed pytest cannot), then remove the record."""
    try:
        with open(path, "rb") as f:
            recorded = f.read(1 << 20).split()
    except OSError:
        recorded = []
    for item in recorded:
        if item.isdigit() and int(item) > 1:
            _signal_group(int(item), signal.SIGKILL)
    for mark in process_tree.recorded_marks(b" ".join(recorded)):  # what left its group (setsid, a daemon)
        process_tree.end_marked(mark)
    with contextlib.suppress(OSError):
        os.unlink(path)


def terminate_as_exit() -> Callable[[], None]:
    """While pytest runs, SIGTERM raises SystemExit(143) in the gate (its default would end the gate at once and
    leave pytest and the engines running). Returns the function that restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
