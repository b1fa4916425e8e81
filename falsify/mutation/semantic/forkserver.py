"""A fork server for pytest runs: import pytest, hypothesis and numpy once, then fork a child per run.

Each mutant's pytest run would otherwise spend most of its time importing the same third-party modules. The
server imports only those (never the project: nothing it imports may be something a mutant edits), reads one
JSON request per line on stdin, forks, and answers with the child's pid. The child starts its own session (so
the runner can kill its process group), moves into the scratch copy, puts it first on sys.path, takes the
request's environment, sends its output to a file, runs pytest.main, writes its exit code next to that file and
exits. The server ignores SIGCHLD, so children are reaped without it; the client waits on the exit-code file.
Each child restores SIGCHLD's default, so the exit codes of the processes it starts (exec: engines) can be read.

mutmut forks from a process that has imported everything for the same reason.

    python falsify/mutation/semantic/forkserver.py     # started by falsify.mutation.semantic.scratch.Scratch, as a script: the
                                             # falsify package itself stays unimported
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys

# BLAS thread pools do not survive fork; one thread per child also keeps parallel mutants from oversubscribing.
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PRELOAD = (
    "pytest",
    "_pytest.python",
    "_pytest.terminal",
    "hypothesis",
    "hypothesis.strategies",
    "hypothesis.stateful",
    "numpy",
    "jsonschema",
    "yaml",
)


def child(request: dict[str, object]) -> None:
    # The server's SIG_IGN would make the kernel reap this child's own children: subprocess.wait() would get
    # ECHILD and report exit code 0 for an engine that exited 3 (an exec: wire engine's exit status).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    out = str(request["out"])
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdin.close()
    code = 3
    try:
        cwd = str(request["cwd"])
        os.chdir(cwd)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        # What `python -m pytest` with PYTHONPATH=cwd would give: the copy first (in place of this script's own
        # directory, which must not shadow anything).
        sys.path[0] = cwd
        # and the copy's other import roots (src/) that PYTHONPATH names, ahead of any editable install's paths
        inside = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith(cwd + os.sep)]
        sys.path[1:1] = [p for p in inside if p not in sys.path]
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        sys.argv = ["pytest", *argv]
        import pytest

        code = int(pytest.main(argv))
    except BaseException as exc:  # the child must always report and exit, never return to the server loop
        print(f"forkserver child: {type(exc).__name__}: {exc}", flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open(out + ".rc", "w", encoding="utf-8") as f:
            f.write(str(code))
        os._exit(code)


def main() -> int:
    for name in THREAD_ENV:
        os.environ[name] = "1"
    for name in PRELOAD:
        with contextlib.suppress(
            ImportError
        ):  # optional for a project's tests: the child imports what it needs
            importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request)
        print(json.dumps({"pid": pid}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
