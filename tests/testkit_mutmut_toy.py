"""The toy project (tests/fixtures/mutants/toy) copied and set up for a `falsify mutmut` run: its pyproject gets a
[tool.falsify.mutmut] table over toy/loop.py (tests/check_toy.py), and loop.py a function no test calls, so its
mutants survive with "no tests" and no baseline lists them. Used by tests/test_mutmut_runner.py (mutmut's own run)
and tests/test_scale.py (the same run over Ray)."""

from __future__ import annotations

import shutil
from pathlib import Path

TOY = Path(__file__).parent / "fixtures" / "mutants" / "toy"
UNCOVERED = '    return "tokens: " + str(n + 1)'  # the line no test reaches


def copy_toy(root: Path) -> Path:
    """A copy of the toy project at `root`."""
    shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def set_up_mutmut(root: Path, settings: str) -> int:
    """Configure the toy project at `root` for mutmut (`settings`: further TOML lines of the table, such as
    `timeout = 900`) and add the uncovered function; returns the uncovered line's number in toy/loop.py."""
    with (root / "pyproject.toml").open("a", encoding="utf-8") as f:
        f.write(
            '\n[tool.falsify.mutmut]\nkill_rate_floor = 0\npaths = ["toy/loop.py"]\n'
            f'tests = ["tests/check_toy.py"]\n{settings}'
        )
    loop = root / "toy" / "loop.py"
    with loop.open("a", encoding="utf-8") as f:
        f.write(f"\n\ndef describe(n: int) -> str:\n{UNCOVERED}\n")
    return loop.read_text(encoding="utf-8").splitlines().index(UNCOVERED) + 1
