"""Running mutmut for `falsify mutmut`: which functions to mutate (--since: the lines git says changed), the scratch
copy mutmut works in (our mutants/ moved aside), mutmut's run with progress lines, and its results read back from
the .meta files, each located by file:line with its original and mutated line.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
import tomllib
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from falsify.mutation.mutmut.config import (
    CLASS_SEPARATOR,
    LISTED_NOT_RUN,
    NOT_SAMPLED,
    STATUS_BY_EXIT_CODE,
    Baseline,
    MutmutConfig,
    MutmutError,
    MutmutMutant,
    MutmutRun,
)
from falsify.mutation.semantic.scratch import Scratch
from falsify.project import Project


def _git(root: Path, *args: str) -> str:
    # surrogateescape: a diff of a source that is not UTF-8 is read to its hunk headers, and the file is then named
    # by parse_source, not by a UnicodeDecodeError from here.
    proc = subprocess.run(
        ["git", *args],
        cwd=root,
        capture_output=True,
        encoding="utf-8",
        errors="surrogateescape",
        check=False,
    )
    if proc.returncode != 0:
        raise MutmutError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def changed_lines(root: Path, ref: str, files: list[str]) -> dict[str, set[int] | None]:
    """Lines of `files` changed since `ref` (committed or not); None for a file git does not know at `ref`."""
    _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    out: dict[str, set[int] | None] = {}
    for line in _git(root, "ls-files", "--others", "--exclude-standard", "--", *files).splitlines():
        out[line] = None
    current: str | None = None
    # --text: a source with a NUL byte is still diffed by line (git would call it binary, with no hunks, and the
    # run would say nothing changed); parsing it then names the byte (parse_source).
    for line in _git(root, "diff", "-U0", "--no-color", "--text", ref, "--", *files).splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("--- /dev/null") and current is None:
            pass
        elif line.startswith("@@") and current:
            match = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", line)
            if match:
                start, count = int(match[1]), int(match[2] or 1)
                lines = out.setdefault(current, set())
                if lines is not None:
                    lines.update(range(start, start + max(count, 1)))
    return out


def parse_source(path: Path, file: str) -> ast.Module:
    """A changed source file's syntax tree, or a MutmutError naming the file and why it has none: --since cannot
    tell which functions changed in a file Python cannot parse (and mutmut could not mutate it either)."""
    where = f"{file}: --since cannot find the changed functions"
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MutmutError(
            f"{where}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise MutmutError(f"{file}:{line}: --since cannot find the changed functions: a NUL byte") from None
    try:
        return ast.parse(text, filename=file)
    except SyntaxError as exc:
        raise MutmutError(
            f"{file}:{exc.lineno}: --since cannot find the changed functions: {exc.msg}"
        ) from None
    except (RecursionError, MemoryError):  # the parser's own limits: nesting deeper than CPython's stack
        raise MutmutError(f"{where}: it nests too deeply for Python's parser") from None


def function_patterns(root: Path, changed: dict[str, set[int] | None]) -> list[str]:
    """mutmut mutant-name patterns for every function or method whose lines changed."""
    patterns = []
    for file, lines in sorted(changed.items()):
        path = root / file
        if not path.is_file():
            continue
        module = ".".join(Path(file).with_suffix("").parts).removesuffix(".__init__")
        tree = parse_source(path, file)
        for node in tree.body:
            defs: list[tuple[str, ast.AST]] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defs.append((f"x_{node.name}", node))
            elif isinstance(node, ast.ClassDef):
                defs += [
                    (f"x{CLASS_SEPARATOR}{node.name}{CLASS_SEPARATOR}{f.name}", f)
                    for f in node.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
            for mangled, fn in defs:
                span = set(range(fn.lineno, (fn.end_lineno or fn.lineno) + 1))  # type: ignore[attr-defined]
                if lines is None or span & lines:
                    patterns.append(f"{module}.{mangled}__mutmut_*")
    return patterns


# -- running mutmut in a scratch copy ---------------------------------------------------------------------------


# Loaded into every pytest run mutmut makes: an engine that cannot load (under a mutant, or mutmut's forced
# failure) is a failed run there, not a usage error (engine_probe.py).
PROBE_PLUGIN = "falsify.mutation.mutmut.engine_probe"


def prepare(tree: Path, project: Project, config: MutmutConfig, files: list[str]) -> None:
    """Make the scratch copy a mutmut project whose ./mutants/ is free for mutmut, and in which the tests run as
    they do in the project."""
    if (tree / "mutants").exists():
        # mutmut runs pytest in ./mutants/ on the copied pyproject.toml: what was there is found there again.
        aside = tree / ".falsify-mutants-aside"
        (tree / "mutants").rename(aside)
        (tree / "mutants").mkdir()
        aside.rename(tree / "mutants" / "mutants")
    sources = sorted({Path(f).parts[0] for f in files})
    # mutmut copies into ./mutants/ only the source paths (which it mutates), tests/, test/ and a few config
    # files; the rest of the project goes too: a root conftest.py, pytest.ini, a tests directory of another
    # name, the contracts, the data the tests read.
    copy_also = sorted(
        p.name
        for p in tree.iterdir()
        if p.name not in {"mutants", "setup.cfg", *sources} and not p.name.startswith(".falsify-")
    )
    pyproject = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    if "mutmut" in pyproject.get("tool", {}):
        raise MutmutError(
            "pyproject.toml has a [tool.mutmut] table; configure mutmut in [tool.falsify.mutmut]"
        )
    lines = [
        "[mutmut]",
        "source_paths =",
        *(f"    {d}" for d in sources),
        "only_mutate =",
        *(f"    {f}" for f in files),
        "pytest_add_cli_args_test_selection =",
        *(f"    {t}" for t in config.tests),
        "also_copy =",
        *(f"    {c}" for c in copy_also),
        f"timeout_multiplier = {config.timeout_multiplier}",
        f"timeout_constant = {config.timeout_constant}",
        "pytest_add_cli_args =",
        *(f"    {a}" for a in ("-p", "no:cacheprovider", "-p", PROBE_PLUGIN, *config.pytest_args)),
        "",
    ]
    setup_cfg = tree / "setup.cfg"
    previous = setup_cfg.read_text(encoding="utf-8") + "\n" if setup_cfg.is_file() else ""
    if "[mutmut]" in previous:
        raise MutmutError("setup.cfg has a [mutmut] section; configure mutmut in [tool.falsify.mutmut]")
    setup_cfg.write_text(previous + "\n".join(lines), encoding="utf-8")


def mutmut_command(*args: str) -> list[str]:
    # `python -m mutmut` re-executes mutmut.__main__ (mutmut warns); import its click group instead.
    return [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())", *args]


def read_results(tree: Path, files: list[str], patterns: list[str]) -> list[MutmutMutant]:
    out = []
    for file in files:
        meta = tree / "mutants" / f"{file}.meta"
        if not meta.is_file():
            continue
        data = json.loads(meta.read_text(encoding="utf-8"))
        durations = data.get("durations_by_key", {})
        for name, code in data["exit_code_by_key"].items():
            if patterns and not any(_fnmatch(name, p) for p in patterns):
                continue
            status = STATUS_BY_EXIT_CODE.get(code, "suspicious")
            out.append(MutmutMutant(name, file, status, duration=durations.get(name)))
    return out


def _fnmatch(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


# mutmut's own generation step of `mutmut run` (mutmut/__main__.py _run), without its test runs.
_GENERATE_SCRIPT = """
import os, sys
from mutmut.__main__ import create_mutants, store_lines_covered_by_tests
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
os.makedirs("mutants", exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
store_lines_covered_by_tests()
create_mutants(int(sys.argv[1]))
"""


def generate(tree: Path, scratch: Scratch, timeout: float, jobs: int = 1) -> None:
    """mutmut's mutants generated in `tree` (prepared) by `jobs` processes, no test run: `mutmut run` there later
    reuses them."""
    generated = scratch.run(
        [sys.executable, "-c", _GENERATE_SCRIPT, str(jobs)], cwd=tree, env=_env(), timeout=timeout
    )
    if generated.returncode is None:
        raise MutmutError(f"mutmut's mutant generation ran past {timeout:.0f} s")
    if generated.returncode != 0:
        raise MutmutError(f"mutmut could not generate its mutants:\n{_clean_tail(generated.output)}")


_DIFFS_SCRIPT = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
names = json.load(open(sys.argv[1]))
out = {}
for name, path in names.items():
    try:
        out[name] = get_diff_for_mutant(name, path=path)
    except Exception as exc:  # one unreadable mutant must not lose the others' diffs
        out[name] = ""
json.dump(out, open(sys.argv[2], "w"))
"""


def locate(tree: Path, mutants: list[MutmutMutant], scratch: Scratch, timeout: float) -> list[MutmutMutant]:
    """file:line, original and mutated line of each mutant, from mutmut's own diffs (read in one process)."""
    if not mutants:
        return mutants
    names, diffs_path = tree / ".falsify-names.json", tree / ".falsify-diffs.json"
    names.write_text(json.dumps({m.name: m.file for m in mutants}), encoding="utf-8")
    finished = scratch.run(
        [sys.executable, "-c", _DIFFS_SCRIPT, str(names), str(diffs_path)],
        cwd=tree,
        env=_env(),
        timeout=timeout,
    )
    diffs = json.loads(diffs_path.read_text(encoding="utf-8")) if diffs_path.is_file() else {}
    if finished.returncode != 0:
        print(
            f"mutmut: could not read mutmut's diffs (exit {finished.returncode}); survivors listed without lines"
        )
    sources: dict[str, list[str]] = {}
    out = []
    for m in mutants:
        lines = sources.setdefault(m.file, (tree / m.file).read_text(encoding="utf-8").splitlines())
        out.append(_with_line(m, diffs.get(m.name, ""), lines))
    return out


def _with_line(m: MutmutMutant, diff: str, lines: list[str]) -> MutmutMutant:
    removed = [d[1:] for d in diff.splitlines() if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
    if not removed and not added:
        return m
    original = removed[0] if removed else ""
    start = _function_line(m, lines)
    line = 0
    if original.strip():
        # The diff is of the function alone: find its removed line in the file, from the function's first line on.
        for i in range(max(start - 1, 0), len(lines)):
            if lines[i].strip() == original.strip():
                line = i + 1
                break
    return MutmutMutant(
        m.name,
        m.file,
        m.status,
        line or start,
        original.strip(),
        (added[0] if added else "").strip(),
        m.duration,
    )


def _function_line(m: MutmutMutant, lines: list[str]) -> int:
    mangled = m.name.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("x" + CLASS_SEPARATOR):
        cls, _, fn = mangled[2:].partition(CLASS_SEPARATOR)
        start = next((i for i, t in enumerate(lines) if re.match(rf"class {re.escape(cls)}\b", t)), 0)
    else:
        fn, start = mangled.removeprefix("x_"), 0
    for i in range(start, len(lines)):
        if re.match(rf"\s*(async\s+)?def {re.escape(fn)}\(", lines[i]):
            return i + 1
    return 1


def _env() -> dict[str, str]:
    import os

    env = os.environ.copy()
    env["HYPOTHESIS_PROFILE"] = "mutation"
    env.pop("PYTHONPATH", None)  # mutmut puts ./mutants first itself; nothing else may shadow it
    return env


def run_mutmut(
    project: Project,
    config: MutmutConfig,
    *,
    since: str | None,
    jobs: int,
    progress: Any = print,
    recheck: Baseline | None = None,
    in_shards: Callable[[MutmutRun], MutmutRun] | None = None,
    skip_listed: Baseline | None = None,
    sample: tuple[int, int] | None = None,
) -> MutmutRun:
    """mutmut over the configured files (or the --since / --recheck subset): with its own parallelism (`jobs`
    children), or handed to `in_shards` once chosen (sharded.py: shards on an executor). With `skip_listed`, a
    whole run generates the mutants first, locates them, and runs only those the baseline lists neither as
    equivalent nor as survivors; the listed ones come back as LISTED_NOT_RUN. With `sample` (K, N), a whole run
    generates and locates every mutant and runs only those of sample K (in_sample); the others come back as
    NOT_SAMPLED."""
    files = sorted(
        {
            str(p.relative_to(project.root))
            for pattern in config.paths
            for p in project.root.glob(pattern)
            if p.suffix == ".py"
        }
    )
    if not files:
        raise MutmutError(f"[tool.falsify.mutmut] paths {list(config.paths)} match no Python file")
    run = MutmutRun(config, files, since=since, sample=sample)
    if sample is not None and (recheck is not None or since or in_shards is not None):
        raise MutmutError(
            "--sample draws from a whole run on mutmut's own children: not with --since, --recheck or --executor"
        )
    if recheck is not None:
        # mutmut's names are the current code's right after a whole run; an entry whose name no longer exists is
        # simply not run (and a whole run reports it as gone).
        run.recheck = True
        run.patterns = sorted({e.mutant for e in recheck.survivors})
        modules = {".".join(Path(f).with_suffix("").parts): f for f in files}
        run.files = sorted({modules[m] for m in (p.rpartition(".")[0] for p in run.patterns) if m in modules})
        if not run.patterns:
            progress(f"mutmut: {recheck.path} lists no survivor; nothing to recheck")
            return run
        progress(f"mutmut: rechecking the {len(run.patterns)} survivors {recheck.path} lists")
    elif since:
        changed = changed_lines(project.root, since, files)
        run.patterns = function_patterns(project.root, changed)
        run.files = sorted({f for f in changed if f in files})
        if not run.patterns:
            progress(f"mutmut: no function of {', '.join(files)} changed since {since}; nothing to mutate")
            return run
        progress(f"mutmut: {len(run.patterns)} functions changed since {since} in {', '.join(run.files)}")
    if in_shards is not None:
        return in_shards(run)
    start = time.perf_counter()
    with Scratch(project.root, prefix="falsify-mutmut-", exclude=project.copy_exclude) as scratch:
        tree = scratch.copy("project")
        prepare(tree, project, config, run.files)
        progress(f"mutmut: mutating {', '.join(run.files)} in {tree}, tests {', '.join(config.tests)}")
        located: dict[str, MutmutMutant] = {}
        listed: set[str] = set()
        names = list(run.patterns)
        outside: set[str] = set()
        if sample is not None or (skip_listed is not None and sets_aside(run, skip_listed)):
            generate(tree, scratch, config.timeout, jobs)  # as `mutmut run` would; it reuses them
            located, listed = set_listed_aside(
                tree, scratch, run, skip_listed or Baseline(config.baseline), progress
            )
            if sample is not None:
                outside = set_sample_aside(located, listed, sample, progress)
            if listed or outside:
                names = [n for n in located if n not in listed and n not in outside]
        log = ""
        # an empty name list would run every mutant: when all are set aside, mutmut is not run at all
        if not (listed or outside) or names:
            args = ["run", "--max-children", str(jobs), *names]
            done = threading.Event()
            watcher = threading.Thread(
                target=_report_progress, args=(tree, run, done, progress, listed | outside), daemon=True
            )
            watcher.start()
            try:
                finished = scratch.run(mutmut_command(*args), cwd=tree, env=_env(), timeout=config.timeout)
            finally:
                done.set()
                watcher.join()
            log = finished.output
            if finished.returncode is None:
                raise MutmutError(
                    f"mutmut ran past its timeout of {config.timeout:.0f} s ([tool.falsify.mutmut] "
                    "timeout); narrow paths or tests"
                )
            if finished.returncode != 0:
                raise MutmutError(failure(tree, scratch, args, finished.returncode, log, config.timeout))
        mutants = read_results(tree, run.files, run.patterns)
        if not mutants:
            raise MutmutError(f"mutmut reported no mutant:\n{_clean_tail(log)}")
        if located:
            run.mutants = with_results(located, listed, mutants, outside)
        else:
            run.mutants = locate(tree, mutants, scratch, timeout=600)
    run.seconds = time.perf_counter() - start
    return run


def sets_aside(run: MutmutRun, baseline: Baseline) -> bool:
    """Whether this run leaves out what `baseline` lists: a whole run, and a baseline that lists any mutant."""
    return not run.partial and bool(baseline.equivalent or baseline.survivors)


def set_listed_aside(
    tree: Path, scratch: Scratch, run: MutmutRun, baseline: Baseline, progress: Any
) -> tuple[dict[str, MutmutMutant], set[str]]:
    """In a tree whose mutants are generated: every mutant, located, by name (mutmut's order), and the names of
    those `baseline` lists, which the run does not run."""
    located = {m.name: m for m in locate(tree, read_results(tree, run.files, []), scratch, timeout=600)}
    listed = {n for n, m in located.items() if baseline.is_equivalent(m) or baseline.is_known_survivor(m)}
    if listed:
        equivalent = sum(baseline.is_equivalent(located[n]) for n in listed)
        progress(
            f"mutmut: {len(listed)} of {len(located)} mutants are listed in {baseline.path} ({equivalent} as "
            f"equivalent, {len(listed) - equivalent} as survivors) and are not run; they count as surviving "
            "(--run-listed runs them)"
        )
    return located, listed


def in_sample(name: str, sample: tuple[int, int]) -> bool:
    """Whether mutant `name` is in sample K of N: the CRC-32 of its name, mod N, is K - 1. The N samples
    partition the mutants; a mutant stays in its sample while mutmut keeps its name (its function unchanged)."""
    k, n = sample
    return zlib.crc32(name.encode()) % n == k - 1


def set_sample_aside(
    located: dict[str, MutmutMutant], listed: set[str], sample: tuple[int, int], progress: Any
) -> set[str]:
    """The names of the mutants outside `sample`, which the run does not run."""
    outside = {n for n in located if not in_sample(n, sample)}
    inside = len(located) - len(outside)
    progress(
        f"mutmut: --sample {sample[0]}/{sample[1]}: {inside} of {len(located)} mutants are in the sample "
        f"({len(set(located) - outside - listed)} to run, {len(listed - outside)} listed in the baseline); "
        f"the {len(outside)} others are not run"
    )
    return outside


def with_results(
    located: dict[str, MutmutMutant],
    listed: set[str],
    results: list[MutmutMutant],
    outside: set[str] | None = None,
) -> list[MutmutMutant]:
    """The run's results, in their order, with the lines `located` found before the run (not read again); the
    listed mutants as LISTED_NOT_RUN, those outside the sample as NOT_SAMPLED."""
    out = []
    for m in results:
        where = located.get(m.name, m)
        if outside and m.name in outside:
            out.append(dataclasses.replace(where, status=NOT_SAMPLED, duration=None))
        elif m.name in listed:
            out.append(dataclasses.replace(where, status=LISTED_NOT_RUN, duration=None))
        else:
            out.append(dataclasses.replace(where, status=m.status, duration=m.duration))
    return out


def _report_progress(
    tree: Path,
    run: MutmutRun,
    done: threading.Event,
    progress: Any,
    not_run: set[str],
    every: float = 30.0,
) -> None:
    """A line every `every` seconds while mutmut runs, from its .meta files: mutmut's own spinner is not a log.
    The mutants of `not_run` (listed in the baseline, set aside) are not counted."""
    start = time.perf_counter()
    while not done.wait(every):
        try:
            mutants = [m for m in read_results(tree, run.files, run.patterns) if m.name not in not_run]
        except (OSError, ValueError):  # a .meta file being rewritten
            continue
        counts = Counter(m.status for m in mutants)
        checked = len(mutants) - counts["not checked"]
        phase = (
            f"{checked}/{len(mutants)} mutants checked"
            if mutants
            else "generating mutants, running clean tests"
        )
        detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "not checked")
        progress(f"mutmut: {time.perf_counter() - start:.0f} s: {phase}" + (f" ({detail})" if detail else ""))


# mutmut's steps before any mutant runs, by the title its spinner prints for each.
PHASES = {
    "Generating mutants": "generating its mutants",
    "Running stats": "its stats run (which tests reach which function)",
    "Running clean tests": "its clean run of the tests",
    "Running forced fail test": "its forced-failure check (every mutated function raises; some test must fail)",
}


def failure(tree: Path, scratch: Scratch, args: list[str], returncode: int, log: str, timeout: float) -> str:
    """Why `mutmut ARGS` exited `returncode` in `tree`: the step it was in, and pytest's own output when pytest
    could not run the tests (exit 4), which mutmut shows only with debug = true, so it is run again so."""
    phase = max(PHASES, key=log.rfind) if any(t in log for t in PHASES) else None
    head = f"mutmut exited {returncode}" + (f" in {PHASES[phase]}" if phase else "")
    if "BadTestExecutionCommandsException" in log:
        said = _pytest_output_in_debug(tree, scratch, args, timeout)
        if said:
            return (
                f"{head}: pytest could not run the tests (exit 4, a usage error) in mutmut's copy of the project "
                f"(mutants/, the sources mutated). pytest said:\n{said}"
            )
    return f"{head}:\n{_clean_tail(log)}"


def _pytest_output_in_debug(tree: Path, scratch: Scratch, args: list[str], timeout: float) -> str:
    """The last pytest run's command and output in `mutmut ARGS` run again in `tree` with debug = true."""
    with (tree / "setup.cfg").open("a", encoding="utf-8") as f:
        f.write("debug = true\n")  # the [mutmut] section prepare() wrote is the file's last
    again = scratch.run(mutmut_command(*args), cwd=tree, env=_env(), timeout=timeout)
    lines = [line for line in re.split(r"[\r\n]+", again.output) if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("python -m pytest ")]
    if not starts:
        return ""
    run = lines[starts[-1] :]
    # pytest's output ends at mutmut's "exit code N" (a spinner frame may share its line, under load), before
    # mutmut's own traceback at the latest
    ends = [i for i, line in enumerate(run) if re.match(r"\s*exit code -?\d+", line)]
    ends += [i - 1 for i, line in enumerate(run) if line.lstrip().startswith("Traceback")]
    end = min(ends, default=len(run) - 1)
    return "\n".join(f"  {line.strip()}" for line in run[: end + 1][-40:])


def _clean_tail(log: str, n: int = 20) -> str:
    lines = [line for line in re.split(r"[\r\n]+", log) if line.strip()]
    return "\n".join(lines[-n:])
