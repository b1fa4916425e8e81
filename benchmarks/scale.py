"""Local threads vs Ray on the same work, side by side in one run, each figure with its wall time, CPU time and load
average:

- no-op tasks (a task that returns its argument) through the executor seam, local threads (-j 2) and
  Ray on a loopback cluster of 1 and 2 nodes (1 CPU each): the time to the first result (Ray: connect, snapshot,
  warm workers) and the marginal seconds per task per worker slot after it, which is Ray's own per-task cost;
- `falsify mutants` (the toy project's mutants by default) with the local executor (-j 1, -j 2) and with Ray on
  1 and 2 nodes: wall, and the per-task overhead = (slot-seconds of the mutant phase - the mutants' own seconds) /
  mutants, from the progress lines (the control and Ray's start are outside the phase).

CPU time is this machine's: the driver's and its children's, plus the cluster's own processes (named by its temp
directory). The cluster runs in a network namespace of its own (re-executed under `unshare -n`: needs root and
iproute2), so every Ray server listens on 127.0.0.1 only.

python benchmarks/scale.py [--project DIR] [--engine E] [--tasks N] [--out FILE] [IDS ...]   (default: the toy)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# cluster_run: starting the loopback nodes and the stop that ends only this cluster (one copy, the test's)
sys.path.insert(0, str(ROOT / "tests" / "scale"))

from cluster_run import free_port, own_processes, start_head, start_worker, stop_own_cluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

# The no-op driver: defines its task in __main__ (so cloudpickle ships it by value, and the same script times any
# version of executors.py), and prints when the first and the last result came back.
NOOP = """
import json, sys, time
from pathlib import Path
from falsify.mutation import executors
def noop(root, i):
    return i
root, executor, address, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
tasks = [(i,) for i in range(n)]
start = time.perf_counter()
if executor == "ray":
    stream = executors.ray_tasks(noop, tasks, root, address)
else:
    stream = executors.run_tasks(noop, tasks, root, "local", None, jobs=2)
first = last = None
got = []
for r in stream:
    got.append(r)
    last = time.perf_counter() - start
    first = first if first is not None else last
end = time.perf_counter() - start
assert sorted(got) == list(range(n)), got
print(json.dumps({"first": first, "last": last, "end": end}))
"""


class Clock:
    """Wall, CPU and load average around one figure. CPU is sampled every 0.1 s over the watched processes' trees
    (the command's, and the cluster's own processes, named by its temp directory), each counted up to its last
    sample; the figure is the larger of that and the command's reaped children's rusage: both are lower bounds
    (a process shorter than a sample, or not waited for, is missed)."""

    def __init__(self, cluster_temp: str | None) -> None:
        self.temp = cluster_temp
        self.roots: set[int] = set()
        self.load_before = os.getloadavg()[0]
        self.seen: dict[int, float] = {}
        self.base = self._sample()
        self.children_before = self._children()
        self.done = threading.Event()
        self.sampler = threading.Thread(target=self._poll, daemon=True)
        self.sampler.start()
        self.start = time.perf_counter()

    def watch(self, pid: int) -> None:
        self.roots.add(pid)

    @staticmethod
    def _children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def _sample(self) -> float:
        stats: dict[int, tuple[int, float]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    fields = f.read().rpartition(")")[2].split()
                stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
            except (OSError, IndexError, ValueError):
                continue
        # by command line only (open files are not read 10 times a second): Ray's small agents are missed
        mine = set(self.roots) | set(own_processes(self.temp, open_files=False) if self.temp else [])
        grew = True
        while grew:  # every descendant of a watched process
            more = {pid for pid, (ppid, _) in stats.items() if ppid in mine} - mine
            mine |= more
            grew = bool(more)
        for pid in mine & stats.keys():
            self.seen[pid] = stats[pid][1]
        return sum(self.seen.values())

    def _poll(self) -> None:
        while not self.done.wait(0.1):
            self._sample()

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self.start
        self.done.set()
        self.sampler.join()
        cpu = max(self._sample() - self.base, self._children() - self.children_before)
        return {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "load_1m_before": self.load_before,
            "load_1m_after": os.getloadavg()[0],
        }


def noop(
    project: Path,
    executor: str,
    address: str,
    n: int,
    slots: int,
    env: dict[str, str] | None,
    temp: str | None,
) -> dict[str, Any]:
    clock = Clock(temp)
    proc = subprocess.Popen(
        [str(BIN / "python"), "-c", NOOP, str(project), executor, address, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    clock.watch(proc.pid)
    stdout, stderr = proc.communicate(timeout=1800)
    figure = clock.stop()
    if proc.returncode != 0:
        raise SystemExit(f"no-op tasks on {executor} exited {proc.returncode}:\n{stderr[-3000:]}")
    times = json.loads(stdout.strip().splitlines()[-1])
    per_task = (times["last"] - times["first"]) / (n - 1)
    return {
        **figure,
        "tasks": n,
        "slots": slots,
        "first_result_s": round(times["first"], 3),
        "per_task_s": round(per_task, 5),
        "per_task_per_slot_s": round(per_task * slots, 5),
    }


PROGRESS = re.compile(r"mutants: \[\d+/\d+\] \S+: \w+(?: in ([0-9.]+) s(?: \(CPU ([0-9.]+) s\))?)?")


def mutants(
    project: Path,
    engine: str,
    ids: list[str],
    slots: int,
    *extra: str,
    env: dict[str, str] | None = None,
    temp: str | None = None,
) -> dict[str, Any]:
    clock = Clock(temp)
    proc = subprocess.Popen(
        # --fresh-control: every figure runs its own control (a stored one would be reused from the second on)
        [
            str(BIN / "python"),
            "-m",
            "falsify.cli",
            "mutants",
            "--engine",
            engine,
            "--fresh-control",
            *extra,
            *ids,
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    clock.watch(proc.pid)
    assert proc.stdout is not None
    lines, phase_start, phase_end, own, own_cpu = [], None, None, [], []
    for line in proc.stdout:
        now = time.perf_counter()
        lines.append(line)
        if "mutants: control green" in line:
            phase_start = now
        match = PROGRESS.search(line)
        if match:
            phase_end = now
            own.append(float(match[1] or 0.0))
            own_cpu.append(float(match[2] or 0.0))
    code = proc.wait(timeout=3600)
    figure = clock.stop()
    if code != 0 or phase_start is None or phase_end is None:
        raise SystemExit(f"falsify mutants {' '.join(extra)} exited {code}:\n{''.join(lines)[-3000:]}")
    phase = phase_end - phase_start
    return {
        **figure,
        "mutants": len(own),
        "slots": slots,
        "mutant_phase_s": round(phase, 3),
        "mutants_own_s": round(sum(own), 3),
        "mutants_own_cpu_s": round(sum(own_cpu), 3),
        "overhead_per_task_s": round((phase * slots - sum(own)) / len(own), 3),
    }


def repeat(project: Path, times: int) -> None:
    """Each mutant `times` times: copies under ids ID-2.., each listed beside ID in the contracts' `mutants:`."""
    for spec in sorted((project / "mutants").glob("*.yaml")):
        text = spec.read_text(encoding="utf-8")
        ids = [f"{spec.stem}-{k}" for k in range(2, times + 1)]
        for new in ids:
            copy = text.replace(f"id: {spec.stem}\n", f"id: {new}\n", 1)
            assert copy != text, f"{spec}: no `id: {spec.stem}` line to rename"
            (spec.parent / f"{new}.yaml").write_text(copy, encoding="utf-8")
        for contract in (project / "contracts").glob("*.yaml"):
            body = contract.read_text(encoding="utf-8")
            listed = re.sub(
                rf"(mutants: \[[^\]]*)\b{re.escape(spec.stem)}\b", rf"\g<0>, {', '.join(ids)}", body
            )
            contract.write_text(listed, encoding="utf-8")


def with_cluster(nodes: int, fn: Callable[[dict[str, str], str, str], Any]) -> Any:
    port = free_port()
    ray = str(BIN / "ray")
    temp = tempfile.mkdtemp(prefix="falsify-ray-bench-")
    # TMPDIR: the workers' unpacked project snapshots go under the cluster's temp dir, removed with it
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "TMPDIR": temp}
    start_head(ray, port, temp, env, timeout=300)
    workers = [start_worker(ray, port, temp, env) for _ in range(nodes - 1)]
    try:
        probe = f"import ray,time\nray.init(logging_level='ERROR', _node_ip_address='127.0.0.1')\nwhile len([n for n in ray.nodes() if n['Alive']]) < {nodes}: time.sleep(0.5)"
        subprocess.run([str(BIN / "python"), "-c", probe], env=env, check=True, timeout=300)
        return fn(env, f"127.0.0.1:{port}", temp)
    finally:
        stop_own_cluster(ray, temp, [w.pid for w in workers], env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=ROOT / "tests" / "fixtures" / "mutants" / "toy")
    parser.add_argument("--engine", default="toy.engine:ToyEngine")
    parser.add_argument("--tasks", type=int, default=200, help="no-op tasks per figure (default 200)")
    parser.add_argument("--no-mutants", action="store_true", help="the no-op figures only")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each mutant this many times, as copies under new ids (more tasks to spread a run's start over)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("ids", nargs="*")
    args = parser.parse_args()
    if not args.in_netns:
        return subprocess.call(["unshare", "-n", sys.executable, __file__, "--in-netns", *sys.argv[1:]])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    base = Path(tempfile.mkdtemp(prefix="falsify-scale-bench-"))
    try:
        return measure(args, base / "project")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> int:
    shutil.copytree(args.project, work, ignore=shutil.ignore_patterns("__pycache__", ".falsify", ".tox"))
    if args.repeat > 1:
        repeat(work, args.repeat)
    n = args.tasks
    figures: dict[str, Any] = {"noop_local_j2": noop(work, "local", "", n, 2, None, None)}
    for nodes in (1, 2):

        def on_ray(env: dict[str, str], addr: str, temp: str, k: int = nodes) -> dict[str, Any]:
            return noop(work, "ray", addr, n, k, env, temp)

        figures[f"noop_ray_{nodes}_node"] = with_cluster(nodes, on_ray)
    if not args.no_mutants:
        figures["mutants_local_j1"] = mutants(work, args.engine, args.ids, 1, "-j", "1")
        figures["mutants_local_j2"] = mutants(work, args.engine, args.ids, 2, "-j", "2")
        for nodes in (1, 2):

            def mutants_on_ray(env: dict[str, str], addr: str, temp: str, k: int = nodes) -> dict[str, Any]:
                ray = ("--executor", "ray", "--address", addr)
                return mutants(work, args.engine, args.ids, k, *ray, env=env, temp=temp)

            figures[f"mutants_ray_{nodes}_node"] = with_cluster(nodes, mutants_on_ray)
    result = {
        "benchmark": "scale",
        "cores": os.cpu_count(),
        "figures": figures,
        "note": "per_task_per_slot_s (no-op) is the executor's own cost per task; a mutants figure's wall includes "
        "its control run and (Ray) the driver's start, snapshot upload and warm workers' start; overhead_per_task_s "
        "is the slot time of the mutant phase not spent inside a mutant",
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
