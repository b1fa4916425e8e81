"""`falsify mutmut --judge contracts` (falsify/mutation/mutmut/contracts.py): its configuration, the stratified draw,
the environment each gate runs in, and (slow) one server mutant judged in a scratch copy of this repository: the
OpenAI server started by the gate runs mutmut's copy, red under the mutant and green unmutated."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from falsify.mutation.mutmut.config import MutmutConfig, MutmutError, MutmutMutant
from falsify.mutation.mutmut.contracts import (
    ContractsConfig,
    Group,
    draw,
    gate_command,
    gate_env,
    read_contracts_config,
)
from falsify.project import find_project

ROOT = Path(__file__).resolve().parents[1]


def project_with(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.falsify]\ncontracts = "contracts"\n\n' + textwrap.dedent(table), encoding="utf-8"
    )
    (tmp_path / "contracts").mkdir()
    return tmp_path


GOOD = """
    [tool.falsify.mutmut-contracts]
    paths = ["src/*.py"]
    [[tool.falsify.mutmut-contracts.group]]
    name = "server"
    files = ["src/server.py"]
    engines = ["exec:python -m src.server"]
    [[tool.falsify.mutmut-contracts.group]]
    name = "core"
    files = ["src/*.py"]
    engines = ["", "exec:python -m src.server"]
"""


def test_config_reads_groups_in_order_and_the_first_match_judges(tmp_path: Path) -> None:
    config = read_contracts_config(find_project(project_with(tmp_path, GOOD)))
    assert [g.name for g in config.groups] == ["server", "core"]
    assert config.group_of("src/server.py").name == "server"  # type: ignore[union-attr]
    assert config.group_of("src/model.py").name == "core"  # type: ignore[union-attr]
    assert config.group_of("other/x.py") is None
    assert config.mutmut.baseline == "mutmut-contracts-baseline.toml"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('paths = ["src/*.py"]', "paths = []"), "paths must be a non-empty list"),
        (('name = "core"', 'name = "server"'), "group names must differ"),
        (('engines = ["exec:python -m src.server"]', "engines = []"), "group #1 (server) engines must be"),
        (('files = ["src/server.py"]', 'files = [""]'), "group #1 (server) files must be"),
        (('paths = ["src/*.py"]', 'paths = ["src/*.py"]\ngate_timeout = 0'), "gate_timeout must be seconds"),
        (('paths = ["src/*.py"]', 'paths = ["src/*.py"]\nsuite = 1'), "unknown key(s) suite"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    project = find_project(project_with(tmp_path, GOOD.replace(*edit)))
    with pytest.raises(MutmutError, match=r"mutmut-contracts\]") as exc:
        read_contracts_config(project)
    assert message in str(exc.value)


def _config() -> ContractsConfig:
    return ContractsConfig(
        MutmutConfig(paths=("src/*.py",)),
        (Group("server", ("src/server.py",), ("x",)), Group("core", ("src/*.py",), ("",))),
    )


def test_draw_takes_n_from_each_group_at_random_and_the_seed_repeats_it() -> None:
    located = [
        MutmutMutant(f"src.server.x_f__mutmut_{i}", "src/server.py", "not checked") for i in range(1, 30)
    ]
    located += [
        MutmutMutant(f"src.model.x_g__mutmut_{i}", "src/model.py", "not checked") for i in range(1, 5)
    ]
    chosen = draw(located, _config(), 3, seed=7)
    assert sorted(chosen.values()) == ["core"] * 3 + ["server"] * 3
    assert draw(located, _config(), 3, seed=7) == chosen
    assert any(draw(located, _config(), 3, seed=s) != chosen for s in range(8, 12))
    assert len(draw(located, _config(), None, seed=0)) == len(located)
    assert sorted(draw(located, _config(), 10, seed=0).values()).count("core") == 4  # a group smaller than N


def test_draw_refuses_a_file_no_group_lists() -> None:
    stray = [MutmutMutant("lib.x_h__mutmut_1", "lib/x.py", "not checked")]
    with pytest.raises(MutmutError, match=r"lib/x\.py: no .* group lists it"):
        draw(stray, _config(), 1, seed=0)


def test_each_gate_imports_the_trampolined_copy_with_the_mutant_set(tmp_path: Path) -> None:
    env = gate_env(tmp_path / "mutants", "reference.x.x_f__mutmut_1")
    assert env["PYTHONPATH"] == str(tmp_path / "mutants")
    assert env["MUTANT_UNDER_TEST"] == "reference.x.x_f__mutmut_1"
    assert env["HYPOTHESIS_PROFILE"] == "ci"
    assert "FALSIFY_ENGINE" not in env
    cmd = gate_command("exec:python -m reference.serve", tmp_path / "out")
    assert cmd[cmd.index("--engine") + 1] == "exec:python -m reference.serve"
    assert cmd[-2:] == ["--", "-x"]
    assert "--engine" not in gate_command("", tmp_path / "out")
