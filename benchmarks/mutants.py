"""Time per semantic mutant: each mutant of mutants/ run alone (one worker), median over repeats. Target: <= 5 s.

The figure is the mutant's own falsifier run (scratch copy, pytest, the kills' tests until every listed
prediction is red), not the one-off control. Wall time and CPU time are both reported: the machine is shared, and
the CPU time is what the mutant itself cost.

python benchmarks/mutants.py [--repeats 3] [--ids ID ...] [--no-forkserver] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from measure import measured
from result_json import emit

from falsify.mutation.semantic.runner import MutantOutcome, Runner, Settings, load
from falsify.mutation.semantic.scratch import Scratch

TARGET_SECONDS = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--engine", default="reference")
    parser.add_argument(
        "--no-forkserver",
        dest="forkserver",
        action="store_false",
        help="a new interpreter per pytest run (for comparison)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    project, corpus, problems = load()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    mutants = [m for m in corpus.mutants if not args.ids or m.id in args.ids]
    runner = Runner(project, corpus, Settings(engine=args.engine, jobs=1), progress=lambda line: None)
    per: dict[str, dict[str, list[float]]] = {m.id: {"wall": [], "cpu": []} for m in mutants}
    outcomes: dict[str, str] = {}
    with measured() as total, Scratch(project.root) as scratch:
        forkserver = args.forkserver and scratch.start_forkserver()  # as `falsify mutants` runs them
        with measured() as control_cost:
            control = runner.control = runner.run_control(scratch, mutants)
        if not control.ok:
            print(control.detail, file=sys.stderr)
            return 1
        with measured() as mutants_cost:
            for _ in range(args.repeats):
                for m in mutants:
                    result = runner.run_mutant(scratch, m, timeout=max(120.0, 5 * control.seconds))
                    outcomes[m.id] = str(result.outcome)
                    per[m.id]["wall"].append(result.seconds)
                    if result.cpu is not None:
                        per[m.id]["cpu"].append(result.cpu)
    medians = {
        mid: {"wall": statistics.median(t["wall"]), "cpu": statistics.median(t["cpu"]) if t["cpu"] else None}
        for mid, t in per.items()
    }
    walls = [v["wall"] for v in medians.values() if v["wall"] is not None]
    cpus = [v["cpu"] for v in medians.values() if v["cpu"] is not None]
    summary = {
        "benchmark": "mutants",
        "mutants": len(mutants),
        "repeats": args.repeats,
        "control_seconds": control.seconds,
        # Wall, CPU and load: of the control alone, of every mutant run of every repeat, and of everything. Runs
        # forked from the forkserver are its children, not ours: their CPU is counted in `total` only (when the
        # forkserver exits), so with it the parts' cpu_s is None.
        "control": {**control_cost.figures(), **({"cpu_s": None} if forkserver else {})},
        "all_mutant_runs": {**mutants_cost.figures(), **({"cpu_s": None} if forkserver else {})},
        "total": total.figures(),
        "forkserver": forkserver,
        "per_mutant": {
            mid: {
                **medians[mid],
                "outcome": outcomes[mid],
                "wall_runs": per[mid]["wall"],
                "cpu_runs": per[mid]["cpu"],
            }
            for mid in per
        },
        "median_seconds": statistics.median(walls),
        "max_seconds": max(walls),
        "median_cpu_seconds": statistics.median(cpus) if cpus else None,
        "max_cpu_seconds": max(cpus) if cpus else None,
        "target_seconds": TARGET_SECONDS,
        "ratio_to_target": statistics.median(walls) / TARGET_SECONDS,
        "all_killed": all(o == MutantOutcome.KILLED for o in outcomes.values()),
        "cores": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],  # the machine is shared: read the wall figures against this
    }
    return emit(summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
