"""Hostile paths and names: nothing is read through a link out of the project (contracts, mutants, test files, the
tests directory), and a file name or message with control characters reaches the terminal escaped, on one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from testkit_gate_cli import init_project, run_cli

from falsify.contracts.corpus import discover
from falsify.contracts.lint import EXIT_CLEAN, lint
from falsify.errors import Problem, terminal_safe
from falsify.table import table

ENV = {**os.environ, "PYTHONHASHSEED": "0"}
ENV.pop("FALSIFY_ENGINE", None)
SECRET = "TOP SECRET LINE"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh `falsify init` project at tmp_path/proj, and tmp_path/outside beside it holding a secret."""
    root = init_project(tmp_path / "proj", ENV)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET + "\n")
    return root


def moved_and_linked(path: Path, to: Path) -> Path:
    """Move path into the directory `to` and leave a symlink to it in its place; the path now linked to."""
    moved = to / path.name
    path.rename(moved)
    path.symlink_to(moved)
    return moved


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "where", ["contracts/leak-v1.yaml", "mutants/leak.yaml", "contracts/sub/leak-v1.yml"]
)
def test_a_yaml_file_linked_out_of_the_project_is_named_and_never_read(project: Path, where: str) -> None:
    link = project / where
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(project.parent / "outside" / "secret.txt")
    result = run_cli("lint", cwd=project, env=ENV)
    assert result.returncode == 1
    assert SECRET not in result.stdout + result.stderr
    assert f"{where}:0: a symlink to a file outside the project: not followed [io]" in result.stdout
    _no_traceback(result)


def test_a_contract_linked_out_of_the_project_fails_the_gate_before_any_falsifier(project: Path) -> None:
    moved_and_linked(project / "contracts" / "example-cancel-v1.yaml", project.parent / "outside")
    result = run_cli("gate", cwd=project, env=ENV)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a symlink to a file outside the project: not followed" in result.stdout
    assert "no falsifier was run" in result.stdout


def test_a_link_inside_the_project_is_followed(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is where the link leads, not that it is one: a contract linked to another place in the project
    loads."""
    (project / "shared").mkdir()
    moved_and_linked(project / "contracts" / "example-cancel-v1.yaml", project / "shared")
    monkeypatch.chdir(project)  # its mutants are looked up in the project of the working directory
    corpus, code = lint([project / "contracts"])
    assert (code, [c.id for c in corpus.contracts]) == (EXIT_CLEAN, ["example-cancel-v1"])


def test_a_tests_directory_linked_out_of_the_project_is_refused_before_pytest(project: Path) -> None:
    tests = project / "tests"
    moved_and_linked(tests, project.parent / "outside")
    for command in ("gate", "bindings"):
        result = run_cli(command, cwd=project, env=ENV)
        assert result.returncode == 2, command + result.stdout + result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            f"falsify: [tool.falsify] tests {tests}: a symlink to a directory outside the project: not followed"
        )
        assert "passed" not in result.stdout


def test_a_test_file_linked_out_of_the_project_is_refused_by_the_plugin(project: Path) -> None:
    test = project / "tests" / "test_example_cancel.py"
    moved_and_linked(test, project.parent / "outside")
    result = run_cli("gate", cwd=project, env=ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"falsify: {test}: a symlink to a file outside the project: not followed" in result.stderr
    assert "nothing was judged" in result.stdout


def test_upper_case_yaml_extensions_are_named_not_skipped_in_silence(tmp_path: Path) -> None:
    for name in ("a-v1.YAML", "b-v1.Yml"):
        (tmp_path / name).write_text("contract: x\n")
    files, problems = discover([tmp_path])
    assert files == []
    assert sorted(p.message for p in problems) == [
        "not read: name it .yaml (.YAML is not)",
        "not read: name it .yml (.Yml is not)",
    ]


def test_a_whole_tree_is_refused_not_walked(tmp_path: Path) -> None:
    """`falsify lint /` walked the file system; a path with more levels than a contracts tree has is named."""
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(20)])
    deep.mkdir(parents=True)
    result = run_cli("lint", str(tmp_path), cwd=tmp_path, env=ENV)
    assert result.returncode == 1
    assert "over 16 directory levels below it" in result.stdout
    _no_traceback(result)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("boom\x1b[2J\x1b]0;pwned\x07", "boom\\x1b[2J\\x1b]0;pwned\\x07"),
        ("two\nlines\r", "two\\nlines\\r"),
        ("nul\x00 del\x7f csi\x9b", "nul\\x00 del\\x7f csi\\x9b"),
        ("tab\tkept, é 日本 kept", "tab\tkept, é 日本 kept"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        (os.fsdecode(b"bad\xff"), "bad\\udcff"),
    ],
)
def test_terminal_safe_escapes_controls_and_keeps_ordinary_text(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown
    shown.encode("utf-8")  # printable on a UTF-8 terminal: no lone surrogate left


def test_terminal_safe_can_keep_line_breaks_of_a_message_of_ours() -> None:
    assert terminal_safe("a\x1b\nb\r", newlines=True) == "a\\x1b\nb\\r"


def test_a_problem_and_a_table_cell_are_one_terminal_safe_line() -> None:
    problem = Problem("contracts/\x1b[2Jx\n-v1.yaml", 3, "a\x07", "bad \x1b]0;t\x07", "type")
    assert str(problem) == "contracts/\\x1b[2Jx\\n-v1.yaml:3: a\\x07: bad \\x1b]0;t\\x07 [type]"
    assert table(["h"], [["x\ny\x1b"]]).splitlines()[-1] == "x\\ny\\x1b"


def test_a_file_name_with_escapes_reaches_lint_output_escaped(project: Path) -> None:
    (project / "contracts" / "\x1b[2Jx\n-v1.yaml").write_text("contract: 1\n")
    result = run_cli("lint", cwd=project, env=ENV)
    assert result.returncode == 1
    assert "\x1b" not in result.stdout + result.stderr
    assert "contracts/\\x1b[2Jx\\n-v1.yaml:1: 'version' is a required property" in result.stdout


WIRE_ENGINE = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m:
        print(json.dumps({"id": m["id"], "error": {"code": -32603, "message": "boom\\x1b[2J\\x1b]0;pwned\\x07\\nforged"}}), flush=True)
"""


@pytest.mark.parametrize("command", [["engine", "check"], ["gate"]])
def test_a_wire_engines_error_message_reaches_the_terminal_escaped(project: Path, command: list[str]) -> None:
    (project / "eng.py").write_text(WIRE_ENGINE)
    result = run_cli(*command, "--engine", "exec:python3 eng.py", cwd=project, env=ENV, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "boom\\x1b[2J\\x1b]0;pwned\\x07\\nforged" in last
    _no_traceback(result)


def test_a_failed_checks_words_and_the_table_reach_the_gates_output_escaped() -> None:
    """A falsifier's failure quotes the engine (its error messages, its output); the gate prints it under the
    table and in the DETAIL column: both terminal-safe."""
    from falsify.contracts.corpus import load_corpus
    from falsify.harness.gate import failures, render
    from falsify.harness.results import Outcome, PredictionResult

    good = Path(__file__).parent / "fixtures" / "contracts" / "good"
    corpus = load_corpus([good])
    pid = next(iter(corpus.predictions))
    row = PredictionResult(
        pid, "c", Outcome.FAIL, ("t",), ("t",), 0.1, 1, "engine said \x1b]0;pwned\x07\x1b[2J", None
    )
    text = failures([row], corpus) + render([row])
    assert "\x1b" not in text and "\x07" not in text
    assert "engine said \\x1b]0;pwned\\x07\\x1b[2J" in text
