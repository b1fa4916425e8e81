"""The `falsify` command. Exit codes are stable: 0 pass, 1 failures found, 2 nothing to check or bad usage.

Subcommands live in their own modules; each offers `add_parser(subparsers)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import select
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from falsify import __version__
from falsify.errors import FalsifyError, terminal_safe
from falsify.harness.shards import MAX_JOBS as GATE_MAX_JOBS
from falsify.project import Project, find_project, find_project_or_none
from falsify.subcommand import add_subcommand, seconds, whole_number

# name -> module; modules are imported only when their command runs, so one broken part cannot break the rest.
COMMANDS = {
    "init": "falsify.init",
    "wrapper": "falsify.wrapper",
    "lint": "falsify.cli",
    "bindings": "falsify.cli",
    "gate": "falsify.cli",
    "engine": "falsify.cli",
    "packs": "falsify.cli",
    "mutants": "falsify.mutation.semantic.cli",
    "mutmut": "falsify.mutation.mutmut",
    "campaign": "falsify.mutation.campaign",
    "evidence": "falsify.evidence.cli",
    "verify": "falsify.evidence.cli",
    "diff": "falsify.evidence.diff",
    "keygen": "falsify.evidence.cli",
    "sign": "falsify.evidence.cli",
    "matrix": "falsify.harness.matrix",
}

HELP = {
    "init": "write a working starter into this repo: [tool.falsify], a contract, a falsifier, a mutant, CI",
    "wrapper": "pin the running falsify harness in this repo: a wheel and its sha256 in .falsify-harness/ (for CI)",
    "lint": "validate contracts and mutants; report every error with file:line",
    "bindings": "print prediction -> tests, from pytest's collection",
    "gate": "lint, run the falsifiers, print one row per prediction and a verdict",
    "engine": "engine check: load the engine under test and print its capability conformance table",
    "packs": "list the built-in contract packs",
    "mutants": "apply each semantic mutant in a scratch copy; every one must be killed",
    "mutmut": "run mutmut over the engine's sources in a scratch copy; fail below the kill-rate floor or on an unlisted survivor",
    "campaign": "run chosen predictions' falsifiers under the thorough profile, sharded by prediction and seed",
    "evidence": "write a release evidence bundle (in-toto statements, reports)",
    "verify": "recompute an evidence bundle's digests against this tree",
    "diff": "compare two evidence bundles (OLD NEW); exit 1 on a regression",
    "keygen": "write a new Ed25519 key pair for signing evidence (PATH and PATH.pub)",
    "sign": "sign an evidence bundle's statements (DSSE envelopes, Ed25519)",
    "matrix": "run the gate on several engines; print one table of predictions x engines",
}


def _parser(sub: argparse._SubParsersAction, name: str, exits: str) -> argparse.ArgumentParser:
    return add_subcommand(sub, name, HELP[name], HELP[name], f"exit codes: {exits}")


def add_lint(sub: argparse._SubParsersAction) -> None:
    from falsify.contracts.lint import FORMATS

    p = _parser(sub, "lint", "0 clean; 1 errors found; 2 no contract found, or no [tool.falsify] project")
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="files or directories (default: the project's contracts and mutants)",
    )
    p.add_argument("--format", choices=FORMATS, default="text")
    _pack_args(p)


def run_lint(args: argparse.Namespace) -> int:
    from falsify.contracts.corpus import contract_dirs
    from falsify.contracts.lint import lint, render, unkilled_classes
    from falsify.contracts.packs import contracts_dir

    paths = args.paths
    if not paths:
        project = find_project()
        paths = contract_dirs(project, tuple(args.pack)) + (
            [project.mutants] if project.mutants.is_dir() else []
        )
        # A project with no contracts directory of its own and no pack (an engine in C whose mutants kill pack
        # predictions): "no contract found", naming the pack its mutants need, not an I/O error (issue #46).
        read = [p for p in paths if p.exists()] if project.mutants.is_dir() else paths
    else:  # the files named, with the packs asked for (so a mutant's kills can name a pack's predictions)
        paths = read = [*paths, *(contracts_dir(name) for name in args.pack)]
    corpus, code = lint(read)
    if corpus.mutants:
        from falsify.contracts.lint import EXIT_ERRORS
        from falsify.mutation.semantic.matching import match_problems

        # Checked here, not in the contracts layer: matching reads the engine's source with libcst.
        found = match_problems(corpus.mutants)
        if found:
            corpus.problems = sorted([*corpus.problems, *found], key=lambda p: (p.file, p.line))
            code = EXIT_ERRORS
    print(render(corpus, paths, args.format, unkilled_classes(corpus, boundary_kills())))
    return code


def boundary_kills() -> dict[str, tuple[str, ...]]:
    """Each boundary mutant's class -> the predictions it must turn red (falsify/engines/boundary)."""
    from falsify.engines.boundary.catalogue import CATALOGUE

    return {m.id: m.kills for m in CATALOGUE}


def _engine_args(p: argparse.ArgumentParser) -> None:
    from falsify.engines.loading import engine_forms

    p.add_argument("--engine", help=engine_forms())
    p.add_argument(
        "--engine-model",
        metavar="ID",
        help="the model an openai+ engine asks for (default: $FALSIFY_ENGINE_MODEL, then the first /v1/models id)",
    )


def _pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pack",
        action="append",
        default=[],
        metavar="NAME",
        help="also use the built-in contract pack NAME (repeatable; `falsify packs` lists them)",
    )


def engine_spec(args: argparse.Namespace, project: Project, *, probe: bool = False) -> str:
    """--engine, FALSIFY_ENGINE, then [tool.falsify] engine; loaded and checked here, before any test runs (and,
    with `probe`, a wire engine started once or its port reached: falsify/engines/loading.py, probe_wire)."""
    from falsify.engines.loading import check_engine, probe_wire, resolve_engine

    spec = resolve_engine(args.engine, project.engine, f"[tool.falsify] in {project.pyproject}")
    if getattr(args, "engine_model", None):  # read by the openai+ engine wherever the run loads it
        os.environ["FALSIFY_ENGINE_MODEL"] = args.engine_model
    if not spec.startswith("openai+exec:"):  # that one starts its server: only the run itself does
        check_engine(spec, project.import_roots)
    if probe:  # a wire engine that cannot start: one line and exit 2, before any test runs
        from falsify.harness.pytest_runs import terminate_as_exit

        restore = terminate_as_exit()  # SIGTERM mid-probe: the probe's engine is stopped, not left running
        try:
            probe_wire(spec)
        finally:
            restore()
    return spec


def add_bindings(sub: argparse._SubParsersAction) -> None:
    p = _parser(
        sub, "bindings", "0 every prediction bound; 1 unbound predictions or binding problems; 2 no contract"
    )
    _engine_args(p)
    _pack_args(p)


def run_bindings(args: argparse.Namespace) -> int:
    import tempfile

    from falsify.harness.gate import lint_project
    from falsify.harness.pytest_runs import run_pytest_timed
    from falsify.harness.results import load_results
    from falsify.table import table

    project = find_project()
    packs = tuple(args.pack)
    corpus, problems = lint_project(project, packs)
    if problems:
        print("\n".join(problems))
        print(f"bindings: lint found {len(problems)} error(s); fix them first")
        return 1
    if not corpus.contracts:
        print(f"bindings: no contract found in {project.contracts}")
        return 2
    # the same order as every command; collection never makes the engine, so none named is fine here
    engine = args.engine or os.environ.get("FALSIFY_ENGINE") or project.engine or "none"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "collect.json"
        run_pytest_timed(project, path, [], engine=engine, collect_only=True, quiet=True, packs=packs)
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
        print(terminal_safe(problem))
    unbound = [pid for pid, tests in tests_of.items() if not tests]
    print(
        f"bindings: {len(corpus.contracts)} contracts, {len(tests_of)} predictions, "
        f"{len(results['collected'])} falsifier tests, {len(unbound)} unbound, "
        f"{len(results.get('binding_problems', []))} problems"
    )
    return 1 if unbound or results.get("binding_problems") else 0


def add_gate(sub: argparse._SubParsersAction) -> None:
    p = _parser(
        sub,
        "gate",
        "0 every prediction passed (or is not applicable) and something ran; 1 a prediction failed, errored, "
        "timed out or was not run, or lint/binding failed; 2 no contract, no project, an engine that cannot be "
        "loaded or a wire engine that cannot start (reported before any test runs), or another gate holds --out's "
        "lock",
    )
    _engine_args(p)
    _pack_args(p)
    p.add_argument(
        "--out",
        type=Path,
        default=Path(".falsify/gate"),
        help="where results.json, junit.xml and gate.json go (default: .falsify/gate)",
    )
    p.add_argument("--junit", type=Path, help="also copy the JUnit XML here")
    p.add_argument(
        "--mutants-report",
        type=Path,
        help="mutation-report.json of a `falsify mutants` run, for the PROVEN column (default: "
        ".falsify/mutants/mutation-report.json when present, made on this run's engine, and its mutated files are "
        "unchanged)",
    )
    p.add_argument(
        "--test-timeout",
        type=seconds(zero_is_none=True),
        help="seconds per falsifier before it is stopped and reported TIMEOUT, 0 for none "
        "(default: [tool.falsify.gate] test_timeout, else 900)",
    )
    p.add_argument(
        "--timeout",
        type=seconds(zero_is_none=True),
        help="seconds for the whole run; predictions not finished by then are TIMEOUT, 0 for none "
        "(default: [tool.falsify.gate] timeout, else 5400)",
    )
    p.add_argument(
        "--jobs",
        type=whole_number(1, GATE_MAX_JOBS),
        help="pytest processes, 1-8 (default: $FALSIFY_GATE_JOBS, [tool.falsify.gate] jobs, the cores; openai+: 1)",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest")


def run_gate(args: argparse.Namespace) -> int:
    from falsify.harness.gate import copy_junit, gate

    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if args.junit is not None and (
        os.path.islink(args.junit) or (args.junit.exists() and not args.junit.is_file())
    ):
        # refused before the run, not after it: a symlink is never written through (copy_junit refuses it too)
        what = "a symlink" if os.path.islink(args.junit) else "not a regular file"
        raise FalsifyError(f"--junit {args.junit}: {what}; give a new path or a regular file")
    project = find_project()
    from falsify.harness.gate import check_environment, jobs, timeouts

    # before an engine is started: HYPOTHESIS_PROFILE, the FALSIFY_* numbers, [tool.falsify.gate]
    check_environment()
    timeouts(project, args.test_timeout, args.timeout)
    engine = engine_spec(args, project, probe=True)
    processes = jobs(project, args.jobs, engine)
    out = args.out if args.out.is_absolute() else project.root / args.out
    report = args.mutants_report
    if report is not None and not report.is_absolute():
        report = Path.cwd() / report
    code = gate(
        project,
        engine=engine,
        out=out,
        pytest_args=extra,
        packs=tuple(args.pack),
        mutants_report=report,
        test_timeout=args.test_timeout,
        timeout=args.timeout,
        jobs=processes,
    )
    if args.junit and (out / "junit.xml").is_file():
        copy_junit(out, args.junit)  # by a temporary renamed over it, never through a link
    return code


def add_engine(sub: argparse._SubParsersAction) -> None:
    p = _parser(
        sub,
        "engine",
        "0 the engine loads and implements every capability it claims; 1 --conformance: a probe failed or a part "
        "of the protocol went unexercised; 2 it cannot be loaded, or claims a capability without its methods",
    )
    p.add_argument("action", choices=["check"], help="check: load the engine and print its conformance table")
    p.add_argument(
        "--conformance",
        action="store_true",
        help="a wire engine (exec:/http:): send every message of the version it speaks and provoke the errors "
        "docs/engine-protocol.md §9 lists, then print a table of messages and errors x times exercised",
    )
    _engine_args(p)


def run_engine(args: argparse.Namespace) -> int:
    from falsify.engines.loading import ENV, EngineError, conformance, load_engine, resolve_engine
    from falsify.engines.protocol import CAPABILITIES
    from falsify.table import table

    # An engine named by --engine (or FALSIFY_ENGINE) is checked anywhere: a C engine's directory needs no
    # project to be checked (issue #46); its modules import from the working directory.
    named = args.engine or os.environ.get(ENV)
    project = find_project_or_none() if named else find_project()
    where = f"[tool.falsify] in {project.pyproject}" if project else "[tool.falsify]"
    spec = resolve_engine(args.engine, project.engine if project else None, where)
    engine = load_engine(spec, project.import_roots if project else (Path.cwd(),))
    rows = conformance(engine)
    print(
        table(
            ["capability", "claimed", "methods needed", "missing", "reason if not claimed"],
            [
                [
                    r.capability,
                    "yes" if r.supported else "no",
                    ", ".join(CAPABILITIES[r.capability]),
                    ", ".join(r.lacking) or ("-" if r.supported else ""),
                    r.reason,
                ]
                for r in rows
            ],
        )
    )
    claimed = [r for r in rows if r.supported]
    broken = [r for r in claimed if r.lacking]
    print(
        f"engine check: {spec} (name {engine.name!r}): {len(claimed)} of {len(rows)} capabilities claimed, "
        f"{len(broken)} claimed without their methods"
    )
    source = getattr(
        engine, "weights_source", None
    )  # adapters that load named weights say which (or why none)
    if source is not None:
        print(f"weights: {terminal_safe(source)}")
    if broken:
        raise EngineError(
            f"engine {spec!r} claims {', '.join(r.capability for r in broken)} without the methods"
        )
    if getattr(args, "conformance", False):
        return _conformance(engine, spec)
    return 0


def _conformance(engine: object, spec: str) -> int:
    from falsify.engines.loading import EngineError
    from falsify.engines.wire.client import WireEngine
    from falsify.engines.wire.conformance import probes, spec_parts, unexercised
    from falsify.table import table

    if not isinstance(engine, WireEngine):
        raise EngineError(
            f"--conformance exercises the wire protocol; {spec!r} is not a wire engine (exec:, http:)"
        )
    conn = engine.connection()
    results = probes(engine)
    engine.close()  # shutdown, then exit: exercised too
    print(table(["probe", "outcome"], [[r.name, r.outcome] for r in results]))
    parts = spec_parts(engine.version)  # a falsify-engine/1 engine is not asked for what only 1.1 carries
    print(table(["message or error", "exercised"], [[p, str(conn.seen.get(p, 0))] for p in parts]))
    failed = [r for r in results if r.outcome.startswith("FAIL")]
    missing = unexercised(conn.seen, parts)
    print(
        f"conformance: {spec}: {len(results) - len(failed)} of {len(results)} probes ok; {len(parts) - len(missing)} "
        f"of {len(parts)} messages and errors exercised"
        + (f"; unexercised: {', '.join(missing)}" if missing else "")
    )
    return 1 if failed or missing else 0


def add_packs(sub: argparse._SubParsersAction) -> None:
    from falsify.contracts.packs_show import FORMATS

    p = _parser(sub, "packs", "0 listed or shown; 2 no pack installed, an unknown pack, or bad usage")
    p.add_argument("action", nargs="?", metavar="show", help="show NAME: each prediction of the pack NAME")
    p.add_argument("name", nargs="?", metavar="NAME", help="the pack `falsify packs` lists")
    p.add_argument("--format", choices=FORMATS, default="text", help="for show: text (default) or json")


def run_packs(args: argparse.Namespace) -> int:
    from falsify.contracts.corpus import load_corpus
    from falsify.contracts.packs import available, contracts_dir, describe
    from falsify.table import table

    if args.action is not None:
        if args.action != "show" or args.name is None:
            print("falsify packs: expected `falsify packs` or `falsify packs show NAME`", file=sys.stderr)
            return 2
        from falsify.contracts.packs_show import render
        from falsify.engines.boundary.catalogue import CATALOGUE

        boundary: dict[str, list[str]] = {}
        for m in CATALOGUE:
            for pid in m.kills:
                boundary.setdefault(pid, []).append(m.id)
        print(render(args.name, boundary, args.format))  # an unknown name: PackError, one line, exit 2
        return 0

    names = available()
    rows = []
    for name in names:
        corpus = load_corpus([contracts_dir(name)])
        info = describe(name)
        rows.append(
            [
                name,
                info.get("title", ""),
                ", ".join(c.id for c in corpus.contracts),
                str(len(corpus.predictions)),
                ", ".join(sorted({r for c in corpus.contracts for r in c.requires})),
            ]
        )
    print(table(["pack", "what", "contracts", "predictions", "capabilities"], rows))
    print(f"packs: {len(names)} installed")
    return 0 if names else 2


LOCAL = {
    "lint": (add_lint, run_lint),
    "bindings": (add_bindings, run_bindings),
    "gate": (add_gate, run_gate),
    "engine": (add_engine, run_engine),
    "packs": (add_packs, run_packs),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="falsify",
        description=__doc__.splitlines()[0],
        epilog="exit codes: 0 pass; 1 failures found; 2 nothing to check, bad usage or configuration; "
        "130 interrupted. `falsify COMMAND --help` for each command's.",
    )
    parser.add_argument("--version", action="version", version=f"falsify {__version__}")
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


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:  # closed
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


RELAY_DRAIN = 5.0  # seconds the relay may go on copying after the command ended


def _relay(read_end: int, real: int, done: threading.Event, gone: threading.Event) -> None:
    """Copy what arrives on `read_end` to `real` until `done` is set and nothing is left; once a write to `real`
    fails (its reader has gone: EPIPE), keep draining and drop the rest. A process that outlived the command and
    still writes (one that left the command's process group) holds the relay at most RELAY_DRAIN seconds after
    `done`: the command's exit never waits on it."""
    deadline = None
    while True:
        if done.is_set() and deadline is None:
            deadline = time.monotonic() + RELAY_DRAIN
        if deadline is not None and time.monotonic() > deadline:
            break
        seen_done = done.is_set()
        ready, _, _ = select.select([read_end], [], [], 0.1)
        if not ready:
            # `done` is set only after the command's last flush, so nothing it wrote can be left once the pipe was
            # empty *after* `done` was seen: a select that timed out just before that flush would lose it
            if seen_done:
                break
            continue
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        view = memoryview(chunk)
        while view and not gone.is_set():
            try:
                view = view[os.write(real, view) :]
            except OSError:
                gone.set()
    os.close(read_end)


@contextlib.contextmanager
def reader_may_leave() -> Iterator[None]:
    """`falsify gate | head -1`: the reader of a piped stdout may leave early. The command still does all its work
    (its children are not stopped by EPIPE, gate.json is written) and exits with its own code, with no
    BrokenPipeError traceback, here or at interpreter shutdown.

    fd 1 becomes a pipe of our own, inherited by every child, that a thread copies to the real stdout and drains
    into nothing once the reader has gone; fd 2 too when it is the same pipe (2>&1), so the two keep their order.
    """
    if os.name != "posix" or threading.current_thread() is not threading.main_thread() or not _is_pipe(1):
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    fds = (1, 2) if _same_file(1, 2) else (1,)
    real = {fd: os.dup(fd) for fd in fds}  # not inheritable: children only ever hold our pipe
    read_end, write_end = os.pipe()
    for fd in fds:
        os.dup2(write_end, fd)
    os.close(write_end)
    done, gone = threading.Event(), threading.Event()
    relay = threading.Thread(
        target=_relay, args=(read_end, real[1], done, gone), name="stdout-relay", daemon=True
    )
    relay.start()
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        done.set()
        relay.join()
        # The reader gone, the final flush at interpreter shutdown must not meet the closed pipe (it would print
        # "Exception ignored ... BrokenPipeError"): what is left goes to /dev/null, as Python's docs advise.
        devnull = os.open(os.devnull, os.O_WRONLY) if gone.is_set() else None
        for fd in fds:
            os.dup2(real[fd] if devnull is None else devnull, fd)
            os.close(real[fd])
        if devnull is not None:
            os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    with reader_may_leave():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["evidence", "diff"]:  # `falsify evidence diff OLD NEW` is `falsify diff OLD NEW`
        argv = ["diff", *argv[2:]]
    # Started from `nohup`, a background job or a CI runner, SIGINT may arrive ignored; then neither Ctrl-C nor
    # a runner's interrupt would stop the scratch copies and children (issue #19). Ctrl-C always means stop.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
        # its words quote files, engines and names it did not write: each line made terminal-safe
        print(f"falsify: {terminal_safe(exc, newlines=True)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        print(f"falsify: {terminal_safe(command)} is not available in this install ({exc})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("falsify: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
