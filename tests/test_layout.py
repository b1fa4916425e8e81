"""The package's folders follow the data flow, and nothing below imports from above (falsify/__init__.py); the
harness never imports the reference engine (its own distribution, packaging/reference), which uses only the
harness's engine-side instruments; no import circles; no module over MAX_LINES lines. All static: the files are parsed, never imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FALSIFY = Path(__file__).resolve().parent.parent / "falsify"

# Lowest first. A module may import from its own layer and the layers before it.
LAYERS = [
    (
        "falsify.errors",
        "falsify.project",
        "falsify.table",
        "falsify.untrusted",
        "falsify.subcommand",
    ),
    ("falsify.contracts",),
    ("falsify.engines",),
    ("falsify.harness", "falsify.packs"),  # packs: contracts + falsifiers that run under the harness
    ("falsify.mutation",),
    ("falsify.evidence",),
    ("falsify.cli", "falsify.init", "falsify.wrapper"),
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
    """(line, name) of every falsify name imported anywhere in the module (function bodies included)."""
    return [(line, name) for line, name in imports(tree, package) if name.startswith("falsify")]


def imports(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, name) of every import: the module, and for `from m import a` also `m.a`."""
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
    return found


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


ROOT = FALSIFY.parent


def package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def test_the_harness_never_imports_the_reference_engine() -> None:
    """reference/ is its own distribution that the harness does not depend on. An engine named at run time
    (`--engine reference`, found by importlib from that string) is how the harness reaches it."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in MODULES
        for line, target in imports(ast.parse(path.read_text(encoding="utf-8")), package_of(path))
        if target == "reference" or target.startswith("reference.")
    ]
    assert not found, "\n".join(found)


# What the reference engine may use of the harness (issue #29: the harness owns its instruments, the reference uses
# them): the engine-side instruments, whose distribution packaging/reference declares a dependency on. Nothing else:
# the engine must not reach into the harness that judges it. (calls: a generate call's argument checks, the same
# refusals for the harness's own sessions and the reference engine's; lanes: what every lane host derives from its
# rounds, `run`, `tokens` and `decode_gaps`.) And one guard of the untrusted-input layer, from the same distribution
# (issue #50): untrusted.deadline, the reader by one deadline through which the harness's HTTP client reads an
# engine's replies and the reference's HTTP servers read their clients' requests.
INSTRUMENTS = {
    "falsify.engines.calls",
    "falsify.engines.cancel",
    "falsify.engines.lanes",
    "falsify.engines.prefill",
    "falsify.engines.tokens",
    "falsify.untrusted.deadline",
}


def beyond_instruments(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every falsify import in a reference module that is not one of the INSTRUMENTS."""
    return [
        (line, target)
        for line, target in imports(tree, "reference")
        if (target == "falsify" or target.startswith("falsify."))
        and target not in INSTRUMENTS
        and target.rpartition(".")[0] not in INSTRUMENTS
    ]


def test_beyond_instruments_finds_a_harness_import_and_passes_an_instrument() -> None:
    tree = ast.parse(
        "from falsify.harness.checks import check\nfrom falsify.engines.cancel import HarnessCancel\n"
    )
    assert beyond_instruments(tree) == [(1, "falsify.harness.checks"), (1, "falsify.harness.checks.check")]


def test_the_reference_engine_uses_only_the_harness_instruments() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / "reference").rglob("*.py"))
        for line, target in beyond_instruments(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "\n".join(found)
    declared = (ROOT / "packaging" / "reference" / "pyproject.toml").read_text(encoding="utf-8")
    assert '"falsify-harness"' in declared, (
        "packaging/reference must declare its dependency on falsify-harness"
    )


def import_graph() -> dict[str, set[str]]:
    """falsify module -> the falsify modules it imports (anywhere in it): `from m import a` is an edge to m.a when
    that is a module, else to m."""
    names = {module_name(p): p for p in MODULES}
    names["falsify"] = FALSIFY / "__init__.py"
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for _, target in imported(ast.parse(path.read_text(encoding="utf-8")), package):
            while target and target not in names:  # an attribute of a module: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    # `from m import a` where m.a is a module also names m itself: keep only the most specific edge
    return {n: {t for t in ts if not any(o.startswith(t + ".") for o in ts)} for n, ts in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_circle_and_nothing_in_a_line() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circles_in_falsify() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in found
    )


MAX_LINES = 600  # the hard ceiling (issue 29); STYLE.md: past ~400 lines a module is usually two concepts


@pytest.mark.parametrize("folder", ["falsify", "reference"])
def test_no_module_over_the_line_ceiling(folder: str) -> None:
    over = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not over, f"modules over {MAX_LINES} lines (split each by concern): " + ", ".join(over)


TOP_LEVEL_MODULES = 8  # issue #50 (the wave-2 layout's aim): a concept with a second module is a package


def test_the_top_level_holds_few_modules() -> None:
    modules = sorted(p.name for p in FALSIFY.glob("*.py"))  # __init__.py counts, as the issue counts it
    assert len(modules) <= TOP_LEVEL_MODULES, f"{len(modules)} modules at falsify/'s top level: {modules}"
