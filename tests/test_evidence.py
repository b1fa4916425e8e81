"""`falsify evidence` / `falsify verify` end to end on a throwaway project in a tmp dir: the real gate, real
pytest, real digests. Tampering happens only in tmp copies, never in this checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from testkit_gate_cli import run_cli

from falsify.cli import main
from falsify.evidence import (
    CONTRACT_EVIDENCE_TYPE,
    JUNIT,
    MUTATION_REPORT,
    RELEASE_REPORT_TYPE,
    REPORT_HTML,
    REPORT_MD,
    RESULTS,
    STATEMENTS,
    TEST_RESULT_TYPE,
)
from falsify.evidence.statements import PACKAGES, environment
from falsify.evidence.verify import shape_problems

ENGINE = "tinyengine.engine:TinyEngine"
Verify = Callable[..., tuple[int, str]]

FILES = {
    "pyproject.toml": """
        [project]
        name = "tinyproj"
        version = "0"

        [tool.falsify]
        contracts = "contracts"
        mutants = "mutants"
        tests = "tests"
        weights_dirs = ["../cache"]  # the engine's weights live outside the tree, like the real cache

        [tool.pytest.ini_options]
        falsify_contracts = "contracts"
        """,
    "tox.ini": """
        [tox]
        env_list = py
        """,
    "contracts/tiny-add-v1.yaml": """
        contract: tiny-add-v1
        version: 1.0.0
        title: Adding two small ints
        description: The engine adds two ints and reports how many operations it spent.
        references: ["https://docs.python.org/3/library/operator.html"]
        observables:
          total: {meaning: the sum the engine returned, type: int}
          extra_ops: {meaning: operations beyond the one add, type: int, unit: ops}
        predictions:
          - id: FALSIFY-TINY-ADD-001
            claim: The engine returns a + b.
            formula: total == a + b
            domain:
              a: {type: int, min: 0, max: 9}
              b: {type: int, min: 0, max: 9}
            if_fails: the add is off
            mutants: [add-off-by-one]
          - id: FALSIFY-TINY-ADD-002
            claim: An add costs no extra operation.
            formula: extra_ops <= 0
            domain: {}
            if_fails: the engine does work it throws away
            unproven_because: the tiny engine has no operation counter a planted bug could inflate yet
        costs:
          - {name: extra_ops, formula: extra_ops <= 0, per: add, unit: ops, checked_by: FALSIFY-TINY-ADD-002}
        """,
    "mutants/add-off-by-one.yaml": """
        id: add-off-by-one
        description: The sum is one too large.
        file: tinyengine/engine.py
        function: TinyEngine.add
        op: replace
        statement: "total = a + b"
        replacement: "total = a + b + 1"
        kills: [FALSIFY-TINY-ADD-001]
        """,
    "tinyengine/__init__.py": "",
    "tinyengine/engine.py": """
        from pathlib import Path


        class TinyEngine:
            name = "tiny"

            def supports(self, capability):
                return f"tiny only adds ints: no {capability}"

            def add(self, a, b):
                total = a + b
                return total, 0

            def tiny_model_path(self):
                return Path(__file__).resolve().parents[2] / "cache" / "tiny-0"
        """,
    "tests/test_add.py": """
        import os
        from pathlib import Path

        import falsify
        import pytest
        from hypothesis import given, settings
        from hypothesis import strategies as st


        @pytest.mark.falsifies("FALSIFY-TINY-ADD-001", "FALSIFY-TINY-ADD-002")
        def test_add(engine):
            if os.environ.get("TINY_EDIT_DURING_RUN"):  # a tree edited while the gate runs
                Path("tinyengine/late.py").write_text("LATE = 1\\n")
            for a, b in [(1, 2), (5, 7), (0, 9)]:
                total, extra_ops = engine.add(a, b)
                falsify.check("FALSIFY-TINY-ADD-001", total=total, a=a, b=b)
                falsify.check("FALSIFY-TINY-ADD-002", extra_ops=extra_ops)


        @pytest.mark.falsifies("FALSIFY-TINY-ADD-001")
        @settings(max_examples=10)
        @given(a=st.integers(0, 9), b=st.integers(0, 9))
        def test_add_any(engine, a, b):
            total, _ = engine.add(a, b)
            falsify.check("FALSIFY-TINY-ADD-001", total=total, a=a, b=b)
        """,
}


def make_project(base: Path) -> Path:
    """base/proj (the project) and base/cache/tiny-0 (its weights, outside the tree like the real cache)."""
    root = base / "proj"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    weights = base / "cache" / "tiny-0"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text('{"vocab_size": 8}\n', encoding="utf-8")
    (weights / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    return root


def stryker_report(status: str = "Killed") -> dict[str, object]:
    """A mutation-testing-report (Stryker schema v2) as `falsify mutants` writes one for the tiny project."""
    return {
        "schemaVersion": "2",
        "thresholds": {"high": 100, "low": 100},
        "projectRoot": "/somewhere/else",
        "files": {
            "tinyengine/engine.py": {
                "language": "python",
                "source": "...",
                "mutants": [
                    {
                        "id": "add-off-by-one",
                        "mutatorName": "replace",
                        "replacement": "total = a + b + 1",
                        "location": {"start": {"line": 10, "column": 9}, "end": {"line": 10, "column": 26}},
                        "status": status,
                        "killedBy": ["tests/test_add.py::test_add"] if status == "Killed" else [],
                        "duration": 123.4,
                    }
                ],
            }
        },
        "testFiles": {
            "tests/test_add.py": {
                "tests": [{"id": "tests/test_add.py::test_add", "name": "tests/test_add.py::test_add"}]
            }
        },
        "performance": {"setup": 1, "initialRun": 2, "mutation": 3},
    }


def falsify_cli(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # The ci hypothesis profile (derandomized) for `falsify gate` too: its results feed `evidence --from`.
    full_env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600", "HYPOTHESIS_PROFILE": "ci", **(env or {})}
    full_env.pop("PYTEST_ADDOPTS", None)
    return run_cli(*args, cwd=root, env=full_env, timeout=240)


def evidence_args(out: str) -> list[str]:
    """`falsify evidence` of the tiny project from its gate's output in .falsify/gate, into `out`."""
    return [
        "evidence",
        "--out",
        out,
        "--engine",
        ENGINE,
        "--sources",
        "tinyengine/**/*.py",
        "--from",
        ".falsify/gate",
    ]


def evidence_predicate(root: Path, out: str, *extra: str) -> dict[str, Any]:
    """`falsify evidence` (evidence_args) with EXTRA arguments, which must succeed: the contract-evidence predicate."""
    proc = falsify_cli(root, *evidence_args(out), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return statements(root / out)[1]["predicate"]


@pytest.fixture
def verify(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Verify:
    """`falsify verify` in this process (fast): exit code and output, run from the project root given."""

    def run(root: Path, *args: str) -> tuple[int, str]:
        # Each tmp copy has its own `tinyengine`; drop the one a previous copy imported.
        for name in [m for m in sys.modules if m == "tinyengine" or m.startswith("tinyengine.")]:
            del sys.modules[name]
        monkeypatch.chdir(root)
        capsys.readouterr()
        code = main(["verify", *args])
        out = capsys.readouterr()
        return code, out.out + out.err

    return run


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project and one bundle (with a killed-mutant report), written once for the module; tests copy it."""
    base = tmp_path_factory.mktemp("evidence")
    root = make_project(base)
    (base / "stryker.json").write_text(json.dumps(stryker_report()), encoding="utf-8")
    proc = falsify_cli(root, "gate", "--engine", ENGINE, "--out", ".falsify/gate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = falsify_cli(
        root,
        *evidence_args("evidence"),
        "--mutants-report",
        str(base / "stryker.json"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return base


@pytest.fixture
def copy(built: Path, tmp_path: Path) -> Path:
    """A private copy of project, weights and bundle: tampering cannot leak into other tests."""
    shutil.copytree(built, tmp_path / "c")
    return tmp_path / "c"


def statements(bundle: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()]


def test_bundle_has_every_file_and_three_in_toto_statements(built: Path) -> None:
    bundle = built / "proj" / "evidence"
    assert sorted(p.name for p in bundle.iterdir()) == sorted(
        [STATEMENTS, JUNIT, RESULTS, MUTATION_REPORT, REPORT_MD, REPORT_HTML, "kill-matrix.svg"]
    )
    stmts = statements(bundle)
    assert [s["predicateType"] for s in stmts] == [
        TEST_RESULT_TYPE,
        CONTRACT_EVIDENCE_TYPE,
        RELEASE_REPORT_TYPE,
    ]
    for s in stmts:
        assert shape_problems(s) == []
        assert s["_type"] == "https://in-toto.io/Statement/v1"
        for subject in s["subject"]:
            assert len(subject["digest"]["sha256"]) == 64
    assert_no_absolute_path(bundle, built)


def assert_no_absolute_path(bundle: Path, base: Path) -> None:
    """Not the project's path, not the weights cache's, nor any other tmp path, in any file of the bundle."""
    for path in bundle.iterdir():
        text = path.read_text(encoding="utf-8")
        assert str(base) not in text and "/tmp/" not in text, path.name


def test_shape_check_rejects_what_is_not_a_statement() -> None:
    good = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "a", "digest": {"sha256": "0" * 64}}],
        "predicateType": "https://example.com/p/v1",
        "predicate": {},
    }
    assert shape_problems(good) == []
    assert shape_problems({**good, "_type": "https://in-toto.io/Statement/v0.1"})
    assert shape_problems({**good, "subject": []})
    assert shape_problems({**good, "subject": [{"name": "a", "digest": {"sha256": "xyz"}}]})
    assert shape_problems({k: v for k, v in good.items() if k != "predicate"})


def test_test_result_statement(built: Path) -> None:
    test_result = statements(built / "proj" / "evidence")[0]
    p = test_result["predicate"]
    assert p["result"] == "PASSED"
    assert p["passedTests"] == ["tests/test_add.py::test_add", "tests/test_add.py::test_add_any"]
    assert p["failedTests"] == []
    roles = {d["name"]: d["annotations"]["falsify.role"] for d in p["configuration"]}
    config = {name for name, role in roles.items() if role not in ("harness", "schema")}
    assert {
        "contracts/tiny-add-v1.yaml",
        "mutants/add-off-by-one.yaml",
        "tox.ini",
        "pyproject.toml",
        "tests/test_add.py",
    } == config
    # The harness that judged the run, and the schemas it checked the contracts with (issue #19).
    harness = {name for name, role in roles.items() if role == "harness"}
    assert "falsify-harness/falsify/contracts/formula.py" in harness, sorted(harness)
    assert "falsify-harness/falsify/harness/results.py" in harness, sorted(harness)
    assert {name for name, role in roles.items() if role == "schema"} >= {
        "falsify-harness/falsify/contracts/schema/contract-v1.schema.json",
        "falsify-harness/falsify/contracts/schema/mutant-v1.schema.json",
    }
    subjects = {d["name"]: d["annotations"]["falsify.role"] for d in test_result["subject"]}
    assert subjects == {
        "tinyengine/__init__.py": "engine-source",
        "tinyengine/engine.py": "engine-source",
        "tiny-0/config.json": "weights",
        "tiny-0/model.safetensors": "weights",
    }
    assert {d["name"] for d in p["reports"]} == {JUNIT, RESULTS}


def test_contract_evidence_statement(built: Path) -> None:
    ev = statements(built / "proj" / "evidence")[1]["predicate"]
    assert ev["verdict"]["decision"] == "GO", ev["verdict"]
    rows = {p["id"]: p for p in ev["predictions"]}
    add, cost = rows["FALSIFY-TINY-ADD-001"], rows["FALSIFY-TINY-ADD-002"]
    assert add["outcome"] == "PASS" and add["formula"] == "total == a + b"
    assert add["tests"] == ["tests/test_add.py::test_add", "tests/test_add.py::test_add_any"]
    assert add["checks"] > 3 and cost["checks"] == 3  # 3 in test_add, the rest from hypothesis' examples
    assert add["values"] == {"total": 9, "a": 0, "b": 9}
    assert [m["id"] for m in add["mutantsKilled"]] == ["add-off-by-one"]
    assert cost["mutantsKilled"] == [] and cost["costs"] == [
        {
            "name": "extra_ops",
            "formula": "extra_ops <= 0",
            "per": "add",
            "unit": "ops",
            "measured": {"extra_ops": 0},
            "held": True,
        }
    ]
    import hashlib

    contract = built / "proj" / "contracts" / "tiny-add-v1.yaml"
    assert add["contractDigest"]["sha256"] == hashlib.sha256(contract.read_bytes()).hexdigest()
    assert ev["mutants"]["run"] is True
    assert ev["mutants"]["results"][0]["status"] == "Killed"
    # Timings are not evidence: the bundle's copies of the reports carry none.
    report = json.loads((built / "proj" / "evidence" / MUTATION_REPORT).read_text(encoding="utf-8"))
    assert "performance" not in report and "duration" not in json.dumps(report)
    assert report["projectRoot"] == "."
    junit = (built / "proj" / "evidence" / JUNIT).read_text(encoding="utf-8")
    raw = (built / "proj" / ".falsify" / "gate" / JUNIT).read_text(encoding="utf-8")
    assert 'time="' in raw and "hypothesis-statistics-" in raw
    assert 'time="' not in junit and "hypothesis-statistics-" not in junit and 'tests="2"' in junit


def test_untouched_tree_verifies(copy: Path) -> None:
    """Through the real command line once; the other verify tests run it in-process."""
    proc = falsify_cli(copy / "proj", "verify", "evidence", "--require-go")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify: OK" in proc.stdout and "GO —" in proc.stdout


@pytest.mark.parametrize(
    "name",
    [
        "tinyengine/engine.py",
        "contracts/tiny-add-v1.yaml",
        "evidence/REPORT.md",
        "evidence/report.html",
        "evidence/junit.xml",
        "evidence/results.json",
        "evidence/mutation-report.json",
        "../cache/tiny-0/model.safetensors",
        "tox.ini",
    ],
)
def test_one_changed_byte_fails_verify_naming_the_file(copy: Path, name: str, verify: Verify) -> None:
    path = copy / "proj" / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, out = verify(copy / "proj", "evidence")
    assert code == 1, out
    shown = name.removeprefix("evidence/").removeprefix("../cache/")
    assert f"  {shown}: sha256 changed" in out, out


def test_an_added_engine_source_fails_verify(copy: Path, verify: Verify) -> None:
    (copy / "proj" / "tinyengine" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    code, out = verify(copy / "proj", "evidence")
    assert code == 1
    assert "tinyengine/extra.py: engine source not in the evidence" in out, out


def test_verify_finds_the_weights_without_importing_the_engine(copy: Path, verify: Verify) -> None:
    """Issue #27: `verify` runs no project code; the weights outside the tree are found from the names the bundle
    records, in a declared weights directory ([tool.falsify] weights_dirs = ["../cache"])."""
    code, out = verify(copy / "proj", "evidence")
    assert code == 0, out
    assert not [m for m in sys.modules if m == "tinyengine" or m.startswith("tinyengine.")]


def test_weights_outside_every_declared_directory_are_missing_not_read(copy: Path, verify: Verify) -> None:
    pyproject = copy / "proj" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace("weights_dirs", "# was"), "utf-8")
    code, out = verify(copy / "proj", "evidence")
    assert code == 1
    assert "tiny-0/config.json: missing (working tree records sha256" in out, out
    assert "tiny-0/model.safetensors: missing" in out, out


def test_evidence_refuses_weights_verify_could_not_find(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from falsify.evidence.tree import EvidenceError, weights_files

    root = copy / "proj"
    monkeypatch.setenv("FALSIFY_CACHE", str(copy / "elsewhere"))
    assert [n for n, _ in weights_files(root, ENGINE)[0]] == [
        "tiny-0/config.json",
        "tiny-0/model.safetensors",
    ]
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace("weights_dirs", "# was"), "utf-8")
    with pytest.raises(
        EvidenceError, match=r"outside the project and outside every weights directory .* add "
    ):
        weights_files(root, ENGINE)
    for name in [m for m in sys.modules if m == "tinyengine" or m.startswith("tinyengine.")]:
        del sys.modules[name]


def test_a_weights_symlink_fifo_or_invented_name_is_never_read(copy: Path, verify: Verify) -> None:
    cache = copy / "cache" / "tiny-0"
    (copy / "outside.safetensors").write_bytes((cache / "model.safetensors").read_bytes())
    (cache / "model.safetensors").unlink()
    (cache / "model.safetensors").symlink_to(copy / "outside.safetensors")  # same bytes, through a link
    (cache / "config.json").unlink()
    os.mkfifo(cache / "config.json")  # read, it would block verify for ever
    code, out = verify(copy / "proj", "evidence")
    assert code == 1
    assert "  tiny-0/model.safetensors: missing" in out, out
    assert "  tiny-0/config.json: missing" in out, out
    bundle = copy / "proj" / "evidence"
    lines = (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()
    for invented in ("../cache/tiny-0/config.json", "/etc/hostname", "~/.bashrc"):
        forged = [line.replace('"tiny-0/config.json"', json.dumps(invented)) for line in lines]
        assert forged != lines
        (bundle / STATEMENTS).write_text("\n".join(forged) + "\n", encoding="utf-8")
        code, out = verify(copy / "proj", "evidence")
        assert code == 1
        assert f"  {invented}: missing" in out, out


def test_an_edited_statement_fails_verify(copy: Path, verify: Verify) -> None:
    """Claiming in the statements an outcome the results do not give is caught by the rebuild, beside the digest."""
    bundle = copy / "proj" / "evidence"
    lines = (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()
    edited = lines[1].replace('"outcome":"PASS"', '"outcome":"FAIL"', 1)
    assert edited != lines[1]
    (bundle / STATEMENTS).write_text("\n".join([lines[0], edited, lines[2]]) + "\n", encoding="utf-8")
    code, out = verify(copy / "proj", "evidence")
    assert code == 1
    assert f"{STATEMENTS} line 2: sha256 changed" in out
    assert 'predicate.predictions[0].outcome: recorded "FAIL", re-derived "PASS"' in out, out


def test_evidence_runs_the_gate_and_the_real_mutant_runner(built: Path, copy: Path, verify: Verify) -> None:
    """No --from, no report: `falsify evidence` runs the gate and `falsify mutants` itself. The gate's statement
    comes out byte for byte as the one from the separate gate run; the bundle rebuilt from the raw outputs it kept
    is byte for byte the same bundle."""
    pytest.importorskip("libcst", reason="the mutant runner needs libcst (extra `mutants`)")
    root = copy / "proj"
    sources = ("--engine", ENGINE, "--sources", "tinyengine/**/*.py")
    proc = falsify_cli(root, "evidence", "--out", "full", *sources)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ev = statements(root / "full")[1]["predicate"]
    assert ev["verdict"]["decision"] == "GO", ev["verdict"]
    [mutant] = ev["mutants"]["results"]
    assert (mutant["id"], mutant["status"], mutant["killedPredictions"]) == (
        "add-off-by-one",
        "Killed",
        ["FALSIFY-TINY-ADD-001"],
    )
    report = json.loads((root / "full" / MUTATION_REPORT).read_text(encoding="utf-8"))
    assert "performance" not in report and '"duration"' not in json.dumps(report)
    kept = report["files"]["tinyengine/engine.py"]["mutants"][0]["statusReason"]
    assert kept == "red: FALSIFY-TINY-ADD-001"  # test output (reprs, times) stays in the raw report only
    # The bundle's copy, timings dropped, is still a report of the Stryker schema (the npm package's file).
    schema = (
        Path(__file__).parent
        / "data"
        / "mutation-testing-report-schema"
        / "mutation-testing-report-schema.json"
    )
    if schema.is_file():
        jsonschema.validate(report, json.loads(schema.read_text(encoding="utf-8")))
    first = (root / "full" / STATEMENTS).read_bytes().splitlines()[0]
    assert first == (built / "proj" / "evidence" / STATEMENTS).read_bytes().splitlines()[0]
    proc = falsify_cli(
        root,
        *("evidence", "--out", "again", *sources, "--from", ".falsify/evidence-gate"),
        *("--mutants-report", ".falsify/evidence-mutants/mutation-report.json"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in (STATEMENTS, JUNIT, RESULTS, MUTATION_REPORT, REPORT_MD, REPORT_HTML):
        assert (root / "again" / name).read_bytes() == (root / "full" / name).read_bytes(), name
    assert verify(root, "full", "--require-go")[0] == 0


def test_a_reused_control_leaves_the_bundle_byte_identical(tmp_path: Path) -> None:
    """docs/evidence.md: with SOURCE_DATE_EPOCH set, every byte of the bundle is reproducible. The second run on the
    same tree (a `falsify init` project) reuses the mutants' stored control (.falsify/control/); the console says
    so, the raw report keeps where it came from and when it ran, and the bundle is the same bytes as the first."""
    pytest.importorskip("libcst", reason="the mutant runner needs libcst (extra `mutants`)")
    root = tmp_path / "proj"
    root.mkdir()
    made = run_cli("init", cwd=root)
    assert made.returncode == 0, made.stdout + made.stderr
    runs = []
    for n in (1, 2):  # each bundle outside the tree: one inside would be part of the next run's tree
        proc = falsify_cli(root, "evidence", "--out", str(tmp_path / f"bundle{n}"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(proc.stdout)
    reused = "mutants: control reused from .falsify/control/"
    assert reused not in runs[0] and reused in runs[1], runs[1]
    raw = json.loads((root / ".falsify" / "evidence-mutants" / MUTATION_REPORT).read_text(encoding="utf-8"))
    assert raw["config"]["control"].startswith("reused from .falsify/control/")
    first, second = (sorted(p.name for p in (tmp_path / f"bundle{n}").iterdir()) for n in (1, 2))
    assert first == second and MUTATION_REPORT in first and REPORT_MD in first
    for name in first:
        assert (tmp_path / "bundle1" / name).read_bytes() == (tmp_path / "bundle2" / name).read_bytes(), name
    kept = json.loads((tmp_path / "bundle2" / MUTATION_REPORT).read_text(encoding="utf-8"))
    assert "control" not in kept["config"] and kept["config"]["engine"] == "example_engine:make_engine"


def test_the_environment_names_distributions_with_their_installed_versions() -> None:
    """The environment block looks versions up by distribution name (importlib.metadata): the harness is
    falsify-harness, whose import name `falsify` is no distribution here, so it once read "falsify not
    installed" in a bundle falsify-harness had just written."""
    try:
        harness = metadata.version("falsify-harness")
    except metadata.PackageNotFoundError:
        pytest.skip("falsify-harness is not installed here (a checkout on PYTHONPATH)")
    packages = environment()["packages"]
    assert packages["falsify-harness"] == harness
    by_import = metadata.packages_distributions()
    for name in PACKAGES:  # an import name that belongs to a distribution of another name is never looked up
        assert name not in by_import or name in by_import[name], (name, by_import[name])
    required = {
        re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower()
        for r in metadata.requires("falsify-harness") or []
        if "extra ==" not in r
    }
    for name in PACKAGES:
        if name == "falsify-harness" or name.lower() in required:
            assert packages[name] == metadata.version(name), name


def test_mutants_not_run_is_said_and_is_no_go(copy: Path, verify: Verify) -> None:
    root = copy / "proj"
    proc = falsify_cli(
        root,
        *evidence_args("nomut"),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "mutants NOT RUN" in proc.stdout
    ev = statements(root / "nomut")[1]["predicate"]
    assert ev["verdict"]["decision"] == "NO-GO"
    assert ev["verdict"]["mutants"] == {
        "run": False,
        "declared": 1,
        "ran": 0,
        "killed": 0,
        "timedOut": [],
        "notKilled": [],
        "missing": [],
    }
    assert all(p["mutantsKilled"] == [] for p in ev["predictions"])
    assert ev["predictions"][0]["mutants"] == [
        {"id": "add-off-by-one", "status": "NOT RUN", "diffDigest": None}
    ]
    assert "NOT RUN" in (root / "nomut" / REPORT_MD).read_text(encoding="utf-8")
    assert_no_absolute_path(root / "nomut", copy)
    assert MUTATION_REPORT not in {p.name for p in (root / "nomut").iterdir()}
    assert verify(root, "nomut")[0] == 0
    assert verify(root, "nomut", "--require-go")[0] == 1


def red_bundle(copy: Path) -> Path:
    """Break the copy's add (total off by one) and write its bundle to red/ with a surviving mutant: NO-GO."""
    root = copy / "proj"
    engine = root / "tinyengine" / "engine.py"
    engine.write_text(
        engine.read_text(encoding="utf-8").replace("total = a + b", "total = a + b + 1"), encoding="utf-8"
    )
    (copy / "survived.json").write_text(json.dumps(stryker_report("Survived")), encoding="utf-8")
    proc = falsify_cli(
        root,
        "evidence",
        "--out",
        "red",
        "--engine",
        ENGINE,
        "--sources",
        "tinyengine/**/*.py",
        "--mutants-report",
        str(copy / "survived.json"),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return root


def test_survivor_and_falsified_prediction_are_no_go(copy: Path, verify: Verify) -> None:
    """A real falsification: the engine's add is broken in the copy; the gate fails and the bundle says so."""
    root = red_bundle(copy)
    stmts = statements(root / "red")
    assert stmts[0]["predicate"]["result"] == "FAILED"
    assert stmts[0]["predicate"]["failedTests"] == [
        "tests/test_add.py::test_add",
        "tests/test_add.py::test_add_any",
    ]
    ev = stmts[1]["predicate"]
    rows = {p["id"]: p for p in ev["predictions"]}
    assert rows["FALSIFY-TINY-ADD-001"]["outcome"] == "FAIL"
    assert rows["FALSIFY-TINY-ADD-001"]["values"] == {"total": 4, "a": 1, "b": 2}
    assert "total == a + b" in rows["FALSIFY-TINY-ADD-001"]["detail"]
    assert ev["verdict"]["decision"] == "NO-GO"
    assert "1 of 2 predictions FAIL" in ev["verdict"]["reasons"]
    assert "1 of 1 mutants not killed: add-off-by-one (Survived)" in ev["verdict"]["reasons"]
    assert verify(root, "red")[0] == 0


def test_verify_on_a_directory_that_is_not_a_bundle(copy: Path, verify: Verify) -> None:
    (copy / "proj" / "empty").mkdir()
    code, out = verify(copy / "proj", "empty")
    assert code == 2
    assert "evidence.intoto.jsonl: no such file" in out


CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
    None,
)


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the inflated scanlines (filter bytes included) of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def screenshot(browser: list[str], page: Path, size: tuple[int, int], shot: Path) -> tuple[int, int, bytes]:
    """PAGE as the headless BROWSER (its command and flags) draws it in a SIZE window: png_pixels of SHOT."""
    subprocess.run(
        [*browser, f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return png_pixels(shot.read_bytes())


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium); .ci/run installs it"
)
def test_report_html_opens_offline_in_a_headless_browser(built: Path, tmp_path: Path) -> None:
    page = built / "proj" / "evidence" / REPORT_HTML
    html = page.read_text(encoding="utf-8")
    # One file, nothing fetched: no external src/href, no @import or url() in the CSS, no script.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html)
    assert "@import" not in html and "url(" not in html and "<script" not in html
    assert CHROMIUM is not None
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    width, height, pixels = screenshot(flags, page, (1280, 1000), tmp_path / "report.png")
    assert (width, height) == (1280, 1000)
    assert len(set(pixels)) > 16, "the screenshot is blank"
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    verdict = re.search(r'<div class="verdict go" id="verdict"><div class="word">(.*?)</div>', dom)
    assert verdict and verdict.group(1) == "GO", dom[:2000]
    text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
    assert "2 of 2 predictions passed" in text and "1 of 1 mutants killed" in text
    assert re.search(r"tiny-add-v1 FALSIFY-TINY-ADD-001 .{0,200}? PASS", text), text[:3000]
    assert "add-off-by-one Killed tinyengine/engine.py FALSIFY-TINY-ADD-001" in text
    # The kill-matrix figure is on the page, drawn inline, with the killed cell in red.
    figure = re.search(r'<figure id="kill-matrix">.*?</figure>', dom, re.S)
    assert figure and "<svg" in figure.group(0) and 'fill="#cf222e"' in figure.group(0), dom[:3000]
    # ... and renders legibly at 1400 px: the SVG alone, screenshotted, shows the red cell and dark label text.
    alone = tmp_path / "figure.html"
    svg = (built / "proj" / "evidence" / "kill-matrix.svg").read_text(encoding="utf-8")
    alone.write_text(f"<!DOCTYPE html><html><body style='margin:0;background:#fff'>{svg}</body></html>")
    width, height, pixels = screenshot(flags, alone, (1400, 400), tmp_path / "figure.png")
    assert width == 1400
    assert _has_colour(pixels, width, (0xCF, 0x22, 0x2E)), "no killed (red) cell rendered"
    assert _has_colour(pixels, width, (0x1D, 0x23, 0x2A), tolerance=60), "no label text rendered"


def _has_colour(pixels: bytes, width: int, rgb: tuple[int, int, int], tolerance: int = 8) -> bool:
    """Whether an RGB(A) PNG's unfiltered scanlines hold a pixel near `rgb` (filter 0 rows only: enough for
    flat fills, which chromium writes unfiltered or Sub-filtered; Sub rows are undone here too)."""
    for bpp in (4, 3):
        stride = 1 + width * bpp
        if len(pixels) % stride:
            continue
        for row in range(len(pixels) // stride):
            line = bytearray(pixels[row * stride + 1 : (row + 1) * stride])
            kind = pixels[row * stride]
            if kind == 1:  # Sub
                for i in range(bpp, len(line)):
                    line[i] = (line[i] + line[i - bpp]) & 0xFF
            elif kind != 0:
                continue
            for i in range(0, len(line) - bpp + 1, bpp):
                if all(abs(line[i + k] - rgb[k]) <= tolerance for k in range(3)):
                    return True
    return False


def test_verdict_denominators() -> None:
    from falsify.evidence.verdict import decide

    clean = {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    ran = {
        "run": True,
        "declared": ["m1", "m2"],
        "results": [{"id": "m1", "status": "Killed"}, {"id": "m2", "status": "Timeout"}],
    }
    go = decide(["PASS", "PASS", "NOT APPLICABLE"], clean, ran)
    assert go["decision"] == "GO" and go["reasons"] == []
    assert go["summary"].startswith("GO — 2 of 3 predictions passed (1 not applicable); 3 tests, 0 failed")
    assert go["summary"].endswith("1 of 2 mutants killed, 1 timed out")
    assert decide([], clean, ran)["reasons"] == ["no prediction: an empty corpus is never a pass"]
    assert decide(["NOT APPLICABLE"], clean, ran)["reasons"] == ["0 of 1 predictions passed"]
    assert decide(["PASS", "NOT RUN"], clean, ran)["reasons"] == ["1 of 2 predictions NOT RUN"]
    junit_red = decide(["PASS"], {**clean, "errors": 1}, ran)
    assert junit_red["reasons"] == ["JUnit: 0 failed and 1 errors of 3 tests"]
    survived = {**ran, "results": [{"id": "m1", "status": "Survived"}]}
    assert decide(["PASS"], clean, survived)["reasons"] == [
        "1 of 1 mutants not killed: m1 (Survived)",
        "1 of 2 declared mutants missing from the report: m2",
    ]
    not_run = decide(["PASS"], clean, {"run": False, "reason": "runner absent", "declared": ["m1"]})
    assert not_run["decision"] == "NO-GO"
    assert not_run["reasons"] == ["mutants not run (1 declared): runner absent"]
    assert "mutants NOT RUN (1 declared, 0 killed)" in not_run["summary"]
    assert decide(["PASS"], clean, {"run": False, "declared": []})["decision"] == "GO"


def test_go_needs_every_applicable_prediction_proven_or_excused() -> None:
    from falsify.evidence.verdict import decide

    clean = {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    ran = {"run": True, "declared": ["m1"], "results": [{"id": "m1", "status": "Killed"}]}

    def proof(outcome: str, proven: str, because: str | None = None) -> dict[str, Any]:
        return {"outcome": outcome, "proven": proven, "because": because}

    go = decide(
        ["PASS", "PASS", "NOT APPLICABLE"],
        clean,
        ran,
        {
            "P1": proof("PASS", "PROVEN"),
            "P2": proof("PASS", "EXCUSED", "reviewed: no mutant can reach it"),
            "P3": proof("NOT APPLICABLE", "UNPROVEN"),  # not applicable here: not held against GO
        },
    )
    assert go["decision"] == "GO", go["reasons"]
    assert "; 1 of 2 proven, 1 unproven with a reviewed reason;" in go["summary"]
    assert go["proof"] == {"measured": True, "applicable": 2, "proven": 1, "excused": ["P2"], "unproven": []}
    nogo = decide(
        ["PASS", "PASS"], clean, ran, {"P1": proof("PASS", "PROVEN"), "P2": proof("PASS", "UNPROVEN")}
    )
    assert nogo["decision"] == "NO-GO"
    assert nogo["reasons"] == [
        "1 of 2 applicable predictions UNPROVEN (no mutant turned them red; no reviewed unproven_because): P2"
    ]
    # zero mutants is not a GO: nothing is shown able to fail
    none = decide(["PASS"], clean, {"run": False, "declared": []}, {"P1": proof("PASS", "NOT MEASURED")})
    assert none["decision"] == "NO-GO" and "no mutant run" in none["reasons"][0]


def test_a_mutant_this_machine_cannot_show_is_excused_only_beside_its_not_applicable_prediction() -> None:
    """A CANNOT SHOW mutant (statusReason "cannot be shown on this machine: P3") is not a failed kill when P3 is
    NOT APPLICABLE in the same run, and the summary counts it; when P3 ran (PASS) it is a mutant not killed."""
    from falsify.evidence.verdict import decide

    clean = {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    ran = {
        "run": True,
        "declared": ["m1", "m2"],
        "results": [
            {"id": "m1", "status": "Killed"},
            {"id": "m2", "status": "Ignored", "cannotShowPredictions": ["P3"]},
        ],
    }
    here = {"outcome": "NOT APPLICABLE", "proven": "CANNOT SHOW", "because": None}
    proofs = {"P1": {"outcome": "PASS", "proven": "PROVEN", "because": None}, "P3": here}
    go = decide(["PASS", "NOT APPLICABLE"], clean, ran, proofs)
    assert go["decision"] == "GO", go["reasons"]
    assert "; 1 of 1 proven, 1 cannot be shown here;" in go["summary"]
    assert go["summary"].endswith("1 of 2 mutants killed, 1 cannot be shown here")
    assert go["proof"]["cannotShow"] == ["P3"] and go["mutants"]["cannotShow"] == ["m2"]
    ran_here = {**proofs, "P3": {**here, "outcome": "PASS"}}
    nogo = decide(["PASS", "PASS"], clean, ran, ran_here)
    assert "1 of 2 mutants not killed: m2 (Ignored)" in nogo["reasons"]
    assert (
        decide(["PASS", "NOT APPLICABLE"], clean, ran)["decision"] == "NO-GO"
    )  # no proofs: nothing to excuse it


def test_evidence_is_no_go_when_a_mutant_file_is_deleted(copy: Path) -> None:
    """Done-when of issue 12: a scratch copy with one mutant file (and its listing) removed is NO-GO, naming the
    prediction no mutant proves any more. The real gate and mutant runner run on the tiny project."""
    pytest.importorskip("libcst", reason="the mutant runner needs libcst (extra `mutants`)")
    root = copy / "proj"
    sources = ("--engine", ENGINE, "--sources", "tinyengine/**/*.py")
    go = falsify_cli(root, "evidence", "--out", "full", *sources)
    assert go.returncode == 0, go.stdout + go.stderr
    assert (
        "GO — 2 of 2 predictions passed (0 not applicable); 1 of 2 proven, 1 unproven with a reviewed"
        in go.stdout
    )
    (root / "mutants" / "add-off-by-one.yaml").unlink()
    contract = root / "contracts" / "tiny-add-v1.yaml"
    contract.write_text(contract.read_text().replace("    mutants: [add-off-by-one]\n", ""))
    nogo = falsify_cli(root, "evidence", "--out", "full", *sources)
    assert nogo.returncode == 1, nogo.stdout + nogo.stderr
    assert "NO-GO" in nogo.stdout
    assert "1 of 2 applicable predictions UNPROVEN" in nogo.stdout and "FALSIFY-TINY-ADD-001" in nogo.stdout


def test_killed_predictions_come_from_the_runners_status_reason(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`falsify mutants` names the predictions that turned red in statusReason; a failing test bound to several
    predictions must not credit the ones that held."""
    from falsify.contracts.corpus import load_corpus
    from falsify.evidence.mutation import outcomes

    root = built / "proj"
    monkeypatch.chdir(root)
    corpus = load_corpus([root / "contracts", root / "mutants"])
    results = json.loads((root / "evidence" / RESULTS).read_text(encoding="utf-8"))
    report = stryker_report()
    mutant = report["files"]["tinyengine/engine.py"]["mutants"][0]  # type: ignore[index]
    assert outcomes(report, corpus, results, root)[0].killed == ("FALSIFY-TINY-ADD-001",)
    mutant["statusReason"] = "red: FALSIFY-TINY-ADD-001, FALSIFY-TINY-ADD-002\nassert 4 == 3"
    assert outcomes(report, corpus, results, root)[0].killed == (
        "FALSIFY-TINY-ADD-001",
        "FALSIFY-TINY-ADD-002",
    )
    mutant["status"] = "Survived"
    assert outcomes(report, corpus, results, root)[0].killed == ()


def test_a_tree_edited_during_the_run_gets_no_bundle(copy: Path) -> None:
    root = copy / "proj"
    proc = falsify_cli(
        root,
        *("evidence", "--out", "late", "--engine", ENGINE, "--sources", "tinyengine/**/*.py", "--no-mutants"),
        env={"TINY_EDIT_DURING_RUN": "1"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "the tree changed while the gate and mutants ran: tinyengine/late.py; no bundle written"
        in proc.stderr
    )
    assert not (root / "late").exists()


def test_sources_that_match_nothing_are_refused(copy: Path) -> None:
    root = copy / "proj"
    proc = falsify_cli(root, "evidence", "--out", "x", "--engine", ENGINE, "--sources", "nothing/**/*.py")
    assert proc.returncode == 2
    assert "no engine source file matches nothing/**/*.py" in proc.stderr
    assert not (root / "x").exists()


def test_a_report_edited_with_its_digest_fixed_up_fails_verify(copy: Path, verify: Verify) -> None:
    """REPORT.md must say what the statements say, even when its digest in statement 3 was forged to match."""
    import hashlib

    bundle = copy / "proj" / "evidence"
    report = (bundle / REPORT_MD).read_text(encoding="utf-8")
    forged = report.replace("**PASS**", "**FAIL**", 1)
    assert forged != report
    (bundle / REPORT_MD).write_text(forged, encoding="utf-8")
    lines = (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()
    old, new = (hashlib.sha256(t.encode()).hexdigest() for t in (report, forged))
    assert old in lines[2]
    lines[2] = lines[2].replace(old, new)
    (bundle / STATEMENTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = verify(copy / "proj", "evidence")
    assert code == 1
    assert "REPORT.md: does not say what the statements say" in out, out


def test_scrub_makes_text_machine_neutral(tmp_path: Path) -> None:
    from falsify.evidence.digests import scrub

    root = tmp_path / "proj"
    text = (
        f"{root}/tests/test_x.py:3 Model({Path.home()}/.cache/falsify/tiny-0-v1) "
        "<reference.engine.ReferenceEngine object at 0x7fcff6f84650> in {root}"
    )
    assert scrub({"m": [text.replace("{root}", str(root))]}, root) == {
        "m": [
            "tests/test_x.py:3 Model(~/.cache/falsify/tiny-0-v1) <reference.engine.ReferenceEngine object at 0x?> in ."
        ]
    }


def test_a_mutmut_report_is_kept_summarised_drawn_and_verified(copy: Path, verify: Verify) -> None:
    root = copy / "proj"
    mutmut_report = {
        "schemaVersion": "2",
        "thresholds": {"high": 80, "low": 60},
        "files": {
            "tinyengine/engine.py": {
                "language": "python",
                "source": "",
                "mutants": [
                    {
                        "id": str(i),
                        "mutatorName": "m",
                        "status": status,
                        "location": {"start": {"line": 1, "column": 1}, "end": {"line": 1, "column": 2}},
                    }
                    for i, status in enumerate(["Killed"] * 9 + ["Survived", "Timeout", "NoCoverage"])
                ],
            }
        },
    }
    (copy / "mutmut.json").write_text(json.dumps(mutmut_report), encoding="utf-8")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8") + "\n[tool.falsify.mutmut]\nkill_rate_floor = 0.7\n",
        encoding="utf-8",
    )
    ev = evidence_predicate(
        root,
        "with-mutmut",
        "--mutants-report",
        str(copy / "stryker.json"),
        "--mutmut-report",
        str(copy / "mutmut.json"),
    )
    assert ev["mutmut"] == {
        "killed": 9,
        "survived": 1,
        "timeout": 1,
        "no_tests": 1,
        "other": 0,
        "floor": 0.7,
        "sample": None,
    }
    svg = (root / "with-mutmut" / "mutmut.svg").read_text(encoding="utf-8")
    assert "floor 70%" in svg
    assert "kill rate 75.0%" in (root / "with-mutmut" / REPORT_MD).read_text(encoding="utf-8")
    assert verify(root, "with-mutmut")[0] == 0
    # The kept report is pinned: a changed status fails verify naming the file.
    kept = root / "with-mutmut" / "mutmut-report.json"
    kept.write_text(kept.read_text(encoding="utf-8").replace('"Survived"', '"Killed"'), encoding="utf-8")
    code, out = verify(root, "with-mutmut")
    assert code == 1 and "mutmut-report.json: sha256 changed" in out, out


def test_an_engines_matrix_is_kept_shown_and_verified(copy: Path, verify: Verify) -> None:
    root = copy / "proj"
    matrix = {
        "engines": ["tinyengine.engine:TinyEngine", "other"],
        "predictions": [
            {
                "id": "FALSIFY-TINY-ADD-001",
                "contract": "tiny-add-v1",
                "outcomes": {"tinyengine.engine:TinyEngine": "PASS", "other": "FAIL"},
                "details": {"tinyengine.engine:TinyEngine": "", "other": f"falsified in {root}/x.py"},
            }
        ],
        "summaries": {
            "tinyengine.engine:TinyEngine": "1 predictions: 1 PASS",
            "other": "1 predictions: 1 FAIL",
        },
    }
    (copy / "matrix.json").write_text(json.dumps(matrix), encoding="utf-8")
    ev = evidence_predicate(
        root,
        "with-matrix",
        "--mutants-report",
        str(copy / "stryker.json"),
        "--matrix",
        str(copy / "matrix.json"),
    )
    assert ev["matrix"]["outcomes"] == {
        "FALSIFY-TINY-ADD-001": {"tinyengine.engine:TinyEngine": "PASS", "other": "FAIL"}
    }
    kept = (root / "with-matrix" / "engines-matrix.json").read_text(encoding="utf-8")
    assert str(root) not in kept  # paths scrubbed
    html = (root / "with-matrix" / REPORT_HTML).read_text(encoding="utf-8")
    assert "<h2>Engines</h2>" in html and '<td class="FAIL">FAIL</td>' in html
    assert verify(root, "with-matrix")[0] == 0
    bad = copy / "bad.json"
    bad.write_text(json.dumps({"engines": "x"}), encoding="utf-8")
    proc = falsify_cli(root, *evidence_args("bad-matrix"), "--matrix", str(bad))
    assert proc.returncode == 2 and "matrix: `engines` must be a list" in proc.stderr, proc.stderr


def test_a_list_that_grew_or_shrank_names_the_first_item_that_differs() -> None:
    """verify's difference between a recorded and a re-derived list of another length (a source file added since
    the bundle was made): the first item that differs, by its name, not two long lists cut where they look alike."""
    from falsify.evidence.verify import json_diff

    old = [
        {"name": "a.py", "digest": {"sha256": "52ab2" * 12}},
        {"name": "c.py", "digest": {"sha256": "7" * 64}},
    ]
    new = [old[0], {"name": "b.py", "digest": {"sha256": "9" * 64}}, old[1]]
    assert json_diff({"subject": old}, {"subject": new}) == [
        'subject: recorded 2 items, re-derived 3; first difference at [1]: recorded name "c.py", re-derived name "b.py"'
    ]
    assert json_diff([1, 2], [1, 2, 3]) == [
        ": recorded 2 items, re-derived 3; first difference at [2]: recorded nothing, re-derived 3"
    ]
