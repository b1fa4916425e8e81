"""A mutant can never write outside its scratch copy (issue #19): a symlinked source, an absolute path and `../`
are refused by lint and again where the path is used; a scratch copy holds no link to a file; scratch dirs of a
killed run are swept by the next one; SIGINT works even when the caller ignored it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from falsify.contracts.corpus import Mutant, load_corpus
from falsify.mutation.semantic.runner import MutantOutcome, Runner, Settings
from falsify.mutation.semantic.scratch import GROUPS, OWNER, Scratch, scratch_root
from falsify.project import find_project, source_problem

ROOT = Path(__file__).resolve().parent.parent.parent
TOY = ROOT / "tests" / "fixtures" / "mutants" / "toy"


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    outside = tmp_path / "outside.py"
    outside.write_text((root / "toy" / "loop.py").read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.chdir(root)
    return root


def mutant_file(root: Path, file: str) -> None:
    (root / "mutants" / "poll-deleted.yaml").write_text(
        f"id: poll-deleted\ndescription: d\nfile: {file}\nfunction: generate\nop: delete\n"
        'statement: "if budget.cancelled():"\nkills: [FALSIFY-TOY-001]\n',
        encoding="utf-8",
    )


def linked_source(root: Path) -> Path:
    """toy/loop.py made an absolute symlink to a file outside the project (the probe's case)."""
    outside = root.parent / "outside.py"
    (root / "toy" / "loop.py").unlink()
    (root / "toy" / "loop.py").symlink_to(outside)
    return outside


@pytest.mark.parametrize(
    ("file", "fragment"),
    [
        ("../outside.py", "climbs out"),
        ("toy/../../outside.py", "climbs out"),
        ("ABSOLUTE", "is absolute"),
        ("~/outside.py", "does not match"),  # the schema's pattern answers first
        ("toy", "does not match"),
        ("toy/loop.py/", "does not match"),
        ("toy/nope.py", "does not exist"),
        ("LINKED", "is a symlink"),
        ("LINKED_DIR", "is a symlink"),
    ],
)
def test_lint_refuses_a_mutant_path_outside_the_project(toy: Path, file: str, fragment: str) -> None:
    if file == "ABSOLUTE":
        file = str(toy.parent / "outside.py")
    elif file == "LINKED":
        linked_source(toy)
        file = "toy/loop.py"
    elif file == "LINKED_DIR":
        (toy / "elsewhere").symlink_to(toy.parent)
        file = "elsewhere/outside.py"
    mutant_file(toy, file)
    corpus = load_corpus([toy / "contracts", toy / "mutants"])
    problems = [p for p in corpus.problems if p.rule in ("mutant-file", "pattern") and p.path == "file"]
    assert problems and fragment in problems[0].message, [str(p) for p in corpus.problems]
    assert not any(m.id == "poll-deleted" for m in corpus.mutants)


def test_the_runner_refuses_it_too_and_writes_nothing(toy: Path) -> None:
    """Bypassing lint (a Mutant built by hand), the runner still refuses before reading or writing."""
    outside = linked_source(toy)
    before = outside.read_bytes()
    project = find_project(toy)
    corpus = load_corpus([toy / "contracts"])
    for file in ("toy/loop.py", "../outside.py", str(outside)):
        m = Mutant("poll-deleted", "d", file, "generate", "delete", "if budget.cancelled():", None, None, None,
                   ("FALSIFY-TOY-001",), "mutants/poll-deleted.yaml", 1)  # fmt: skip
        with Scratch(project.root) as scratch:
            result = Runner(project, corpus, Settings(), progress=lambda line: None).run_mutant(
                scratch, m, 30
            )
        assert result.outcome is MutantOutcome.ERROR, result
        assert "file:" in result.detail
    assert outside.read_bytes() == before


def test_a_scratch_copy_holds_no_link_to_a_file(toy: Path) -> None:
    outside = linked_source(toy)
    before = outside.read_bytes()
    (toy / "dev").symlink_to("/dev/zero")
    (toy / "loop-dir").symlink_to(toy)
    with Scratch(toy) as scratch:
        tree = scratch.copy("m")
        copied = tree / "toy" / "loop.py"
        assert not copied.is_symlink() and copied.read_bytes() == before
        assert source_problem(tree, "toy/loop.py") is None
        copied.write_text("# mutated\n", encoding="utf-8")
        assert not (tree / "dev").exists() and not (tree / "loop-dir").exists()
        assert tree.resolve().is_relative_to(scratch_root().resolve())
    assert outside.read_bytes() == before


def test_end_to_end_a_linked_source_is_refused_and_left_unchanged(toy: Path) -> None:
    outside = linked_source(toy)
    before = outside.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutants", "--engine", "toy.engine:ToyEngine"],
        cwd=toy,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "is a symlink" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert outside.read_bytes() == before


def test_a_killed_run_is_swept_by_the_next(toy: Path) -> None:
    root = scratch_root()
    dead = root / "falsify-mutants-dead"
    (dead / "copy").mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (dead / OWNER).write_text(str(gone.pid), encoding="ascii")
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], cwd=dead / "copy", start_new_session=True
    )
    bystander = subprocess.Popen(  # same kind of process, elsewhere: must survive the sweep
        [sys.executable, "-c", "import time; time.sleep(120)"], cwd=toy, start_new_session=True
    )
    (dead / GROUPS).write_text(f"{orphan.pid}\n{bystander.pid}\n", encoding="ascii")
    try:
        with Scratch(toy) as scratch:
            assert dead in scratch.swept
            assert not dead.exists()
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None
    finally:
        for proc in (orphan, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_sigint_is_honoured_when_the_caller_ignored_it(tmp_path: Path) -> None:
    """As under nohup or a CI runner's background job: SIGINT arrives ignored, the CLI restores it."""
    script = (
        "import signal, sys, time\n"
        "from falsify import cli\n"
        "cli.main(['lint', sys.argv[1]])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while "ready" not in proc.stdout.readline() and time.monotonic() < deadline:
        pass
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
