"""`falsify mutmut` in a fresh `falsify init` project, whose layout is not this repository's: the default paths
mutate the engine the falsify plugin loads before any test runs (mutmut's forced-failure check must pass through
that load), and when pytest cannot run the tests in mutmut's copy, the error is pytest's own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from testkit_gate_cli import run_cli

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def init_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    pytest.importorskip("mutmut")
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    env.pop("FALSIFY_ENGINE", None)
    init = run_cli("init", cwd=root, env=env)
    assert init.returncode == 0, init.stdout + init.stderr
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*GIT, *cmd], cwd=root, check=True, capture_output=True)
    return root, env


def test_mutmut_passes_in_a_fresh_init_project(tmp_path: Path) -> None:
    """A pull request's run (--since) over a change to the engine's session(): mutmut's whole path (the scratch
    copy, its stats and clean runs, the forced-failure check through every mutated function of the engine, the
    plugin's engine load among them) on the default paths and tests, fast because one function's mutants run."""
    root, env = init_project(tmp_path)
    engine = root / "example_engine" / "engine.py"
    text = engine.read_text(encoding="utf-8")
    line = "        return Session(model)\n"
    assert text.count(line) == 1
    engine.write_text(text.replace(line, "        # one session per model\n" + line), encoding="utf-8")
    result = run_cli(
        "mutmut", "-j", "2", "--timeout", "120", "--since", "HEAD", cwd=root, env=env, timeout=180
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "mutmut: mutating example_engine/engine.py in " in out
    summary = next(line for line in result.stdout.splitlines() if line.startswith("mutmut: PASS"))
    assert " killed" in summary and " kill rate 1/1 = 100.0%" in summary, summary
    report = json.loads((root / ".falsify" / "mutmut" / "mutation-report.json").read_text(encoding="utf-8"))
    mutants = report["files"]["example_engine/engine.py"]["mutants"]
    assert mutants and all("ExampleEngineǁsession__mutmut_" in m["id"] for m in mutants)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_pytest_that_cannot_run_the_tests_is_shown_in_its_own_words(tmp_path: Path) -> None:
    root, env = init_project(tmp_path)
    with (root / "pyproject.toml").open("a", encoding="utf-8") as f:
        f.write('\n[tool.falsify.mutmut]\ntests = ["tests/test_missing.py"]\n')
    result = run_cli("mutmut", "-j", "2", "--timeout", "120", cwd=root, env=env, timeout=180)
    err = result.stderr
    assert result.returncode == 2, result.stdout + err
    assert "mutmut exited 1 in its stats run" in err
    assert "pytest could not run the tests (exit 4, a usage error)" in err
    assert "ERROR: file or directory not found: tests/test_missing.py" in err
    assert "Traceback" not in err and "BadTestExecutionCommandsException" not in err
