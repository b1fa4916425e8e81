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
    Judge,
    draw,
    gate_command,
    gate_env,
    read_contracts_config,
    run_as_main,
)
from falsify.mutation.mutmut.running import generate, locate, prepare, read_results
from falsify.mutation.semantic.scratch import Scratch
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
    engines = ["exec:python -m tools.run"]
    [[tool.falsify.mutmut-contracts.group]]
    name = "core"
    files = ["src/*.py"]
    engines = ["", "exec:python -m tools.run"]
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
        (
            ('engines = ["exec:python -m tools.run"]', "engines = []"),
            "group #1 (server) engines must be",
        ),
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


def test_config_refuses_a_mutated_module_run_as_main(tmp_path: Path) -> None:
    # python -m runs the file as __main__: mutmut's trampolines there compare the mutant's module with __main__
    # and never run the mutant (found measuring: every serve.py mutant survived the wire gate).
    project = find_project(project_with(tmp_path, GOOD.replace("tools.run", "src.server")))
    with pytest.raises(MutmutError, match=r"runs src/server\.py as __main__ \(python -m\)"):
        read_contracts_config(project)
    assert run_as_main("openai+exec:python -m a.b --port {port}") == "a.b"
    assert run_as_main('exec:python -c "from a.b import main; main()"') == ""
    assert run_as_main("") == ""


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


# A known-bad mutant of an OpenAI server method: usage's total_tokens made prompt - completion, which
# FALSIFY-OAI-013 (usage adds up) must see. mutmut's name for the method, and the mutated line.
SERVER_FILE = "reference/openai_server.py"
KNOWN_BAD = ("reference.openai_server.xǁ_Handlerǁ_serve__mutmut_", '"total_tokens": len(job.prompt) - n,')
ONE_SLOT = "openai+exec:python -m reference.serve --openai --port {port} --slots 1"


@pytest.mark.slow
def test_a_server_mutant_is_killed_by_the_contracts_and_the_clean_gate_is_green() -> None:
    pytest.importorskip("mutmut")
    project = find_project(ROOT)
    config = MutmutConfig(paths=(SERVER_FILE,), tests=("(the contract gate)",))
    with Scratch(project.root, prefix="falsify-test-contracts-", exclude=project.copy_exclude) as scratch:
        tree = scratch.copy("project")
        prepare(tree, project, config, [SERVER_FILE])
        generate(tree, scratch, timeout=900)
        of_serve = [m for m in read_results(tree, [SERVER_FILE], []) if m.name.startswith(KNOWN_BAD[0])]
        bad = [m for m in locate(tree, of_serve, scratch, timeout=900) if m.mutated == KNOWN_BAD[1]]
        assert len(bad) == 1, f"no single mutant of {KNOWN_BAD[0]}* mutates a line to {KNOWN_BAD[1]!r}"
        judge = Judge(tree, scratch, timeout=900)
        assert judge.gate(ONE_SLOT, "")[0] == 0, "the unmutated gate on the OpenAI server must be green"
        judged = judge.judge(bad[0].name, (ONE_SLOT,))
        assert (judged.status, judged.engine, judged.returncode) == ("killed", ONE_SLOT, 1), judged
