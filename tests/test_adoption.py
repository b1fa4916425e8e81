"""falsify as an engine team adopts it: the harness wheel built from this checkout, installed (not editable) into a
fresh virtualenv outside the repository, used in a new empty git repository.

The virtualenv borrows only third-party dependencies (numpy, pytest, hypothesis, ...) from the interpreter running
this test, through a .pth line naming its site-packages (a plain path line: the editable install of this checkout
that lives there is never activated); falsify itself comes from the wheel, and `reference` is not importable.
Building the wheel needs setuptools from the package index (pip's build isolation), as `tox` itself does.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from testkit_harness_wheel import build_harness_wheel

ROOT = Path(__file__).resolve().parent.parent


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the fresh venv's bin directory, an environment that uses it and nothing of this checkout)."""
    base = tmp_path_factory.mktemp("adoption")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FALSIFY_", "VIRTUAL_ENV"))}
    env.update(PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", HOME=str(base / "home"))
    env.pop("CI", None)
    wheel = build_harness_wheel(base)
    venv = base / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base, env)
    borrowed = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    Path(purelib.stdout.strip(), "borrowed-dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    pip = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            # the borrowed site-packages may hold this checkout's editable install: pip must not call that
            # "already satisfied" (its import hook does not load from a borrowed path)
            "--ignore-installed",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        base,
        env,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return venv / "bin", env


def test_the_wheel_installs_no_reference_and_ships_its_data(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    probe = run(
        [
            str(bin_dir / "python"),
            "-c",
            "import importlib.util, falsify, falsify.contracts.packs as p; "
            "print(falsify.__file__); print(importlib.util.find_spec('reference')); print(' '.join(p.available()))",
        ],
        tmp_path,
        env,
    )
    assert probe.returncode == 0, probe.stderr
    where, reference, packs = probe.stdout.splitlines()
    assert "site-packages" in where and str(ROOT) not in where
    assert reference == "None"
    assert "serving" in packs.split()
    version = run([str(bin_dir / "falsify"), "--version"], tmp_path, env)
    assert version.returncode == 0 and version.stdout.startswith("falsify ")


def test_init_then_lint_gate_mutants_in_a_new_repository(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    falsify = str(bin_dir / "falsify")
    repo = tmp_path / "repo"
    repo.mkdir()
    assert run(["git", "init", "-q"], repo, env).returncode == 0
    nothing = run([falsify, "gate"], repo, env)
    assert (
        nothing.returncode == 2 and "no pyproject.toml or falsify.toml with [tool.falsify]" in nothing.stderr
    )
    for step in (["init"], ["lint"], ["gate"], ["mutants"]):
        done = run([falsify, *step], repo, env)
        assert done.returncode == 0, (
            f"falsify {' '.join(step)}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    assert "gate: PASS — 1 contracts, 1 predictions (1 pass" in run([falsify, "gate"], repo, env).stdout
    missing = run([falsify, "gate", "--engine", "nosuch"], repo, env)
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.splitlines()) == 1 and "unknown engine 'nosuch'" in missing.stderr


def test_the_serving_pack_judges_a_toy_engine_and_its_buggy_twin(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """`falsify gate --pack serving --engine <module in the repo>`: green on a correct toy engine, red on the same
    engine with its cancel poll moved after the forward."""
    bin_dir, env = installed
    falsify = str(bin_dir / "falsify")
    repo = tmp_path / "repo"
    repo.mkdir()
    assert run(["git", "init", "-q"], repo, env).returncode == 0
    assert run([falsify, "init"], repo, env).returncode == 0
    good = (repo / "example_engine" / "engine.py").read_text()
    poll = '            if cancel.is_cancelled():\n                run.stop_reason = "cancelled"\n                break\n'
    forward = "            logits = self.next_logits(prompt, run, state)\n"
    assert good.count(poll + forward) == 1, "the example engine's loop changed: update this test's edit"
    (repo / "toy_engine.py").write_text(good)
    (repo / "buggy_engine.py").write_text(good.replace(poll + forward, forward + poll))

    green = run(
        [falsify, "gate", "--pack", "serving", "--engine", "toy_engine:make_engine", "--out", "g"], repo, env
    )
    assert green.returncode == 0, green.stdout[-4000:] + green.stderr[-2000:]
    assert "FALSIFY-SERVE-CANCEL-002" in green.stdout and "FALSIFY-SERVE-PREFILL-001" in green.stdout
    assert "gate: PASS" in green.stdout

    red = run(
        [falsify, "gate", "--pack", "serving", "--engine", "buggy_engine:make_engine", "--out", "r"],
        repo,
        env,
    )
    assert red.returncode == 1, red.stdout[-4000:] + red.stderr[-2000:]
    rows = {
        line.split()[0]: line.split()[2] for line in red.stdout.splitlines() if line.startswith("FALSIFY-")
    }
    assert rows["FALSIFY-SERVE-CANCEL-002"] == "FAIL"
    assert rows["FALSIFY-SERVE-PREFILL-001"] == "PASS"  # the prefill half is unchanged by the planted bug
    assert "gate: FAIL" in red.stdout


def test_a_plain_pytest_project_keeps_its_hypothesis_profile_under_ci(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The plugin is installed (entry point) but the project has no [tool.falsify]: nothing changes."""
    bin_dir, env = installed
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "plain"\n[tool.pytest.ini_options]\n')
    (tmp_path / "conftest.py").write_text(
        "from hypothesis import settings\n"
        "settings.register_profile('mine', max_examples=7)\n"
        "settings.load_profile('mine')\n"
    )
    (tmp_path / "test_plain.py").write_text(
        "from hypothesis import settings\n\n"
        "def test_profile(request):\n"
        "    assert settings.default.max_examples == 7\n"
        "    assert 'engine' not in request.fixturenames\n"
        "    assert request.config.pluginmanager.get_plugin('falsify-core') is None\n"
        "    assert request.config.pluginmanager.get_plugin('falsify') is not None  # installed, and polite\n"
    )
    done = run(
        [str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        tmp_path,
        {**env, "CI": "true"},
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout


def test_the_reference_engine_is_its_own_opt_in_distribution(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """packaging/reference builds falsify-harness-reference (the top-level `reference` package and nothing else);
    installed next to the harness in another fresh venv, `--engine reference` loads and conforms."""
    bin_dir, env = installed
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "reference", src / "reference", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copytree(ROOT / "packaging" / "reference", src / "packaging" / "reference")
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), "."],
        src / "packaging" / "reference",
        {**os.environ},
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("falsify_harness_reference-*.whl")
    import zipfile

    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"reference", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    harness = next((bin_dir.parent.parent / "dist").glob("falsify_harness-*.whl"))
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env).returncode == 0
    python = venv / "bin" / "python"
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env
    )
    borrowed = (bin_dir.parent / "lib").glob("python*/site-packages/borrowed-dependencies.pth")
    shutil.copy2(next(borrowed), Path(purelib.stdout.strip()) / "borrowed-dependencies.pth")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--ignore-installed", "--no-deps"]
    pip += ["--no-index", "-q"]
    assert run([*pip, str(harness), str(wheel)], tmp_path, env).returncode == 0
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[tool.falsify]\nengine = "reference"\n')
    check = run([str(venv / "bin" / "falsify"), "engine", "check"], repo, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "engine check: reference (name 'reference')" in check.stdout
    assert "claimed without their methods" in check.stdout and ", 0 claimed without" in check.stdout


def engine_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[tool.falsify]\n")
    return repo


def probe_engine(
    bin_dir: Path, spec: str, repo: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """In the wheel-only venv: load `spec`, generate 3 tokens (harness cancel token) and step a prefill."""
    code = (
        "import sys; from falsify.engines.loading import load_engine; e = load_engine(sys.argv[1]); "
        "m = e.load_model('f32'); run = e.session(m).generate([5, 6, 7], 3, cancel=e.cancel_token()()); "
        "pf = e.prefill(m, m.new_state(), list(range(1, 80)), chunk_cap=64); "
        "print(run.emitted, type(run).__name__, pf.run(), pf.pos)"
    )
    return run([str(bin_dir / "python"), "-c", code, spec], repo, env)


def check_engine_alone(
    bin_dir: Path, engine: str, weights: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """`engine check` of `engine` and of `engine:weights` pass with the harness wheel alone (no `reference`);
    without weights named, loading says what to install or pass instead of a traceback; with them it runs."""
    repo = engine_repo(tmp_path)
    falsify = str(bin_dir / "falsify")
    check = run([falsify, "engine", "check", "--engine", engine], repo, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        f"engine check: {engine} (name '{engine}')" in check.stdout and ", 0 claimed without" in check.stdout
    )
    assert "weights: none: --engine" in check.stdout and "falsify-harness-reference" in check.stdout
    named = run([falsify, "engine", "check", "--engine", f"{engine}:{weights}"], repo, env)
    assert named.returncode == 0, named.stdout + named.stderr
    assert f"weights: {weights}" in named.stdout and ", 0 claimed without" in named.stdout
    unnamed = probe_engine(bin_dir, engine, repo, env)
    assert unnamed.returncode == 1 and "NoDefaultWeights" in unnamed.stderr
    assert "pip install ./packaging/reference" in unnamed.stderr.splitlines()[-1]
    probe = probe_engine(bin_dir, f"{engine}:{weights}", repo, env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    emitted, _, done, pos = probe.stdout.split()
    assert (emitted, done, pos) == ("3", "True", "79")


@pytest.mark.oracle
def test_engine_hf_checks_and_runs_with_the_harness_wheel_alone(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from reference.tiny import tiny_model  # this test's side has the checkout; the venv has no `reference`

    bin_dir, env = installed
    check_engine_alone(bin_dir, "hf", tiny_model(seed=0), tmp_path, env)


@pytest.mark.llamacpp
def test_engine_llamacpp_checks_and_runs_with_the_harness_wheel_alone(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    pytest.importorskip("llama_cpp")
    from reference.gguf_io import write_gguf  # this test's side has the checkout; the venv has no `reference`
    from reference.tiny import tiny_model

    gguf = write_gguf(tiny_model(0), tmp_path / "tiny-f32.gguf", weights="f32")
    bin_dir, env = installed
    check_engine_alone(bin_dir, "llamacpp", Path(gguf), tmp_path, env)
