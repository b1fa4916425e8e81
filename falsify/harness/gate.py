"""`falsify gate`: lint, run the bound falsifiers with pytest, one row per prediction, a verdict with denominators."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from falsify.contracts.corpus import Corpus, contract_dirs, load_corpus
from falsify.contracts.lint import EXIT_EMPTY
from falsify.errors import FalsifyError
from falsify.harness.command import falsifier_args
from falsify.harness.proven import PredictionProof, Proof, proofs, red_from_stryker, stale_files, summary
from falsify.harness.results import (
    Outcome,
    PredictionResult,
    counts_text,
    load_results,
    per_prediction,
    test_counts,
)
from falsify.project import Project
from falsify.table import table


def run_pytest(
    project: Project,
    results: Path,
    args: list[str],
    *,
    engine: str,
    junit: Path | None = None,
    collect_only: bool = False,
    quiet: bool = False,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    packs: tuple[str, ...] = (),
) -> int:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *falsifier_args(
            [str(project.tests)] if project.tests.is_dir() else [],
            contracts=project.contracts,
            results=results,
            engine=engine,
            strict=True,
            packs=packs,
            rootdir=project.root,
        ),
    ]
    if junit:
        cmd += ["--junitxml", str(junit)]
    if collect_only:
        cmd.append("--collect-only")
    cmd += args
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(
        cmd,
        cwd=project.root,
        stdout=out,
        stderr=out,
        env=env or os.environ.copy(),
        timeout=timeout,
        check=False,
    )
    return proc.returncode


def lint_project(project: Project, packs: tuple[str, ...] = ()) -> tuple[Corpus, list[str]]:
    """The project's contracts, its packs' and its mutants, linted together."""
    paths = contract_dirs(project, packs) + ([project.mutants] if project.mutants.is_dir() else [])
    corpus = load_corpus(paths)
    return corpus, [str(p) for p in corpus.problems]


DEFAULT_MUTANTS_REPORT = Path(".falsify/mutants/mutation-report.json")


def mutant_proofs(
    project: Project, corpus: Corpus, report_path: Path | None
) -> tuple[dict[str, PredictionProof], str]:
    """Per-prediction proof from a mutant run's report, and where it came from (or why there is none)."""
    path = report_path or project.root / DEFAULT_MUTANTS_REPORT
    if not path.is_file():
        if report_path is not None:
            raise FalsifyError(f"--mutants-report {report_path}: no such file")
        return proofs(corpus, None), f"no mutant run ({DEFAULT_MUTANTS_REPORT} absent; run `falsify mutants`)"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FalsifyError(f"{path}: not a readable mutation report ({exc})") from None
    if not isinstance(report, dict) or not isinstance(report.get("files"), dict):
        raise FalsifyError(f"{path}: not a Stryker mutation-testing report (needs files)")
    stale = stale_files(report, project.root)
    if stale:
        return proofs(corpus, None), f"mutant report {path} is stale ({', '.join(stale)} changed since)"
    return proofs(corpus, red_from_stryker(report)), f"mutant report {path}"


def gate(
    project: Project,
    *,
    engine: str,
    out: Path,
    pytest_args: list[str],
    packs: tuple[str, ...] = (),
    mutants_report: Path | None = None,
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
    out.mkdir(parents=True, exist_ok=True)
    results_path, junit = out / "results.json", out / "junit.xml"
    results_path.unlink(missing_ok=True)
    n_pred = sum(len(c.predictions) for c in corpus.contracts)
    print(
        f"gate: running the falsifiers of {len(corpus.contracts)} contracts, {n_pred} predictions on engine "
        f"{engine!r}",
        flush=True,
    )
    code = run_pytest(project, results_path, pytest_args, engine=engine, junit=junit, packs=packs)
    if not results_path.is_file():
        print(f"gate: FAIL — pytest exited {code} before any result was written (see its output above)")
        return 1
    results = load_results(results_path)
    if results.get("binding_problems"):
        print("\n".join(results["binding_problems"]))
        print(f"gate: FAIL — {len(results['binding_problems'])} binding problem(s); no falsifier was run")
        return 1
    rows = per_prediction(corpus, results)
    proved, proof_source = mutant_proofs(project, corpus, mutants_report)
    print()
    print(render(rows, proved))
    summary, ok = verdict(corpus, rows, results, engine, proved)
    (out / "gate.json").write_text(
        json.dumps(
            {
                "verdict": summary,
                "ok": ok,
                "engine": engine,
                "pytest_exit": code,
                "proof_source": proof_source,
                "tests": test_counts(results),
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
        ),
        encoding="utf-8",
    )
    print(summary)
    print(f"gate: PROVEN from {proof_source}")
    for pid, proof in proved.items():
        if proof.status is Proof.EXCUSED:
            print(f"gate: {pid} unproven because: {proof.because}")
    print(f"gate: JUnit XML in {junit}, results in {results_path}")
    return 0 if ok and code == 0 else 1


def render(rows: list[PredictionResult], proved: dict[str, PredictionProof] | None = None) -> str:
    return table(
        ["prediction", "contract", "outcome", "proven", "tests", "checks", "time", "detail"],
        [
            [
                r.id,
                r.contract,
                str(r.outcome),
                proved[r.id].cell if proved and r.id in proved else "?",
                _tests_cell(r),
                str(r.checks) + (f" ({r.vacuous} vacuous)" if r.vacuous else ""),
                f"{r.seconds:.2f}s",
                _one_line(r.detail),
            ]
            for r in rows
        ],
    )


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
        and not counts[Outcome.NOT_RUN]
    )
    parts = ", ".join(f"{counts[o]} {o.value.lower()}" for o in Outcome)
    proof = f"; {summary(proved)}" if proved else ""
    word = "PASS" if ok else "FAIL"
    return (
        f"gate: {word} — {len(corpus.contracts)} contracts, {len(rows)} predictions ({parts}){proof}; "
        f"{counts_text(test_counts(results))}; engine {engine}"
    ), ok
