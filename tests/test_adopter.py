"""An adopter with packs, from the built wheel to a signed GO, outside this checkout (issue #24; `tox -e adopter`).

As a new user does it: the harness wheel built from this checkout, installed with pip (its dependencies from the
package index) into a fresh venv; a new git repository in a tmp dir; `falsify init`; the starter's example engine
replaced by the adopter's own; `packs = ["serving"]`; planted bugs in `mutants/` that kill pack predictions; then
gate PASS -> mutants KILLED -> evidence GO -> keygen, sign -> `verify --require-go --key`. The engine's
poll-after-forward twin ends FAIL and NO-GO. Two engines, neither the reference nor the init example
(tests/data/adopter/): a numpy RNN in process (tinyrnn.py, Python mutants) and a C program over the wire protocol
(tinyc.c, `exec:build/tinyc`, text mutants whose `build` compiles it; build/ is kept out of the scratch copies,
so a copy that is not built has no engine). Then the CI workflow `falsify init` wrote runs its `run:` steps, as
GitHub Actions would, in a fresh clone and a fresh venv that has no falsify: it installs the wheel init pinned.

Each flow prints the new user's wall time from the wheel to the signed GO. Nothing here contacts an address but
the package index pip is configured with (PIP_INDEX_URL / PIP_FIND_LINKS).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from testkit_harness_wheel import build_harness_wheel

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "adopter"
PACK_CONTRACT = "falsify/packs/serving/contracts/apr-serve-cancellation-v1.yaml"

pytestmark = [
    pytest.mark.adopter,
    pytest.mark.skipif(
        not os.environ.get("FALSIFY_ADOPTER"), reason="the adopter flow runs in its own env: tox -e adopter"
    ),
]


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def ok(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = run(cmd, cwd, env)
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def user_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell: nothing of this checkout or of tox (PIP_* kept: where pip finds packages)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "FALSIFY_", "VIRTUAL_ENV", "TOX_", "HYPOTHESIS_")) and k != "CI"
    }
    env.update(
        PYTHONHASHSEED="0",
        OPENBLAS_NUM_THREADS="1",
        GIT_AUTHOR_NAME="adopter",
        GIT_AUTHOR_EMAIL="adopter@example.invalid",
        GIT_COMMITTER_NAME="adopter",
        GIT_COMMITTER_EMAIL="adopter@example.invalid",
        GIT_CONFIG_GLOBAL=str(home / "gitconfig"),
    )
    return env


def fresh_venv(path: Path, env: dict[str, str]) -> dict[str, str]:
    """A venv with pip and nothing else; the environment with its bin/ first on PATH."""
    ok([sys.executable, "-m", "venv", str(path)], path.parent, env)
    return {
        **env,
        "PATH": os.pathsep.join([str(path / "bin"), env.get("PATH", "")]),
        "VIRTUAL_ENV": str(path),
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness wheel, built from a copy of this checkout's distribution files (no build/ left in the tree)."""
    return build_harness_wheel(tmp_path_factory.mktemp("wheel"))


def new_repo(base: Path, env: dict[str, str], engine: str, sources: str, extra: str = "") -> Path:
    """`falsify init` in a new git repo, the example engine and its contract, falsifier and mutant removed, the
    adopter's engine configured with the serving pack."""
    repo = base / "repo"
    repo.mkdir()
    ok(["git", "init", "-q", "-b", "main"], repo, env)
    out = ok(["falsify", "init"], repo, env)
    assert "init: wrote .falsify-harness/falsify_harness-" in out
    for path in (
        "example_engine",
        "tests",
        "contracts/example-cancel-v1.yaml",
        "mutants/example-poll-after-forward.yaml",
    ):
        target = repo / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count('# packs = ["serving"]') == 1, "init's [tool.falsify] changed: update this test's edit"
    text = text.replace('engine = "example_engine:make_engine"', f'engine = "{engine}"')
    text = text.replace('sources = ["example_engine/**/*.py"]', f"sources = [{sources}]")
    text = text.replace('# packs = ["serving"]', 'packs = ["serving"]' + extra)
    pyproject.write_text(text)
    with (repo / ".gitignore").open("a") as f:
        f.write("evidence/\nevidence-twin/\nbuild/\n")
    return repo


def commit(repo: Path, env: dict[str, str], message: str) -> None:
    ok(["git", "add", "-A"], repo, env)
    ok(["git", "commit", "-q", "-m", message], repo, env)


# the cancellation contract's predictions a `generate` engine that starts each run at 0 is judged on
APPLICABLE = 12


def to_signed_go(repo: Path, env: dict[str, str], mutants: list[str], keys: Path) -> str:
    """gate PASS -> mutants KILLED (pack predictions among the kills) -> evidence GO -> sign -> verify; the
    verify line."""
    gate = ok(["falsify", "gate"], repo, env)
    assert "gate: PASS" in gate and "FALSIFY-SERVE-CANCEL-002" in gate
    bindings = ok(["falsify", "bindings"], repo, env)
    collected = re.search(r"(\d+) tests collected", gate)
    assert collected and int(collected[1]) > 90, gate[
        -600:
    ]  # the pack's falsifiers, collected from site-packages
    assert f", {collected[1]} falsifier tests, 0 unbound" in bindings, bindings[-300:]
    report = ok(["falsify", "mutants"], repo, env)
    for mid in mutants:
        assert f"{mid}: KILLED" in report, report[-4000:]
    killed = {line.split()[0] for line in report.splitlines() if line.startswith("FALSIFY-SERVE-CANCEL-0")}
    assert len(killed) == APPLICABLE, report[
        -3000:
    ]  # the kill matrix: a row per pack prediction some mutant turned red
    # the adopter's own mutants, and falsify's boundary mutants for the pack predictions none of them lists
    # (docs/mutants.md "Boundary mutants"): every one killed
    ran = re.search(r"mutants: PASS — (\d+) mutants: (\d+) killed", report)
    assert ran and ran[1] == ran[2] and int(ran[1]) >= len(mutants), report[-2000:]
    commit(repo, env, "the adopter's engine, with the serving pack and its mutants")
    evidence = run(["falsify", "evidence", "--out", "evidence"], repo, env)
    assert evidence.returncode == 0, evidence.stdout[-4000:] + evidence.stderr[-2000:]
    # APPLICABLE of the cancellation contract's predictions apply to a `generate` engine that starts every run at
    # position 0 (FALSIFY-SERVE-CANCEL-012 is NOT APPLICABLE: it reuses nothing); the pack's others are NOT APPLICABLE
    verdict = re.search(
        rf"evidence: GO — {APPLICABLE} of (\d+) predictions passed \((\d+) not applicable\); {APPLICABLE} of {APPLICABLE} proven",
        evidence.stdout,
    )
    assert verdict and int(verdict[1]) == APPLICABLE + int(verdict[2]), evidence.stdout[-3000:]
    statements = (repo / "evidence" / "evidence.intoto.jsonl").read_text()
    assert '"name":"pkg:pypi/falsify-harness@' in statements and f"#{PACK_CONTRACT}" in statements
    assert str(repo) not in statements and "site-packages" not in statements
    ok(["falsify", "keygen", str(keys)], repo, env)
    ok(["falsify", "sign", "--key", str(keys), "evidence"], repo, env)
    verified = ok(["falsify", "verify", "evidence", "--require-go", "--key", f"{keys}.pub"], repo, env)
    assert "every statement's signature verifies" in verified and "GO —" in verified
    # the other key does not verify it
    ok(["falsify", "keygen", f"{keys}-other"], repo, env)
    wrong = run(["falsify", "verify", "evidence", "--require-go", "--key", f"{keys}-other.pub"], repo, env)
    assert wrong.returncode == 1, wrong.stdout[-2000:]
    return verified.splitlines()[0]


def twin_fails(repo: Path, env: dict[str, str]) -> None:
    """The working tree now holds the poll-after-forward twin: gate FAIL, evidence NO-GO naming the red
    predictions, verify --require-go refuses it."""
    gate = run(["falsify", "gate", "--out", ".falsify/twin"], repo, env)
    assert gate.returncode == 1 and "gate: FAIL" in gate.stdout, gate.stdout[-3000:] + gate.stderr[-2000:]
    rows = {
        line.split()[0]: line.split()[2] for line in gate.stdout.splitlines() if line.startswith("FALSIFY-")
    }
    assert rows["FALSIFY-SERVE-CANCEL-002"] == "FAIL" and rows["FALSIFY-SERVE-CANCEL-010"] == "FAIL"
    evidence = run(["falsify", "evidence", "--out", "evidence-twin", "--from", ".falsify/twin"], repo, env)
    assert evidence.returncode == 1 and "evidence: NO-GO" in evidence.stdout, evidence.stdout[-3000:]
    assert "FALSIFY-SERVE-CANCEL-002" in evidence.stdout.split("evidence: NO-GO")[1]
    refused = run(["falsify", "verify", "evidence-twin", "--require-go"], repo, env)
    assert refused.returncode == 1 and "the verdict is not GO" in refused.stdout, refused.stdout[-2000:]


@pytest.fixture(scope="module")
def user(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], float]:
    """A fresh venv with the wheel pip-installed (dependencies from the index); the install's wall time."""
    base = tmp_path_factory.mktemp("user")
    env = user_env(base)
    start = time.monotonic()
    env = fresh_venv(base / "venv", env)
    ok(["python", "-m", "pip", "install", "-q", str(wheel)], base, env)
    return env, time.monotonic() - start


def test_a_numpy_engine_with_the_serving_pack_reaches_a_signed_go(
    user: tuple[dict[str, str], float], tmp_path: Path
) -> None:
    env, installed = user
    start = time.monotonic()
    repo = new_repo(tmp_path, env, "tinyrnn:make_engine", '"tinyrnn.py"')
    shutil.copy2(DATA / "tinyrnn.py", repo / "tinyrnn.py")
    for mutant in (DATA / "mutants").glob("*.yaml"):
        shutil.copy2(mutant, repo / "mutants" / mutant.name)
    mutants = sorted(m.stem for m in (DATA / "mutants").glob("*.yaml"))
    assert not (repo / "tests").exists()  # the pack's falsifiers are all there is: they must bind and run
    verified = to_signed_go(repo, env, mutants, tmp_path / "release-key")
    took = installed + time.monotonic() - start
    print(
        f"adopter (numpy engine): wheel -> signed GO with packs in {took:.0f} s ({installed:.0f} s of it pip)"
    )
    print(verified)

    # verify re-checks the pack's files against what is installed, and names the one that changed
    site = run(
        ["python", "-c", "import falsify, pathlib; print(pathlib.Path(falsify.__file__).parent.parent)"],
        repo,
        env,
    )
    contract = Path(site.stdout.strip()) / PACK_CONTRACT
    original = contract.read_bytes()
    try:
        contract.write_bytes(original + b"# edited after the release\n")
        tampered = run(["falsify", "verify", "evidence"], repo, env)
    finally:
        contract.write_bytes(original)
    assert tampered.returncode == 1
    # the installed pack is held to the wheel's RECORD before the bundle's digests (issue #48): it names the file
    assert "installed pack 'serving' does not match the RECORD" in tampered.stdout, tampered.stdout[-2000:]
    assert f"{PACK_CONTRACT}: sha256=" in tampered.stdout, tampered.stdout[-2000:]
    ok(["falsify", "verify", "evidence", "--require-go"], repo, env)

    good = (repo / "tinyrnn.py").read_text()
    poll = "            if cancel.is_cancelled():\n                break\n"
    forward = "            logits = self.advance(prompt, out, state, rec)\n"
    assert good.count(poll + forward) == 1, "tinyrnn.py's loop changed: update this test's edit"
    (repo / "tinyrnn.py").write_text(good.replace(poll + forward, forward + poll))
    twin_fails(repo, env)


def test_a_numpy_engine_whose_state_copy_shares_its_kv_cache_fails_prefill_020(
    user: tuple[dict[str, str], float], tmp_path: Path
) -> None:
    """Issue 45, as a new user found it: a numpy engine with a KV cache (tests/data/adopter/tinykv.py, capabilities
    generate and prefill) whose state copy shares the cache with its original passed FALSIFY-SERVE-PREFILL-020 while
    the check advanced both by the same tokens. In the adopter's repo `falsify mutants` runs the control (the
    engine as written: PREFILL-020 green) and the aliasing copy (kvmutants/kv-copy-shares-the-cache.yaml): KILLED
    by PREFILL-020."""
    env, _ = user
    repo = new_repo(tmp_path, env, "tinykv:make_engine", '"tinykv.py", "tinyrnn.py"')
    for name in ("tinykv.py", "tinyrnn.py"):
        shutil.copy2(DATA / name, repo / name)
    for mutant in (DATA / "kvmutants").glob("*.yaml"):
        shutil.copy2(mutant, repo / "mutants" / mutant.name)
    report = ok(["falsify", "mutants", "kv-copy-shares-the-cache", "--strict"], repo, env)
    assert "kv-copy-shares-the-cache: KILLED" in report and "by 1/1 listed" in report, report[-3000:]
    assert re.search(r"^FALSIFY-SERVE-PREFILL-020 +X", report, re.M), report[-3000:]


def test_a_compiled_wire_engine_with_the_serving_pack_reaches_a_signed_go(
    user: tuple[dict[str, str], float], tmp_path: Path
) -> None:
    if shutil.which("cc") is None:
        pytest.fail("no C compiler (cc): the compiled engine's flow cannot run")
    env, installed = user
    start = time.monotonic()
    repo = new_repo(tmp_path, env, "exec:build/tinyc", '"tinyc.c"', '\ncopy_exclude = ["build"]')
    for name in ("tinyc.c", "build.sh"):
        shutil.copy2(DATA / name, repo / name)
    for mutant in (DATA / "cmutants").glob("*.yaml"):
        shutil.copy2(mutant, repo / "mutants" / mutant.name)
    mutants = sorted(m.stem for m in (DATA / "cmutants").glob("*.yaml"))
    ok(["sh", "build.sh"], repo, env)
    verified = to_signed_go(repo, env, mutants, tmp_path / "release-key")
    took = installed + time.monotonic() - start
    print(
        f"adopter (C engine over the wire): wheel -> signed GO with packs in {took:.0f} s ({installed:.0f} s of it pip)"
    )
    print(verified)

    twin = yaml.safe_load((DATA / "cmutants" / "c-poll-after-forward.yaml").read_text())
    source = (repo / "tinyc.c").read_text()
    assert source.count(twin["snippet"]) == 1
    (repo / "tinyc.c").write_text(source.replace(twin["snippet"], twin["replacement"]))
    ok(["sh", "build.sh"], repo, env)
    twin_fails(repo, env)


def test_the_workflow_init_writes_is_green_on_its_first_run(
    user: tuple[dict[str, str], float], tmp_path: Path
) -> None:
    """A fresh repo with what `falsify init` wrote (by the user's install of the wheel), committed and cloned as CI
    checks it out; the workflow's `run:` steps, in order, in a fresh venv without falsify (the runner's
    setup-python)."""
    author, _ = user
    env = user_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    ok(["git", "init", "-q", "-b", "main"], repo, author)
    ok(["falsify", "init"], repo, author)
    commit(repo, author, "falsify init")
    checkout = tmp_path / "checkout"
    ok(["git", "clone", "-q", str(repo), str(checkout)], tmp_path, env)
    workflow = yaml.safe_load((checkout / ".github" / "workflows" / "falsify.yml").read_text())
    (job,) = workflow["jobs"].values()
    runner = fresh_venv(tmp_path / "ci-venv", {**env, **{k: str(v) for k, v in job.get("env", {}).items()}})
    assert run(["python", "-c", "import falsify"], checkout, runner).returncode == 1  # nothing installed yet
    steps = [step["run"] for step in job["steps"] if "run" in step]
    assert any("pip install" in s for s in steps) and any(s.startswith("falsify gate") for s in steps)
    for step in steps:
        done = run(["bash", "-e", "-c", step], checkout, runner)
        assert done.returncode == 0, (
            f"workflow step `{step}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    # the sum is checked: a wheel that is not the pinned one stops the run before anything is installed
    (pinned,) = (checkout / ".falsify-harness").glob("*.whl")
    pinned.write_bytes(pinned.read_bytes() + b"\0")
    check = next(s for s in steps if "sha256sum" in s)
    assert run(["bash", "-e", "-c", check], checkout, runner).returncode != 0
