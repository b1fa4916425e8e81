"""Hostile engine specs, environment settings and configuration: each is one line naming what is wrong, exit 2,
before any engine starts or any falsifier runs; never a traceback, an INTERNALERROR or a silent default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testkit_gate_cli import init_project, run_cli

from falsify.engines import env_settings
from falsify.engines.loading import REGISTERED, EngineError, load_engine, probe_wire, resolve_engine
from falsify.engines.specs import spec_problem
from falsify.errors import FalsifyError
from falsify.harness.matrix import engine_dirs, ours_or_absent

ENV = {**os.environ, "PYTHONHASHSEED": "0"}
for name in ("FALSIFY_ENGINE", "HYPOTHESIS_PROFILE", "CI"):
    ENV.pop(name, None)

MALFORMED = [
    # http: brackets, ports, hosts, what follows the port
    "http://[::1",
    "http://[::1:80",
    "http://[zz::1]:80",
    "http://:80",
    "http://127.0.0.1",
    "http://127.0.0.1:",
    "http://127.0.0.1:0",
    "http://127.0.0.1:65536",
    "http://127.0.0.1:99999999999999999999",
    "http://127.0.0.1:+80",
    "http://127.0.0.1:8_0",
    "http://127.0.0.1:abc",
    "http://a b:80",
    "http://" + "x" * 300 + ":80",
    "http://u:p@127.0.0.1:80",
    "http://127.0.0.1:80/a b",
    "http://127.0.0.1:80?q",
    "http://127.0.0.1:80#f",
    "https://127.0.0.1:80",
    "HTTP://127.0.0.1:80",
    # exec and openai+
    "exec:",
    "exec: ",
    "exec:'unclosed",
    'exec:"unclosed',
    "exec:a\x00b",
    "openai+",
    "openai+ftp://127.0.0.1:80",
    "openai+https://127.0.0.1:80",
    "openai+http://10.0.0.1:80",
    "openai+http://[::1",
    "openai+http://127.0.0.1:65536",
    "openai+exec:",
    "openai+exec:'unclosed",
    "openai+exec:no-such-program-xyz --port {port}",
    # module:factory
    ":x",
    ".x:y",
    "x:",
    "a b:c",
    "a..b:c",
    "a:b.c",
    "1a:b",
    # one line of text, of a sane length
    "example_engine:make\n",
    "exec:python3 x.py\x1b[2J",
    " exec:true",
    "x" * 5000,
]


@pytest.mark.parametrize("spec", MALFORMED, ids=[repr(s)[:40] for s in MALFORMED])
def test_a_malformed_engine_spec_is_one_line_naming_it(spec: str) -> None:
    """resolve_engine (every command), load_engine and probe_wire: an EngineError, never urlsplit's ValueError,
    Popen's FileNotFoundError or idna's UnicodeError."""
    assert spec_problem(spec, tuple(REGISTERED)) is not None
    for step in (lambda: resolve_engine(spec, None), lambda: load_engine(spec), lambda: probe_wire(spec)):
        with pytest.raises(EngineError) as info:
            step()
        text = str(info.value)
        assert "\n" not in text and "\x1b" not in text and "\x00" not in text and len(text) < 1000, text


@pytest.mark.parametrize(
    "spec",
    [
        "reference",
        "llamacpp:/models/x.gguf",
        "hf:/checkpoints/qwen",
        "my_pkg.engine:make",
        'exec:"python3 -m reference.serve"',
        "exec:python3 engine.py --flag 'a b'",
        "http://127.0.0.1:8080",
        "http://[::1]:8080/base/",
        "http://engine.local:1",
        "openai+http://localhost:8000",
        "openai+http://[::1]:8000",
        "openai+exec:python3 -m server --port {port}",
    ],
)
def test_well_formed_specs_keep_working(spec: str) -> None:
    assert spec_problem(spec, tuple(REGISTERED)) is None


def test_the_cli_refuses_an_unclosed_ipv6_url_on_one_line(tmp_path: Path) -> None:
    result = run_cli("gate", "--engine", "http://[::1", cwd=tmp_path, env=ENV)
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    # no project here: the project is looked for first; in a project the spec is named (test above)
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FALSIFY_WIRE_TIMEOUT", "1e308"),
        ("FALSIFY_WIRE_TIMEOUT", "nan"),
        ("FALSIFY_WIRE_TIMEOUT", "0.001"),
        ("FALSIFY_OPENAI_TIMEOUT", "inf"),
        ("FALSIFY_OPENAI_TIMEOUT", "-1"),
        ("FALSIFY_TEST_TIMEOUT", "soon"),
        ("FALSIFY_TEST_TIMEOUT", "1e308"),
        ("FALSIFY_WIRE_MAX_LINE", "1e308"),
        ("FALSIFY_WIRE_MAX_LINE", "12"),
        ("FALSIFY_WIRE_MAX_LINE", "9" * 40),
        ("FALSIFY_LLAMACPP_THREADS", "0"),
        ("FALSIFY_LLAMACPP_THREADS", "1000000"),
        ("FALSIFY_TORCH_THREADS", "two"),
        ("FALSIFY_TORCH_THREADS", "1.5"),
    ],
)
def test_every_number_setting_has_a_range_and_names_its_variable(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(FalsifyError, match=f"^{name}="):
        env_settings.check_all(FalsifyError)


def test_number_settings_in_range_are_read() -> None:
    env = {"FALSIFY_TEST_TIMEOUT": "0", "FALSIFY_WIRE_MAX_LINE": "2048", "FALSIFY_TORCH_THREADS": "4"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        env_settings.check_all(FalsifyError)
        assert env_settings.test_timeout(FalsifyError) == 0.0
        assert env_settings.wire_max_line(FalsifyError) == 2048
        assert env_settings.threads("FALSIFY_TORCH_THREADS", FalsifyError) == 4
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return init_project(tmp_path / "proj", ENV)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"HYPOTHESIS_PROFILE": "nonexistent"},
            "falsify: HYPOTHESIS_PROFILE='nonexistent' is not a hypothesis",
        ),
        (
            {"FALSIFY_WIRE_TIMEOUT": "1e308"},
            "falsify: FALSIFY_WIRE_TIMEOUT='1e308' must be a number of seconds",
        ),
        ({"FALSIFY_TEST_TIMEOUT": "nan"}, "falsify: FALSIFY_TEST_TIMEOUT='nan' must be 0 (no limit) or"),
    ],
)
def test_the_gate_checks_the_environment_before_it_runs(
    project: Path, env: dict[str, str], said: str
) -> None:
    result = run_cli("gate", cwd=project, env={**ENV, **env})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[-1]]
    assert result.stderr.startswith(said), result.stderr
    assert (
        "INTERNALERROR" not in result.stdout + result.stderr and "running the falsifiers" not in result.stdout
    )


def test_pytest_itself_names_a_bad_profile_and_a_bad_test_timeout(project: Path) -> None:
    """The plugin under a plain `pytest`: a usage error (exit 4), not an INTERNALERROR (exit 3)."""
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    for env, flag, said in [
        ({"HYPOTHESIS_PROFILE": "nope"}, [], "HYPOTHESIS_PROFILE='nope' is not a hypothesis profile"),
        ({"FALSIFY_TEST_TIMEOUT": "soon"}, [], "FALSIFY_TEST_TIMEOUT='soon' is not a number"),
        ({}, ["--falsify-test-timeout=inf"], "argument --falsify-test-timeout: must be a finite number"),
    ]:
        result = subprocess.run(
            [*pytest_cmd, *flag], cwd=project, env={**ENV, **env}, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 4, result.stdout + result.stderr
        assert said in result.stdout + result.stderr
        assert "INTERNALERROR" not in result.stdout + result.stderr


def test_an_unknown_gate_key_is_named(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.falsify.gate]\ntimout = 5\n")
    result = run_cli("gate", cwd=project, env=ENV)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"falsify: {pyproject}: [tool.falsify.gate] has unknown key(s) timout (known: test_timeout, timeout, jobs)"
    )


def test_matrix_is_not_a_pass_when_an_engine_never_started(project: Path) -> None:
    result = run_cli("matrix", "--engine", "example_engine:make_engine,exec:false", cwd=project, env=ENV)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "matrix: engine 'exec:false' not run: engine 'exec:false' did not start" in result.stdout
    document = json.loads((project / ".falsify" / "matrix" / "matrix.json").read_text())
    assert document["summaries"]["exec:false"].startswith("not run: ")


def test_matrix_does_not_write_over_a_file_it_did_not_write(project: Path) -> None:
    out = project / "reports"
    out.mkdir()
    (out / "matrix.json").write_text('{"mine": true}\n')
    result = run_cli(
        "matrix", "--engine", "example_engine:make_engine", "--out", str(out), cwd=project, env=ENV
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"falsify: --out: {out / 'matrix.json'} is not a matrix falsify wrote; not written over (give another --out)"
    )
    assert (out / "matrix.json").read_text() == '{"mine": true}\n'


def test_a_matrix_of_an_earlier_run_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "matrix.json").write_text(json.dumps({"engines": [], "predictions": [], "summaries": {}}))
    (tmp_path / "matrix.md").write_text("| prediction | a |\n")
    ours_or_absent(tmp_path / "matrix.json")
    ours_or_absent(tmp_path / "matrix.md")
    ours_or_absent(tmp_path / "absent.json")
    (tmp_path / "matrix.md").write_text("# my notes\n")
    with pytest.raises(FalsifyError, match="not a matrix falsify wrote"):
        ours_or_absent(tmp_path / "matrix.md")


def test_engines_whose_safe_names_collide_get_directories_of_their_own() -> None:
    dirs = engine_dirs(["a:b", "a_b", "A_b", "exec:x y"])
    assert dirs == {"a:b": "a_b", "a_b": "a_b-2", "A_b": "A_b-3", "exec:x y": "exec_x_y"}
