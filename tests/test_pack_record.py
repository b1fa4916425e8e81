"""Installed packs and the pinned harness held to their distribution's RECORD (falsify/contracts/pack_record.py,
issue #48): a pack file edited, added, removed or linked in site-packages is refused by name before `packs`,
`lint`, `gate`, `mutants` or `evidence` use it; evidence records the check and `verify` repeats it; `falsify
wrapper` pins only an intact harness. The installs are scratch copies made here (the harness's files, a METADATA
and a RECORD of their sha256, as pip writes one), never the shared environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from falsify.contracts import pack_record

ROOT = Path(__file__).resolve().parent.parent
PACK = "falsify/packs/serving/falsifiers"


def install(site: Path) -> Path:
    """The running harness as pip installs a wheel of it into `site`: its files and a dist-info with a RECORD."""
    shutil.copytree(ROOT / "falsify", site / "falsify", ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "falsify_harness-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: falsify-harness\nVersion: 0.1.0\n")
    files = sorted(p for p in site.rglob("*") if p.is_file())
    lines = [f"{p.relative_to(site).as_posix()},{pack_record.record_hash(p.read_bytes())},{p.stat().st_size}\n" for p in files]  # fmt: skip
    (info / "RECORD").write_text("".join(lines) + f"{info.name}/RECORD,,\n")
    return site


def falsify(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "falsify.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return install(tmp_path / "site")


def named(proc: subprocess.CompletedProcess[str], *texts: str) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    for text in texts:
        assert text in out, out[-3000:]
    return out


REFUSED = "installed pack 'serving' does not match the RECORD of falsify-harness 0.1.0 ("


def test_an_intact_pack_is_recorded_checked_and_a_later_edit_fails_gate_and_verify(
    site: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert falsify(site, project, "init", ".").returncode == 0
    config = project / "pyproject.toml"
    config.write_text(config.read_text().replace('# packs = ["serving"]', 'packs = ["serving"]'))
    gate = falsify(site, project, "gate", "--out", "out")
    assert gate.returncode in (0, 1), named(gate)
    evidence = falsify(site, project, "evidence", "--out", "bundle", "--from", "out", "--no-mutants")
    named(evidence)
    statements = (project / "bundle" / "evidence.intoto.jsonl").read_text()
    checked = statements.count(
        '"falsify.record":"checked against the RECORD of falsify-harness 0.1.0: 12 files"'
    )
    # the pack's files as installed; not the bytecode its import wrote beside them (where PYTHONDONTWRITEBYTECODE
    # is unset, as under tox), which no RECORD lists
    installed = [p for p in (site / "falsify/packs/serving").rglob("*.*") if "__pycache__" not in p.parts]
    assert checked == len(installed), statements[:2000]
    assert falsify(site, project, "verify", "bundle").returncode == 0

    target = site / PACK / "test_lanes_host.py"
    target.write_text(target.read_text() + "\n# a falsifier edited after install\n")
    edited = f"{PACK}/test_lanes_host.py: sha256="
    gate = falsify(site, project, "gate", "--out", "out2")
    assert gate.returncode == 2 and not (project / "out2" / "results.json").exists(), named(gate)
    named(gate, REFUSED, edited)
    verify = falsify(site, project, "verify", "bundle")
    assert verify.returncode == 1, named(verify)
    named(verify, REFUSED, edited)


def edit(d: Path) -> None:
    (d / "test_lanes_host.py").write_text("def test_x():\n    pass\n")


def add(d: Path) -> None:
    (d / "conftest.py").write_text("collect_ignore = ['.']\n")


def remove(d: Path) -> None:
    (d / "test_lanes_host.py").unlink()


def link(d: Path) -> None:
    (d / "lane_probe.py").unlink()
    (d / "lane_probe.py").symlink_to(d / "__init__.py")


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (edit, "test_lanes_host.py: sha256="),
        (add, "conftest.py: not in RECORD (added after install)"),
        (remove, "test_lanes_host.py: in RECORD, missing"),
        (link, "lane_probe.py: not a regular file"),
    ],
    ids=["edited", "added", "removed", "linked"],
)
def test_a_tampered_pack_is_refused_by_name_before_any_command_reads_it(
    site: Path, tmp_path: Path, tamper: Callable[[Path], None], why: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert falsify(site, project, "init", ".").returncode == 0
    assert falsify(site, project, "packs").returncode == 0
    tamper(site / PACK)
    for args in (("packs",), ("lint", "--pack", "serving"), ("mutants", "--pack", "serving")):
        proc = falsify(site, project, *args)
        assert proc.returncode == 2, (args, named(proc))
        named(proc, REFUSED, f"{PACK}/{why}")


def test_the_wrapper_pins_only_an_intact_harness(site: Path, tmp_path: Path) -> None:
    assert falsify(site, tmp_path, "wrapper", ".").returncode == 0
    (site / "falsify" / "harness" / "gate.py").write_text("# the gate, edited after install\n")
    proc = falsify(site, tmp_path, "wrapper", ".")
    assert proc.returncode == 2, named(proc)
    named(
        proc,
        "the installed harness does not match the RECORD of falsify-harness 0.1.0",
        "falsify/harness/gate.py",
    )


def test_a_harness_not_installed_from_a_wheel_is_used_as_it_is_and_says_so() -> None:
    """This checkout (no RECORD lists its files): nothing to check against, and the record says why."""
    got = pack_record.check("serving")
    assert got.files == 0 and got.record.startswith("not checked: "), got
