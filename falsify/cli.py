"""The `falsify` command. Exit codes are stable: 0 pass, 1 failures found, 2 nothing to check or bad usage.

Subcommands live in their own modules; each offers `add_parser(subparsers)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

from falsify.errors import FalsifyError
from falsify.project import find_project

# name -> module; modules are imported only when their command runs, so one broken part cannot break the rest.
COMMANDS = {
    "lint": "falsify.cli",
    "bindings": "falsify.cli",
    "gate": "falsify.cli",
    "mutants": "falsify.mutation.semantic.cli",
    "mutmut": "falsify.mutation.mutmut",
    "evidence": "falsify.evidence.cli",
    "verify": "falsify.evidence.cli",
    "diff": "falsify.evidence.diff",
    "keygen": "falsify.evidence.cli",
    "sign": "falsify.evidence.cli",
}

HELP = {
    "lint": "validate contracts and mutants; report every error with file:line",
    "bindings": "print prediction -> tests, from pytest's collection",
    "gate": "lint, run the falsifiers, print one row per prediction and a verdict",
    "mutants": "apply each semantic mutant in a scratch copy; every one must be killed",
    "mutmut": "run mutmut over reference/ in a scratch copy; fail above the survivor budget",
    "evidence": "write a release evidence bundle (in-toto statements, reports)",
    "verify": "recompute an evidence bundle's digests against this tree",
    "diff": "compare two evidence bundles (OLD NEW); exit 1 on a regression",
    "keygen": "write a new Ed25519 key pair for signing evidence (PATH and PATH.pub)",
    "sign": "sign an evidence bundle's statements (DSSE envelopes, Ed25519)",
}


def add_lint(sub: argparse._SubParsersAction) -> None:
    from falsify.contracts.lint import FORMATS

    p = sub.add_parser("lint", help=HELP["lint"], description=HELP["lint"])
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="files or directories (default: the project's contracts and mutants)",
    )
    p.add_argument("--format", choices=FORMATS, default="text")


def run_lint(args: argparse.Namespace) -> int:
    from falsify.contracts.lint import lint, render

    paths = args.paths
    if not paths:
        project = find_project()
        paths = [project.contracts] + ([project.mutants] if project.mutants.is_dir() else [])
    corpus, code = lint(paths)
    print(render(corpus, paths, args.format))
    return code


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", default="reference", help="reference (default), hf, or module:factory")


def add_bindings(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bindings", help=HELP["bindings"], description=HELP["bindings"])
    _engine_args(p)


def run_bindings(args: argparse.Namespace) -> int:
    import tempfile

    from falsify.harness.gate import lint_project, run_pytest
    from falsify.harness.results import load_results
    from falsify.table import table

    project = find_project()
    corpus, problems = lint_project(project)
    if problems:
        print("\n".join(problems))
        print(f"bindings: lint found {len(problems)} error(s); fix them first")
        return 1
    if not corpus.contracts:
        print(f"bindings: no contract found in {project.contracts}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "collect.json"
        run_pytest(project, path, [], engine=args.engine, collect_only=True, quiet=True)
        if not path.is_file():
            print("bindings: pytest could not collect the tests (run `pytest --collect-only` to see why)")
            return 1
        results = load_results(path)
    tests_of: dict[str, list[str]] = {pid: [] for pid in corpus.predictions}
    for item in results["collected"]:
        for pid in item["predictions"]:
            tests_of.setdefault(pid, []).append(item["nodeid"])
    rows = [[pid, str(len(tests)), ", ".join(tests) or "UNBOUND"] for pid, tests in tests_of.items()]
    print(table(["prediction", "tests", "bound to"], rows))
    for problem in results.get("binding_problems", []):
        print(problem)
    unbound = [pid for pid, tests in tests_of.items() if not tests]
    print(
        f"bindings: {len(corpus.contracts)} contracts, {len(tests_of)} predictions, "
        f"{len(results['collected'])} falsifier tests, {len(unbound)} unbound, "
        f"{len(results.get('binding_problems', []))} problems"
    )
    return 1 if unbound or results.get("binding_problems") else 0


def add_gate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help=HELP["gate"], description=HELP["gate"])
    _engine_args(p)
    p.add_argument(
        "--out",
        type=Path,
        default=Path(".falsify/gate"),
        help="where results.json, junit.xml and gate.json go (default: .falsify/gate)",
    )
    p.add_argument("--junit", type=Path, help="also copy the JUnit XML here")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest")


def run_gate(args: argparse.Namespace) -> int:
    import shutil

    from falsify.harness.gate import gate

    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    project = find_project()
    out = args.out if args.out.is_absolute() else project.root / args.out
    code = gate(project, engine=args.engine, out=out, pytest_args=extra)
    if args.junit and (out / "junit.xml").is_file():
        args.junit.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "junit.xml", args.junit)
    return code


LOCAL = {"lint": (add_lint, run_lint), "bindings": (add_bindings, run_bindings), "gate": (add_gate, run_gate)}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="falsify", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if name in LOCAL:
            LOCAL[name][0](sub)
        elif only == name:
            add_parser = importlib.import_module(module).add_parser
            # A module that serves several commands (evidence, verify) is told which one to register.
            if "name" in inspect.signature(add_parser).parameters:
                add_parser(sub, name=name)
            else:
                add_parser(sub)
        else:
            sub.add_parser(name, help=HELP[name], add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["evidence", "diff"]:  # `falsify evidence diff OLD NEW` is `falsify diff OLD NEW`
        argv = ["diff", *argv[2:]]
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(command if command in COMMANDS and command not in LOCAL else None)
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        if args.command in LOCAL:
            return LOCAL[args.command][1](args)
        return int(importlib.import_module(COMMANDS[args.command]).run(args))
    except FalsifyError as exc:
        print(f"falsify: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        print(f"falsify: {command} is not available in this install ({exc})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("falsify: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
