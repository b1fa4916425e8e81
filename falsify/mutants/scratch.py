"""Scratch copies of a project, and the processes run in them: nothing outlives the `with` block.

The working tree is only ever read. Every copy lives under one temporary directory that is removed on exit,
also on SIGINT or a crash; every child runs in its own process group, killed as a group on timeout or exit.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# Never copied: VCS data, caches, virtualenvs, build outputs and our own output directories.
IGNORE_TOP = {".git", ".tox", ".venv", "venv", ".falsify", "build", "dist", "mutmut-scratch", ".benchmarks",
              "reports", "evidence", "node_modules"}
IGNORE_ANYWHERE = ("__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache", "*.egg-info",
                   "*.pyc")


class Interrupted(Exception):
    """The scratch area is shutting down; no new process may start."""


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int | None  # None: killed at the timeout
    output: str
    seconds: float


class Scratch:
    def __init__(self, source: Path, prefix: str = "falsify-mutants-") -> None:
        self.source = source.resolve()
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._stopping = False

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def copy(self, name: str) -> Path:
        """A fresh copy of the project at base/name."""
        if self._stopping:
            raise Interrupted(name)
        dest = self.base / name
        root = self.source

        def ignore(directory: str, names: list[str]) -> set[str]:
            skip = {n for n in names if any(fnmatch.fnmatch(n, p) for p in IGNORE_ANYWHERE)}
            if Path(directory).resolve() == root:
                skip |= IGNORE_TOP & set(names)
            return skip

        shutil.copytree(root, dest, ignore=ignore, symlinks=True)
        return dest

    def remove(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def run(self, cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None) -> Finished:
        """Run `cmd` in its own process group; on timeout kill the whole group."""
        start = time.perf_counter()
        with self._lock:
            if self._stopping:
                raise Interrupted(" ".join(cmd[:3]))
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            self._procs.add(proc)
        try:
            output, _ = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            code = None
        finally:
            with self._lock:
                self._procs.discard(proc)
        if self._stopping:
            raise Interrupted(" ".join(cmd[:3]))
        return Finished(code, output or "", time.perf_counter() - start)

    def stop(self) -> None:
        """Refuse new work and kill every running child's process group."""
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)
