"""`falsify evidence --out DIR`, `falsify verify DIR`, `falsify keygen PATH` and `falsify sign DIR --key KEY`.

Exit codes: evidence 0 GO, 1 NO-GO (the bundle is written either way); verify 0 when every digest matches and the
bundle rebuilds byte for byte (with --require-go: and the re-derived verdict is GO; with --key: and every statement
carries a valid signature by that key), 1 otherwise; keygen and sign 0 done; every command 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from falsify.contracts.corpus import contract_dirs, load_corpus
from falsify.engines.loading import check_engine, engine_forms, resolve_engine
from falsify.evidence import (
    JUNIT,
    MATRIX,
    MUTATION_REPORT,
    MUTMUT_REPORT,
    REPORT_HTML,
    REPORT_MD,
    RESULTS,
    SIGNATURES,
    STATEMENTS,
)
from falsify.evidence.collect import find_mutation_report, read_gate_dir, run_gate, run_mutants, same_engine
from falsify.evidence.digests import scrub
from falsify.evidence.mutation import load_report
from falsify.evidence.render import FIGURE_TITLES
from falsify.evidence.sign import check_envelopes, keygen, load_private_key, load_public_key, sign_bundle
from falsify.evidence.statements import (
    RunResults,
    build,
    environment,
    git_source,
    normalise_junit,
    normalise_results,
)
from falsify.evidence.tree import DEFAULT_SOURCES, EvidenceError, Inputs, source_files, tree_digests
from falsify.evidence.verify import MAX_JSON_BYTES, verify
from falsify.harness.proven import report_engine
from falsify.project import find_project
from falsify.untrusted import boundedjson, safefile

HELP = {
    "evidence": "write a release evidence bundle (in-toto statements, reports)",
    "verify": "recompute an evidence bundle's digests against this tree",
    "keygen": "write a new Ed25519 key pair for signing evidence (PATH and PATH.pub)",
    "sign": "sign an evidence bundle's statements (DSSE envelopes, Ed25519)",
}
EXITS = {
    "evidence": "exit codes: 0 the bundle is written and its verdict is GO; 1 written, with a NO-GO verdict; 2 bad "
    "usage or input (no project, no engine source, the gate wrote no results, the tree changed during the run)",
    "verify": "exit codes: 0 every digest matches and the bundle rebuilds from its results (and, with --require-go, "
    "its verdict is GO; with --key, every signature verifies); 1 a problem found, or not GO under --require-go; "
    "2 bad usage, or no such bundle or key",
    "keygen": "exit codes: 0 the key pair is written; 2 bad usage, or a key file already exists (never overwritten)",
    "sign": "exit codes: 0 every statement is signed (evidence.dsse.jsonl written); 2 bad usage, no such bundle, "
    "or a key that cannot be read",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str | None = None) -> None:
    """Register `name` (evidence or verify). cli.main calls this for the command being run only, after the
    commands listed before it in COMMANDS (evidence before verify); without `name`, the first of the two not yet
    registered is the one being run."""
    if name is None:
        name = next(n for n in HELP if n not in sub.choices)
    if name == "verify":
        v = sub.add_parser("verify", help=HELP["verify"], description=HELP["verify"], epilog=EXITS["verify"])
        v.add_argument("bundle", type=Path, help="the evidence directory")
        v.add_argument(
            "--require-go", action="store_true", help="also fail unless the re-derived verdict is GO"
        )
        v.add_argument(
            "--key",
            type=Path,
            help="Ed25519 public key (PEM): also fail unless every statement is signed by it (evidence.dsse.jsonl)",
        )
        return
    if name == "keygen":
        k = sub.add_parser("keygen", help=HELP["keygen"], description=HELP["keygen"], epilog=EXITS["keygen"])
        k.add_argument("path", help="the private key's file (written mode 0600; never overwritten)")
        return
    if name == "sign":
        g = sub.add_parser("sign", help=HELP["sign"], description=HELP["sign"], epilog=EXITS["sign"])
        g.add_argument("bundle", type=Path, help="the evidence directory")
        g.add_argument("--key", type=Path, required=True, help="Ed25519 private key (PEM, PKCS#8)")
        return
    p = sub.add_parser(
        "evidence", help=HELP["evidence"], description=HELP["evidence"], epilog=EXITS["evidence"]
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for the bundle (created; files in it with the bundle's names are replaced)",
    )
    p.add_argument(
        "--engine",
        help=engine_forms(),
    )
    p.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        help="use the results of a `falsify gate --out DIR` run "
        "(results.json, junit.xml; and mutation-report.json if present) instead of running the gate",
    )
    p.add_argument("--mutants-report", type=Path, help="Stryker mutation-testing-report JSON of a mutant run")
    p.add_argument(
        "--mutmut-report",
        type=Path,
        help="Stryker report of a `falsify mutmut` run (e.g. .falsify/mutmut/mutation-report.json) to include",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        help="matrix.json of a `falsify matrix` run (predictions x engines) to include and show",
    )
    p.add_argument(
        "--no-mutants",
        action="store_true",
        help="do not run the mutants; the bundle says so and the verdict is NO-GO when mutants are declared",
    )
    p.add_argument(
        "--sources",
        action="append",
        help="glob of engine source files, relative to the project root "
        f"(repeatable; default: sources in [tool.falsify], else {' '.join(DEFAULT_SOURCES)})",
    )
    p.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help="Ed25519 private key (PEM): wrap each statement in a signed DSSE envelope (evidence.dsse.jsonl)",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest by the gate")


def run(args: argparse.Namespace) -> int:
    runners = {"evidence": run_evidence, "verify": run_verify, "keygen": run_keygen, "sign": run_sign}
    return runners[args.command](args)


def run_keygen(args: argparse.Namespace) -> int:
    if not args.path:  # Path("") is ".", the directory: say what was typed
        raise EvidenceError("keygen: an empty path; give a file name for the private key (e.g. evidence-key)")
    if args.path.endswith("/"):  # Path("a/") is "a": a file would be written where a directory was meant
        raise EvidenceError(f"{args.path}: a directory, not a file name for the private key")
    private, public = keygen(Path(args.path))
    print(f"keygen: private key {private} (keep it secret), public key {public} (give it to verifiers)")
    return 0


def run_sign(args: argparse.Namespace) -> int:
    if not args.bundle.is_dir():
        raise EvidenceError(f"{args.bundle}: no such directory")
    target = sign_bundle(args.bundle, load_private_key(args.key))
    print(f"sign: {target} written, one envelope per statement")
    return 0


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
    out, from_dir, mutants_report, mutmut_path = (
        None if p is None else p if p.is_absolute() else here / p
        for p in (args.out, args.from_dir, args.mutants_report, args.mutmut_report)
    )
    mutmut_report = load_report(mutmut_path) if mutmut_path is not None else None
    matrix = None
    if args.matrix is not None:
        matrix_path = args.matrix if args.matrix.is_absolute() else here / args.matrix
        try:
            matrix = boundedjson.loads(
                safefile.read_bytes(matrix_path, limit=MAX_JSON_BYTES, what="matrix.json"),
                what=str(matrix_path),
            )
        except (safefile.FileLayerError, boundedjson.JsonFormatError) as exc:
            raise EvidenceError(f"not a readable matrix.json: {exc}") from None
    assert out is not None
    signing_key = (
        load_private_key(args.sign if args.sign.is_absolute() else here / args.sign) if args.sign else None
    )
    os.chdir(root)  # contract file names and the mutant file check are relative to the project root
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    args.engine = resolve_engine(args.engine, project.engine, f"[tool.falsify] in {project.pyproject}")
    check_engine(args.engine, project.import_roots)  # a usage error (exit 2) before anything runs
    sources = tuple(args.sources) if args.sources else project.sources or DEFAULT_SOURCES
    inputs = Inputs.of(project, args.engine, sources)
    if not source_files(root, sources):
        raise EvidenceError(f"no engine source file matches {' '.join(sources)} under {root} (see --sources)")
    # A report given or found is read (and its engine checked) before anything runs: a bad one is exit 2 at once.
    report_path = mutants_report or (find_mutation_report(from_dir) if from_dir else None)
    report, reason = None, ""
    if report_path:
        report = load_report(report_path)
        same_engine(report_engine(report), report_path, "the mutants ran", args.engine)
    before = tree_digests(root, inputs)
    if from_dir:
        results, junit = read_gate_dir(from_dir)
        made_on = results.get("engine")
        same_engine(
            made_on if isinstance(made_on, str) else None, from_dir / RESULTS, "the gate ran", args.engine
        )
        gate_note = f"gate results read from {from_dir}"
    else:
        results, junit, code = run_gate(project, args.engine, extra, root / ".falsify" / "evidence-gate")
        gate_note = f"gate exited {code}"
    if report_path is None:
        if args.no_mutants:
            reason = "skipped with --no-mutants"
        elif from_dir:
            reason = f"no {MUTATION_REPORT} in the --from directory and no --mutants-report given"
        else:
            report, reason = run_mutants(project, args.engine, root / ".falsify" / "evidence-mutants")
    corpus = load_corpus(contract_dirs(project) + ([project.mutants] if project.mutants.is_dir() else []))
    if corpus.problems:
        raise EvidenceError(
            "contracts do not lint; run `falsify lint` first:\n" + "\n".join(str(p) for p in corpus.problems)
        )
    run = RunResults(
        normalise_results(results, root, inputs.contracts),
        normalise_junit(junit, root, str(from_dir / JUNIT) if from_dir else JUNIT),
        report,
        scrub(reason, root),
        mutmut_report,
        matrix,
    )
    files = build(root, inputs, corpus, run, environment(), generated_at(), git_source(root))
    changed = sorted(set(before.items()) ^ set(tree_digests(root, inputs).items()))
    if changed:  # the results would be claimed for a tree they were not obtained on
        names = sorted({name for name, _ in changed})
        raise EvidenceError(
            f"the tree changed while the gate and mutants ran: {', '.join(names)}; no bundle "
            "written (run again on a quiet tree)"
        )
    try:  # the one file layer: a symlink or FIFO in the bundle is replaced or refused, never written through
        safefile.make_dirs(out, what="bundle directory")
        for stale in (MUTATION_REPORT, MUTMUT_REPORT, MATRIX, *FIGURE_TITLES):
            if stale not in files and os.path.lexists(out / stale):
                (out / stale).unlink()
        for name, data in files.items():
            safefile.replace(out / name, data, what=name)
    except (safefile.FileLayerError, IsADirectoryError) as exc:
        raise EvidenceError(str(exc)) from None
    if signing_key is not None:
        print(f"evidence: signed: {sign_bundle(out, signing_key)}")
    elif os.path.lexists(out / SIGNATURES):
        (out / SIGNATURES).unlink()  # an old signature would not cover the new statements
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


def _bundle_file(path: Path, problems: list[str]) -> bytes | None:
    """A bundle file's bytes through the file layer; None (and a problem, unless it is simply absent) otherwise."""
    if not os.path.lexists(path):
        return None
    try:
        return safefile.read_bytes(path, limit=MAX_JSON_BYTES, what=path.name)
    except safefile.FileLayerError as exc:
        problems.append(str(exc))
        return None


def run_verify(args: argparse.Namespace) -> int:
    project = find_project()
    bundle = args.bundle if args.bundle.is_absolute() else Path.cwd() / args.bundle
    os.chdir(project.root)
    if not bundle.is_dir():
        raise EvidenceError(f"{args.bundle}: no such directory")
    public_key = None
    if args.key:
        public_key = load_public_key(args.key if args.key.is_absolute() else Path.cwd() / args.key)
    result = verify(bundle, project.root)
    if public_key is not None:
        result.problems += check_envelopes(
            _bundle_file(bundle / STATEMENTS, result.problems) or b"",
            _bundle_file(bundle / SIGNATURES, result.problems),
            public_key,
        )
    verdict = result.verdict
    if result.problems:
        print(f"verify: FAIL — {len(result.problems)} problem(s) in {args.bundle} against {project.root}:")
        for p in result.problems:
            print(f"  {p}")
    else:
        print(
            f"verify: OK — {result.checked} digests match and the bundle rebuilds byte for byte from its results "
            "and this tree" + (", and every statement's signature verifies" if public_key is not None else "")
        )
        if public_key is None and (bundle / SIGNATURES).exists():
            print(f"verify: {SIGNATURES} present but not checked (pass --key PUBLIC_KEY to check it)")
    if verdict:
        print(f"verify: verdict re-derived from the bundle's results: {verdict['summary']}")
    if result.problems:
        return 1
    if args.require_go and (not verdict or verdict["decision"] != "GO"):
        print("verify: --require-go: the verdict is not GO")
        return 1
    return 0
