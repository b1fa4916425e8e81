"""`falsify lint`, `bindings` and `gate` as a user runs them: real subprocesses, stable exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from testkit_gate_cli import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "contracts"
ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def falsify(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=ENV, timeout=300)


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr


def test_this_repositorys_own_corpus_lints_clean() -> None:
    """The repository's contracts, packs and semantic mutants, as `falsify lint` finds them from the root: an edit of
    reference/ that leaves a mutant quoting a statement no longer there fails here, in the README's test command,
    rather than in CI's evidence step 40 minutes later."""
    root = Path(__file__).resolve().parents[1]
    result = falsify("lint", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    found = re.fullmatch(r"lint: \d+ files, \d+ contracts, \d+ predictions, (\d+) mutants .*, 0 errors", last)
    assert found, last
    assert int(found.group(1)) == len(list((root / "mutants").glob("*.yaml")))


def test_lint_good_exits_0_with_denominator() -> None:
    result = falsify("lint", str(FIXTURES / "good"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip().splitlines()[-1] == "lint: 1 files, 1 contracts, 2 predictions, 0 errors"


def test_lint_bad_directory_reports_every_file_and_exits_1() -> None:
    result = falsify("lint", str(FIXTURES / "bad"))
    assert result.returncode == 1
    assert_no_traceback(result)
    bad = sorted((FIXTURES / "bad").glob("*.yaml"))
    for path in bad:
        assert f"{path.name}:" in result.stdout, path.name
    assert f"lint: {len(bad)} files," in result.stdout


def test_lint_empty_directory_exits_2(tmp_path: Path) -> None:
    result = falsify("lint", str(tmp_path))
    assert result.returncode == 2
    assert "no contract found" in result.stdout and "never a pass" in result.stdout


def test_lint_with_mutants_but_no_contract_is_an_empty_corpus(tmp_path: Path) -> None:
    """Mutants alone check nothing: no contract is exit 2 with the empty-corpus line, as with no file at all."""
    from falsify.contracts.lint import EXIT_EMPTY, lint, verdict

    mutant = sorted((Path(__file__).resolve().parents[1] / "mutants").glob("*.yaml"))[0]
    (tmp_path / mutant.name).write_bytes(mutant.read_bytes())
    corpus, code = lint([tmp_path])
    assert (len(corpus.mutants), corpus.contracts, corpus.problems, code) == (1, [], [], EXIT_EMPTY)
    assert verdict(corpus, [tmp_path]) == (
        f"lint: no contract found in {tmp_path} (1 mutant, no prediction for them to kill) "
        "(an empty corpus is never a pass)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gate", "--timeout", "nan"], "argument --timeout: must be a finite number of seconds, not nan"),
        (
            ["gate", "--test-timeout", "inf"],
            "argument --test-timeout: must be a finite number of seconds, not inf",
        ),
        (
            ["gate", "--test-timeout", "-1"],
            "argument --test-timeout: must be 0 (no limit) or between 0.01 and",
        ),
        (["gate", "--test-timeout", "1e-300"], "argument --test-timeout: must be 0 (no limit) or between"),
        (["gate", "--timeout", "1e300"], "argument --timeout: must be 0 (no limit) or between"),
        (
            ["mutants", "--timeout", "-1"],
            "argument --timeout: must be between 0.01 and 604800 seconds, not -1.0",
        ),
        (
            ["mutants", "--timeout", "0"],
            "argument --timeout: must be between 0.01 and 604800 seconds, not 0.0",
        ),
        (["mutants", "-j", "-1"], "argument -j/--jobs: must be between 0 (one per core) and 1024, not -1"),
        (
            ["campaign", "--seeds", "100000000"],
            "argument --seeds: must be between 1 and 10000, not 100000000",
        ),
        (["campaign", "--seeds", "0"], "argument --seeds: must be between 1 and 10000, not 0"),
        (["campaign", "--timeout", "nan"], "argument --timeout: must be a finite number of seconds, not nan"),
        (["campaign", "-j", "99999"], "argument -j/--jobs: must be between 0 (one per core) and 1024"),
        (["mutmut", "--timeout", "nan"], "argument --timeout: must be a finite number of seconds, not nan"),
        (["mutmut", "-j", "-3"], "argument -j/--jobs: must be between 0 (one per core) and 1024, not -3"),
    ],
)
def test_number_options_are_finite_and_in_range(tmp_path: Path, args: list[str], message: str) -> None:
    """Checked as the arguments are parsed, before any project is looked for: `nan` slipped past `< 0` checks,
    `inf` overflowed a wait, and --seeds 100000000 built its shard list until memory ran out."""
    result = falsify(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert_no_traceback(result)
    assert result.stderr.strip().splitlines()[-1].startswith(f"falsify {args[0]}: error: {message}"), (
        result.stderr
    )


def test_lint_missing_path_exits_1_naming_it(tmp_path: Path) -> None:
    result = falsify("lint", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert "nope:0: no such file or directory" in result.stdout
    assert_no_traceback(result)


def test_lint_10_mb_file_is_refused_quickly(tmp_path: Path) -> None:
    big = tmp_path / "big-v1.yaml"
    big.write_text("contract: big-v1\ndescription: |\n" + ("  " + "x" * 98 + "\n") * 100_000)
    assert big.stat().st_size > 10_000_000
    result = falsify("lint", str(big))
    assert result.returncode == 1
    assert "big-v1.yaml:1: file is 10.1 MB, over the 1024 KiB limit [size]" in result.stdout


def test_lint_alias_bomb_does_not_expand() -> None:
    result = falsify("lint", str(FIXTURES / "bad" / "alias-bomb-v1.yaml"))
    assert result.returncode == 1
    assert "anchors and aliases are not allowed" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_lint_formats(fmt: str) -> None:
    import json

    result = falsify("lint", "--format", fmt, str(FIXTURES / "bad" / "unknown-key-top-v1.yaml"))
    assert result.returncode == 1
    if fmt == "json":
        assert json.loads(result.stdout)["errors"][0]["line"] == 7
    elif fmt == "sarif":
        sarif = json.loads(result.stdout)
        assert sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 7
    else:
        assert (
            result.stdout.startswith("::error file=")
            and ",line=7,title=additionalProperties::" in result.stdout
        )


CONTRACT = (FIXTURES / "good" / "demo-serve-v1.yaml").read_text()
FALSIFIERS = """\
import falsify, pytest

@pytest.mark.falsifies("FALSIFY-DEMO-001")
def test_forwards(engine):
    assert engine.name == "reference"
    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=FORWARDS, n=8)

@pytest.mark.falsifies("FALSIFY-DEMO-002")
def test_prefix():
    falsify.check("FALSIFY-DEMO-002", tokens=[1, 2], reference_tokens=[1, 2, 3], n=2, wasted_forwards=0)
"""


def make_project(root: Path, forwards: int = 7, body: str = FALSIFIERS) -> Path:
    (root / "contracts").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(
        '[tool.falsify]\ncontracts = "contracts"\ntests = "tests"\nengine = "reference"\n'
    )
    (root / "contracts" / "demo-serve-v1.yaml").write_text(CONTRACT.replace("requires: [generate]\n", ""))
    (root / "tests" / "test_demo.py").write_text(body.replace("FORWARDS", str(forwards)))
    return root


def test_gate_passes_with_table_and_junit(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = falsify("gate", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FALSIFY-DEMO-001  demo-serve-v1  PASS     ?" in result.stdout
    assert (
        "gate: PASS — 1 contracts, 2 predictions (2 pass, 0 fail, 0 error, 0 not run, 0 not applicable, "
        "0 timeout); "
        "proven not measured (no current mutant run); 2 tests collected: 2 passed, 0 failed, 0 errors, 0 skipped "
        "(0 not applicable); "
        "engine reference"
    ) in result.stdout
    assert (root / ".falsify" / "gate" / "junit.xml").read_text().count("<testcase") == 2


def test_gate_fails_on_a_falsified_prediction(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", forwards=8)
    result = falsify("gate", cwd=root)
    assert result.returncode == 1
    assert "FALSIFY-DEMO-001  demo-serve-v1  FAIL" in result.stdout
    assert "decode_forwards was 8, emitted was 8" in result.stdout
    assert "gate: FAIL — 1 contracts, 2 predictions (1 pass, 1 fail," in result.stdout
    # under the table: the failure in full, then the contract's if_fails
    assert (
        "FAIL FALSIFY-DEMO-001 (contracts/demo-serve-v1.yaml:13): FALSIFY-DEMO-001 (demo-serve-v1) falsified: "
        "decode_forwards == emitted - 1: decode_forwards was 8, emitted was 8\n"
        "  if_fails: a forward runs after the cancel was seen\n"
    ) in result.stdout
    junit = (root / ".falsify" / "gate" / "junit.xml").read_text()
    assert "if_fails: a forward runs after the cancel was seen" in junit


def test_gate_fails_naming_an_unbound_prediction(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p", body=FALSIFIERS.replace('@pytest.mark.falsifies("FALSIFY-DEMO-002")\n', "")
    )
    result = falsify("gate", cwd=root)
    assert result.returncode == 1
    # the message names the prediction's line as the YAML parser marks it (0-based: the line before its `- id:`)
    line = CONTRACT.splitlines().index("  - id: FALSIFY-DEMO-002")
    assert (
        f"FALSIFY-DEMO-002 (contracts/demo-serve-v1.yaml:{line}) is bound to no collected test"
        in result.stdout
    )
    assert "binding problem" in result.stdout
    assert_no_traceback(result)


def test_gate_fails_on_a_marker_with_an_unknown_id(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        body=FALSIFIERS + '\n@pytest.mark.falsifies("FALSIFY-DEMO-404")\ndef test_ghost():\n    pass\n',
    )
    result = falsify("gate", cwd=root)
    assert result.returncode == 1
    assert "marker names 'FALSIFY-DEMO-404', which no contract" in result.stdout


def test_gate_on_empty_corpus_exits_2(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "contracts" / "demo-serve-v1.yaml").unlink()
    result = falsify("gate", cwd=root)
    assert result.returncode == 2
    assert "no contract found" in result.stdout


def test_bindings_lists_prediction_to_tests(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = falsify("bindings", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FALSIFY-DEMO-001  1      tests/test_demo.py::test_forwards" in result.stdout
    assert "bindings: 1 contracts, 2 predictions, 2 falsifier tests, 0 unbound, 0 problems" in result.stdout


def test_unknown_engine_exits_2_with_one_line_before_any_test(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = falsify("gate", "--engine", "nosuch", cwd=root)
    assert result.returncode == 2
    assert result.stdout == ""  # nothing ran: no "gate: running", no pytest output
    (line,) = result.stderr.splitlines()
    assert line.startswith("falsify: unknown engine 'nosuch': use one of reference, hf, ")
    assert (
        'module:factory, exec:"CMD ARGS", http://HOST:PORT, openai+http://127.0.0.1:PORT or openai+exec:CMD'
        in line
    )
    assert not (root / ".falsify").exists()


def test_pytest_arguments_it_refuses_are_a_usage_error_exit_2(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = falsify("gate", "--engine", "reference", "--", "--no-such-pytest-option", cwd=root)
    assert result.returncode == 2, result.stdout[-2000:]
    assert "unrecognized arguments: --no-such-pytest-option" in result.stdout + result.stderr
    assert (
        result.stdout.splitlines()[-1]
        == "gate: ERROR — pytest stopped at a usage error (above); nothing was judged"
    )


@pytest.mark.parametrize("command", ["gate", "mutants", "evidence", "engine"])
def test_every_command_resolves_the_engine_the_same_way(tmp_path: Path, command: str) -> None:
    """--engine, then FALSIFY_ENGINE, then [tool.falsify] engine; none of them: exit 2 naming all three."""
    root = make_project(tmp_path / "p")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('engine = "reference"\n', ""))
    (root / "mutants").mkdir()
    args = {
        "gate": ["gate"],
        "mutants": ["mutants"],
        "evidence": ["evidence", "--out", "ev"],
        "engine": ["engine", "check"],
    }
    result = falsify(*args[command], cwd=root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no engine under test: pass --engine module:factory, set FALSIFY_ENGINE" in result.stderr
    assert_no_traceback(result)
    env_result = subprocess.run(
        [sys.executable, "-m", "falsify.cli", *args[command]],
        capture_output=True,
        text=True,
        cwd=root,
        env={**ENV, "FALSIFY_ENGINE": "nosuch.module:Engine"},
        timeout=300,
        check=False,
    )
    assert env_result.returncode == 2
    assert "engine 'nosuch.module:Engine': cannot import nosuch" in env_result.stderr


def test_no_project_is_a_clear_error_never_another_checkout(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # a repository root: the search for pyproject.toml stops here
    for command in (["lint"], ["gate"], ["mutants"], ["bindings"]):
        result = falsify(*command, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stdout)
        assert (
            f"no pyproject.toml or falsify.toml with [tool.falsify] at or above {tmp_path.resolve()}"
            in result.stderr
        )
        assert "falsify init" in result.stderr
        assert_no_traceback(result)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    result = falsify("gate", cwd=tmp_path)
    assert result.returncode == 2
    assert "pyproject.toml has no [tool.falsify] table" in result.stderr


def test_a_misspelt_config_key_is_an_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("contracts =", "contract ="))
    result = falsify("lint", cwd=root)
    assert result.returncode == 2
    assert "[tool.falsify] has an unknown key 'contract' (allowed: contracts, packs, tests" in result.stderr


def test_version_and_exit_codes_in_every_help() -> None:
    from falsify import __version__
    from falsify.cli import COMMANDS

    assert falsify("--version").stdout.strip() == f"falsify {__version__}"
    for command in COMMANDS:
        result = falsify(command, "--help")
        assert result.returncode == 0, command
        text = " ".join(result.stdout.split())
        found = re.search(r"exit codes: (.*)", text, re.IGNORECASE)
        assert found, f"falsify {command} --help lists no exit codes"
        # each code with what it means ("0 every shard passed, 1 ..."); 2 is argparse's usage error everywhere
        codes = {int(c) for c in re.findall(r"(?:^|[;,] )(\d+) [a-z(]", found.group(1))}
        assert {0, 2} <= codes <= {0, 1, 2, 130}, f"falsify {command} --help exit codes: {found.group(1)}"


def test_every_engine_option_lists_every_engine_form() -> None:
    """Each command taking --engine says every form load_engine accepts (issue #24: exec: and http:// were
    missing from gate --help and mutants --help)."""
    import argparse
    from typing import cast

    from falsify.cli import build_parser
    from falsify.engines.loading import REGISTERED

    for command in ("gate", "mutants", "evidence", "campaign", "bindings", "engine", "matrix"):
        parser = build_parser(command)
        choices = next(a for a in parser._actions if a.dest == "command").choices
        sub = cast("dict[str, argparse.ArgumentParser]", choices)[command]
        (engine,) = [a for a in sub._actions if "--engine" in a.option_strings]
        text = " ".join(str(engine.help).split())
        forms = (*REGISTERED, "llamacpp:PATH.gguf", "module:factory", 'exec:"CMD ARGS"', "http://HOST:PORT")
        for form in forms:
            assert form in text, f"falsify {command} --help: --engine does not name {form}: {text}"


def test_the_reference_engine_install_hint_names_what_exists() -> None:
    """Without the reference distribution, `--engine reference` says how to install it from a checkout: its
    distribution is on no package index."""
    code = (
        "import sys; sys.modules['reference'] = None\n"
        "from falsify.engines.loading import EngineError, load_engine\n"
        "try:\n    load_engine('reference')\nexcept EngineError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=True
    ).stdout
    assert "cannot import reference.engine" in out
    assert "pip install ./packaging/reference from a falsify checkout" in out
    assert "pip install falsify-harness-reference" not in out
    assert (Path(__file__).parent.parent / "packaging" / "reference" / "pyproject.toml").is_file()


def test_lint_refuses_a_mutant_that_matches_its_target_other_than_once() -> None:
    """tests/fixtures/mutants/ambiguous: a statement, an anchor and a snippet that each match twice, and an anchor
    that matches nothing. Lint names the mutant file, the field's line and the lines matched; at run time each
    would only have been STALE (issue #24)."""
    root = Path(__file__).parent / "fixtures" / "mutants" / "ambiguous"
    env = {
        **ENV,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), ENV.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "lint"],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    twice = "matches 2 statements in amb/loop.py, function generate (lines 7, 10); a mutant needs exactly one"
    lines = result.stdout.splitlines()
    assert lines == [
        "mutants/anchor-gone.yaml:7: anchor: matches 0 statements in amb/loop.py, function generate; a mutant "
        "needs exactly one (the source drifted: quote what it has now) [mutant-match]",
        f"mutants/moved-after-twice.yaml:7: anchor: {twice} (quote more of it, or another statement) [mutant-match]",
        f"mutants/poll-deleted-twice.yaml:6: statement: {twice} (quote more of it, or another statement) "
        "[mutant-match]",
        "mutants/text-twice.yaml:5: snippet: matches 2 places in amb/loop.py (lines 8, 11); a mutant needs exactly "
        "one (quote more of it, or another statement) [mutant-match]",
        "lint: 5 files, 1 contracts, 1 predictions, 4 mutants (1 of 1 predictions listed by one, 0 with "
        "unproven_because), 4 errors",
    ]
    # The unique statement of moved-after-twice and anchor-gone is not reported: only the field that is ambiguous.
    assert "statement: matches 1" not in result.stdout


def test_lint_counts_only_existing_predictions_as_listed_by_a_mutant(tmp_path: Path) -> None:
    """A mutant's `kills:` naming no prediction is a mutant-kills error; the verdict's "N of M predictions listed
    by one" counts only predictions that exist (it read "2 of 1")."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert falsify("init", cwd=tmp_path).returncode == 0
    mutant = tmp_path / "mutants" / "example-poll-after-forward.yaml"
    text = mutant.read_text()
    assert "kills: [FALSIFY-EXAMPLE-CANCEL-001]" in text
    mutant.write_text(
        text.replace(
            "kills: [FALSIFY-EXAMPLE-CANCEL-001]", "kills: [FALSIFY-EXAMPLE-CANCEL-001, FALSIFY-NOPE-001]"
        )
    )
    result = falsify("lint", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("kills: FALSIFY-NOPE-001 is not a prediction of any contract [mutant-kills]")
    assert "1 mutants (1 of 1 predictions listed by one, 0 with unproven_because), 1 error" in lines[-1]


def read_then_close(args: list[str], cwd: Path, lines: int) -> tuple[int, str]:
    """`falsify ARGS | head -LINES`: a real pipe whose reader reads LINES lines and leaves; the exit code and
    stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "falsify.cli", *args],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(lines):
        assert proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    return proc.wait(timeout=600), stderr


@pytest.mark.parametrize(
    ("args", "lines"),
    [(["packs"], 0), (["--help"], 0), (["lint"], 0), (["gate"], 1)],
    ids=["packs", "help", "lint", "gate"],
)
def test_a_reader_that_leaves_early_stops_neither_the_work_nor_the_exit_code(
    tmp_path: Path, args: list[str], lines: int
) -> None:
    """`falsify gate | head -1` in a fresh `falsify init` project: the gate still runs its falsifiers and writes
    gate.json, exits with its verdict's code (0: PASS), and prints no BrokenPipeError, neither from a print nor
    at interpreter shutdown."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert falsify("init", cwd=tmp_path).returncode == 0
    code, stderr = read_then_close(args, tmp_path, lines)
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr and "BrokenPipe" not in stderr, stderr
    if args == ["gate"]:
        gate = json.loads((tmp_path / ".falsify" / "gate" / "gate.json").read_text())
        assert [row["outcome"] for row in gate["predictions"]] == ["PASS"]


def test_the_stdout_relay_never_waits_on_a_process_that_outlived_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """falsify.cli's relay (a piped stdout whose reader may leave) stops copying RELAY_DRAIN seconds after the
    command ended even while something it started still writes: the exit never hangs on a straggler."""
    import contextlib
    import threading
    import time

    from falsify import cli

    monkeypatch.setattr(cli, "RELAY_DRAIN", 0.3)
    read_end, write_end = os.pipe()
    sink = os.open(os.devnull, os.O_WRONLY)
    stop = threading.Event()

    def straggler() -> None:
        with contextlib.suppress(OSError):  # EPIPE once the relay has let go of the read end
            while not stop.is_set():
                os.write(write_end, b"x" * 4096)

    writer = threading.Thread(target=straggler, daemon=True)
    writer.start()
    done, gone = threading.Event(), threading.Event()
    done.set()
    started = time.monotonic()
    relay = threading.Thread(target=cli._relay, args=(read_end, sink, done, gone), daemon=True)
    relay.start()
    relay.join(5)
    stop.set()
    assert not relay.is_alive(), "the relay went on copying a straggler's output"
    assert time.monotonic() - started < 3
    os.close(write_end)
    os.close(sink)


def test_the_stdout_relay_copies_what_came_just_before_the_command_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race that lost `falsify evidence --help`'s whole output 4 times in 100 runs under load: the relay's
    select times out on an empty pipe, then the command flushes its output and sets `done` before the relay looks
    at `done`. What was flushed must still be copied."""
    import select as select_module
    import threading

    from falsify import cli

    read_end, write_end = os.pipe()
    out_read, out_write = os.pipe()
    done, gone = threading.Event(), threading.Event()
    real_select = select_module.select
    calls = []

    def select_then_finish(rlist: list[int], wlist: list[int], xlist: list[int], timeout: float) -> tuple:
        calls.append(timeout)
        if len(calls) == 1:  # the timeout, and while it expired: the command's last flush, then done
            os.write(write_end, b"usage: falsify evidence ... exit codes: 0 success\n")
            done.set()
            return [], [], []
        return real_select(rlist, wlist, xlist, timeout)

    monkeypatch.setattr(cli.select, "select", select_then_finish)
    cli._relay(read_end, out_write, done, gone)
    os.close(out_write)
    assert os.read(out_read, 1 << 16) == b"usage: falsify evidence ... exit codes: 0 success\n"
    os.close(write_end)
    os.close(out_read)


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_gate_refuses_a_junit_path_it_would_write_through_before_running(tmp_path: Path, kind: str) -> None:
    """`falsify gate --junit DEST`: a symlink at DEST (it wrote through one, over a file outside the project) or a
    directory is refused on one line, exit 2, before any falsifier runs; the file behind the link is untouched."""
    root = make_project(tmp_path / "p")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data\n")
    dest = root / "j.xml"
    if kind == "symlink":
        dest.symlink_to(victim)
    else:
        dest.mkdir()
    result = falsify("gate", "--engine", "reference", "--junit", str(dest), cwd=root)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1 and str(dest) in result.stderr
    assert victim.read_text() == "precious data\n"
