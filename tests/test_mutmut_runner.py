"""`falsify mutmut`: configuration, --since function selection, the budget verdict, and one real mutmut run on
the toy project (tests/fixtures/mutants/toy), whose own mutants/ directory collides with mutmut's."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from falsify.mutation.mutmut import (
    MutmutConfig,
    MutmutError,
    MutmutMutant,
    MutmutRun,
    changed_lines,
    function_patterns,
    read_config,
    verdict,
)
from falsify.project import Project

TOY = Path(__file__).parent / "fixtures" / "mutants" / "toy"
SCHEMA = (
    Path(__file__).parent / "data" / "mutation-testing-report-schema" / "mutation-testing-report-schema.json"
)
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def project_with(tmp_path: Path, table: str) -> Project:
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.falsify]\n\n[tool.falsify.mutmut]\n{table}", encoding="utf-8"
    )
    return Project(tmp_path, tmp_path / "contracts", tmp_path / "mutants", tmp_path / "tests")


def test_config_defaults_come_from_the_project(tmp_path: Path) -> None:
    """No paths: the .py files of [tool.falsify] sources (a src layout here); no tests: the tests directory."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "loop.py", "notes.txt"):
        (tmp_path / "src" / "pkg" / name).write_text("", encoding="utf-8")
    project = project_with(tmp_path, "")
    config = read_config(dataclasses.replace(project, sources=("src/**/*",)))
    assert config.paths == ("src/pkg/__init__.py", "src/pkg/loop.py")
    assert config.tests == ("tests",)
    with pytest.raises(MutmutError, match="no paths to mutate: set paths there, or sources"):
        read_config(project)


def test_config_values_are_read(tmp_path: Path) -> None:
    config = read_config(
        project_with(
            tmp_path,
            'survivor_budget = 7\npaths = ["reference/session.py"]\n'
            'tests = ["tests/test_session_unit.py"]\ntimeout = 60\n',
        )
    )
    assert config == MutmutConfig(7, ("reference/session.py",), ("tests/test_session_unit.py",), 60.0)
    config = read_config(project_with(tmp_path, 'paths = ["a.py"]\npytest_args = ["-k", "not slow"]\n'))
    assert config.pytest_args == ("-k", "not slow")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("survivor_budget = -1\n", "survivor_budget must be an int >= 0, got -1"),
        ('survivor_budget = "ten"\n', "survivor_budget must be an int >= 0"),
        ("paths = []\n", "paths must be a non-empty list of paths"),
        ("timeout = 0\n", "timeout must be a number of seconds > 0"),
        ("budget = 3\n", "unknown key(s) budget"),
        ('pytest_args = "-x"\n', "pytest_args must be a list of strings"),
    ],
)
def test_bad_config_is_a_one_line_error(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(MutmutError, match=r"pyproject\.toml: \[tool\.falsify\.mutmut\]") as info:
        read_config(project_with(tmp_path, table))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_since_selects_the_changed_functions_only(tmp_path: Path) -> None:
    pkg = tmp_path / "reference"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def a():\n    return 1\n\n\nclass C:\n    def b(self):\n        return 2\n\n"
        "    def c(self):\n        return 3\n",
        encoding="utf-8",
    )
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run([*GIT, *cmd], cwd=tmp_path, check=True, capture_output=True)
    source = (pkg / "m.py").read_text(encoding="utf-8")
    (pkg / "m.py").write_text(source.replace("return 2", "return 20"), encoding="utf-8")
    (pkg / "new.py").write_text("def fresh():\n    return 0\n", encoding="utf-8")
    changed = changed_lines(tmp_path, "HEAD", ["reference/m.py", "reference/new.py"])
    assert changed == {"reference/m.py": {7}, "reference/new.py": None}
    assert function_patterns(tmp_path, changed) == [
        "reference.m.xǁCǁb__mutmut_*",
        "reference.new.x_fresh__mutmut_*",
    ]
    with pytest.raises(MutmutError, match="no-such-ref"):
        changed_lines(tmp_path, "no-such-ref", ["reference/m.py"])


def _run(budget: int, statuses: list[str]) -> MutmutRun:
    run = MutmutRun(MutmutConfig(survivor_budget=budget), ["reference/m.py"])
    run.mutants = [
        MutmutMutant(f"reference.m.x_a__mutmut_{i}", "reference/m.py", s) for i, s in enumerate(statuses)
    ]
    return run


def test_verdict_counts_survivors_and_uncovered_against_the_budget() -> None:
    statuses = ["killed"] * 7 + ["timeout", "survived", "no tests"]
    text, ok = verdict(_run(2, statuses))
    assert ok and "kill rate 8/10 = 80.0%" in text and "2 survivors" in text
    text, ok = verdict(_run(1, statuses))
    assert not ok and text.startswith("mutmut: FAIL")


def test_mutmut_runs_on_the_toy_in_a_scratch_copy(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    pytest.importorskip("mutmut")
    root = tmp_path / "toy"
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    with (root / "pyproject.toml").open("a", encoding="utf-8") as f:
        f.write(
            '\n[tool.falsify.mutmut]\nsurvivor_budget = 0\npaths = ["toy/loop.py"]\n'
            'tests = ["tests/check_toy.py"]\ntimeout = 900\n'
        )
    # A function no test calls: its mutants survive ("no tests"), so the budget of 0 must fail the run.
    with (root / "toy" / "loop.py").open("a", encoding="utf-8") as f:
        f.write('\n\ndef describe(n: int) -> str:\n    return "tokens: " + str(n + 1)\n')
    uncovered = (root / "toy" / "loop.py").read_text(encoding="utf-8").splitlines().index(
        '    return "tokens: " + str(n + 1)'
    ) + 1
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "toy"]):
        subprocess.run([*GIT, *cmd], cwd=root, check=True, capture_output=True)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "FALSIFY_ENGINE": "toy.engine:ToyEngine"}
    result = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "mutmut", "-j", "2"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "mutmut: FAIL" in out and "against a budget of 0" in out and "Traceback" not in out + result.stderr
    # Survivors by file:line, with the original and the mutated line.
    listed = [line for line in out.splitlines() if line.startswith(f"toy/loop.py:{uncovered} ")]
    assert listed and all("no tests" in line for line in listed)
    assert any('return "tokens: " + str(n + 1)' in line for line in listed)
    # The working tree, its own mutants/ directory included, is untouched; no scratch copy is left.
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    assert sorted(p.name for p in (root / "mutants").iterdir()) == sorted(
        p.name for p in (TOY / "mutants").iterdir()
    )
    assert list((tmp_path / "tmp").iterdir()) == []
    report = json.loads((root / ".falsify" / "mutmut" / "mutation-report.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, json.loads(SCHEMA.read_text(encoding="utf-8")))
    mutants = report["files"]["toy/loop.py"]["mutants"]
    statuses = {m["status"] for m in mutants}
    assert (
        "Killed" in statuses and "NoCoverage" in statuses and statuses <= {"Killed", "NoCoverage", "Timeout"}
    )
    assert {m["location"]["start"]["line"] for m in mutants if m["status"] == "NoCoverage"} == {uncovered}
