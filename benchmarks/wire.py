"""The serving pack over the wire against in process, side by side (issue #49): `falsify gate --pack serving` on the
reference engine in process (`--engine reference`) and over stdio (`--engine "exec:python -m reference.serve"`),
run by turns on the same hypothesis seed, restricted to the serving pack's falsifiers (`-k`), each run's wall time,
CPU time of the whole process tree (the gate, its pytest and the engine process) and the load average before and
after. It prints each pair and the medians of wall, CPU and the pairs' wall ratios (wire / in process; issue #49's
goal is <= 1.5). A figure, not a test: nothing here fails on time.

python benchmarks/wire.py [--pairs 2] [--seed N] [--engine-cmd "python -m reference.serve"] [--out FILE]

The first pair's order is in process first, the second's the other way, and so on, so that a trend in the machine's
load falls on both sides; one uncounted warm-up run each compiles the modules first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from gate import BYTECODE, median, one_run

ROOT = Path(__file__).resolve().parent.parent
# The serving pack's falsifier modules (falsify/packs/serving/falsifiers/): `-k` keeps the gate to them on both
# sides, so the project's own contracts, which only the in-process engine carries, are not run on either.
# The gate's verdict counts: the other contracts' predictions are NOT RUN under `-k` (so the gate exits 1), the
# serving pack's must pass, none may fail or be an error, and both sides must pass as many.
COUNTS = re.compile(r"\((?P<passed>\d+) pass, (?P<fail>\d+) fail, (?P<error>\d+) error")
SERVING = "test_cancel_contract or test_lanes_host or test_lanes_paths or test_prefill_steps or test_sampling_contract"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="interleaved pairs of runs (default 2)")
    parser.add_argument("--seed", type=int, help="the hypothesis seed of every run (default: one drawn)")
    parser.add_argument(
        "--engine-cmd", default=f"{sys.executable} -m reference.serve", help="the wire engine"
    )
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs: at least 1")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    sides = {"in process": "reference", "wire": f"exec:{args.engine_cmd}"}
    extra: dict[str, Any] = {"gate_args": ("--pack", "serving"), "pytest_args": ("-k", SERVING)}
    for engine in sides.values():
        one_run(engine, seed, **extra)  # warm-up, not counted
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for i in range(args.pairs):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            run = one_run(sides[name], seed, **extra)
            counts = COUNTS.search(run["verdict_line"])
            if counts is None or counts["fail"] != "0" or counts["error"] != "0":
                raise SystemExit(f"benchmarks/wire.py: the {name} gate failed:\n{run['verdict']}")
            run["passed"] = int(counts["passed"])
            runs[name].append(run)
        a, b = runs["in process"][-1], runs["wire"][-1]
        if a["passed"] != b["passed"]:
            raise SystemExit(
                f"benchmarks/wire.py: {a['passed']} predictions pass in process, {b['passed']} on the wire"
            )
        print(
            f"pair {i + 1}: in process {a['wall_s']} s wall, {a['cpu_s']} s CPU; wire {b['wall_s']} s wall, "
            f"{b['cpu_s']} s CPU; ratio {b['wall_s'] / a['wall_s']:.2f}; load {a['load_before'][0]}-{b['load_after'][0]}"
        )
    ratios = [w["wall_s"] / p["wall_s"] for p, w in zip(runs["in process"], runs["wire"], strict=True)]
    print(
        f"serving pack, {args.pairs} pair(s), seed {seed}: in process median {median([r['wall_s'] for r in runs['in process']])} s"
        f" wall, wire {median([r['wall_s'] for r in runs['wire']])} s wall; median ratio {median(ratios):.2f} "
        f"(goal <= 1.5); {BYTECODE}"
    )
    if args.out:
        args.out.write_text(
            json.dumps({"seed": seed, "runs": runs, "ratios": ratios}, indent=1), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
