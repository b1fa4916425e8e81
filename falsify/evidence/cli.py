"""`falsify evidence --out DIR` and `falsify verify DIR`.

Exit codes: evidence 0 GO, 1 NO-GO (the bundle is written either way); verify 0 when every digest matches and the
bundle rebuilds byte for byte (with --require-go: and the re-derived verdict is GO), 1 otherwise; 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from falsify.contracts.corpus import load_corpus
from falsify.evidence import MUTATION_REPORT, REPORT_HTML, REPORT_MD, STATEMENTS
from falsify.evidence.collect import find_mutation_report, read_gate_dir, run_gate, run_mutants
from falsify.evidence.digests import scrub
from falsify.evidence.mutation import load_report
from falsify.evidence.statements import RunResults, build, environment, normalise_junit, normalise_results
from falsify.evidence.tree import DEFAULT_SOURCES, EvidenceError, Inputs, source_files, tree_digests
from falsify.evidence.verify import verify
from falsify.project import find_project

HELP = {
    "evidence": "write a release evidence bundle (in-toto statements, reports)",
    "verify": "recompute an evidence bundle's digests against this tree",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str | None = None) -> None:
    """Register `name` (evidence or verify). cli.main calls this for the command being run only, after the
    commands listed before it in COMMANDS (evidence before verify); without `name`, the first of the two not yet
    registered is the one being run."""
    if name is None:
        name = "evidence" if "evidence" not in sub.choices else "verify"
    if name == "verify":
        v = sub.add_parser("verify", help=HELP["verify"], description=HELP["verify"])
        v.add_argument("bundle", type=Path, help="the evidence directory")
        v.add_argument(
            "--require-go", action="store_true", help="also fail unless the re-derived verdict is GO"
        )
        return
    p = sub.add_parser("evidence", help=HELP["evidence"], description=HELP["evidence"])
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for the bundle (created; files in it with the bundle's names are replaced)",
    )
    p.add_argument("--engine", default="reference", help="reference (default), hf, or module:factory")
    p.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        help="use the results of a `falsify gate --out DIR` run "
        "(results.json, junit.xml; and mutation-report.json if present) instead of running the gate",
    )
    p.add_argument("--mutants-report", type=Path, help="Stryker mutation-testing-report JSON of a mutant run")
    p.add_argument(
        "--no-mutants",
        action="store_true",
        help="do not run the mutants; the bundle says so and the verdict is NO-GO when mutants are declared",
    )
    p.add_argument(
        "--sources",
        action="append",
        help="glob of engine source files, relative to the project root "
        f"(repeatable; default: {' '.join(DEFAULT_SOURCES)})",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest by the gate")


def run(args: argparse.Namespace) -> int:
    return run_evidence(args) if args.command == "evidence" else run_verify(args)


def generated_at() -> str:
    """The bundle's one time field: now, or SOURCE_DATE_EPOCH (reproducible-builds.org) when set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        try:
            seconds = int(epoch)
        except ValueError:
            raise EvidenceError(f"SOURCE_DATE_EPOCH={epoch!r} is not an integer") from None
    else:
        seconds = int(time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def run_evidence(args: argparse.Namespace) -> int:
    project = find_project()
    root = project.root
    here = Path.cwd()  # paths on the command line are relative to where it was typed
    out, from_dir, mutants_report = (
        None if p is None else p if p.is_absolute() else here / p
        for p in (args.out, args.from_dir, args.mutants_report)
    )
    assert out is not None
    os.chdir(root)  # contract file names and the mutant file check are relative to the project root
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    sources = tuple(args.sources) if args.sources else DEFAULT_SOURCES
    inputs = Inputs.of(project, args.engine, sources)
    if not source_files(root, sources):
        raise EvidenceError(f"no engine source file matches {' '.join(sources)} under {root} (see --sources)")
    before = tree_digests(root, inputs)
    if from_dir:
        results, junit = read_gate_dir(from_dir)
        gate_note = f"gate results read from {from_dir}"
    else:
        results, junit, code = run_gate(project, args.engine, extra, root / ".falsify" / "evidence-gate")
        gate_note = f"gate exited {code}"
    report, reason = None, ""
    found = find_mutation_report(from_dir) if from_dir else None
    if mutants_report:
        report = load_report(mutants_report)
    elif found:
        report = load_report(found)
    elif args.no_mutants:
        reason = "skipped with --no-mutants"
    elif from_dir:
        reason = f"no {MUTATION_REPORT} in the --from directory and no --mutants-report given"
    else:
        report, reason = run_mutants(project, args.engine, root / ".falsify" / "evidence-mutants")
    corpus = load_corpus([project.contracts] + ([project.mutants] if project.mutants.is_dir() else []))
    if corpus.problems:
        raise EvidenceError(
            "contracts do not lint; run `falsify lint` first:\n" + "\n".join(str(p) for p in corpus.problems)
        )
    run = RunResults(
        normalise_results(results, root, inputs.contracts),
        normalise_junit(junit, root),
        report,
        scrub(reason, root),
    )
    files = build(root, inputs, corpus, run, environment(), generated_at())
    changed = sorted(set(before.items()) ^ set(tree_digests(root, inputs).items()))
    if changed:  # the results would be claimed for a tree they were not obtained on
        names = sorted({name for name, _ in changed})
        raise EvidenceError(
            f"the tree changed while the gate and mutants ran: {', '.join(names)}; no bundle "
            "written (run again on a quiet tree)"
        )
    out.mkdir(parents=True, exist_ok=True)
    for stale in (MUTATION_REPORT,):
        if stale not in files and (out / stale).exists():
            (out / stale).unlink()
    for name, data in files.items():
        (out / name).write_bytes(data)
    verdict = json.loads(files[STATEMENTS].splitlines()[1])["predicate"]["verdict"]
    print(f"evidence: {gate_note}; bundle in {out}: {', '.join(sorted(files))}")
    if not report:
        print(f"evidence: mutants NOT RUN ({reason}); no mutant is counted as killed")
    print(f"evidence: {verdict['summary']}")
    for reason_line in verdict["reasons"]:
        print(f"evidence:   - {reason_line}")
    print(
        f"evidence: open {out / REPORT_HTML} or read {out / REPORT_MD}; check it with `falsify verify {out}`"
    )
    return 0 if verdict["decision"] == "GO" else 1


def run_verify(args: argparse.Namespace) -> int:
    project = find_project()
    bundle = args.bundle if args.bundle.is_absolute() else Path.cwd() / args.bundle
    os.chdir(project.root)
    if not bundle.is_dir():
        raise EvidenceError(f"{args.bundle}: no such directory")
    result = verify(bundle, project.root)
    verdict = result.verdict
    if result.problems:
        print(f"verify: FAIL — {len(result.problems)} problem(s) in {args.bundle} against {project.root}:")
        for p in result.problems:
            print(f"  {p}")
    else:
        print(
            f"verify: OK — {result.checked} digests match and the bundle rebuilds byte for byte from its results "
            "and this tree"
        )
    if verdict:
        print(f"verify: verdict re-derived from the bundle's results: {verdict['summary']}")
    if result.problems:
        return 1
    if args.require_go and (not verdict or verdict["decision"] != "GO"):
        print("verify: --require-go: the verdict is not GO")
        return 1
    return 0
