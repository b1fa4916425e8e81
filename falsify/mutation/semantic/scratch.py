"""Scratch copies of a project, and the processes run in them: nothing outlives the `with` block.

The working tree is only ever read. Every copy lives under one temporary directory that is removed on exit,
also on SIGINT or a crash; every child runs in its own process group, killed as a group on timeout or exit.
All runs' directories sit under one root this user owns (`scratch_root()`); each records its owner's pid and
its children's process groups, so a run killed with SIGKILL leaves nothing a later run does not sweep.
A copy holds no symlink to a file: each is copied as content, so an edit in the copy cannot write through a
link into the working tree or anywhere else (issue #19).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from falsify.engines import process_tree
from falsify.errors import FalsifyError

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
    output: str  # its last OUTPUT_KEPT bytes, after a line saying how much went before them
    seconds: float

    def tail(self, what: str, lines: int = 15) -> str:
        """`what`, then the output's last `lines` lines."""
        tail = "\n".join(self.output.strip().splitlines()[-lines:])
        return f"{what}:\n{tail}" if tail else what


OWNER = "owner.pid"  # in each run's directory: the pid of the process that made it
GROUPS = "groups"  # in each run's directory: one process-group id per line, of every child started
# In each run's directory, one file per pytest run: the process groups of the wire engines it started (each starts
# in a session of its own, out of pytest's group), as falsify/engines/wire/transports.py records them when the
# environment names the file, as the gate does. Ended when that pytest run ends, however it ends.
ENGINES = "engines-"
ENGINE_GROUPS_ENV = "FALSIFY_ENGINE_GROUPS"
OUTPUT_KEPT = 4 << 20  # bytes of a child's output kept, its end: a build or an engine may print without bound


class ScratchError(FalsifyError):
    """The scratch root cannot be used (not ours, not a directory, not writable); the message names it."""


def scratch_root() -> Path:
    """<tmp>/falsify-scratch-<uid>: made 0700 and checked to be ours, so no one else can plant files in it."""
    root = Path(tempfile.gettempdir()) / f"falsify-scratch-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o700)
        info = os.lstat(root)
    except OSError as exc:
        raise ScratchError(f"{root}: cannot make the scratch root ({exc.strerror}); set TMPDIR") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ScratchError(
            f"{root} is not a directory owned by this user; refusing to use it for scratch copies"
        )
    return root


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the directories of runs whose owner is gone, killing the process groups they recorded (only those
    whose working directory is still inside the dead run's directory, so a reused pid is never touched)."""
    root = root or scratch_root()
    swept = []
    for run in sorted(root.iterdir()):
        try:
            owner = int((run / OWNER).read_text(encoding="ascii"))
        except (OSError, ValueError):
            owner = None
        if owner is not None and (owner == os.getpid() or _alive(owner)):
            continue
        if owner is None and time.time() - run.lstat().st_mtime < 60:
            continue  # being created right now
        for pgid in _recorded(run / GROUPS, *run.glob(f"{ENGINES}*")):
            if _cwd_inside(pgid, run):
                _kill_pid_group(pgid)
        shutil.rmtree(run, ignore_errors=True)
        swept.append(run)
    return swept


def _cwd_inside(pid: int, directory: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(directory)
    except OSError:
        return False


class Scratch:
    def __init__(self, source: Path, prefix: str = "falsify-mutants-", exclude: tuple[str, ...] = ()) -> None:
        self.source = source.resolve()
        self.exclude = (
            exclude  # more top-level names (glob patterns) never copied: [tool.falsify] copy_exclude
        )
        self.swept = sweep(scratch_root())
        for attempt in range(3):  # another run's close() may remove the empty root in between
            try:
                self.base = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        (self.base / OWNER).write_text(str(os.getpid()), encoding="ascii")
        self._procs: set[subprocess.Popen[Any]] = set()
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
        _no_file_links(dest, root)
        return dest

    def remove(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def run(self, cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None) -> Finished:
        """Run `cmd` in its own process group; on timeout kill the whole group, and when it ends whatever it
        left running in its group. Its output is read as it comes, keeping the last OUTPUT_KEPT bytes. OSError
        when the program cannot be started."""
        start = time.perf_counter()
        with self._lock:
            if self._stopping:
                raise Interrupted(" ".join(cmd[:3]))
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._procs.add(proc)
            self._record(proc.pid)
        assert proc.stdout is not None
        reader = _Tail(proc.stdout.fileno(), OUTPUT_KEPT)
        code: int | None = None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:  # timed out, done, or SIGINT while waiting: the group goes (`code` None: killed at the timeout)
            _kill_group(proc)
            proc.wait()
            with self._lock:
                self._procs.discard(proc)
        # A process that left the group (a session of its own) may hold the pipe open for ever: not waited for.
        output = reader.text(wait=5.0)
        if reader.done:
            proc.stdout.close()
        if self._stopping:
            raise Interrupted(" ".join(cmd[:3]))
        return Finished(code, output, time.perf_counter() - start)

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
        self._record(server.pid)
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
        """`python -m pytest argv` in `cwd`: forked from the server when one runs, else a new interpreter. The
        wire engines it starts are ended with it (ENGINES)."""
        with self._lock:
            self._runs += 1
            run = self._runs
        engines = self.base / f"{ENGINES}{run}"
        engines.touch()
        env = {**env, ENGINE_GROUPS_ENV: str(engines)}
        try:
            if self._server is None:
                return self.run([sys.executable, "-m", "pytest", *argv], cwd=cwd, env=env, timeout=timeout)
            return self._forked(argv, cwd=cwd, env=env, timeout=timeout, run=run)
        finally:
            for pgid in _recorded(engines):
                _kill_pid_group(pgid)
            for mark in _recorded_marks(engines):  # engines' processes that left their group
                process_tree.end_marked(mark)

    def _forked(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None, run: int
    ) -> Finished:
        assert self._server is not None
        start = time.perf_counter()
        with self._lock:
            if self._stopping:
                raise Interrupted("pytest")
            out = self.base / f"pytest-{run}.out"
            assert self._server.stdin is not None and self._server.stdout is not None
            self._server.stdin.write(
                json.dumps({"argv": argv, "cwd": str(cwd), "env": env, "out": str(out)}) + "\n"
            )
            self._server.stdin.flush()
            pid = int(json.loads(self._server.stdout.readline())["pid"])
            self._pids.add(pid)
            self._record(pid)
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
        finally:  # done, timed out, or SIGINT while waiting: its group goes, with whatever it left running
            _kill_pid_group(pid)
            with self._lock:
                self._pids.discard(pid)
        output = _file_tail(out, OUTPUT_KEPT)
        out.unlink(missing_ok=True)
        rc.unlink(missing_ok=True)
        return Finished(code, output, time.perf_counter() - start)

    def _record(self, pgid: int) -> None:
        with contextlib.suppress(OSError), open(self.base / GROUPS, "a", encoding="ascii") as f:
            f.write(f"{pgid}\n")

    def stop(self) -> None:
        """Refuse new work and kill every running child's process group, and every wire engine's."""
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
            pids = list(self._pids)
        for proc in procs:
            _kill_group(proc)
        for pid in pids:
            _kill_pid_group(pid)
        for pgid in _recorded(*self.base.glob(f"{ENGINES}*")):
            _kill_pid_group(pgid)

    def close(self) -> None:
        self.stop()
        if self._server is not None:
            _kill_group(self._server)
            self._server.wait()
            for stream in (self._server.stdin, self._server.stdout):
                if stream is not None:
                    stream.close()
        shutil.rmtree(self.base, ignore_errors=True)
        with contextlib.suppress(OSError):  # the shared root goes too once no run is using it
            self.base.parent.rmdir()


def _no_file_links(dest: Path, source: Path) -> None:
    """Replace each symlink in the copy: a link to a regular file by the file's content; any other link (to a
    directory, a device, nowhere, or a loop) is removed, as the working tree's own links are never followed."""
    for directory, dirnames, filenames in os.walk(dest, followlinks=False):
        for name in dirnames + filenames:
            path = Path(directory) / name
            if not path.is_symlink():
                continue
            original = source / path.relative_to(dest)
            try:
                regular = stat.S_ISREG(os.stat(original).st_mode)
            except (OSError, RuntimeError):
                regular = False
            path.unlink()
            if regular:
                shutil.copyfile(original, path)


class _Tail:
    """Reads a pipe to its end in a thread of its own, keeping its last `keep` bytes and counting the rest."""

    def __init__(self, fd: int, keep: int) -> None:
        self.fd, self.keep = fd, keep
        self.data = bytearray()
        self.dropped = 0
        self.done = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="falsify-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                with self._lock:
                    self.data += chunk
                    if len(self.data) > 2 * self.keep:  # trimmed now and then, not on every chunk
                        self.dropped += len(self.data) - self.keep
                        del self.data[: -self.keep]
        except OSError:
            pass
        self.done = True

    def text(self, wait: float) -> str:
        """What was kept once the pipe ends (or after `wait` seconds), with a first line saying how much of the
        output went before it when some did."""
        self._thread.join(wait)
        with self._lock:
            dropped = self.dropped + max(len(self.data) - self.keep, 0)
            kept = bytes(self.data[-self.keep :])
        head = f"[{dropped} bytes of output before these not kept]\n" if dropped else ""
        return head + _text(kept)


def _file_tail(path: Path, keep: int) -> str:
    """The last `keep` bytes of the file at `path` (a forked run's output), as _Tail keeps a pipe's."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - keep, 0))
            kept = f.read(keep)
    except OSError:
        return ""
    head = f"[{size - keep} bytes of output before these not kept]\n" if size > keep else ""
    return head + kept.decode("utf-8", errors="replace")


def _text(data: bytes) -> str:
    """Output bytes as subprocess's text mode gives them (universal newlines), undecodable bytes replaced."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _recorded(*files: Path) -> list[int]:
    """The process-group ids recorded in `files` (one a line; at most 1 MiB of each is read)."""
    groups = []
    for path in files:
        try:
            with open(path, "rb") as f:
                groups += [int(item) for item in f.read(1 << 20).split() if item.isdigit() and int(item) > 1]
        except OSError:
            continue
    return groups


def _recorded_marks(path: Path) -> list[str]:
    try:
        with open(path, "rb") as f:
            return process_tree.recorded_marks(f.read(1 << 20))
    except OSError:
        return []


def _kill_group(proc: subprocess.Popen[Any]) -> None:
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
