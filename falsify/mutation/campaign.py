"""`falsify campaign`: the falsifiers of chosen predictions under the `thorough` hypothesis profile (1,000 examples
per test), sharded by prediction and seed, each shard a pytest run, run by an executor (falsify/mutation/
executors.py: local threads or Ray tasks over a project snapshot) and merged into one table.

A shard is (prediction, seed): the tests bound to that prediction, run with `--hypothesis-seed=SEED`. A shard's
outcome is its prediction's outcome in that run (per_prediction, the gate's rules: a skip is not a pass). A failing
shard prints hypothesis' falsifying example and its `@reproduce_failure` blob: paste it above the test to replay.

Exit codes: 0 every shard passed, 1 a shard failed or errored, 2 bad usage or nothing to run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from falsify.contracts.lint import EXIT_EMPTY
from falsify.engines.loading import check_engine, engine_forms, resolve_engine
from falsify.harness.command import falsifier_args
from falsify.harness.gate import lint_project
from falsify.harness.pytest_runs import run_pytest_timed
from falsify.harness.results import Outcome, per_prediction
from falsify.mutation import executors
from falsify.project import find_project
from falsify.subcommand import MAX_SEEDS, jobs, seconds, whole_number
from falsify.table import table

HELP = "run chosen predictions' falsifiers under the thorough profile, sharded by prediction and seed"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "campaign",
        help=HELP,
        description=HELP,
        epilog="exit codes: 0 every shard passed, 1 a shard failed or errored, 2 bad usage or nothing to run",
    )
    p.add_argument(
        "predictions", nargs="*", help="prediction ids (default: every prediction with a bound test)"
    )
    p.add_argument(
        "--seeds",
        type=whole_number(1, MAX_SEEDS),
        default=2,
        help=f"shards per prediction, seeds 0..N-1, 1 to {MAX_SEEDS} (default 2)",
    )
    p.add_argument("--engine", default=None, help=engine_forms())
    p.add_argument(
        "--executor", choices=executors.EXECUTORS, default=os.environ.get("FALSIFY_EXECUTOR", "local")
    )
    p.add_argument(
        "--address", default=os.environ.get("RAY_ADDRESS"), help="with --executor ray: the cluster"
    )
    p.add_argument("-j", "--jobs", type=jobs, default=0, help="local shards at once (default: one per core)")
    p.add_argument(
        "--timeout",
        type=seconds(zero_is_none=False),
        default=1800.0,
        help="seconds per shard (default 1800): then TIMEOUT",
    )
    p.add_argument(
        "--profile", default="thorough", help="hypothesis profile of every shard (default thorough)"
    )


def run_shard(
    root: Path,
    engine: str,
    profile: str,
    pid: str,
    nodeids: list[str],
    seed: int,
    timeout: float,
) -> dict[str, Any]:
    """One shard in the project at `root` (the checkout, or a Ray worker's unpacked snapshot)."""
    # The project as the shard sees it (the checkout or a worker's snapshot): its contracts and its packs', as the
    # gate reads them; a pack's prediction is judged like the project's own.
    project = find_project(root)
    corpus, _ = lint_project(project)
    with tempfile.TemporaryDirectory(prefix="falsify-campaign-") as tmp:
        results = Path(tmp) / "results.json"
        argv = falsifier_args(
            nodeids,
            contracts=project.contracts,
            results=results,
            engine=engine,
            extra=[f"--hypothesis-seed={seed}", "--tb=short"],
        )
        env = {**os.environ, "HYPOTHESIS_PROFILE": profile}
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", *argv],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"prediction": pid, "seed": seed, "outcome": "TIMEOUT", "detail": f"past {timeout:.0f} s"}
        data = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else None
    if data is None:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        return {
            "prediction": pid,
            "seed": seed,
            "outcome": "ERROR",
            "detail": f"no results; pytest said:\n{tail}",
        }
    row = next((r for r in per_prediction(corpus, data) if r.id == pid), None)
    outcome = row.outcome.value if row else Outcome.NOT_RUN.value
    detail = row.detail if row else "not run"
    if outcome in (Outcome.FAIL.value, Outcome.ERROR.value):
        keep = [
            line
            for line in proc.stdout.splitlines()
            if "Falsifying example" in line or "reproduce_failure" in line or line.startswith(("E ", "    "))
        ]
        detail = detail + "\n" + "\n".join(keep[-40:])
    return {"prediction": pid, "seed": seed, "outcome": outcome, "detail": detail}


def run(args: argparse.Namespace) -> int:
    project = find_project()
    corpus, problems = lint_project(project)
    if problems:
        print("\n".join(problems))
        print(f"campaign: FAIL — lint found {len(problems)} error(s); nothing was run")
        return 1
    if args.seeds < 1:
        print("campaign: --seeds must be >= 1", file=sys.stderr)
        return 2
    engine = resolve_engine(args.engine, project.engine, f"[tool.falsify] in {project.pyproject}")
    check_engine(engine, project.import_roots)
    unknown = sorted(set(args.predictions) - set(corpus.predictions))
    if unknown:
        print(f"campaign: no prediction {', '.join(unknown)} in {project.contracts}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="falsify-campaign-") as tmp:
        collected = Path(tmp) / "collected.json"
        run_pytest_timed(project, collected, [], engine=engine, collect_only=True, quiet=True)
        data = json.loads(collected.read_text(encoding="utf-8")) if collected.is_file() else {}
    bound: dict[str, list[str]] = {}
    for c in data.get("collected", []):
        for pid in c["predictions"]:
            bound.setdefault(pid, []).append(c["nodeid"])
    wanted = args.predictions or sorted(bound)
    shards = [(pid, seed) for pid in wanted if pid in bound for seed in range(args.seeds)]
    if not shards:
        print("campaign: no falsifier bound to the chosen predictions (nothing run is never a pass)")
        return EXIT_EMPTY
    print(
        f"campaign: {len(shards)} shards ({len({p for p, _ in shards})} predictions x {args.seeds} seeds), "
        f"profile {args.profile}, engine {engine!r}, executor {args.executor}",
        flush=True,
    )
    tasks = [(engine, args.profile, pid, bound[pid], seed, args.timeout) for pid, seed in shards]
    rows = []
    for done, result in enumerate(
        executors.run_tasks(
            run_shard, tasks, project.root, args.executor, args.address, args.jobs, project.copy_exclude
        ),
        1,
    ):
        rows.append(result)
        print(
            f"campaign: [{done}/{len(tasks)}] {result['prediction']} seed {result['seed']}: {result['outcome']}"
        )
    rows.sort(key=lambda r: (r["prediction"], r["seed"]))
    print()
    print(
        table(
            ["prediction", "seed", "outcome"], [[r["prediction"], str(r["seed"]), r["outcome"]] for r in rows]
        )
    )
    bad = [r for r in rows if r["outcome"] != Outcome.PASS.value]
    for r in bad:
        print(f"\n{r['prediction']} seed {r['seed']}: {r['outcome']}\n{r['detail']}")
    passed = len(rows) - len(bad)
    verdict = "PASS" if not bad else "FAIL"
    print(f"\ncampaign: {verdict} — {len(rows)} shards: {passed} passed, {len(bad)} not passed")
    return 0 if not bad else 1
