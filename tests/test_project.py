"""[tool.falsify] as data: keys, types, the search boundary, and what evidence takes from it (weights)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from falsify.evidence.tree import configured_weights
from falsify.project import ProjectError, find_project, schema_path


def write(root: Path, table: str) -> Path:
    (root / "pyproject.toml").write_text(f"[tool.falsify]\n{table}", encoding="utf-8")
    return root


def test_keys_are_read_with_their_defaults(tmp_path: Path) -> None:
    project = find_project(write(tmp_path, 'packs = ["serving"]\nengine = "m:f"\ncopy_exclude = ["data"]\n'))
    assert project.root == tmp_path.resolve()
    assert project.contracts == tmp_path.resolve() / "contracts"
    assert (project.packs, project.engine, project.copy_exclude) == (("serving",), "m:f", ("data",))
    assert project.import_roots == (tmp_path.resolve(),)
    (tmp_path / "src").mkdir()
    assert find_project(tmp_path).import_roots == (tmp_path.resolve(), tmp_path.resolve() / "src")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('packs = "serving"\n', "packs must be a list of strings"),
        ("engine = 3\n", "engine must be a non-empty string"),
        ('weight = ["x"]\n', "unknown key 'weight'"),
        ("contracts = [\n", "not valid TOML"),
        ("contracts = {a = 1}\n", "contracts must be a non-empty string, got a table"),
        ('sources = {"/etc/*" = 1}\n', "sources must be a list of strings, got a table"),
        ('sources = [{"/etc/*" = 1}]\n', "sources must be a list of strings, got an array"),
        ("gate = 1\n", "gate must be a table"),
        ("[tool.falsify.other]\n", "unknown key 'other'"),
    ],
)
def test_a_bad_table_is_a_one_line_error_naming_the_file(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ProjectError, match=r"pyproject\.toml") as info:
        find_project(write(tmp_path, table))
    assert message in str(info.value)


def test_the_search_stops_at_the_first_pyproject(tmp_path: Path) -> None:
    write(tmp_path, "")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(ProjectError, match=r"has no \[tool\.falsify\] table"):
        find_project(inner / ".")
    assert find_project(tmp_path).root == tmp_path.resolve()


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling symlink"])
def test_a_pyproject_that_is_not_a_file_is_named_not_skipped_for_a_parent(tmp_path: Path, kind: str) -> None:
    write(tmp_path, "")
    inner = tmp_path / "inner"
    inner.mkdir()
    here = inner / "pyproject.toml"
    {
        "directory": here.mkdir,
        "fifo": lambda: os.mkfifo(here),
        "dangling symlink": lambda: here.symlink_to("gone"),
    }[kind]()
    with pytest.raises(ProjectError, match=r"inner/pyproject\.toml is a .*, not a regular file"):
        find_project(inner)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("timeout = nan", "timeout must be a finite number of seconds"),
        ("timeout = inf", "timeout must be a finite number of seconds"),
        ("timeout = 1e300", "timeout must be 0 (no limit) or between"),
        ("test_timeout = 1e-300", "test_timeout must be 0 (no limit) or between"),
        ("test_timeout = -1", "test_timeout must be 0 (no limit) or between"),
        ('test_timeout = "9"', "test_timeout must be a finite number of seconds"),
    ],
)
def test_gate_timeouts_in_the_config_are_finite_and_in_range(
    tmp_path: Path, table: str, message: str
) -> None:
    from falsify.errors import FalsifyError
    from falsify.harness.gate import timeouts

    project = find_project(write(tmp_path, f"[tool.falsify.gate]\n{table}\n"))
    with pytest.raises(FalsifyError, match=r"pyproject\.toml: \[tool\.falsify\.gate\] ") as info:
        timeouts(project, None, None)
    assert message in str(info.value)
    assert timeouts(find_project(write(tmp_path, "[tool.falsify.gate]\ntimeout = 0\n")), None, None)[1] == 0


def test_configured_weights_are_found_relative_to_the_root(tmp_path: Path) -> None:
    write(tmp_path, 'weights = ["w/*.bin"]\n')
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.bin").write_bytes(b"\0")
    (tmp_path / "w" / "b.txt").write_text("not weights")
    assert [name for name, _ in configured_weights(tmp_path)] == ["w/a.bin"]


def test_weights_dirs_may_name_directories_outside_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from falsify.evidence.tree import weights_dirs

    monkeypatch.setenv("FALSIFY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for d in ("p", "q"):
        (tmp_path / d).mkdir()
    write(tmp_path / "p", 'weights_dirs = ["../models", "~/w", "/opt/w"]\n')
    assert weights_dirs(tmp_path / "p") == [
        (tmp_path / "models").resolve(),
        (tmp_path / "home" / "w").resolve(),
        Path("/opt/w"),
        (tmp_path / "cache").resolve(),
    ]
    write(tmp_path / "q", 'weights_dirs = [""]\n')
    with pytest.raises(ProjectError, match=r"weights_dirs: an entry is empty or holds a NUL"):
        find_project(tmp_path / "q")


def test_schemas_ship_inside_the_package() -> None:
    path = schema_path("contract-v1")
    assert (
        path.is_file()
        and path.parent.parent.name == "contracts"
        and path.parent.parent.parent.name == "falsify"
    )


def test_a_project_without_pyproject_is_configured_by_falsify_toml(tmp_path: Path) -> None:
    """Issue #46: an engine in C has no pyproject.toml; falsify.toml holds the same [tool.falsify] table. The search
    stops at the first directory with either file; the table in both is an error naming both, and a
    pyproject.toml without the table defers to a falsify.toml beside it."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "falsify.toml").write_text(
        '[tool.falsify]\nengine = "exec:build/tinyc"\npacks = ["serving"]\n[tool.falsify.gate]\ntest_timeout = 60\n',
        encoding="utf-8",
    )
    (tmp_path / "sub").mkdir()
    project = find_project(tmp_path / "sub")
    assert (project.root, project.engine, project.packs) == (
        tmp_path.resolve(),
        "exec:build/tinyc",
        ("serving",),
    )
    assert project.pyproject == tmp_path.resolve() / "falsify.toml"  # where the sub-tables are read from too
    from falsify.harness.gate import timeouts

    assert timeouts(project, None, None)[0] == 60
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "c-engine"\n', encoding="utf-8")
    assert find_project(tmp_path).pyproject.name == "falsify.toml"
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\nengine = "m:f"\n', encoding="utf-8")
    with pytest.raises(ProjectError, match=r"\[tool.falsify\] in both pyproject.toml and falsify.toml"):
        find_project(tmp_path)
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "falsify.toml").write_text("[other]\nx = 1\n", encoding="utf-8")
    with pytest.raises(ProjectError, match=r"falsify.toml has no \[tool.falsify\] table"):
        find_project(tmp_path)
    (tmp_path / "falsify.toml").unlink()
    with pytest.raises(ProjectError, match=r"no pyproject\.toml or falsify\.toml with"):
        find_project(tmp_path)
