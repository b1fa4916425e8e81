"""A pack installed outside the project, as evidence, verify and the mutant runner name and find it (issue #24).

The whole flow (a wheel in a fresh venv, a repo in a tmp dir, a signed GO) is tests/test_adopter.py (tox -e adopter);
these are the naming rules it relies on, checked in process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from falsify.contracts import packs
from falsify.contracts.packs import PackFile
from falsify.evidence.digests import sha256_file
from falsify.evidence.tree import EvidenceError, file_name
from falsify.evidence.verify import Verification, _pack_versions
from falsify.harness.command import target

CONTRACT = "falsify/packs/serving/contracts/apr-serve-cancellation-v1.yaml"


def test_a_pack_file_is_named_by_distribution_version_and_path_inside_the_package() -> None:
    path = packs.contracts_dir("serving") / "apr-serve-cancellation-v1.yaml"
    shipped = packs.pack_file(path)
    assert shipped == PackFile("falsify-harness", packs.installed_version(), CONTRACT)
    assert shipped.name == f"pkg:pypi/falsify-harness@{packs.installed_version()}#{CONTRACT}"
    assert shipped.pack == "serving"
    assert PackFile.parse(shipped.name) == shipped
    assert packs.locate(shipped).resolve() == path.resolve()


@pytest.mark.parametrize(
    "name",
    [
        "falsify/packs/serving/contracts/x.yaml",  # a project path
        "pkg:pypi/falsify-harness#falsify/packs/serving/x.yaml",  # no version
        "pkg:pypi/falsify-harness@0.1.0#falsify/harness/gate.py",  # not under packs/
        "pkg:pypi/falsify-harness@0.1.0#falsify/packs/serving/../../../etc/passwd",
        "pkg:pypi/@0.1.0#falsify/packs/serving/x.yaml",
    ],
)
def test_a_name_that_is_no_pack_file_parses_to_none(name: str) -> None:
    assert PackFile.parse(name) is None


def test_a_file_outside_every_pack_is_no_pack_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("id: x\n")
    assert packs.pack_file(tmp_path / "x.yaml") is None
    assert packs.pack_file(Path(packs.__file__)) is None  # in the package, not in a pack


def test_evidence_names_a_contract_in_the_project_or_a_pack_and_refuses_anything_else(tmp_path: Path) -> None:
    (tmp_path / "contracts").mkdir()
    own = tmp_path / "contracts" / "c.yaml"
    own.write_text("id: c\n")
    assert file_name(tmp_path, own) == "contracts/c.yaml"
    assert file_name(tmp_path, "contracts/c.yaml") == "contracts/c.yaml"
    pack = packs.contracts_dir("serving") / "apr-serve-cancellation-v1.yaml"
    assert file_name(tmp_path, pack) == f"pkg:pypi/falsify-harness@{packs.installed_version()}#{CONTRACT}"
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other.yaml"
    elsewhere.write_text("id: o\n")
    with pytest.raises(EvidenceError, match=r"outside the project root .* and in no installed pack"):
        file_name(tmp_path, elsewhere)


def test_verify_names_a_pack_file_recorded_from_another_installed_version() -> None:
    path = packs.contracts_dir("serving") / "apr-serve-cancellation-v1.yaml"
    now_name = PackFile("falsify-harness", "0.2.0", CONTRACT).name
    old_name = PackFile("falsify-harness", "0.1.0", CONTRACT).name
    now = {now_name: ("pack contract", path)}

    same = Verification()
    renamed = _pack_versions({old_name: {"digest": {"sha256": sha256_file(path)}}}, now, same)
    assert renamed == {old_name: now_name}
    assert same.problems == [
        f"{CONTRACT}: recorded from falsify-harness 0.1.0, installed is falsify-harness 0.2.0 (same bytes)"
    ]
    changed = Verification()
    _pack_versions({old_name: {"digest": {"sha256": "0" * 64}}}, now, changed)
    assert changed.problems[0].endswith("(sha256 changed)")
    # the same version recorded and installed: left to the digest check
    assert _pack_versions({now_name: {"digest": {"sha256": "0" * 64}}}, now, Verification()) == {}


def test_the_runner_runs_a_pack_falsifier_by_its_installed_path(tmp_path: Path) -> None:
    tree = tmp_path / "copy"
    (tree / "tests").mkdir(parents=True)
    own = "tests/test_x.py::test_a[1]"
    assert target(own, str(tree / "tests" / "test_x.py"), tree) == own
    assert target(own, None, tree) == own
    assert target(own, "tests/test_x.py", tree) == own  # relative: under the rootdir, the copy
    installed = tmp_path / "venv" / "site-packages" / "falsify" / "packs" / "serving" / "falsifiers"
    nodeid = "test_cancel_contract.py::test_a_budget_cancelled_run[x::y]"
    assert (
        target(nodeid, str(installed / "test_cancel_contract.py"), tree)
        == f"{installed / 'test_cancel_contract.py'}::test_a_budget_cancelled_run[x::y]"
    )
