"""`falsify init` in a fresh repository: the starter it writes passes lint, gate and mutants straight away, and the
mutant it plants is a bug the gate would catch."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import yaml
from testkit_gate_cli import run_cli

ENV = {**os.environ, "PYTHONHASHSEED": "0"}
ENV.pop("FALSIFY_ENGINE", None)


def falsify(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=root, env=ENV)


def test_init_writes_a_starter_that_passes_lint_gate_and_mutants(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    init = falsify(root, "init")
    assert init.returncode == 0, init.stdout + init.stderr
    for path in (
        "pyproject.toml",
        "example_engine/engine.py",
        "contracts/example-cancel-v1.yaml",
        "tests/test_example_cancel.py",
        "mutants/example-poll-after-forward.yaml",
        ".github/workflows/falsify.yml",
    ):
        assert (root / path).is_file(), path
    lint = falsify(root, "lint")
    assert lint.returncode == 0, lint.stdout
    summary = lint.stdout.strip().splitlines()[-1]
    assert summary.startswith("lint: 2 files, 1 contracts, 1 predictions, 1 mutants") and summary.endswith(
        " 0 errors"
    )
    gate = falsify(root, "gate")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "gate: PASS — 1 contracts, 1 predictions (1 pass, 0 fail" in gate.stdout
    mutants = falsify(root, "mutants")
    assert mutants.returncode == 0, mutants.stdout + mutants.stderr
    assert "example-poll-after-forward: KILLED" in mutants.stdout
    assert "mutants: PASS — 1 mutants: 1 killed, 0 survived" in mutants.stdout
    check = falsify(root, "engine", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    from falsify.engines.protocol import CAPABILITIES

    claimed = f"2 of {len(CAPABILITIES)} capabilities claimed, 0 claimed without their methods"
    assert claimed in check.stdout


def test_init_keeps_existing_files_and_refuses_a_configured_project(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    (tmp_path / "contracts").mkdir()
    mine = tmp_path / "contracts" / "example-cancel-v1.yaml"
    mine.write_text("mine\n")
    first = falsify(tmp_path, "init")
    assert first.returncode == 0, first.stderr
    assert "init: kept contracts/example-cancel-v1.yaml (already there; not overwritten)" in first.stdout
    assert mine.read_text() == "mine\n"
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith('[project]\nname = "mine"\n') and "[tool.falsify]" in text
    again = falsify(tmp_path, "init")
    assert again.returncode == 2
    assert "already has [tool.falsify]: nothing written" in again.stderr


def test_the_ci_steps_init_writes_leave_the_checkout_clean(tmp_path: Path) -> None:
    """The workflow's falsify steps write only what init's .gitignore ignores: a CI job (or a developer running the
    same steps) sees no untracked file afterwards, its JUnit XML included."""
    root = tmp_path / "repo"
    root.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    assert falsify(root, "init").returncode == 0
    subprocess.run([*git, "add", "."], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "falsify init"], cwd=root, check=True)
    workflow = yaml.safe_load((root / ".github" / "workflows" / "falsify.yml").read_text())
    (job,) = workflow["jobs"].values()
    steps = [shlex.split(s["run"]) for s in job["steps"] if s.get("run", "").startswith("falsify ")]
    assert [s[1] for s in steps] == ["lint", "gate", "mutants"]
    for step in steps:
        done = falsify(root, *step[1:])
        assert done.returncode == 0, f"{step}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    status = subprocess.run(
        [*git, "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    )
    assert status.stdout == "", "untracked after the CI steps:\n" + status.stdout
    assert (root / ".falsify" / "junit-falsify.xml").is_file()


def test_init_refuses_a_pyproject_it_cannot_extend_and_writes_nothing(tmp_path: Path) -> None:
    """Not TOML, `tool` not a table, or a `tool` inline table that [tool.falsify] cannot be added to: each is exit 2
    naming the file, with the directory exactly as it was (it used to append and leave an invalid file)."""
    for body, message in [
        ("[[[[", "pyproject.toml: not valid TOML"),
        ("tool = 5", "pyproject.toml: [tool] must be a table"),
        ("tool = {other = {x = 1}}", "pyproject.toml: [tool.falsify] cannot be appended as valid TOML"),
    ]:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        root.mkdir()
        (root / "pyproject.toml").write_text(body + "\n")
        result = falsify(root, "init")
        assert result.returncode == 2, result.stdout + result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert [p.name for p in root.iterdir()] == ["pyproject.toml"]
        assert (root / "pyproject.toml").read_text() == body + "\n"


def test_init_refuses_a_gitignore_that_is_a_directory_before_writing_anything(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").mkdir()
    result = falsify(tmp_path, "init")
    assert result.returncode == 2, result.stdout + result.stderr
    assert ".gitignore" in result.stderr and "not a regular file" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [".gitignore"]
