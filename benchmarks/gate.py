"""The gate's cost on this repository: `falsify gate` (the first, in-process run of `tox -e gate`), wall time, CPU
time (user + system of the whole process tree: the gate, its pytest and any interpreter a falsifier starts) and the
load average before and after, for each repeat. Budget (issue #28): <= 15 s CPU. A figure, not a test: nothing
here fails on time.

python benchmarks/gate.py [--repeats 1] [--engine reference] [--seed N] [--out FILE]

Each gate run draws its hypothesis examples from a seed of its own (docs/cli.md), so the figure moves with the
examples drawn as well as with the machine; --seed N runs every repeat on the same examples, for comparing two
trees side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# Whether the interpreters may cache compiled modules: with PYTHONDONTWRITEBYTECODE set (this machine's shell sets
# it; tox does not pass it on, so `tox -e gate` caches), every run compiles the project's modules and pytest
# rewrites the test modules' asserts again, ~1-2 s CPU of the gate.
BYTECODE = (
    "PYTHONDONTWRITEBYTECODE set: nothing compiled is cached"
    if os.environ.get("PYTHONDONTWRITEBYTECODE")
    else "compiled modules cached (__pycache__), as under tox"
)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(engine: str, seed: int | None) -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="falsify-gate-bench-") as out:
        cmd = [sys.executable, "-m", "falsify.cli", "gate", "--engine", engine, "--out", out]
        if seed is not None:
            cmd += ["--", f"--hypothesis-seed={seed}"]
        load_before = os.getloadavg()
        cpu, wall = children_cpu(), time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall, cpu = time.monotonic() - wall, children_cpu() - cpu
        load_after = os.getloadavg()
    verdict = next(
        (line for line in proc.stdout.splitlines() if line.startswith(("gate: PASS", "gate: FAIL"))), ""
    )
    drawn = next((line for line in proc.stdout.splitlines() if line.startswith("gate: hypothesis")), "")
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "verdict": verdict if proc.returncode == 0 else (proc.stdout + proc.stderr)[-2000:],
        "hypothesis": drawn,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--engine", default="reference")
    parser.add_argument("--seed", type=int, help="every repeat draws the examples of this hypothesis seed")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    runs = [one_run(args.engine, args.seed) for _ in range(args.repeats)]
    for i, run in enumerate(runs, 1):
        print(
            f"gate run {i}: exit {run['exit']}, {run['wall_s']} s wall, {run['cpu_s']} s CPU (user + system), "
            f"load average {run['load_before'][0]} before, {run['load_after'][0]} after (1-minute)"
        )
        if run["hypothesis"]:
            print(f"  {run['hypothesis']}")
    cpus = sorted(float(r["cpu_s"]) for r in runs)
    walls = sorted(float(r["wall_s"]) for r in runs)
    loads = sorted(float(r["load_before"][0]) for r in runs)
    mid = len(runs) // 2
    print(
        f"gate: median {cpus[mid]} s CPU, {walls[mid]} s wall over {len(runs)} run(s), 1-minute load "
        f"{loads[0]}-{loads[-1]}; {BYTECODE}; budget 15 s CPU (issue #28)"
    )
    if args.out:
        data = {"engine": args.engine, "bytecode": BYTECODE, "seed": args.seed, "runs": runs}
        args.out.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
