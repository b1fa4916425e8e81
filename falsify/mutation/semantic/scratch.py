"""Scratch copies of a project, and the processes run in them: nothing outlives the `with` block.

The working tree is only ever read. Every copy lives under one temporary directory that is removed on exit,
also on SIGINT or a crash; every child runs in its own process group, killed as a group on timeout or exit.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# Never copied: VCS data, caches, virtualenvs, build outputs and our own output directories.
IGNORE_TOP = {
    ".git",
    ".tox",
    ".venv",
    "venv",
    ".falsify",
    "build",
    "dist",
    "mutmut-scratch",
    ".benchmarks",
    "reports",
    "evidence",
    "node_modules",
}
IGNORE_ANYWHERE = (
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    "*.pyc",
)


class Interrupted(Exception):
    """The scratch area is shutting down; no new process may start."""


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int | None  # None: killed at the timeout
    output: str
    seconds: float


class Scratch:
    def __init__(self, source: Path, prefix: str = "falsify-mutants-", exclude: tuple[str, ...] = ()) -> None:
        self.source = source.resolve()
        self.exclude = (
            exclude  # more top-level names (glob patterns) never copied: [tool.falsify] copy_exclude
        )
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self._procs: set[subprocess.Popen[str]] = set()
        self._pids: set[int] = set()  # children of the fork server
        self._server: subprocess.Popen[str] | None = None
        self._runs = 0
        self._lock = threading.Lock()
        self._stopping = False

    def __enter__(self) -> Scratch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
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
                skip |= {n for n in names if any(fnmatch.fnmatch(n, p) for p in self.exclude)}
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
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._procs.add(proc)
        try:
            output, _ = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            code = None
        except BaseException:  # SIGINT while waiting: the child goes with us
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            with self._lock:
                self._procs.discard(proc)
        if self._stopping:
            raise Interrupted(" ".join(cmd[:3]))
        return Finished(code, output or "", time.perf_counter() - start)

    # -- pytest through the fork server ---------------------------------------------------------------------
    def start_forkserver(self) -> bool:
        """Start falsify/mutation/semantic/forkserver.py; False (and plain subprocesses from then on) if it cannot."""
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
            cwd=self.base,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert server.stdout is not None
        ready = server.stdout.readline()
        if '"ready"' not in ready:
            _kill_group(server)
            server.wait()
            return False
        self._server = server
        return True

    def run_pytest(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None
    ) -> Finished:
        """`python -m pytest argv` in `cwd`: forked from the server when one runs, else a new interpreter."""
        if self._server is None:
            return self.run([sys.executable, "-m", "pytest", *argv], cwd=cwd, env=env, timeout=timeout)
        start = time.perf_counter()
        with self._lock:
            if self._stopping:
                raise Interrupted("pytest")
            self._runs += 1
            out = self.base / f"pytest-{self._runs}.out"
            assert self._server.stdin is not None and self._server.stdout is not None
            self._server.stdin.write(
                json.dumps({"argv": argv, "cwd": str(cwd), "env": env, "out": str(out)}) + "\n"
            )
            self._server.stdin.flush()
            pid = int(json.loads(self._server.stdout.readline())["pid"])
            self._pids.add(pid)
        rc = Path(f"{out}.rc")
        code: int | None = None
        try:
            while True:
                if rc.is_file() and rc.read_text(encoding="utf-8"):
                    code = int(rc.read_text(encoding="utf-8"))
                    break
                if not _alive(pid):
                    time.sleep(0.1)  # it may have written its code on the way out
                    code = int(rc.read_text(encoding="utf-8")) if rc.is_file() else -signal.SIGKILL
                    break
                if self._stopping:
                    raise Interrupted("pytest")
                if timeout is not None and time.perf_counter() - start > timeout:
                    _kill_pid_group(pid)
                    code = None
                    break
                time.sleep(0.05)
        except BaseException:  # SIGINT while waiting: the child goes with us
            _kill_pid_group(pid)
            raise
        finally:
            with self._lock:
                self._pids.discard(pid)
        output = out.read_text(encoding="utf-8", errors="replace") if out.is_file() else ""
        out.unlink(missing_ok=True)
        rc.unlink(missing_ok=True)
        return Finished(code, output, time.perf_counter() - start)

    def stop(self) -> None:
        """Refuse new work and kill every running child's process group."""
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
            pids = list(self._pids)
        for proc in procs:
            _kill_group(proc)
        for pid in pids:
            _kill_pid_group(pid)

    def close(self) -> None:
        self.stop()
        if self._server is not None:
            _kill_group(self._server)
            self._server.wait()
            for stream in (self._server.stdin, self._server.stdout):
                if stream is not None:
                    stream.close()
        shutil.rmtree(self.base, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    _kill_pid_group(proc.pid)


def _kill_pid_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
