"""While pytest runs, the helper modules beside the tests are importable under their bare names: pytest puts tests/
and tests/fuzz/ on sys.path (rootdir-relative "prepend" imports) and pyproject.toml's pythonpath adds the checkout
and tests/data/q4k/. A bare name another package looks up is then answered by our file. transformers 5 probes for
`kernels` (the Hub's kernels package) and imported tests/kernels.py instead: every HF oracle test failed in CI with
"cannot import name 'CUDAProperties' from 'kernels' (tests/kernels.py)". So a helper's name carries the prefix
`testkit_`, and none may be the top-level name of a distribution installed beside the tests. Static: files are
listed, never imported."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The folders whose modules are importable by bare name during a pytest run of this repo.
ON_PATH = [ROOT / "tests", ROOT / "tests" / "fuzz", ROOT / "tests" / "data" / "q4k"]
PREFIX = "testkit_"
# Run by path, never imported: golden.json's provenance names the script, so it keeps its name.
SCRIPTS = {ROOT / "tests" / "data" / "q4k" / "make_golden.py"}


def bare_names(folder: Path) -> dict[str, Path]:
    """The module names `import NAME` finds in folder: NAME.py files and NAME/__init__.py packages."""
    found = {p.stem: p for p in folder.glob("*.py")}
    found.update({p.parent.name: p for p in folder.glob("*/__init__.py")})
    return found


def helpers() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in ON_PATH:
        for name, path in bare_names(folder).items():
            if name == "conftest" or name.startswith("test_") or path in SCRIPTS:
                continue
            found[name] = path
    return found


def test_the_folders_on_the_path_hold_helpers() -> None:
    names = helpers()
    assert "testkit_gate_cli" in names and "testkit_q4k_cases" in names, sorted(names)


def test_every_helper_module_carries_the_prefix() -> None:
    bare = {
        name: str(path.relative_to(ROOT)) for name, path in helpers().items() if not name.startswith(PREFIX)
    }
    assert not bare, f"helper modules on pytest's path without the {PREFIX!r} prefix: {bare}"


def test_no_helper_shadows_an_installed_distribution() -> None:
    installed = set(importlib.metadata.packages_distributions())
    shadowing = sorted(set(helpers()) & installed)
    assert not shadowing, f"helper modules named like installed top-level modules: {shadowing}"


def test_the_scripts_exempted_are_still_there() -> None:
    assert all(p.is_file() for p in SCRIPTS), SCRIPTS
