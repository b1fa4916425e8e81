"""How the gate's runs draw hypothesis examples (falsify/harness/draws.py): one seed per run, drawn afresh each run
unless the caller chose a seed or a profile; the parametrized copies of a falsifier draw the same examples under
it; the run records it, and the same seed draws the same examples again. Real pytest sessions (pytester, in a
subprocess: hypothesis' seed and profile are process-wide)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from falsify.harness.draws import SEED_ENV, SEED_OPTION, hypothesis_line, seeded

DATA = Path(__file__).parent / "data" / "contracts"
CONTRACT = (DATA / "plugin-demo-v1.yaml").read_text(encoding="utf-8")

COPIES = """\
import json, os, falsify, pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.falsifies("FALSIFY-DEMO-001")
@pytest.mark.parametrize("copy", ["a", "b"])
@settings(max_examples=20, database=None)
@given(st.lists(st.integers(0, 10**9), max_size=5))
def test_draws(copy, xs):
    with open(os.path.join(os.environ["DRAWN"], copy), "a") as f:
        f.write(json.dumps(xs) + "\\n")
    falsify.check("FALSIFY-DEMO-001", emitted=8, decode_forwards=7)

@pytest.mark.falsifies("FALSIFY-DEMO-002")
def test_budget():
    falsify.check("FALSIFY-DEMO-002", emitted=3, n=4)
"""


# The variables hypothesis 6.170 takes for a CI machine (hypothesis._settings._CI_VARS), besides CI itself.
HYPOTHESIS_CI_MARKERS = (
    "__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI",
    "TF_BUILD",
    "bamboo.buildKey",
    "BUILDKITE",
    "CIRCLECI",
    "CIRRUS_CI",
    "CODEBUILD_BUILD_ID",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "HEROKU_TEST_RUN_ID",
    "TEAMCITY_VERSION",
)


@pytest.fixture
def unchosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither CI nor HYPOTHESIS_PROFILE (under either the plugin loads a profile, and the gate adds no seed), nor a
    seed already chosen; nor what else makes hypothesis load its own derandomized "ci" profile in the runs started
    here (tox keeps CI's value in __TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI, which hypothesis counts too)."""
    for name in ("CI", "HYPOTHESIS_PROFILE", SEED_ENV, *HYPOTHESIS_CI_MARKERS):
        monkeypatch.delenv(name, raising=False)


def test_a_seed_is_added_and_drawn_afresh_each_run(unchosen: None) -> None:
    runs = [seeded(["-q"]) for _ in range(3)]
    for env in runs:
        assert env is not None and 0 <= int(env[SEED_ENV]) < 2**32
        assert {k: v for k, v in env.items() if k != SEED_ENV} == dict(os.environ)
    assert len({env[SEED_ENV] for env in runs if env}) > 1, runs


@pytest.mark.parametrize("chosen", [[SEED_OPTION, "7"], [f"{SEED_OPTION}=7"]])
def test_a_seed_the_caller_chose_is_kept(unchosen: None, chosen: list[str]) -> None:
    assert seeded(["-q", *chosen]) is None


@pytest.mark.parametrize("env", ["CI", "HYPOTHESIS_PROFILE", SEED_ENV])
def test_no_seed_under_a_chosen_profile_or_seed(
    monkeypatch: pytest.MonkeyPatch, unchosen: None, env: str
) -> None:
    monkeypatch.setenv(env, {"CI": "true", "HYPOTHESIS_PROFILE": "ci"}.get(env, "7"))
    assert seeded(["-q"]) is None


def drawn(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tag: str, *args: str
) -> tuple[dict[str, list[str]], dict[str, object]]:
    out = pytester.path / tag
    out.mkdir()
    results = pytester.path / f"{tag}.json"
    monkeypatch.setenv("DRAWN", str(out))
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--falsify-results={results}", *args)
    run.assert_outcomes(passed=3)
    copies = {p.name: p.read_text().splitlines() for p in sorted(out.iterdir())}
    return copies, json.loads(results.read_text())["hypothesis"]


def test_the_copies_draw_the_same_examples_and_the_seed_draws_them_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, unchosen: None
) -> None:
    pytester.makefile(".ini", pytest="[pytest]\nfalsify_contracts = contracts\n")
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    pytester.makepyfile(test_demo=COPIES)
    env = seeded([])
    assert env is not None
    monkeypatch.setenv(SEED_ENV, env[SEED_ENV])
    first, record = drawn(pytester, monkeypatch, "first")
    seed = record["seed"]
    assert record == {"profile": "default", "derandomize": False, "seed": env[SEED_ENV]}
    assert set(first) == {"a", "b"} and len(first["a"]) >= 10
    assert first["a"] == first["b"], "the two copies drew different examples under one seed"
    monkeypatch.delenv(SEED_ENV)
    again, _ = drawn(pytester, monkeypatch, "again", f"{SEED_OPTION}={seed}")
    assert again == first
    # without a seed each copy draws its own: the control that the equality above is the seed's doing
    apart, record = drawn(pytester, monkeypatch, "apart")
    assert record["seed"] is None and apart["a"] != apart["b"]
    # a project that runs pytest without hypothesis' plugin: the gate's seed must not stop it from starting
    monkeypatch.setenv(SEED_ENV, "5")
    _, record = drawn(pytester, monkeypatch, "unplugged", "-p", "no:hypothesispytest")
    assert record["seed"] is None


def test_the_gates_line_names_the_seed_or_says_why_there_is_none() -> None:
    seed = hypothesis_line({"hypothesis": {"profile": "default", "derandomize": False, "seed": "42"}})
    assert seed is not None and f"`falsify gate -- {SEED_OPTION}=42` draws this run's examples again" in seed
    fixed = hypothesis_line({"hypothesis": {"profile": "ci", "derandomize": True, "seed": None}})
    assert fixed == "gate: hypothesis profile 'ci' is derandomized: every run draws the same examples"
    lost = hypothesis_line({"hypothesis": {"profile": "default", "derandomize": False, "seed": None}})
    assert lost is not None and "not reproducible" in lost
    assert hypothesis_line({}) is None
