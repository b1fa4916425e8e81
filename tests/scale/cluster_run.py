"""Run inside a fresh network namespace (`unshare -n`, only loopback exists): start a two-node Ray cluster on
127.0.0.1, run `falsify COMMAND --executor ray` against it in PROJECT (mutants by default; campaign; mutmut), optionally SIGKILL the
worker node once the tasks are out, stop everything, and print one JSON line: {"exit", "output", "killed_worker"}.

python cluster_run.py PROJECT --engine ENGINE [--kill-worker] [--command campaign] [-- EXTRA ARGS]
python cluster_run.py DIR --engine - --command lose-workers -- N LOSE   (the executor with workers that crash)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
NODE = [
    "--node-ip-address=127.0.0.1",
    "--num-cpus=1",
    "--object-store-memory=200000000",
    "--disable-usage-stats",
]


# executors.ray_tasks with tasks whose first attempts end their own worker process (os._exit, as a crash or an OOM
# kill would): tasks `lose` of N do so, once each (a marker file per task records the first attempt). Prints each
# result as it comes back and what the executor said.
LOSE_WORKERS = """
import os, sys
from pathlib import Path
from falsify.mutation import executors
project, address, n, lose = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
marks = project / "first-attempts"
marks.mkdir(exist_ok=True)
def task(root, i):
    mark = marks / str(i)
    if i < lose and not mark.exists():
        mark.write_text(str(os.getpid()))
        os._exit(1)
    return i, os.getpid()
for i, pid in executors.ray_tasks(task, [(i,) for i in range(n)], project, address, say=print):
    print(f"task {i} done in worker {pid}", flush=True)
"""


def own_processes(marker: str, open_files: bool = True) -> list[int]:
    """Pids of the processes that name `marker` (this cluster's own temp/session directory) in their command line
    or hold a file under it open: Ray's dashboard and runtime-env agents rename their command line
    (`ray::DashboardAgent`) but keep their logs there open."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    named = marker.encode() in f.read()
                if not named and open_files:
                    fds = f"/proc/{entry}/fd"
                    named = any(marker in os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds))
            except OSError:
                continue
            if named:
                found.append(int(entry))
    return found


def stop_own_cluster(ray: str, temp: str, groups: list[int], env: dict[str, str]) -> None:
    """Stop only the cluster this script started: its worker nodes' process groups, then every process that
    names its temp directory (the head's GCS, raylets, workers), then the directory itself. Never
    `ray stop --force`, which stops every Ray process on the machine, other users' clusters too."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for _ in range(3):  # a dying raylet may start a worker on its way out
        for pid in own_processes(temp):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    shutil.rmtree(temp, ignore_errors=True)  # the cluster's logs and sockets: nothing of it is left in /tmp


def start_head(ray: str, port: int, temp: str, env: dict[str, str], timeout: float) -> None:
    """Start the cluster's head node on 127.0.0.1:`port`, its files under `temp`; returns once it is up."""
    subprocess.run(
        [ray, "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false", *NODE],
        check=True,
        capture_output=True,
        env=env,
        timeout=timeout,
    )


def start_worker(ray: str, port: int, temp: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A worker node joining the head at 127.0.0.1:`port`, in a process group of its own (stop_own_cluster
    ends the group)."""
    return subprocess.Popen(
        [ray, "start", f"--address=127.0.0.1:{port}", f"--temp-dir={temp}", "--block", *NODE],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--kill-worker", action="store_true")
    parser.add_argument(
        "--command", default="mutants", choices=["mutants", "campaign", "mutmut", "lose-workers"]
    )
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    temp = Path(tempfile.mkdtemp(prefix="falsify-ray-"))
    port = free_port()
    ray = str(BIN / "ray")
    # TMPDIR: the workers' scratch (the executor's unpacked project snapshots) goes under the cluster's own temp
    # directory, which stop_own_cluster removes.
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "TMPDIR": str(temp)}
    start_head(ray, port, str(temp), env, timeout=180)
    worker = start_worker(ray, port, str(temp), env)
    killed = False
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for the second node to register
            probe = subprocess.run(
                [
                    str(BIN / "python"),
                    "-c",
                    "import ray; ray.init(logging_level='ERROR', _node_ip_address='127.0.0.1'); print(len([n for n in ray.nodes() if n['Alive']]))",
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            if probe.stdout.strip().endswith("2"):
                break
            time.sleep(1)
        else:
            raise SystemExit("the worker node never joined")
        address = f"127.0.0.1:{port}"
        if args.command == "lose-workers":  # the executor alone: LOSE_WORKERS, not a falsify command
            command = [str(BIN / "python"), "-c", LOSE_WORKERS, str(args.project), address, *args.extra]
        else:
            command = [
                str(BIN / "python"),
                "-m",
                "falsify.cli",
                args.command,
                *([] if args.command == "mutmut" else ["--engine", args.engine]),
                "--executor",
                "ray",
                "--address",
                address,
                *args.extra,
            ]
        run = subprocess.Popen(
            command,
            cwd=args.project,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, "FALSIFY_ENGINE": args.engine},
        )
        lines = []
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if args.kill_worker and not killed and ("in the object store" in line or "shards" in line):
                time.sleep(3)  # the first tasks are running, some on the worker node
                os.killpg(worker.pid, signal.SIGKILL)
                killed = True
                lines.append("cluster_run: worker node killed\n")
        code = run.wait(timeout=900)
        print(json.dumps({"exit": code, "output": "".join(lines), "killed_worker": killed}))
        return 0
    finally:
        stop_own_cluster(ray, str(temp), [worker.pid], env)


if __name__ == "__main__":
    sys.exit(main())
