"""`falsify mutants` end to end on a throwaway project (tests/fixtures/mutants/toy, copied to a tmp dir and put
under git): real pytest runs in scratch copies, no mocks. Each test reads the CLI as a user would."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

TOY = Path(__file__).parent / "fixtures" / "mutants" / "toy"
SCHEMA = (
    Path(__file__).parent / "data" / "mutation-testing-report-schema" / "mutation-testing-report-schema.json"
)
ENGINE = ["--engine", "toy.engine:ToyEngine"]


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "toy"]):
        subprocess.run([*git, *cmd], cwd=root, check=True, capture_output=True)
    (tmp_path / "tmp").mkdir()
    return root


def env_for(root: Path) -> dict[str, str]:
    # Scratch copies go to a TMPDIR of the test's own, so the test can see that none is left behind.
    return {**os.environ, "TMPDIR": str(root.parent / "tmp"), "PYTHONHASHSEED": "0"}


def falsify(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutants", *ENGINE, *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env_for(root),
        timeout=timeout,
        check=False,
    )


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file of the working tree (git's own data and our gitignored output excluded)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not {".git", ".falsify"} & set(p.relative_to(root).parts)
    }


def assert_untouched(root: Path, before: dict[str, str]) -> None:
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    assert snapshot(root) == before
    assert list((root.parent / "tmp").iterdir()) == [], "a scratch copy was left behind"


def add_poll_deleted(root: Path) -> None:
    """poll-deleted: the poll deleted, a mutant that kills FALSIFY-TOY-001 but also claims FALSIFY-TOY-002, which it
    cannot break (forwards still equal emitted)."""
    add_mutant(root, "poll-deleted", "FALSIFY-TOY-002", "")
    (root / "mutants" / "poll-deleted.yaml").write_text(
        "id: poll-deleted\ndescription: never polled\nfile: toy/loop.py\nfunction: generate\nop: delete\n"
        'statement: "if budget.cancelled():"\nkills: [FALSIFY-TOY-001, FALSIFY-TOY-002]\n',
        encoding="utf-8",
    )


def add_mutant(root: Path, mutant_id: str, prediction: str, body: str) -> None:
    (root / "mutants" / f"{mutant_id}.yaml").write_text(
        f"id: {mutant_id}\ndescription: test mutant\nfile: toy/loop.py\nfunction: generate\n{body}"
        f"kills: [{prediction}]\n",
        encoding="utf-8",
    )
    contract = root / "contracts" / "toy-loop-v1.yaml"
    lines = contract.read_text(encoding="utf-8").splitlines()
    at = lines.index(f"  - id: {prediction}")
    mutants_line = next(i for i in range(at, len(lines)) if lines[i].startswith("    mutants: ["))
    lines[mutants_line] = lines[mutants_line].replace("]", f", {mutant_id}]")
    contract.write_text("\n".join(lines) + "\n", encoding="utf-8")


def commit(root: Path) -> None:
    """Commit the toy's changes (its own throwaway repository), so that `git status` is clean before the run."""
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-qm",
            "change",
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_every_toy_mutant_is_killed_after_a_green_control(toy: Path) -> None:
    before = snapshot(toy)
    result = falsify(toy, "--diff")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "mutants: control green" in out
    for mid, pid in [
        ("poll-deleted", "FALSIFY-TOY-001"),
        ("poll-after-forward", "FALSIFY-TOY-002"),
        ("limit-off-by-one", "FALSIFY-TOY-003"),
    ]:
        assert f"{mid}: KILLED" in out and pid in out
    assert "-        if budget.cancelled():" in out  # --diff
    assert "mutants: PASS — 3 mutants: 3 killed, 0 survived, 0 stale, 0 timeout, 0 error" in out
    assert_untouched(toy, before)

    report = json.loads((toy / ".falsify" / "mutants" / "mutation-report.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, json.loads(SCHEMA.read_text(encoding="utf-8")))
    statuses = {m["id"]: m["status"] for m in report["files"]["toy/loop.py"]["mutants"]}
    assert statuses == {
        "poll-deleted": "Killed",
        "poll-after-forward": "Killed",
        "limit-off-by-one": "Killed",
    }
    page = (toy / ".falsify" / "mutants" / "mutation-report.html").read_text(encoding="utf-8")
    assert "poll-after-forward" in page and "<script src" not in page and "<link" not in page


def test_stale_survived_and_partly_killed_mutants(toy: Path) -> None:
    # limit-off-by-one goes STALE: its statement was rewritten.
    loop = toy / "toy" / "loop.py"
    loop.write_text(
        loop.read_text(encoding="utf-8").replace("if emitted >= max_tokens:", "if max_tokens <= emitted:"),
        encoding="utf-8",
    )
    # An equivalent mutant no falsifier can catch.
    add_mutant(
        toy,
        "equivalent",
        "FALSIFY-TOY-001",
        'op: replace\nstatement: "emitted += 1"\nreplacement: "emitted = emitted + 1"\n',
    )
    add_poll_deleted(toy)
    commit(toy)
    before = snapshot(toy)
    result = falsify(toy, "limit-off-by-one", "equivalent", "poll-deleted")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "limit-off-by-one: STALE" in out and "matches 0 statements of generate" in out
    assert "equivalent: SURVIVED" in out
    assert "poll-deleted: PARTLY KILLED" in out and "NOT by FALSIFY-TOY-002" in out
    assert (
        "mutants: FAIL — 3 mutants: 0 killed, 1 partly killed, 1 survived, 1 stale, 0 timeout, 0 error (1 not by "
        "every listed prediction)" in out
    )
    assert "Traceback" not in out + result.stderr
    assert_untouched(toy, before)


def test_kill_lists_are_enforced_by_default_and_lenient_opts_out(toy: Path) -> None:
    add_poll_deleted(toy)
    commit(toy)
    enforced = falsify(toy, "poll-deleted")
    assert enforced.returncode == 1, enforced.stdout + enforced.stderr
    assert (
        "mutants: FAIL (kill lists enforced; --lenient to accept) — 1 mutants: 0 killed, 1 partly killed"
        in enforced.stdout
    )
    # which predictions the run proved able to fail, the others named
    assert "mutants: 3 predictions: 1 proven, 2 UNPROVEN by this run" in enforced.stdout
    assert (
        "UNPROVEN FALSIFY-TOY-002: listed mutants poll-after-forward, poll-deleted did not turn it red"
        in (enforced.stdout)
    )
    lenient = falsify(toy, "poll-deleted", "--lenient")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "mutants: PASS — 1 mutants: 0 killed, 1 partly killed" in lenient.stdout
    assert "(1 not by every listed prediction), accepted (--lenient); killed 1 of 1 applied" in lenient.stdout


def test_a_mutant_that_hangs_times_out(toy: Path) -> None:
    add_mutant(
        toy,
        "never-ends",
        "FALSIFY-TOY-003",
        'op: replace\nstatement: "if emitted >= max_tokens:"\nreplacement: "if False:"\n',
    )
    commit(toy)
    before = snapshot(toy)
    result = falsify(toy, "never-ends", "--timeout", "4")
    # the hang is reported, but a timeout is not a kill: a run whose every mutant timed out proved no prediction
    # able to fail (--timeout 0.01 gave a vacuous PASS that way), so it is no pass
    assert result.returncode == 1, result.stdout + result.stderr
    assert "never-ends: TIMEOUT" in result.stdout
    assert "a timeout is not a kill, and no mutant was killed; killed 0 of 1 applied" in result.stdout
    assert_untouched(toy, before)


def _processes_under(directory: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "cwd").startswith(str(directory)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


SLOW_FALSIFIER = """
import os
import time
from pathlib import Path

import pytest

import falsify


@pytest.mark.falsifies("FALSIFY-TOY-003")
def test_slow_limit() -> None:
    Path(os.environ["TOY_SLOW_STARTED"]).touch()
    time.sleep(120)
    falsify.check("FALSIFY-TOY-003", emitted=0, max_tokens=0)
"""


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs /proc to look for leftover processes")
@pytest.mark.parametrize("phase", ["control", "mutants"])
def test_sigint_mid_run_leaves_the_tree_untouched_and_nothing_running(toy: Path, phase: str) -> None:
    add_mutant(
        toy,
        "never-ends",
        "FALSIFY-TOY-003",
        'op: replace\nstatement: "if emitted >= max_tokens:"\nreplacement: "if False:"\n',
    )
    if phase == "control":  # a falsifier that keeps the control busy
        (toy / "tests" / "check_slow.py").write_text(SLOW_FALSIFIER, encoding="utf-8")
    commit(toy)
    before = snapshot(toy)
    started = toy.parent / "slow-started"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "falsify.cli",
            "mutants",
            *ENGINE,
            "never-ends",
            "poll-deleted",
            "--timeout",
            "300",
        ],
        cwd=toy,
        env={**env_for(toy), "TOY_SLOW_STARTED": str(started)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    wanted = "mutants: control —" if phase == "control" else "control green"
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        lines.append(line)
        if wanted in line or time.monotonic() > deadline:
            break
    assert any(wanted in line for line in lines), "".join(lines)
    # Under way: the control sleeping in its slow falsifier, or never-ends spinning until killed.
    while phase == "control" and not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "interrupted" in rest
    scratch = toy.parent / "tmp"
    for _ in range(20):
        if not _processes_under(scratch):
            break
        time.sleep(0.25)
    assert _processes_under(scratch) == []
    assert_untouched(toy, before)


def test_an_installed_copy_shadowing_the_scratch_copy_is_caught(toy: Path) -> None:
    # A conftest that puts the working tree itself first on sys.path: the falsifiers would test the unmutated
    # code, and every mutant would "survive". The control's probe must refuse to go on.
    (toy / "tests" / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(toy)!r})\n", encoding="utf-8"
    )
    commit(toy)
    result = falsify(toy, "poll-deleted")
    assert result.returncode == 1, result.stdout
    assert "not from the scratch copy" in result.stdout
    assert "the control run is not green" in result.stdout


def test_no_mutants_is_never_a_pass(toy: Path) -> None:
    result = falsify(toy, "no-such-mutant")
    assert result.returncode == 2
    assert "no mutant no-such-mutant" in result.stderr


def test_a_src_layout_whose_working_tree_is_on_the_path(toy: Path) -> None:
    """The toy moved under src/ (imported as `toy`, not `src.toy`), with the working tree's src/ on PYTHONPATH as
    an installed package would put it: every mutant is still killed, so the copy's module is the one imported."""
    (toy / "src").mkdir()
    (toy / "toy").rename(toy / "src" / "toy")
    for mutant in (toy / "mutants").glob("*.yaml"):
        mutant.write_text(mutant.read_text().replace("file: toy/loop.py", "file: src/toy/loop.py"))
    path = os.pathsep.join(filter(None, [str(toy / "src"), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutants", *ENGINE],
        cwd=toy,
        capture_output=True,
        text=True,
        env={**env_for(toy), "PYTHONPATH": path},
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "mutants: PASS — 3 mutants: 3 killed" in result.stdout


def test_copy_exclude_keeps_folders_out_of_the_scratch_copies(tmp_path: Path) -> None:
    from falsify.mutation.semantic.scratch import Scratch

    for name in ("pkg", "bulky", "bulk-data", "data"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(name)
    with Scratch(tmp_path, exclude=("bulk*",)) as scratch:
        copy = scratch.copy("one")
        assert sorted(p.name for p in copy.iterdir()) == ["data", "pkg"]


@pytest.mark.parametrize("server", [[], ["--no-forkserver"]], ids=["forkserver", "no-forkserver"])
def test_an_exec_engines_exit_code_is_the_one_it_exited_with(tmp_path: Path, server: list[str]) -> None:
    """The fork server ignores SIGCHLD; its children must not, or the kernel reaps the engine process and the wire
    transport reads exit code 0 for an engine that exited 3. A fresh `falsify init` project: its falsifier speaks
    to the engine given."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    env = {k: v for k, v in env_for(tmp_path / "repo").items() if k != "FALSIFY_ENGINE"}
    cli = [sys.executable, "-m", "falsify.cli"]
    subprocess.run([*cli, "init"], cwd=root, env=env, check=True, capture_output=True)
    engine = ["--engine", "exec:sh -c 'exit 3'"]
    proc = subprocess.run(
        [*cli, "mutants", *engine, *server], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the engine exited with code 3" in proc.stdout, proc.stdout[-3000:]
