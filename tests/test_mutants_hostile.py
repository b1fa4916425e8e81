"""Hostile mutant files: every field a mutant YAML can carry, at its worst, gives one line naming the file and the
field (`falsify lint` exit 1, `falsify mutants` exit 2 before anything runs), never a traceback, a hang or
unbounded memory; and whatever `falsify mutants` starts ends with it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from testkit_gate_cli import run_cli

from falsify.contracts.corpus import Mutant
from falsify.mutation.semantic import report, scratch, spec, targets
from falsify.mutation.semantic.edits import Edit, MutantSpecError, apply
from falsify.mutation.semantic.matching import match_problems
from falsify.mutation.semantic.runner import Control, MutantOutcome, MutantResult, Run, Settings
from falsify.project import Project

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "VOCAB = 64\n\n\ndef step(cancel, out):\n    if cancel:\n        return out\n    out.append(1)\n    return out\n"


def text(regex: str | None = None, snippet: str | None = None, replacement: str = "b") -> Edit:
    return Edit("", "text", "", replacement=replacement, snippet=snippet, regex=regex)


# -- regexes: every way re refuses one, and one that never finishes, in any thread ------------------------------


@pytest.mark.parametrize(
    "regex",
    [
        "a{4294967295}",  # OverflowError, not re.error
        "(unclosed",
        "x{2,1}",
        "(?<=a+)b",  # look-behind of no fixed width
        "\\",
        "(?P<n>a)(?P<n>b)",
        "(" * 5000 + "a" + ")" * 5000,  # RecursionError in re's parser
    ],
    ids=[
        "repeat-overflow",
        "unclosed",
        "min-over-max",
        "variable-lookbehind",
        "trailing-escape",
        "dup-group",
        "deep",
    ],
)
def test_a_regex_re_refuses_is_a_spec_error_naming_the_regex_field(regex: str) -> None:
    with pytest.raises(MutantSpecError) as caught:
        targets.text_hits(SOURCE, text(regex))
    assert caught.value.field == "regex"
    assert "\n" not in str(caught.value)


def test_a_regex_that_never_finishes_is_bounded_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """falsify mutants applies each mutant in a worker thread, where no real-time timer reaches: the bound must
    hold there too (it used to fall back to an unbounded search)."""
    monkeypatch.setattr(targets, "REGEX_SECONDS", 0.5)
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(targets.text_hits, "a" * 40 + "!\n", text("^(a|a)*$"))
        with pytest.raises(MutantSpecError, match="without finishing"):
            future.result(timeout=30)
    assert time.monotonic() - started < 10


def test_a_regex_that_matches_everywhere_is_refused_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "MAX_HITS", 50)
    with pytest.raises(MutantSpecError, match="more than 50 places"):
        targets.text_hits("x" * 1000, text("x"))
    with pytest.raises(MutantSpecError, match="more than 50 places"):
        targets.text_hits("x" * 1000, text(snippet="x"))


# -- replacements ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "replacement", ["# nothing", "\n\n", "# a\n# b\n"], ids=["comment", "blank", "comments"]
)
@pytest.mark.parametrize("op", ["replace", "insert"])
def test_a_replacement_with_no_statement_is_a_spec_error(op: str, replacement: str) -> None:
    edit = Edit("step", op, "out.append(1)", anchor="return out" if op == "insert" else None, where="before")
    edit = Edit(
        edit.function, op, edit.statement, edit.anchor, edit.where if op == "insert" else None, replacement
    )
    with pytest.raises(MutantSpecError, match="no statement") as caught:
        apply(SOURCE.replace("        return out\n", "        pass\n"), edit, "m.py")
    assert caught.value.field == "replacement"


@pytest.mark.parametrize("replacement", ["def ((:", "VOCAB = (", "\x00", "  VOCAB = 65\n x"])
def test_op_text_that_leaves_a_python_file_unparseable_is_a_spec_error(replacement: str) -> None:
    with pytest.raises(MutantSpecError, match="does not parse as Python") as caught:
        apply(SOURCE, text(snippet="VOCAB = 64", replacement=replacement), "engine.py")
    assert caught.value.field == "replacement"
    apply(SOURCE, text(snippet="VOCAB = 64", replacement=replacement), "engine.js")  # any text for a .js


# -- command lines --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('sh -c "echo', "No closing quotation"),
        ("make \\", "No escaped character"),
        ("make\x00all", "NUL byte"),
        ("   ", "names no command"),
        ("", "names no command"),
    ],
    ids=["unclosed-quote", "trailing-escape", "nul", "blank", "empty"],
)
def test_a_build_line_no_shell_could_split_is_named(line: str, why: str) -> None:
    with pytest.raises(MutantSpecError, match=why) as caught:
        spec.split_line(line, "build")
    assert caught.value.field == "build"


# -- targets ----------------------------------------------------------------------------------------------------


def _project(tmp_path: Path, files: dict[str, bytes]) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\ncontracts = "contracts"\n', encoding="utf-8")
    (tmp_path / "mutants").mkdir()
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return tmp_path


def _mutant(root: Path, file: str, op: str = "text", **fields: str | None) -> Mutant:
    path = root / "mutants" / "m.yaml"
    lines = ["id: m", "description: d", f"file: {file}", f"op: {op}", "kills: [FALSIFY-X-001]"]
    lines += [f"{k}: {v!r}" for k, v in fields.items() if v is not None]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Mutant(
        "m",
        "d",
        file,
        fields.get("function") or "",
        op,
        fields.get("statement") or "",
        fields.get("anchor"),
        fields.get("where"),
        fields.get("replacement"),
        ("FALSIFY-X-001",),
        str(path),
        1,
        fields.get("snippet"),
        fields.get("regex"),
        fields.get("build"),
        fields.get("engine"),
    )


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xfeab\x00", "not UTF-8 text"),
        (b"VOCAB = 64\n" + "é".encode()[:1] + b"\n", "not UTF-8 text"),
        (b"#" * (spec.MAX_TEXT_BYTES + 1), "over the 1024 KiB"),
    ],
    ids=["binary", "cut-utf8", "too-large"],
)
def test_a_target_that_is_not_text_or_too_large_is_named_on_the_file_field(
    tmp_path: Path, data: bytes, why: str
) -> None:
    root = _project(tmp_path, {"eng/data.txt": data})
    m = _mutant(root, "eng/data.txt", snippet="ab", replacement="cd")
    with pytest.raises(MutantSpecError, match=why) as caught:
        spec.read_target(root, m)
    assert caught.value.field == "file"
    (problem,) = match_problems([m])
    assert (problem.path, problem.rule) == ("file", "mutant-match")
    assert why in problem.message and "\n" not in str(problem)


def test_lint_bounds_a_statement_ops_target_before_parsing_it(tmp_path: Path) -> None:
    """libcst parses the whole module at ~45 µs a byte: a 600 KB target took lint 31 s."""
    body = "".join(f"    x{i} = {i}\n" for i in range(spec.MAX_PYTHON_BYTES // 12))
    root = _project(tmp_path, {"big.py": f"def f():\n{body}    return 1\n".encode()})
    m = _mutant(root, "big.py", op="delete", function="f", statement="return 1")
    started = time.monotonic()
    (problem,) = match_problems([m])
    assert time.monotonic() - started < 5
    assert problem.path == "file" and "over the 256 KiB" in problem.message


@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"regex": "a{4294967295}"}, "regex", "OverflowError"),
        ({"regex": "(x"}, "regex", "does not compile"),
        ({"snippet": "VOCAB = 64", "build": 'sh -c "echo'}, "build", "No closing quotation"),
        ({"snippet": "VOCAB = 64", "build": "make\x00"}, "build", "NUL byte"),
        ({"snippet": "VOCAB = 64", "engine": "exec:'node"}, "engine", "No closing quotation"),
        ({"snippet": "VOCAB = 64", "replacement_": "def ((:"}, "replacement", "does not parse as Python"),
    ],
    ids=["regex-overflow", "regex-unclosed", "build-quote", "build-nul", "engine-quote", "py-unparseable"],
)
def test_lint_names_each_hostile_op_text_field(
    tmp_path: Path, fields: dict[str, str], field: str, why: str
) -> None:
    root = _project(tmp_path, {"eng/engine.py": SOURCE.encode()})
    replacement = fields.pop("replacement_", "VOCAB = 65")
    m = _mutant(root, "eng/engine.py", replacement=replacement, **fields)
    problems = match_problems([m])
    assert [p.path for p in problems] == [field], problems
    assert why in problems[0].message
    assert problems[0].line == next(
        i
        for i, line in enumerate(Path(m.path).read_text("utf-8").splitlines(), 1)
        if line.startswith(f"{field}:")
    )


def test_lint_names_a_replacement_that_is_only_a_comment(tmp_path: Path) -> None:
    root = _project(tmp_path, {"eng/engine.py": SOURCE.encode()})
    m = _mutant(
        root, "eng/engine.py", op="replace", function="step", statement="if cancel:", replacement="# x"
    )
    (problem,) = match_problems([m])
    assert (problem.path, problem.rule) == ("replacement", "mutant-spec")


def test_preflight_names_a_build_program_that_does_not_exist(tmp_path: Path) -> None:
    root = _project(tmp_path, {"eng/engine.py": SOURCE.encode(), "build.sh": b"#!/bin/sh\n"})
    missing = _mutant(
        root, "eng/engine.py", snippet="VOCAB = 64", replacement="VOCAB = 65", build="/nonexistent/b"
    )
    assert [f for f, _ in spec.preflight(missing, root)] == ["build"]
    not_executable = _mutant(
        root, "eng/engine.py", snippet="VOCAB = 64", replacement="VOCAB = 65", build="./build.sh"
    )
    assert [f for f, _ in spec.preflight(not_executable, root)] == ["build"]
    (root / "build.sh").chmod(0o755)
    assert spec.preflight(not_executable, root) == []


# -- processes: output, leftovers, engines ----------------------------------------------------------------------


def test_a_flooding_command_keeps_only_the_tail_of_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "OUTPUT_KEPT", 4096)
    flood = "import sys\nfor i in range(200000): sys.stdout.write(f'line {i}\\n')\nprint('the end')"
    with scratch.Scratch(_project(tmp_path, {})) as s:
        finished = s.run([sys.executable, "-c", flood], cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert finished.returncode == 0
    assert len(finished.output) < 4096 + 100
    assert finished.output.startswith("[") and "bytes of output before these not kept]" in finished.output
    assert finished.output.rstrip().endswith("the end")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextlib.contextmanager
def _shell_in_scratch(tmp_path: Path, script: str) -> Iterator[tuple[scratch.Finished, float]]:
    """`sh -c SCRIPT` run by a scratch copy's runner: what it returned and the seconds it took, inside the copy."""
    with scratch.Scratch(_project(tmp_path, {})) as s:
        started = time.monotonic()
        finished = s.run(["sh", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout=30)
        yield finished, time.monotonic() - started


def test_what_a_command_leaves_running_in_its_group_is_ended_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with _shell_in_scratch(tmp_path, f"sleep 300 & echo $! > {pidfile}; exit 0") as (finished, seconds):
        assert finished.returncode == 0 and seconds < 10
        leftover = int(pidfile.read_text())
        time.sleep(0.2)
        assert not _alive(leftover)


def test_a_process_that_leaves_the_group_holding_the_pipe_does_not_hang_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; echo started"
    with _shell_in_scratch(tmp_path, script) as (finished, seconds):
        pass
    try:
        assert seconds < 20
        assert "started" in finished.output
    finally:
        os.kill(int(pidfile.read_text()), 9)


ENGINE_TEST = """
import os, subprocess
def test_starts_an_engine():
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.environ["FALSIFY_ENGINE_GROUPS"], "a") as f:  # as falsify/engines/wire/transports.py does
        f.write(f"{proc.pid}\\n")
    with open("engine.pid", "w") as f:
        f.write(str(proc.pid))
"""


@pytest.mark.parametrize("forked", [False, True], ids=["subprocess", "forkserver"])
def test_a_wire_engine_a_pytest_run_started_ends_with_the_run(tmp_path: Path, forked: bool) -> None:
    """An exec: engine runs in a session of its own (out of pytest's process group): `exec:sleep 1000` outlived
    falsify mutants. Its group, as the wire transport records it, goes when the pytest run ends."""
    root = _project(tmp_path, {"test_engine.py": ENGINE_TEST.encode()})
    with scratch.Scratch(root) as s:
        if forked:
            assert s.start_forkserver()
        argv = ["-q", "-p", "no:cacheprovider", "test_engine.py"]
        finished = s.run_pytest(argv, cwd=root, env=dict(os.environ), timeout=120)
        assert finished.returncode == 0, finished.output
        engine = int((root / "engine.pid").read_text())
        time.sleep(0.2)
        assert not _alive(engine)


# -- the verdict ------------------------------------------------------------------------------------------------


def _timeout_run(tmp_path: Path, outcomes: list[MutantOutcome], timeout: float | None) -> Run:
    project = Project(tmp_path, tmp_path / "contracts", tmp_path / "mutants", tmp_path / "tests")
    from falsify.contracts.corpus import Corpus

    run = Run(project, Corpus(), Settings(timeout=timeout), jobs=1, wall=1.0)
    run.control = Control(True, 1.0, {"t.py::a": ("P-001",)}, [], "", {}, ("t.py::a",))
    m = _mutant(_project(tmp_path, {"pkg/mod.py": b"def f():\n    x = 1\n"}), "pkg/mod.py", op="delete")
    run.results = [MutantResult(m, outcome, seconds=0.01) for outcome in outcomes]
    return run


def test_a_run_whose_mutants_all_timed_out_is_no_pass(tmp_path: Path) -> None:
    """--timeout 0.01: every mutant TIMEOUT, none killed, used to be `mutants: PASS`, exit 0."""
    text, ok = report.verdict(_timeout_run(tmp_path, [MutantOutcome.TIMEOUT], 0.01))
    assert not ok
    assert text.startswith("mutants: FAIL")
    assert (
        "1 of 1 applied timed out (--timeout 0.01 s): a timeout is not a kill, and no mutant was killed"
        in text
    )
    assert "killed 0 of 1 applied" in text


def test_a_timeout_beside_a_kill_still_passes_and_is_counted_apart(tmp_path: Path) -> None:
    text, ok = report.verdict(_timeout_run(tmp_path, [MutantOutcome.KILLED, MutantOutcome.TIMEOUT], None))
    assert ok, text
    assert "1 of 2 applied timed out" in text and "killed 1 of 2 applied" in text


# -- the command ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init")
    subprocess.run([sys.executable, "-m", "falsify.cli", "init"], cwd=root, check=True, capture_output=True)
    return root


HEAD = "id: example-poll-after-forward\ndescription: x\nkills: [FALSIFY-EXAMPLE-CANCEL-001]\n"
TEXT = HEAD + "file: example_engine/engine.py\nop: text\n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (TEXT + "regex: 'a{4294967295}'\nreplacement: b\n", "regex"),
        (TEXT + "snippet: 'VOCAB = 64'\nreplacement: 'VOCAB = 65'\nbuild: /nonexistent/build\n", "build"),
        (TEXT + "snippet: 'VOCAB = 64'\nreplacement: 'VOCAB = 65'\nbuild: 'sh -c \"echo'\n", "build"),
        (TEXT + "snippet: 'VOCAB = 64'\nreplacement: 'VOCAB = 65'\nbuild: \"make\\0\"\n", "build"),
        (TEXT + "snippet: 'VOCAB = 64'\nreplacement: 'def ((:'\n", "replacement"),
        (TEXT.replace("engine.py", "data.bin") + "snippet: ab\nreplacement: cd\n", "file"),
        (
            HEAD + "file: example_engine/engine.py\nfunction: Session.generate\nop: replace\n"
            "statement: 'if cancel.is_cancelled():'\nreplacement: '# nothing'\n",
            "replacement",
        ),
    ],
    ids=[
        "regex-overflow",
        "build-missing",
        "build-quote",
        "build-nul",
        "py-unparseable",
        "binary",
        "comment-only",
    ],
)
def test_falsify_mutants_refuses_a_hostile_mutant_on_one_line_exit_2(
    initialised: Path, tmp_path: Path, body: str, field: str
) -> None:
    import shutil

    root = tmp_path / "p"
    shutil.copytree(initialised, root)
    (root / "example_engine" / "data.bin").write_bytes(b"\xff\xfeab\x00")
    (root / "mutants" / "example-poll-after-forward.yaml").write_text(body, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    done = run_cli("mutants", "--timeout", "20", cwd=root, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("mutants/example-poll-after-forward.yaml:") and f": {field}: " in first
    assert done.stdout.splitlines()[1] == "mutants: 1 problem(s) in the mutant files; no mutant was run"
