"""Where `gate --junit` and `matrix --out` write: never through a symlink, never over a directory, a special file
or a project file (docs/hardening.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit_gate_cli import run_cli

from falsify.harness.gate import copy_junit
from falsify.untrusted.safefile import FileLayerError

ROOT = Path(__file__).resolve().parents[1]
JUNIT = b'<?xml version="1.0" encoding="utf-8"?><testsuites/>\n'


@pytest.fixture
def out(tmp_path: Path) -> Path:
    run = tmp_path / "out"
    run.mkdir()
    (run / "junit.xml").write_bytes(JUNIT)
    return run


def test_the_junit_copy_is_written_and_replaces_a_regular_file(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "reports" / "j.xml"
    copy_junit(out, dest)
    assert dest.read_bytes() == JUNIT
    dest.write_bytes(b"old")
    copy_junit(out, dest)
    assert dest.read_bytes() == JUNIT


def test_a_symlink_at_the_junit_path_is_refused_not_written_through(out: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    (tmp_path / "j.xml").symlink_to(victim)
    with pytest.raises(
        FileLayerError, match=r"j\.xml: cannot replace the --junit file: a symlink is in its place"
    ):
        copy_junit(out, tmp_path / "j.xml")
    assert victim.read_text() == "precious data"


@pytest.mark.parametrize(("dest", "kind"), [("DIR", "a directory"), ("/dev/full", "a character device")])
def test_a_directory_or_special_file_at_the_junit_path_is_refused(
    out: Path, tmp_path: Path, dest: str, kind: str
) -> None:
    path = tmp_path if dest == "DIR" else Path(dest)
    with pytest.raises(
        FileLayerError, match=f"^{path}: cannot replace the --junit file: {kind} is in its place"
    ):
        copy_junit(out, path)


def test_matrix_out_naming_a_project_file_or_a_symlink_is_refused_before_any_engine_runs(
    tmp_path: Path,
) -> None:
    project_file = tmp_path / "pyproject.toml"
    project_file.write_text("[project]\n")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    for out, kind in [(project_file, "a regular file"), (tmp_path / "link", "a symlink")]:
        proc = run_cli("matrix", "--engine", "reference", "--out", str(out), cwd=ROOT, timeout=300)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert f"{out}: the --out directory is {kind}, not a directory" in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and "=== matrix: engine" not in proc.stdout
    assert project_file.read_text() == "[project]\n"
    assert list((tmp_path / "elsewhere").iterdir()) == []
