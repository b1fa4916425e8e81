"""Local vs Ray on the same mutant set, side by side in one run: wall time of `falsify mutants` with the local
executor (-j 1 and -j 2) and with the Ray executor on a loopback cluster of 1 node and of 2 nodes (1 CPU each),
and the per-task overhead Ray adds. The cluster runs in a network namespace of its own (re-executed under
`unshare -n`: needs root and iproute2), so every Ray server listens on 127.0.0.1 only.

python benchmarks/scale.py [--project DIR] [--engine E] [--out FILE] [IDS ...]   (default: the toy fixture)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from result_json import emit

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# cluster_run: the loopback cluster's start and the stop that ends only that cluster (one copy, the test's)
sys.path.insert(0, str(ROOT / "tests" / "scale"))

from cluster_run import free_port, start_cluster, stop_own_cluster  # noqa: E402


def mutants(
    project: Path, engine: str, ids: list[str], *extra: str, env: dict[str, str] | None = None
) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [str(BIN / "python"), "-m", "falsify.cli", "mutants", "--engine", engine, *extra, *ids],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"falsify mutants {' '.join(extra)} exited {proc.returncode}:\n{proc.stdout[-2000:]}"
        )
    return time.perf_counter() - start


def with_cluster(nodes: int, fn: Callable[[dict[str, str], str], float]) -> float:
    port = free_port()
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    ray = str(BIN / "ray")
    temp = tempfile.mkdtemp(prefix="falsify-ray-bench-")
    workers = start_cluster(ray, port, temp, env, workers=nodes - 1)
    try:
        probe = f"import ray,time\nray.init(logging_level='ERROR', _node_ip_address='127.0.0.1')\nwhile len([n for n in ray.nodes() if n['Alive']]) < {nodes}: time.sleep(0.5)"
        subprocess.run([str(BIN / "python"), "-c", probe], env=env, check=True, timeout=300)
        return fn(env, f"127.0.0.1:{port}")
    finally:
        stop_own_cluster(ray, temp, workers, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=ROOT / "tests" / "fixtures" / "mutants" / "toy")
    parser.add_argument("--engine", default="toy.engine:ToyEngine")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("ids", nargs="*")
    args = parser.parse_args()
    if not args.in_netns:
        return subprocess.call(["unshare", "-n", sys.executable, __file__, "--in-netns", *sys.argv[1:]])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="falsify-scale-bench-")) / "project"
    shutil.copytree(args.project, work, ignore=shutil.ignore_patterns("__pycache__", ".falsify", ".tox"))
    n = len(args.ids) or len(list((work / "mutants").glob("*.yaml")))
    local1 = mutants(work, args.engine, args.ids, "-j", "1")
    local2 = mutants(work, args.engine, args.ids, "-j", "2")
    ray1 = with_cluster(
        1,
        lambda env, addr: mutants(
            work, args.engine, args.ids, "--executor", "ray", "--address", addr, env=env
        ),
    )
    ray2 = with_cluster(
        2,
        lambda env, addr: mutants(
            work, args.engine, args.ids, "--executor", "ray", "--address", addr, env=env
        ),
    )
    overhead = (ray1 - local1) / n
    result = {
        "benchmark": "scale",
        "mutants": n,
        "seconds": {"local_j1": local1, "local_j2": local2, "ray_1_node": ray1, "ray_2_nodes": ray2},
        "ratios": {
            "ray_2_nodes/local_j2": ray2 / local2,
            "ray_1_node/local_j1": ray1 / local1,
            "ray_1_node/ray_2_nodes": ray1 / ray2,
        },
        "ray_overhead_per_task_seconds": overhead,
        "load_average_1m": os.getloadavg()[0],
        "cores": os.cpu_count(),
        "note": "wall includes each command's control run and (for Ray) driver start and snapshot upload",
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
