"""`falsify gate`: lint, run the bound falsifiers with pytest, one row per prediction, a verdict with denominators."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus, contract_dirs, load_corpus
from falsify.contracts.lint import EXIT_EMPTY
from falsify.engines.env_settings import check_all, gate_jobs
from falsify.errors import FalsifyError, terminal_safe
from falsify.harness import shards
from falsify.harness.command import falsifier_dirs
from falsify.harness.draws import chosen_profile, hypothesis_line, register_profiles, seeded
from falsify.harness.proven import (
    PredictionProof,
    Proof,
    cannot_show_from_stryker,
    proofs,
    red_from_stryker,
    shown_here,
    staleness,
    summary,
)
from falsify.harness.pytest_runs import run_pytest_shared, run_pytest_timed
from falsify.harness.results import (
    Outcome,
    PredictionResult,
    counts_text,
    load_results,
    per_prediction,
    test_counts,
)
from falsify.harness.wire_engine import coverage_line
from falsify.project import Project, ProjectError, read_toml, subtable
from falsify.subcommand import seconds_problem
from falsify.table import table
from falsify.untrusted import safefile

GATE_KEYS = ("test_timeout", "timeout", "jobs")  # [tool.falsify.gate]
DEFAULT_TEST_TIMEOUT = 900.0  # seconds per falsifier; [tool.falsify.gate] test_timeout or --test-timeout
DEFAULT_GATE_TIMEOUT = (
    5400.0  # seconds for the whole run (CI's own budget); [tool.falsify.gate] timeout or --timeout
)
KEEP_RUNS = 5  # run directories kept under --out/runs


def _gate_table(project: Project) -> dict[str, Any]:
    try:
        table = subtable(read_toml(project.pyproject), project.pyproject, "tool", "falsify", "gate") or {}
    except (
        ProjectError
    ):  # find_project read the same file a moment ago; a file changed since keeps the defaults
        table = {}
    unknown = sorted(set(table) - set(GATE_KEYS))
    if unknown:  # as [tool.falsify] and [tool.falsify.mutmut] name theirs: a typo is not a silent default
        raise FalsifyError(
            f"{project.pyproject}: [tool.falsify.gate] has unknown key(s) {', '.join(unknown)} "
            f"(known: {', '.join(GATE_KEYS)})"
        )
    return table


def jobs(project: Project, flag: int | None, engine: str) -> int:
    """How many pytest processes run the falsifiers: --jobs, else $FALSIFY_GATE_JOBS, else [tool.falsify.gate]
    jobs, else the cores this process may use (shards.py), but 1 for an OpenAI-compatible server: nearly all its
    falsifiers time it, and each process would start a server of its own."""
    if flag is not None:
        value: object = flag
        where = "--jobs"
    else:
        env = gate_jobs(FalsifyError)
        if env is not None:
            return env
        table = _gate_table(project)
        if "jobs" not in table:
            return 1 if engine.startswith("openai+") else shards.default_jobs()
        value, where = table["jobs"], f"{project.pyproject}: [tool.falsify.gate] jobs"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= shards.MAX_JOBS:
        raise FalsifyError(f"{where} must be a whole number from 1 to {shards.MAX_JOBS}, not {value!r}")
    return value


def timeouts(project: Project, test: float | None, whole: float | None) -> tuple[float, float]:
    """Per-test and per-gate timeouts: the flag, else [tool.falsify.gate] test_timeout/timeout, else defaults."""
    table = _gate_table(project)

    def pick(flag: float | None, key: str, default: float) -> float:
        value = flag if flag is not None else table.get(key, default)
        problem = seconds_problem(value, zero_is_none=True)
        if problem:
            where = (
                f"--{key.replace('_', '-')}"
                if flag is not None
                else f"{project.pyproject}: [tool.falsify.gate] {key}"
            )
            raise FalsifyError(f"{where} {problem}")
        return float(value)

    return pick(test, "test_timeout", DEFAULT_TEST_TIMEOUT), pick(whole, "timeout", DEFAULT_GATE_TIMEOUT)


def profile_problem() -> str | None:
    """Why the hypothesis profile the environment chooses (HYPOTHESIS_PROFILE; CI chooses "ci") cannot be loaded;
    None when it can or none is chosen. `HYPOTHESIS_PROFILE=nonexistent` was an INTERNALERROR inside pytest."""
    profile = chosen_profile()
    if not profile:
        return None
    try:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return None
    register_profiles()
    try:
        settings.get_profile(profile)
    except InvalidArgument:
        known = ", ".join(sorted(getattr(settings, "_profiles", {})))
        return f"HYPOTHESIS_PROFILE={profile!r} is not a hypothesis profile; registered: {known}"
    return None


def check_environment() -> None:
    """The environment's settings a run reads, checked before it starts: one line naming a bad one, exit 2."""
    problem = profile_problem()
    if problem:
        raise FalsifyError(problem)
    check_all(FalsifyError)  # FALSIFY_WIRE_TIMEOUT=1e308 was an OverflowError traceback mid-run


def lint_project(project: Project, packs: tuple[str, ...] = ()) -> tuple[Corpus, list[str]]:
    """The project's contracts, its packs' and its mutants, linted together."""
    paths = contract_dirs(project, packs) + ([project.mutants] if project.mutants.is_dir() else [])
    corpus = load_corpus(paths)
    return corpus, [str(p) for p in corpus.problems]


DEFAULT_MUTANTS_REPORT = Path(".falsify/mutants/mutation-report.json")


def mutant_proofs(
    project: Project, corpus: Corpus, report_path: Path | None, engine: str
) -> tuple[dict[str, PredictionProof], str]:
    """Per-prediction proof from a mutant run's report on `engine`, and where it came from (or why there is
    none): a report made on another engine, or whose mutated files changed since, is stale and measures nothing."""
    path = report_path or project.root / DEFAULT_MUTANTS_REPORT
    if not path.is_file():
        if report_path is not None:
            raise FalsifyError(f"--mutants-report {report_path}: no such file")
        return proofs(corpus, None), f"no mutant run ({DEFAULT_MUTANTS_REPORT} absent; run `falsify mutants`)"
    try:
        report = safefile.read_json(path, limit=256 * 2**20, what="mutation report")
    except safefile.FileLayerError as exc:
        raise FalsifyError(f"not a readable mutation report: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("files"), dict):
        raise FalsifyError(f"{path}: not a Stryker mutation-testing report (needs files)")
    stale = staleness(report, project.root, engine)
    if stale:
        return proofs(corpus, None), (
            f"no current mutant run: mutant report {path} is {stale}; `falsify mutants` on this engine and tree "
            "measures it"
        )
    return proofs(corpus, red_from_stryker(report), cannot_show_from_stryker(report)), f"mutant report {path}"


def gate(
    project: Project,
    *,
    engine: str,
    out: Path,
    pytest_args: list[str],
    packs: tuple[str, ...] = (),
    mutants_report: Path | None = None,
    test_timeout: float | None = None,
    timeout: float | None = None,
    jobs: int = 1,
) -> int:
    corpus, problems = lint_project(project, packs)
    if not corpus.contracts and not problems:
        where = ", ".join(map(str, contract_dirs(project, packs)))
        print(f"gate: FAIL — no contract found in {where} (an empty corpus is never a pass)")
        return EXIT_EMPTY
    if problems:
        print("\n".join(problems))
        print(
            f"gate: FAIL — lint found {len(problems)} error(s) in {corpus.files} files; no falsifier was run"
        )
        return 1
    falsifier_dirs(
        project, project.root, packs
    )  # a tests directory that is a link out: refused before any run
    per_test, whole = timeouts(project, test_timeout, timeout)
    safefile.make_dirs(out, what="--out directory")  # a file, a link or a read-only disk there is named
    with _locked(out) as held:
        if not held:
            print(f"gate: another gate is writing to {out} (see {out / LOCK}); use another --out")
            return EXIT_EMPTY
        return _gate(project, corpus, engine, out, pytest_args, per_test, whole, packs, mutants_report, jobs)


def _binding_problems(results_path: Path) -> bool:
    return results_path.is_file() and bool(load_results(results_path).get("binding_problems"))


LOCK = ".lock"
pytest_usage_error = 4  # pytest.ExitCode.USAGE_ERROR, without importing pytest into the gate's process
OUTPUTS = ("results.json", "junit.xml", "gate.json")


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[bool]:
    """An exclusive, non-blocking lock on out/.lock for the whole run; False when another gate holds it."""
    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise safefile.FileLayerError(f"{out / LOCK}: cannot lock --out: {safefile.cause(exc)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield True
    finally:
        os.close(fd)


def _gate(
    project: Project,
    corpus: Corpus,
    engine: str,
    out: Path,
    pytest_args: list[str],
    per_test: float,
    whole: float,
    packs: tuple[str, ...],
    mutants_report: Path | None,
    jobs: int,
) -> int:
    # This run's files go to a directory of its own; out/latest and the copies in out/ change only when it
    # ends, each by an atomic rename. Until then out/ holds no result at all: a run that hangs or is killed
    # cannot leave the previous run's files looking like its own.
    costs = shards.read_costs(out / "results.json") if jobs > 1 else {}  # the previous run's durations
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
    run_dir = out / "runs" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    safefile.make_dirs(run_dir, what="run directory")
    results_path, junit = run_dir / "results.json", run_dir / "junit.xml"
    n_pred = sum(len(c.predictions) for c in corpus.contracts)
    limits = f"timeouts {per_test:g} s per falsifier, {whole:g} s in all" if whole else "no gate timeout"
    processes = f"; {jobs} pytest processes" if jobs > 1 else ""
    print(
        f"gate: running the falsifiers of {len(corpus.contracts)} contracts, {n_pred} predictions on engine "
        f"{engine!r} ({limits}{processes})",
        flush=True,
    )
    if jobs > 1:
        ran = run_pytest_shared(
            project,
            run_dir,
            pytest_args,
            engine=engine,
            jobs=jobs,
            costs=costs,
            env=seeded(pytest_args),
            timeout=whole or None,
            test_timeout=per_test or None,
            packs=packs,
        )
    else:
        ran = run_pytest_timed(
            project,
            results_path,
            pytest_args,
            engine=engine,
            env=seeded(pytest_args),
            junit=junit,
            timeout=whole or None,
            test_timeout=per_test or None,
            packs=packs,
        )
    code = ran.code
    if code == pytest_usage_error and not ran.timed_out and not _binding_problems(results_path):
        # pytest refused its arguments, or the plugin refused the run (an engine that cannot start): a usage
        # error, said above, and nothing was judged. Binding problems are a usage error to pytest too, but a
        # failed gate (exit 1), reported below.
        print("gate: ERROR — pytest stopped at a usage error (above); nothing was judged")
        return EXIT_EMPTY
    if not results_path.is_file() and not ran.timed_out:
        print(f"gate: FAIL — pytest exited {code} before any result was written (see its output above)")
        return 1
    # Stopped at the timeout before its first test finished: every prediction is a TIMEOUT row.
    results = load_results(results_path) if results_path.is_file() else {"tests": {}}
    if results.get("binding_problems"):
        print("\n".join(terminal_safe(p) for p in results["binding_problems"]))  # node ids: file names
        print(f"gate: FAIL — {len(results['binding_problems'])} binding problem(s); no falsifier was run")
        return 1
    rows = per_prediction(corpus, results)
    if ran.timed_out:
        rows = [_timed_out(r, whole) if r.outcome is Outcome.NOT_RUN else r for r in rows]
    proved, proof_source = mutant_proofs(project, corpus, mutants_report, engine)
    proved = shown_here(proved, {r.id for r in rows if r.cannot_show})
    print()
    print(render(rows, proved))
    failed = failures(rows, corpus)
    if failed:
        print()
        print(failed)
        print()
    summary, ok = verdict(corpus, rows, results, engine, proved)
    if ran.timed_out:
        summary += f"; the run was stopped at its {whole:g} s timeout"
    safefile.replace(
        run_dir / "gate.json",
        json.dumps(
            {
                "verdict": summary,
                "ok": ok,
                "engine": engine,
                "pytest_exit": code,
                "timed_out": ran.timed_out,
                "timeouts": {"test": per_test, "gate": whole},
                "proof_source": proof_source,
                "tests": test_counts(results),
                "wire_coverage": results.get("wire_coverage"),
                "hypothesis": results.get("hypothesis"),
                "predictions": [
                    asdict(r)
                    | {
                        "proven": str(proved[r.id].status),
                        "red_by": list(proved[r.id].red_by),
                        "expected_mutants": list(proved[r.id].expected),
                        "unproven_because": proved[r.id].because,
                    }
                    for r in rows
                ],
            },
            indent=1,
            default=str,
        ).encode("utf-8"),
        what="gate.json",
    )
    try:
        _publish(out, run_dir)
    except OSError as exc:  # a disk that filled or turned read-only while the run went on
        raise safefile.FileLayerError(
            f"{out}: cannot publish the run {run_dir.name}: {safefile.cause(exc)}"
        ) from None
    print(summary)
    wire = wire_coverage_line(results)
    if wire:
        print(wire)
    hypothesis = hypothesis_line(results)
    if hypothesis:
        print(hypothesis)
    print(f"gate: PROVEN from {terminal_safe(proof_source)}")
    shown = {r.id: r for r in rows}
    for pid, proof in proved.items():
        if proof.status is Proof.EXCUSED:
            print(f"gate: {pid} unproven because: {terminal_safe(proof.because)}")
        elif proof.status is Proof.CANNOT_SHOW:
            # the row's own words say whose reason it is: "cannot be shown on this engine: ..." or "machine"
            print(
                f"gate: {terminal_safe(_one_line(shown[pid].detail, 300))} (and the mutant run's CANNOT SHOW)"
            )
    print(f"gate: JUnit XML in {out / 'junit.xml'}, results in {out / 'results.json'} (this run: {run_dir})")
    return 0 if ok and code == 0 and not ran.timed_out else 1


def wire_coverage_line(results: dict[str, object]) -> str | None:
    """For a run on a wire engine, the line naming the protocol's messages and errors it left unexercised, from
    the `wire_coverage` the pytest plugin wrote to results.json; None for an engine that is not a wire engine."""
    cov = results.get("wire_coverage")
    return f"gate: {coverage_line(cov)}" if isinstance(cov, dict) else None


def _timed_out(r: PredictionResult, whole: float) -> PredictionResult:
    return replace(r, outcome=Outcome.TIMEOUT, detail=f"not finished when the gate stopped at {whole:g} s")


def _publish(out: Path, run_dir: Path) -> None:
    """Point out/latest at run_dir and copy its files to out/, each by an atomic rename; keep KEEP_RUNS runs."""
    for name in OUTPUTS:
        if (run_dir / name).is_file():
            tmp = out / f".{name}.tmp"
            shutil.copyfile(run_dir / name, tmp)
            os.replace(tmp, out / name)
    link = out / ".latest.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(run_dir.relative_to(out))
    os.replace(link, out / "latest")
    runs = sorted(p for p in (out / "runs").iterdir() if p.is_dir() and not p.is_symlink())
    for old in runs[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)


JUNIT_LIMIT = 256 * 2**20  # bytes; the gate's own junit.xml, read back to copy it


def copy_junit(out: Path, dest: Path) -> None:
    """`gate --junit DEST`: the run's junit.xml written to DEST by a temporary renamed over it. A symlink at DEST
    is refused, never written through (it overwrote a file outside the project), as are a directory, `/dev/full`
    or any other special file: FileLayerError naming DEST, exit 2."""
    data = safefile.read_bytes(out / "junit.xml", limit=JUNIT_LIMIT, what="junit.xml")
    safefile.make_dirs(dest.parent, what="--junit directory")
    safefile.replace(dest, data, what="--junit file")


def render(rows: list[PredictionResult], proved: dict[str, PredictionProof] | None = None) -> str:
    return table(
        ["prediction", "contract", "outcome", "proven", "tests", "checks", "corners", "time", "detail"],
        [
            [
                r.id,
                r.contract,
                str(r.outcome),
                _proven_cell(r, proved),
                _tests_cell(r),
                str(r.checks) + (f" ({r.vacuous} vacuous)" if r.vacuous else ""),
                r.corners_cell,
                f"{r.seconds:.2f}s",
                _one_line(r.detail),
            ]
            for r in rows
        ],
    )


def not_applicable(rows: list[PredictionResult], proved: dict[str, PredictionProof]) -> list[str]:
    """Predictions NOT APPLICABLE in this run, for the engine's or the machine's reason, that no mutant run shows
    proven or CANNOT SHOW: nothing of theirs ran that a mutant could turn red, so they are neither proven nor
    UNPROVEN (issue #46: "23 proven, 16 UNPROVEN" where all 16 were n/a)."""
    return [
        r.id
        for r in rows
        if r.outcome is Outcome.NOT_APPLICABLE
        and r.id in proved
        and proved[r.id].status not in (Proof.PROVEN, Proof.CANNOT_SHOW)
    ]


def _proven_cell(r: PredictionResult, proved: dict[str, PredictionProof] | None) -> str:
    """The PROVEN cell: "n/a" for a prediction NOT APPLICABLE in this run (never "NO")."""
    if not proved or r.id not in proved:
        return "?"
    return "n/a" if r.id in not_applicable([r], proved) else proved[r.id].cell


def failures(rows: list[PredictionResult], corpus: Corpus) -> str:
    """Under the table, each FAIL with where its prediction is, its own failed check in full, and the contract's
    `if_fails`: what the failure means for the engine."""
    lines = []
    for r in rows:
        if r.outcome is not Outcome.FAIL:
            continue
        p = corpus.predictions[r.id]
        lines.append(f"FAIL {r.id} ({p.file}:{p.line}): {_one_line(r.detail, 400)}")
        lines.append(f"  if_fails: {_one_line(p.if_fails, 400)}")
    # the engine's words (its error messages in a failed check) and the contract's: shown, never acted on
    return "\n".join(terminal_safe(line) for line in lines)


def _tests_cell(r: PredictionResult) -> str:
    text = str(len(r.tests))
    if r.skipped:
        text += f" ({r.skipped} skipped)"
    if r.not_applicable:
        text += f" ({r.not_applicable} n/a)"
    return text


def _one_line(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict(
    corpus: Corpus,
    rows: list[PredictionResult],
    results: dict[str, object],
    engine: str,
    proved: dict[str, PredictionProof] | None = None,
) -> tuple[str, bool]:
    """One line with every denominator: outcomes, proven, and the tests as pytest counted them. PASS needs at least one PASS and
    no FAIL, ERROR or NOT RUN (a skipped bound test makes its prediction NOT RUN). Proof is counted, not gated
    here: `falsify evidence` refuses GO on an unproven prediction."""
    counts = Counter(r.outcome for r in rows)
    ok = (
        counts[Outcome.PASS] > 0
        and not counts[Outcome.FAIL]
        and not counts[Outcome.ERROR]
        and not counts[Outcome.TIMEOUT]
        and not counts[Outcome.NOT_RUN]
    )
    parts = ", ".join(f"{counts[o]} {o.value.lower()}" for o in Outcome)
    proof = f"; {summary(proved, not_applicable=not_applicable(rows, proved))}" if proved else ""
    word = "PASS" if ok else "FAIL"
    return (
        f"gate: {word} — {len(corpus.contracts)} contracts, {len(rows)} predictions ({parts}){proof}; "
        f"{counts_text(test_counts(results))}; engine {engine}"
    ), ok
