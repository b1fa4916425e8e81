"""`falsify mutants`: apply each semantic mutant in a scratch copy; every one must be killed.

A mutant counts as killed only when every prediction its file lists in `kills` turned red (the kill list is
enforced; `--lenient` accepts a kill by any of them). The run also says which predictions it proved able to fail:
PROVEN (some mutant turned it red), UNPROVEN (none did), with the contracts' reviewed `unproven_because:`.

Exit codes: 0 every mutant killed by its whole kill list or timed out, and not every one timed out; 1 a mutant
SURVIVED, is STALE or ERROR, was killed by only part of its kill list (unless --lenient), no mutant was killed (a
timeout is not a kill), the control is red, or lint failed; 2 no mutant to run, a mutant file no run could get
past (a regex that does not compile or cannot be searched in bounded time, a build line that does not split or
names no program, a replacement that is no statement, a target that is not UTF-8 text or is too large), no
project, or an engine that cannot be loaded; 130 interrupted (the scratch copies are gone, the working tree
untouched).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from falsify.contracts.corpus import Corpus
from falsify.contracts.lint import EXIT_EMPTY
from falsify.contracts.packs import pack_dir
from falsify.engines.loading import check_engine, engine_forms, resolve_engine
from falsify.errors import FalsifyError, Problem
from falsify.harness.results import Outcome, load_results, per_prediction
from falsify.mutation import stryker
from falsify.mutation.executors import EXECUTORS, sigterm_interrupts
from falsify.mutation.semantic import report
from falsify.mutation.semantic.boundary import MODES as BOUNDARY_MODES
from falsify.mutation.semantic.boundary import OP as BOUNDARY_OP
from falsify.mutation.semantic.boundary import boundary_mutants
from falsify.mutation.semantic.matching import field_line
from falsify.mutation.semantic.runner import SCOPES, Run, Runner, Settings, load
from falsify.mutation.semantic.spec import preflight
from falsify.project import Project, find_project
from falsify.subcommand import add_subcommand, jobs, seconds

HELP = "apply each semantic mutant in a scratch copy; every one must be killed"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "mutants", HELP, __doc__)
    p.add_argument("ids", nargs="*", help="mutant ids to run (default: every file in the mutants directory)")
    p.add_argument(
        "--pack",
        action="append",
        default=[],
        metavar="NAME",
        help="also use the built-in contract pack NAME, as `gate --pack` does (repeatable; `falsify packs` lists them)",
    )
    p.add_argument(
        "--engine",
        help=engine_forms(),
    )
    p.add_argument(
        "--scope",
        choices=SCOPES,
        default="kills",
        help="falsifiers run per mutant: those bound to its `kills` predictions (default), every "
        "falsifier of those predictions' contracts, or all",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="run every selected falsifier even once all of `kills` is red (a complete kill matrix)",
    )
    p.add_argument("-j", "--jobs", type=jobs, default=0, help="mutants run at once (default: one per core)")
    p.add_argument(
        "--timeout",
        type=seconds(zero_is_none=False),
        help="seconds per mutant (default: 60, or 5x the control run)",
    )
    p.add_argument("--diff", action="store_true", help="print each mutant's diff")
    p.add_argument(
        "--boundary",
        choices=BOUNDARY_MODES,
        default="auto",
        help="boundary mutants (falsify's wrappers around the engine, docs/mutants.md): auto (default) for the "
        "applicable pack predictions no mutant of yours lists, all for every pack prediction they kill, none",
    )
    p.add_argument(
        "--fresh-control",
        action="store_true",
        help="run the control even when a green one of the same tree, engine and versions is stored "
        "(.falsify/control/)",
    )
    p.add_argument(
        "--no-forkserver",
        dest="forkserver",
        action="store_false",
        help="start a new interpreter per pytest run instead of forking from a warm one",
    )
    p.add_argument(
        "--lenient",
        action="store_true",
        help="accept a mutant killed by only part of its `kills` list (by default every listed prediction "
        "must turn red)",
    )
    # The kill list used to be enforced only with --strict; it is the default now, and --strict is accepted
    # so that old command lines keep working.
    p.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=os.environ.get("FALSIFY_EXECUTOR", "local"),
        help="where mutant runs execute: local threads (default) or one Ray task each (FALSIFY_EXECUTOR)",
    )
    p.add_argument(
        "--address",
        default=os.environ.get("RAY_ADDRESS"),
        help="with --executor ray: the cluster, auto or HOST:PORT (default: RAY_ADDRESS, else auto)",
    )
    stryker.add_out_option(p, Path(".falsify/mutants"))


GATE_RESULTS = Path(".falsify/gate/results.json")  # the latest `falsify gate` run's (its default --out)


def not_applicable(project: Project, corpus: Corpus, engine: str, run: Run) -> list[str]:
    """Predictions NOT APPLICABLE to this engine, counted apart from proven and UNPROVEN (issue #46): as the
    control run found them, and, for those the control did not run (no mutant lists them), as the latest
    `falsify gate` on the same engine found them (.falsify/gate/results.json). A gate run on another engine, or
    none, says nothing: those predictions stay UNPROVEN."""
    found = {r.id: r.outcome for r in (run.control.rows if run.control else [])}
    path = project.root / GATE_RESULTS
    if path.is_file():
        try:
            gate = load_results(path)
        except FalsifyError:  # a results file that cannot be read judges nothing here
            gate = {}
        if gate.get("engine") == engine:
            for r in per_prediction(corpus, gate):
                found.setdefault(r.id, r.outcome)
    shown = report.cannot_show(run)  # counted as CANNOT SHOW, by its mutants' rows
    return [pid for pid, outcome in found.items() if outcome is Outcome.NOT_APPLICABLE and pid not in shown]


def run(args: argparse.Namespace) -> int:
    project = find_project()
    if (
        args.pack
    ):  # run with the project's packs, as `gate --pack` does: its mutants may kill their predictions
        for name in args.pack:
            pack_dir(name)  # an unknown name is a PackError (exit 2) naming the installed ones
        project = replace(project, packs=tuple(dict.fromkeys([*project.packs, *args.pack])))
    project, corpus, problems = load(project)
    if problems:
        print("\n".join(problems))
        print(f"mutants: FAIL — lint found {len(problems)} error(s); no mutant was run")
        return 1
    engine = resolve_engine(args.engine, project.engine, f"[tool.falsify] in {project.pyproject}")
    made = check_engine(engine, project.import_roots)  # a usage error (exit 2) before any copy is made
    boundary, left_out = boundary_mutants(corpus, made, args.boundary)
    for line in left_out:
        print(f"mutants: {line}")
    mutants = [*corpus.mutants, *boundary]
    if args.ids:
        unknown = sorted(set(args.ids) - {m.id for m in mutants})
        if unknown:
            print(f"mutants: no mutant {', '.join(unknown)} in {project.mutants}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.id in args.ids]
    if not mutants:
        print(
            f"mutants: no mutant found in {project.mutants}, and no boundary mutant for a pack prediction "
            "(an empty set is never a pass)"
        )
        return EXIT_EMPTY
    if boundary:
        print(
            f"mutants: {len(boundary)} boundary mutant(s) for pack predictions no mutant of yours lists "
            f"(--boundary {args.boundary}): {', '.join(m.id for m in boundary)}"
        )
    # What no run could get past (a regex re refuses, a build line no shell splits, a binary target...): named
    # per field now, not an ERROR row or a traceback after the control has run.
    refused = [
        Problem(m.path, field_line(m, field), field, message, "mutant-spec")
        for m in mutants
        if m.op != BOUNDARY_OP
        for field, message in preflight(m, project.root)
    ]
    if refused:
        print("\n".join(map(str, refused)))
        print(f"mutants: {len(refused)} problem(s) in the mutant files; no mutant was run")
        return 2
    settings = Settings(
        engine=engine,
        jobs=args.jobs,
        scope=args.scope,
        full=args.full,
        timeout=args.timeout,
        forkserver=args.forkserver,
        executor=args.executor,
        address=args.address,
        reuse_control=not args.fresh_control,
    )
    with sigterm_interrupts():
        result = Runner(project, corpus, settings, progress=lambda line: print(line, flush=True)).run(mutants)
    if result.control is not None and not result.control.ok:
        print(result.control.detail)
        print(report.verdict(result)[0])
        return 1
    print()
    print(report.render_rows(result))
    print()
    print(report.kill_matrix(result))
    if args.diff:
        print()
        print(report.diffs(result.results))
    out = args.out if args.out.is_absolute() else project.root / args.out
    json_path, html_path = report.write(result, out)
    n_a = not_applicable(project, corpus, engine, result)
    summary, ok = report.verdict(result, lenient=args.lenient, not_applicable=n_a)
    print()
    print(report.proof_lines(result, n_a))
    print()
    print(summary)
    print(f"mutants: report in {json_path} and {html_path}")
    return 0 if ok else 1
