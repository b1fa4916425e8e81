"""`falsify mutmut`: operator-level mutants (mutmut 3) over [tool.falsify.mutmut] paths, in a scratch copy.

The files mutated are [tool.falsify.mutmut] paths, by default the .py files of [tool.falsify] sources (the
engine's). The run has a kill-rate floor and a reviewed baseline of survivors that may only shrink.

mutmut works in ./mutants/, the directory our semantic mutants live in, so it never runs in the working tree: the
project is copied to a scratch directory, our mutants/ moved aside (into mutmut's directory, where the copied
pyproject.toml finds it), the rest of the project copied into mutmut's directory beside the mutated sources (so the
tests run as in the project: a root conftest.py, pytest.ini, data), and mutmut configured there through setup.cfg.
Each pytest run mutmut makes loads engine_probe.py: an engine that cannot load (under a mutant, or mutmut's
forced-failure check) fails the run, where the falsify plugin would stop pytest with a usage error, which mutmut
cannot run past. When pytest cannot run the tests at all, falsify shows pytest's own output (mutmut run again with
debug = true). mutmut exits 0 with survivors, so the verdict comes from its per-file .meta results. A survivor is a
mutant that survived, or that no selected test covers. The run fails when the kill rate of the non-equivalent
mutants is below `kill_rate_floor`, or when a survivor is not in the baseline file: its [[equivalent]] entries (each
with the reviewer's reason) leave the kill rate's denominator, its [[survivor]] entries are the survivors known so
far. An entry matches a mutant of the same function with the same original and mutated line (mutmut renumbers a
function's mutants when it changes, and lines move). Every survivor is listed by file:line with the original and
mutated line.

Configuration, [tool.falsify.mutmut] in pyproject.toml (all optional):
    kill_rate_floor = 90.0    # percent of the non-equivalent mutants that must be killed (or time out)
    baseline = "mutmut-baseline.toml"   # reviewed [[equivalent]] and [[survivor]] entries; absent: none
    paths = ["reference/session.py", ...]   # files mutated (default: the .py files of [tool.falsify] sources)
    tests = ["tests/test_session_unit.py", ...]   # the tests mutmut runs (default: the tests directory)
    timeout = 1500            # seconds for the whole mutmut run
    pytest_args = ["-k", "not slow"]   # added to each pytest run mutmut makes
    timeout_multiplier = 4    # a mutant's run stops after (its tests' time + timeout_constant) x this
    timeout_constant = 10     # seconds

A whole run does not run the mutants the baseline lists (as equivalent or as known survivors): mutmut generates
its mutants, each is located and matched against the baseline first, and only the others run. The listed ones
count as surviving (status "listed (not run)"; in the Stryker report a listed survivor is Survived and an
equivalent one Ignored, as when they run), so the kill rate is the one they would give surviving as listed; a
listed survivor that tests added since would now kill is found by `--recheck` or `--run-listed`, not by a whole
run. `--run-listed` runs them too; `--write-baseline` always does.

`--recheck` runs only the mutants the baseline lists as survivors (after tests were added); with
`--write-baseline` it drops the ones now killed.

`--sample K/N` runs only the K-th of N samples of a whole run's mutants, each mutant's sample being the CRC-32
of its mutmut name mod N (so the N samples partition the mutants, and a mutant keeps its sample while its
function is unchanged). Every mutant is still generated and located, so a baseline entry whose mutant is gone is
still reported; those outside the sample are "not in the sample (not run)" (Stryker: Ignored) and leave every
count but the total. The kill-rate floor is applied to the sample's rate, and the verdict says it is a sample's.
CI uses it where the whole run does not fit its time (.ci/run).

`--executor local|ray` runs the same mutants in shards of whole functions through the executor seam (threads here,
or a Ray cluster's warm workers at --address), with the same report; without it, mutmut's own -j children.

`--judge contracts` judges mutmut's mutants by the contract gate alone, not the unit suite: every file of
[tool.falsify.mutmut-contracts] paths (servers included), each mutant through `falsify gate` on the engines of its
file's group, the servers started by the gate running the mutant (contracts.py); `--draw N --seed S` judges N drawn
at random from each group. Its report adds contracts.json (each mutant's judging gate, per-group counts).

Exit codes: 0 the kill rate is at or above the floor and every survivor is listed in the baseline; 1 below the
floor, or a survivor the baseline does not list; 2 mutmut missing, bad configuration or baseline, no project,
or mutmut could not run; 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
from pathlib import Path

from falsify.mutation import stryker
from falsify.mutation.executors import EXECUTORS, sigterm_interrupts
from falsify.mutation.mutmut.config import (
    MutmutConfig,
    MutmutError,
    MutmutRun,
    read_baseline,
    read_config,
    render_baseline,
)
from falsify.mutation.mutmut.contracts import per_group_counts, read_contracts_config, run_contracts
from falsify.mutation.mutmut.report import render_survivors, to_stryker, verdict
from falsify.mutation.mutmut.running import run_mutmut
from falsify.mutation.mutmut.sharded import run_sharded
from falsify.project import Project, find_project
from falsify.subcommand import add_subcommand, jobs, seconds
from falsify.untrusted import safefile

# The command; its parts: config.py (configuration, run records, baseline), running.py, sharded.py (--executor),
# report.py.
HELP = "run mutmut over the engine's sources in a scratch copy; fail below the kill-rate floor or on an unlisted survivor"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "mutmut", HELP, __doc__)
    p.add_argument(
        "--since", metavar="REF", help="mutate only functions changed since this git ref (pull requests)"
    )
    p.add_argument("-j", "--jobs", type=jobs, default=0, help="mutmut workers (default: one per core)")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="run the mutants in shards through an executor: local threads or a Ray cluster (default: mutmut's "
        "own -j children on this machine); the report is the same",
    )
    p.add_argument(
        "--address",
        default=os.environ.get("RAY_ADDRESS"),
        help="with --executor ray: the cluster, auto or HOST:PORT (default: RAY_ADDRESS, else auto)",
    )
    p.add_argument(
        "--kill-rate-floor", type=float, help="override [tool.falsify.mutmut] kill_rate_floor (percent)"
    )
    p.add_argument(
        "--write-baseline",
        action="store_true",
        help="rewrite the baseline file's [[survivor]] list from this run (review the diff: it may only shrink)",
    )
    p.add_argument(
        "--recheck",
        action="store_true",
        help="run only the baseline's [[survivor]] mutants (after adding tests; with --write-baseline, drop "
        "the ones now killed)",
    )
    p.add_argument(
        "--run-listed",
        action="store_true",
        help="also run the mutants the baseline lists (equivalent and known survivors); a whole run leaves them "
        "out and counts them as surviving",
    )
    p.add_argument(
        "--timeout", type=seconds(zero_is_none=False), help="override [tool.falsify.mutmut] timeout (seconds)"
    )
    p.add_argument(
        "--sample",
        type=sample_spec,
        metavar="K/N",
        help="run only sample K of N of a whole run's mutants, drawn by a hash of each mutant's name (the N "
        "samples partition them); the others are reported as not in the sample, not run",
    )
    p.add_argument(
        "--judge",
        choices=("unit", "contracts"),
        default="unit",
        help="who judges the mutants: the unit suite ([tool.falsify.mutmut], mutmut's own runner) or the contract "
        "gate alone ([tool.falsify.mutmut-contracts]: each mutant through `falsify gate` on its file's engines, "
        "servers included; contracts.py)",
    )
    p.add_argument(
        "--draw",
        type=int,
        metavar="N",
        help="with --judge contracts: judge N mutants drawn at random from each group (default: all)",
    )
    p.add_argument("--seed", type=int, default=0, help="with --draw: the random draw's seed (default 0)")
    stryker.add_out_option(p, Path(".falsify/mutmut"))


def sample_spec(text: str) -> tuple[int, int]:
    """--sample K/N: integers with 1 <= K <= N (argparse turns the ValueError into a one-line usage error)."""
    k, slash, n = text.partition("/")
    if not (slash and k.strip().isdigit() and n.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"expected K/N, two whole numbers such as 1/4, got {text!r}")
    pair = int(k), int(n)
    if not 1 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"K/N needs 1 <= K <= N, got {text!r}")
    return pair


def run(args: argparse.Namespace) -> int:
    from falsify.mutation.executors import available_cores

    if shutil.which("git") is None and args.since:
        raise MutmutError("--since needs git on PATH")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise MutmutError("mutmut is not installed: pip install 'mutmut>=3'") from None
    project = find_project()
    if args.judge == "contracts":
        return run_judged_by_contracts(project, args)
    if args.draw is not None:
        raise MutmutError("--draw is for --judge contracts (the unit judge draws with --sample K/N)")
    config = with_floor(read_config(project), args.kill_rate_floor)
    if args.write_baseline and args.since:
        raise MutmutError("--write-baseline needs a whole run or --recheck, not --since")
    if args.recheck and args.since:
        raise MutmutError("--recheck and --since each pick the mutants: give one")
    if args.run_listed and (args.recheck or args.since):
        raise MutmutError("--run-listed is for a whole run; --recheck and --since pick their own mutants")
    if args.sample and (args.since or args.recheck or args.write_baseline or args.executor):
        raise MutmutError(
            "--sample draws from a whole run on mutmut's own children: not with --since, --recheck, "
            "--write-baseline or --executor"
        )
    baseline = read_baseline(project, config)
    if args.timeout is not None:
        if args.timeout <= 0:
            raise MutmutError(f"--timeout must be > 0, got {args.timeout}")
        config = dataclasses.replace(config, timeout=args.timeout)
    jobs = args.jobs or available_cores()

    def say(line: str) -> None:
        print(line, flush=True)

    # A whole run leaves out the mutants the baseline lists, unless asked, or unless it writes the baseline (which
    # must see the listed survivors killed to drop them).
    skip_listed = None if args.run_listed or args.write_baseline else baseline

    def in_shards(run: MutmutRun) -> MutmutRun:
        return run_sharded(
            project,
            config,
            run,
            executor=args.executor,
            address=args.address,
            jobs=jobs,
            progress=say,
            skip_listed=skip_listed,
        )

    with sigterm_interrupts():
        result = run_mutmut(
            project,
            config,
            since=args.since,
            jobs=jobs,
            progress=say,
            recheck=baseline if args.recheck else None,
            in_shards=in_shards if args.executor else None,
            skip_listed=skip_listed,
            sample=args.sample,
        )
    result.baseline = baseline
    if (args.since or args.recheck) and not result.patterns:
        return 0
    if result.survivors:
        print()
        print(render_survivors(result))
    stale = result.stale()
    if stale:
        print()
        print(
            f"mutmut: {len(stale)} entries of {baseline.path} this run does not bear out (remove or review them):"
        )
        for why, e in stale:
            print(f"  {e.where or '?'} {e.mutant}: {why}")
    out = args.out if args.out.is_absolute() else project.root / args.out
    json_path, html_path = stryker.write_report(
        to_stryker(result, project.root), out, "falsify mutmut: operator mutants"
    )
    summary, ok = verdict(result)
    print()
    print(summary)
    print(f"mutmut: report in {json_path} and {html_path}")
    if args.write_baseline:
        path = project.root / config.baseline
        safefile.replace(path, render_baseline(result, baseline).encode(), what="mutmut baseline")
        listed = len(read_baseline(project, config).survivors)
        print(
            f"mutmut: wrote {path} ({len(baseline.equivalent)} equivalent, {listed} survivors); review the diff"
        )
    return 0 if ok else 1


def with_floor(config: MutmutConfig, floor: float | None) -> MutmutConfig:
    """CONFIG with --kill-rate-floor's FLOOR in place of its own, when given (a percentage in [0, 100])."""
    if floor is None:
        return config
    if not 0 <= floor <= 100:
        raise MutmutError(f"--kill-rate-floor must be a percentage in [0, 100], got {floor}")
    return dataclasses.replace(config, kill_rate_floor=floor)


def run_judged_by_contracts(project: Project, args: argparse.Namespace) -> int:
    """`falsify mutmut --judge contracts`: contracts.py's run, reported as a mutmut run is, with each mutant's
    judging gate and the per-group counts in contracts.json beside the Stryker report."""
    from falsify.mutation.executors import available_cores

    extra = [
        opt
        for opt, given in (
            ("--since", args.since),
            ("--recheck", args.recheck),
            ("--executor", args.executor),
            ("--sample", args.sample),
            ("--write-baseline", args.write_baseline),
        )
        if given
    ]
    if extra:
        raise MutmutError(f"--judge contracts does not take {', '.join(extra)} (it draws with --draw N)")
    if args.draw is not None and args.draw < 1:
        raise MutmutError(f"--draw must be >= 1, got {args.draw}")
    config = read_contracts_config(project)
    config = dataclasses.replace(config, mutmut=with_floor(config.mutmut, args.kill_rate_floor))
    if args.timeout is not None:
        config = dataclasses.replace(config, gate_timeout=args.timeout)
    baseline = read_baseline(project, config.mutmut)
    with sigterm_interrupts():
        result, judgements = run_contracts(
            project,
            config,
            per_group=args.draw,
            seed=args.seed,
            jobs=args.jobs or available_cores(),
            progress=lambda line: print(line, flush=True),
        )
    result.baseline = baseline
    if result.survivors:
        print()
        print(render_survivors(result))
    out = args.out if args.out.is_absolute() else project.root / args.out
    json_path, html_path = stryker.write_report(
        to_stryker(result, project.root),
        out,
        "falsify mutmut --judge contracts: operator mutants, contract gate",
    )
    details = {
        "draw": args.draw,
        "seed": args.seed,
        "groups": per_group_counts(result, config),
        "mutants": {
            m.name: {
                "file": m.file,
                "line": m.line,
                "original": m.original,
                "mutated": m.mutated,
                **dataclasses.asdict(judgements[m.name]),
            }
            for m in result.mutants
            if m.name in judgements
        },
    }
    safefile.replace(
        out / "contracts.json", json.dumps(details, indent=1).encode(), what="contracts judgement"
    )
    summary, ok = verdict(result)
    print()
    for name, counts in details["groups"].items():
        print(f"mutmut contracts: group {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(summary.replace("mutmut:", "mutmut --judge contracts:", 1))
    print(f"mutmut: report in {json_path}, {html_path} and {out / 'contracts.json'}")
    return 0 if ok else 1
