"""The harness wheel as a user installs it: built from a copy of this checkout's distribution files, so no build/
is left in the tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the wheel is built from: the harness distribution's own files (pyproject's package list does the rest).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "falsify")


def build_harness_wheel(base: Path) -> Path:
    """The falsify-harness wheel, built in BASE/dist from a copy of SOURCES in BASE/src (pip's build isolation
    fetches setuptools from the package index, as `tox` itself does)."""
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(src)],
        cwd=base,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, (
        f"building the wheel failed:\n{built.stdout[-2000:]}\n{built.stderr[-2000:]}"
    )
    (wheel,) = (base / "dist").glob("falsify_harness-*.whl")
    return wheel
