"""The package's folders follow the data flow, and nothing below imports from above (falsify/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FALSIFY = Path(__file__).resolve().parent.parent / "falsify"

# Lowest first. A module may import from its own layer and the layers before it.
LAYERS = [
    ("falsify.errors", "falsify.project", "falsify.table", "falsify.boundedjson", "falsify.safefile"),
    ("falsify.contracts",),
    ("falsify.engines",),
    ("falsify.harness", "falsify.packs"),  # packs: contracts + falsifiers that run under the harness
    ("falsify.mutation",),
    ("falsify.evidence",),
    ("falsify.cli", "falsify.init"),
]


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(FALSIFY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("falsify")]


MODULES = sorted(p for p in FALSIFY.rglob("*.py") if p.name != "__init__.py" or p.parent != FALSIFY)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(FALSIFY.parent)))
def test_imports_point_down(path: Path) -> None:
    name = module_name(path)
    own = layer_of(name)
    assert own is not None, f"{name} belongs to no layer: add it to LAYERS and to falsify/__init__.py's map"
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    upward = []
    for line, target in imported(ast.parse(path.read_text(encoding="utf-8")), package):
        rank = layer_of(target)
        if rank is not None and rank > own:
            upward.append(f"{path.relative_to(FALSIFY.parent)}:{line} imports {target} (a layer above)")
    assert not upward, "\n".join(upward)


def test_every_package_says_what_it_owns() -> None:
    for init in sorted(FALSIFY.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(FALSIFY.parent)} has no docstring saying what the package owns"
