"""Every process an engine starts ends with it (issue #48), whatever the engine does with its children.

An engine (`exec:` over the wire, `openai+exec:`) starts in a session and process group of its own, which its
close() kills. That misses what leaves the group: a child that calls setsid, a daemon that double-forks. So each
engine is also started with a mark in its environment, FALSIFY_ENGINE_MARK=<128 random bits>, which every
descendant inherits unless it clears its environment; `end_marked` kills every process of this user whose
environment carries the mark, wherever it was reparented. (PR_SET_CHILD_SUBREAPER would catch such orphans only
while this process lives, and only as its children; the mark also serves `falsify gate` and `mutants`, which end a
run's engines after pytest itself was killed.) On systems without /proc the group is all that is ended.

Each engine's group and mark are appended to the file FALSIFY_ENGINE_GROUPS names (one `PGID` or `mTOKEN` a
line), so that the gate and the mutant runner end them when pytest cannot.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from pathlib import Path
from typing import Any

MARK_ENV = "FALSIFY_ENGINE_MARK"
GROUPS_ENV = "FALSIFY_ENGINE_GROUPS"


def marked_env(base: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """The environment to start an engine with, and its mark."""
    token = secrets.token_hex(16)
    return {**(os.environ if base is None else base), MARK_ENV: token}, token


def record(pgid: int, token: str | None = None) -> None:
    """Append the engine's group (and mark) to the file FALSIFY_ENGINE_GROUPS names, if any."""
    path = os.environ.get(GROUPS_ENV)
    if not path:
        return
    lines = f"{pgid}\n" + (f"m{token}\n" if token else "")
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)


def start(argv: list[str], **popen: Any) -> tuple[subprocess.Popen[bytes], str]:
    """Start an engine's process in a session and process group of its own, marked and recorded (see above):
    subprocess.Popen's OSError and ValueError pass to the caller, which names the engine."""
    env, token = marked_env()
    process = subprocess.Popen(argv, start_new_session=True, env=env, **popen)
    record(process.pid, token)
    return process, token


def recorded_marks(data: bytes) -> list[str]:
    """The marks in a FALSIFY_ENGINE_GROUPS file's bytes."""
    marks = []
    for item in data.split():
        token = item[1:].decode("ascii", "replace")
        if item.startswith(b"m") and len(token) == 32 and all(c in "0123456789abcdef" for c in token):
            marks.append(token)
    return marks


def marked(token: str) -> list[int]:
    """The pids of this user's processes (not this one) whose environment carries the mark."""
    needle = f"{MARK_ENV}={token}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone meanwhile, another user's, a kernel thread
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def end_marked(token: str, rounds: int = 5) -> int:
    """SIGKILL every process carrying the mark, again while new ones appear (one forking as it is killed): the
    number killed."""
    killed = 0
    for _ in range(rounds):
        pids = marked(token)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def end_group(pgid: int, token: str | None) -> None:
    """Kill the engine's process group, then whatever carries its mark outside it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if token:
        end_marked(token)
