"""`falsify mutmut`: configuration, the baseline file, --since function selection, the verdict (kill-rate floor,
survivors the baseline does not list), and one real mutmut run on the toy project (tests/fixtures/mutants/toy),
whose own mutants/ directory collides with mutmut's."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from testkit_gate_cli import run_cli
from testkit_mutmut_toy import TOY, UNCOVERED, copy_toy, set_up_mutmut

from falsify.mutation.mutmut.config import (
    Baseline,
    BaselineEntry,
    MutmutConfig,
    MutmutError,
    MutmutMutant,
    MutmutRun,
    read_baseline,
    read_config,
    render_baseline,
)
from falsify.mutation.mutmut.report import verdict
from falsify.mutation.mutmut.running import changed_lines, function_patterns
from falsify.project import Project

SCHEMA = (
    Path(__file__).parent / "data" / "mutation-testing-report-schema" / "mutation-testing-report-schema.json"
)
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def project_with(tmp_path: Path, table: str) -> Project:
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.falsify]\n\n[tool.falsify.mutmut]\n{table}", encoding="utf-8"
    )
    return Project(tmp_path, tmp_path / "contracts", tmp_path / "mutants", tmp_path / "tests")


def test_config_defaults_come_from_the_project(tmp_path: Path) -> None:
    """No paths: the .py files of [tool.falsify] sources (a src layout here); no tests: the tests directory."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "loop.py", "notes.txt"):
        (tmp_path / "src" / "pkg" / name).write_text("", encoding="utf-8")
    project = project_with(tmp_path, "")
    config = read_config(dataclasses.replace(project, sources=("src/**/*",)))
    assert config.paths == ("src/pkg/__init__.py", "src/pkg/loop.py")
    assert config.tests == ("tests",)
    with pytest.raises(MutmutError, match="no paths to mutate: set paths there, or sources"):
        read_config(project)


def test_config_values_are_read(tmp_path: Path) -> None:
    config = read_config(
        project_with(
            tmp_path,
            'kill_rate_floor = 90\nbaseline = "b.toml"\npaths = ["reference/session.py"]\n'
            'tests = ["tests/test_session_unit.py"]\ntimeout = 60\n',
        )
    )
    assert config == MutmutConfig(
        90.0, "b.toml", ("reference/session.py",), ("tests/test_session_unit.py",), 60.0
    )
    config = read_config(project_with(tmp_path, 'paths = ["a.py"]\npytest_args = ["-k", "not slow"]\n'))
    assert config.pytest_args == ("-k", "not slow")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("kill_rate_floor = 101\n", "kill_rate_floor must be a percentage in [0, 100], got 101"),
        ('kill_rate_floor = "ninety"\n', "kill_rate_floor must be a percentage in [0, 100]"),
        ("survivor_budget = 7\n", "survivor_budget is gone: set kill_rate_floor"),
        ("baseline = 3\n", "baseline must be a path relative to the project root"),
        ("paths = []\n", "paths must be a non-empty list of paths"),
        ("timeout = 0\n", "timeout must be between 0.01 and 604800 seconds, not 0"),
        ("timeout = nan\n", "timeout must be a finite number of seconds, not nan"),
        ("timeout = 1e300\n", "timeout must be between 0.01 and 604800 seconds"),
        ("kill_rate_floor = nan\n", "kill_rate_floor must be a percentage in [0, 100]"),
        ("timeout_multiplier = inf\n", "timeout_multiplier must be a number in [1, 1000]"),
        ("timeout_constant = nan\n", "timeout_constant must be in [0, 604800] seconds"),
        ("budget = 3\n", "unknown key(s) budget"),
        ('pytest_args = "-x"\n', "pytest_args must be a list of strings"),
    ],
)
def test_bad_config_is_a_one_line_error(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(MutmutError, match=r"pyproject\.toml: \[tool\.falsify\.mutmut\]") as info:
        read_config(project_with(tmp_path, table))
    assert message in str(info.value) and "\n" not in str(info.value)


BASELINE = """
[[equivalent]]
mutant = "reference.m.x_a__mutmut_1"
where = "reference/m.py:2"
original = "return x"
mutated = "return x * 1.0"
reason = "x is a float32 array: * 1.0 changes no bit"

[[survivor]]
mutant = "reference.m.x_a__mutmut_2"
original = "return x"
mutated = "return None"
"""


def test_baseline_is_read_and_absent_means_empty(tmp_path: Path) -> None:
    project = project_with(tmp_path, "")
    assert read_baseline(project, MutmutConfig()) == Baseline("mutmut-baseline.toml")
    (tmp_path / "mutmut-baseline.toml").write_text(BASELINE, encoding="utf-8")
    baseline = read_baseline(project, MutmutConfig())
    assert baseline.equivalent == (
        BaselineEntry(
            "reference.m.x_a__mutmut_1",
            "return x",
            "return x * 1.0",
            "reference/m.py:2",
            "x is a float32 array: * 1.0 changes no bit",
        ),
    )
    assert [e.mutant for e in baseline.survivors] == ["reference.m.x_a__mutmut_2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASELINE.replace('reason = "x is a float32 array: * 1.0 changes no bit"', ""),
            "needs a non-empty string 'reason'",
        ),
        (
            BASELINE.replace('mutated = "return None"', ""),
            "[[survivor]] #1 needs a string 'mutated'",
        ),
        (
            BASELINE
            + "\n[[survivor]]\nmutant = 'reference.m.x_a__mutmut_1'\noriginal = 'x'\nmutated = 'y'\n",
            "listed more than once",
        ),
        (BASELINE + "\n[other]\nx = 1\n", "unknown table(s) other"),
        (BASELINE.replace("[[survivor]]\n", "[[survivor]]\nline = 3\n"), "unknown key(s) line"),
        ("[[survivor]\n", "mutmut-baseline.toml"),
    ],
)
def test_bad_baseline_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    project = project_with(tmp_path, "")
    (tmp_path / "mutmut-baseline.toml").write_text(text, encoding="utf-8")
    with pytest.raises(MutmutError) as info:
        read_baseline(project, MutmutConfig())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_since_selects_the_changed_functions_only(tmp_path: Path) -> None:
    pkg = tmp_path / "reference"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def a():\n    return 1\n\n\nclass C:\n    def b(self):\n        return 2\n\n"
        "    def c(self):\n        return 3\n",
        encoding="utf-8",
    )
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run([*GIT, *cmd], cwd=tmp_path, check=True, capture_output=True)
    source = (pkg / "m.py").read_text(encoding="utf-8")
    (pkg / "m.py").write_text(source.replace("return 2", "return 20"), encoding="utf-8")
    (pkg / "new.py").write_text("def fresh():\n    return 0\n", encoding="utf-8")
    changed = changed_lines(tmp_path, "HEAD", ["reference/m.py", "reference/new.py"])
    assert changed == {"reference/m.py": {7}, "reference/new.py": None}
    assert function_patterns(tmp_path, changed) == [
        "reference.m.xǁCǁb__mutmut_*",
        "reference.new.x_fresh__mutmut_*",
    ]
    with pytest.raises(MutmutError, match="no-such-ref"):
        changed_lines(tmp_path, "no-such-ref", ["reference/m.py"])


@pytest.mark.parametrize(
    ("appended", "message"),
    [
        (b"\ndef broken(:\n", "reference/m.py:4: --since cannot find the changed functions: invalid syntax"),
        (b"\n# caf\xe9\n", "reference/m.py: --since cannot find the changed functions: not UTF-8 (byte 0xe9"),
        (b"\nx = 1\x00\n", "reference/m.py:4: --since cannot find the changed functions: a NUL byte"),
        (
            b"\nx = " + b"-" * 200_000 + b"1\n",
            "reference/m.py: --since cannot find the changed functions: it nests",
        ),
    ],
    ids=["syntax-error", "not-utf8", "nul-byte", "nested"],
)
def test_since_names_a_changed_source_it_cannot_parse(tmp_path: Path, appended: bytes, message: str) -> None:
    pkg = tmp_path / "reference"
    pkg.mkdir()
    (pkg / "m.py").write_bytes(b"def a():\n    return 1\n")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run([*GIT, *cmd], cwd=tmp_path, check=True, capture_output=True)
    (pkg / "m.py").write_bytes((pkg / "m.py").read_bytes() + appended)
    changed = changed_lines(tmp_path, "HEAD", ["reference/m.py"])
    assert changed["reference/m.py"]  # a NUL byte does not make git call the file binary, with no hunks
    with pytest.raises(MutmutError) as info:
        function_patterns(tmp_path, changed)
    assert message in str(info.value) and "\n" not in str(info.value)


def _run(floor: float, statuses: list[str], baseline: Baseline | None = None) -> MutmutRun:
    run = MutmutRun(MutmutConfig(kill_rate_floor=floor), ["reference/m.py"])
    run.mutants = [
        MutmutMutant(f"reference.m.x_a__mutmut_{i}", "reference/m.py", s, i + 1, "return x", f"mutated {i}")
        for i, s in enumerate(statuses)
    ]
    if baseline is not None:
        run.baseline = baseline
    return run


def _entry(i: int, reason: str = "") -> BaselineEntry:
    return BaselineEntry(f"reference.m.x_a__mutmut_{i}", "return x", f"mutated {i}", reason=reason)


def test_verdict_needs_the_floor_and_every_survivor_listed() -> None:
    statuses = ["killed"] * 7 + ["timeout", "survived", "no tests"]
    listed = Baseline("b.toml", survivors=(_entry(8), _entry(9)))
    text, ok = verdict(_run(80, statuses, listed))
    assert ok and "kill rate 8/10 = 80.0%" in text and "2 listed in b.toml, 0 not listed" in text
    # Below the floor fails even with every survivor listed.
    text, ok = verdict(_run(80.1, statuses, listed))
    assert not ok and text.startswith("mutmut: FAIL")
    # A survivor the baseline does not list fails even above the floor: the list may only shrink.
    text, ok = verdict(_run(50, statuses, Baseline("b.toml", survivors=(_entry(8),))))
    assert not ok and "1 not listed" in text
    # An entry matches by function, original and mutated line: the same name with another edit is a new
    # survivor, while a renumbered mutant (mutmut renumbers a changed function's mutants) still matches.
    other = BaselineEntry("reference.m.x_a__mutmut_9", "return x", "other")
    assert not verdict(_run(50, statuses, Baseline("b.toml", survivors=(_entry(8), other))))[1]
    renumbered = BaselineEntry("reference.m.x_a__mutmut_42", "return x", "mutated 9")
    assert verdict(_run(50, statuses, Baseline("b.toml", survivors=(_entry(8), renumbered))))[1]
    elsewhere = BaselineEntry("reference.m.x_b__mutmut_9", "return x", "mutated 9")
    assert not verdict(_run(50, statuses, Baseline("b.toml", survivors=(_entry(8), elsewhere))))[1]


def test_equivalent_mutants_leave_the_denominator_and_a_killed_one_is_stale() -> None:
    statuses = ["killed"] * 9 + ["survived"]
    run = _run(90, statuses, Baseline("b.toml", equivalent=(_entry(9, "same bits"),)))
    text, ok = verdict(run)
    assert ok and "1 listed as equivalent" in text and "kill rate 9/9 = 100.0%" in text
    assert run.stale() == []
    # Listed, but this run killed it: it was not equivalent, and the entry is reported.
    run = _run(90, statuses, Baseline("b.toml", equivalent=(_entry(0, "wrong"),), survivors=(_entry(9),)))
    text, ok = verdict(run)
    assert ok and "0 listed as equivalent" in text and "kill rate 9/10" in text
    assert [(why, e.mutant) for why, e in run.stale()] == [
        ("listed as equivalent, now killed", "reference.m.x_a__mutmut_0")
    ]


def test_listed_mutants_not_run_count_as_surviving_as_listed() -> None:
    """A whole run leaves out what the baseline lists (LISTED_NOT_RUN): the verdict and the kill rate are the
    ones they would give surviving as listed, and such an entry is never reported stale as killed."""
    from falsify.mutation.mutmut.config import LISTED_NOT_RUN
    from falsify.mutation.mutmut.report import kill_rate, to_stryker

    listed = Baseline("b.toml", equivalent=(_entry(8, "same bits"),), survivors=(_entry(9),))
    ran = _run(80, ["killed"] * 8 + ["survived", "survived"], listed)
    skipped = _run(80, ["killed"] * 8 + [LISTED_NOT_RUN, LISTED_NOT_RUN], listed)
    assert kill_rate(skipped) == kill_rate(ran) == (8, 9)
    assert verdict(skipped)[1] and verdict(ran)[1]
    assert "2 listed mutants not run (--run-listed)" in verdict(skipped)[0]
    assert [m.name for m in skipped.not_run] == ["reference.m.x_a__mutmut_8", "reference.m.x_a__mutmut_9"]
    assert skipped.stale() == [] and len(skipped.survivors) == 2 and skipped.new_survivors == []
    # The floor counts a listed survivor as not killed: 8 of 9 (88.9 %) is below 90 %, 7 of 9 below 80 %.
    assert not verdict(_run(90, ["killed"] * 8 + [LISTED_NOT_RUN, LISTED_NOT_RUN], listed))[1]
    three = Baseline("b.toml", equivalent=(_entry(8, "same bits"),), survivors=(_entry(7), _entry(9)))
    text, ok = verdict(_run(80, ["killed"] * 7 + [LISTED_NOT_RUN] * 3, three))
    assert not ok and "kill rate 7/9 = 77.8%" in text and "0 not listed" in text
    # Stryker: the listed survivor is Survived, the equivalent Ignored, as when they run.
    root = Path(__file__).parent.parent
    skipped.files = ["reference/cancel.py"]
    skipped.mutants = [dataclasses.replace(m, file="reference/cancel.py", line=1) for m in skipped.mutants]
    out = to_stryker(skipped, root)["files"]["reference/cancel.py"]["mutants"]
    assert [m["status"] for m in out[-2:]] == ["Ignored", "Survived"]
    assert "--run-listed" in out[-1]["description"]


def test_written_baseline_lists_the_survivors_and_keeps_the_equivalent(tmp_path: Path) -> None:
    statuses = ["killed", "survived", "no tests", "survived"]
    run = _run(0, statuses, Baseline("b.toml", equivalent=(_entry(3, 'a "quoted" reason'),)))
    (tmp_path / "mutmut-baseline.toml").write_text(render_baseline(run, run.baseline), encoding="utf-8")
    again = read_baseline(project_with(tmp_path, ""), MutmutConfig())
    assert again.equivalent == (_entry(3, 'a "quoted" reason'),)
    assert [(e.mutant, e.original, e.mutated, e.where) for e in again.survivors] == [
        ("reference.m.x_a__mutmut_1", "return x", "mutated 1", "reference/m.py:2"),
        ("reference.m.x_a__mutmut_2", "return x", "mutated 2", "reference/m.py:3"),
    ]
    run.baseline = again
    assert verdict(run)[1] and run.stale() == []


def test_mutmut_runs_on_the_toy_in_a_scratch_copy(tmp_path: Path) -> None:
    """The toy run as is (an unlisted survivor fails it), then with a baseline that lists mutants."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    pytest.importorskip("mutmut")
    root = copy_toy(tmp_path / "toy")
    # A function no test calls: its mutants survive ("no tests"), and no baseline lists them: the run fails.
    uncovered = set_up_mutmut(root, "timeout = 900\n")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "toy"]):
        subprocess.run([*GIT, *cmd], cwd=root, check=True, capture_output=True)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "FALSIFY_ENGINE": "toy.engine:ToyEngine"}
    result = run_cli("mutmut", "-j", "2", cwd=root, env=env, timeout=1200)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "mutmut: FAIL" in out and "0 listed in mutmut-baseline.toml" in out
    assert "Traceback" not in out + result.stderr
    # Survivors by file:line, with the original and the mutated line.
    listed = [line for line in out.splitlines() if line.startswith(f"toy/loop.py:{uncovered} ")]
    assert listed and all("no tests" in line for line in listed)
    assert any(UNCOVERED.strip() in line for line in listed)
    # The working tree, its own mutants/ directory included, is untouched; no scratch copy is left.
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    assert sorted(p.name for p in (root / "mutants").iterdir()) == sorted(
        p.name for p in (TOY / "mutants").iterdir()
    )
    assert list((tmp_path / "tmp").iterdir()) == []
    report = json.loads((root / ".falsify" / "mutmut" / "mutation-report.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, json.loads(SCHEMA.read_text(encoding="utf-8")))
    mutants = report["files"]["toy/loop.py"]["mutants"]
    statuses = {m["status"] for m in mutants}
    assert (
        "Killed" in statuses and "NoCoverage" in statuses and statuses <= {"Killed", "NoCoverage", "Timeout"}
    )
    assert {m["location"]["start"]["line"] for m in mutants if m["status"] == "NoCoverage"} == {uncovered}

    # Again, with a baseline listing the uncovered mutants as survivors and one killed mutant as equivalent: a
    # whole run runs neither (they come back as "listed (not run)"), and passes.
    lines = (root / "toy" / "loop.py").read_text(encoding="utf-8").splitlines()

    def entry(kind: str, m: dict) -> str:
        original = lines[m["location"]["start"]["line"] - 1].strip()
        reason = 'reason = "a review this test makes up"\n' if kind == "equivalent" else ""
        return (
            f"[[{kind}]]\nmutant = {json.dumps(m['id'])}\noriginal = {json.dumps(original)}\n"
            f"mutated = {json.dumps(m['replacement'])}\n{reason}\n"
        )

    not_covered = [m for m in mutants if m["status"] == "NoCoverage"]
    killed = [m for m in mutants if m["status"] == "Killed"]
    assert len(killed) > 1
    (root / "mutmut-baseline.toml").write_text(
        "".join(entry("survivor", m) for m in not_covered) + entry("equivalent", killed[0]), encoding="utf-8"
    )
    second = run_cli("mutmut", "-j", "2", cwd=root, env=env, timeout=1200)
    out = second.stdout
    assert second.returncode == 0, out + second.stderr
    n_listed = len(not_covered) + 1
    assert f"{n_listed} of {len(mutants)} mutants are listed in mutmut-baseline.toml" in out
    assert f"{n_listed} listed mutants not run (--run-listed)" in out
    # Judged: every mutant but the equivalent one; detected: the killed others (and timeouts), as in the first run.
    detected = sum(m["status"] in ("Killed", "Timeout") for m in mutants) - 1
    assert f"kill rate {detected}/{len(mutants) - 1} " in out
    report_path = root / ".falsify" / "mutmut" / "mutation-report.json"
    again = json.loads(report_path.read_text(encoding="utf-8"))["files"]["toy/loop.py"]["mutants"]
    by_id = {m["id"]: m for m in again}
    assert [m["id"] for m in again] == [m["id"] for m in mutants]
    assert by_id[killed[0]["id"]]["status"] == "Ignored"
    assert all(by_id[m["id"]]["status"] == "Survived" for m in not_covered)
    assert all("not run (--run-listed" in by_id[m["id"]]["description"] for m in [*not_covered, killed[0]])
    assert all(by_id[m["id"]]["status"] in ("Killed", "Timeout") for m in killed[1:])

    # Sample 1 of 2: only its mutants run; the others are Ignored, outside the sample; the drawn ones end as in
    # the second run.
    from falsify.mutation.mutmut.running import in_sample

    third = run_cli("mutmut", "-j", "2", "--sample", "1/2", cwd=root, env=env, timeout=1200)
    out = third.stdout
    assert third.returncode == 0, out + third.stderr
    drawn = [m["id"] for m in mutants if in_sample(m["id"], (1, 2))]
    assert 0 < len(drawn) < len(mutants)
    assert f"--sample 1/2: {len(drawn)} of {len(mutants)} mutants are in the sample" in out
    assert f"sample 1 of 2: {len(drawn)} of {len(mutants)} mutants drawn" in out
    sampled = json.loads(report_path.read_text(encoding="utf-8"))["files"]["toy/loop.py"]["mutants"]
    for m in sampled:
        if m["id"] in drawn:
            assert m["status"] == by_id[m["id"]]["status"], m
        else:
            assert m["status"] == "Ignored" and "outside this run's --sample" in m["description"], m


def test_recheck_drops_the_listed_survivors_now_killed(tmp_path: Path) -> None:
    listed = Baseline("b.toml", equivalent=(_entry(0, "same bits"),), survivors=(_entry(1), _entry(2)))
    run = _run(90, ["survived", "killed", "survived"], listed)  # 0 equivalent, 1 now killed, 2 still survives
    run.recheck = True
    text, ok = verdict(run)
    assert ok and "not applied to a partial run" in text and run.stale() == []
    (tmp_path / "mutmut-baseline.toml").write_text(render_baseline(run, listed), encoding="utf-8")
    again = read_baseline(project_with(tmp_path, ""), MutmutConfig())
    assert again.equivalent == listed.equivalent and again.survivors == (_entry(2),)


def test_shards_keep_functions_whole_and_every_mutant_once() -> None:
    """`--executor`'s shards: mutmut's order kept, a function never split, each shard at least MIN_SHARD mutants
    but the last, about SHARDS of them for a large run."""
    from falsify.mutation.mutmut.sharded import MIN_SHARD, SHARDS, shards

    names = [f"m.x_f{f}__mutmut_{i}" for f in range(7) for i in range(1, 4 + f)]  # 7 functions, 3..9 mutants
    parts = shards(names)
    assert [n for part in parts for n in part] == names
    functions = [{n.partition("__mutmut_")[0] for n in part} for part in parts]
    assert all(a.isdisjoint(b) for i, a in enumerate(functions) for b in functions[i + 1 :])
    assert all(len(part) >= MIN_SHARD for part in parts[:-1]) and len(parts) == 3
    many = [f"m.x_f{f}__mutmut_{i}" for f in range(400) for i in range(1, 18)]  # 6,800 mutants
    big = shards(many)
    assert [n for part in big for n in part] == many and SHARDS - 1 <= len(big) <= SHARDS + 1
    assert shards(["m.x_a__mutmut_1"]) == [["m.x_a__mutmut_1"]]
