"""Lint rule `cannot-fail`: a prediction no observation could falsify is not a prediction.

A formula with no free name is a constant. Otherwise it is evaluated at the corners of its inputs: for each name,
the values its declared type and range make likely to break a claim (0, +-1, the declared min and max, every
constant in the formula and its neighbours, empty and one-item lists, ...). If the formula is true at every corner
(up to MAX_POINTS of them, a fixed pseudo-random sample when the product is larger), lint reports that it cannot
fail. A corner where the formula raises an error or gives a non-bool counts as "could fail" (the check would
report an ERROR there), so the rule never guesses for the contract author.
"""

from __future__ import annotations

import ast
import itertools
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from falsify.contracts.formula import Formula
from falsify.errors import FormulaError

MAX_POINTS = 512  # corner points evaluated per formula
BUDGET = 20_000  # work units per corner evaluation; a formula that needs more is not judged
FILE_BUDGET = 3_000_000  # work units for every corner check of one file


def corners_of(formula: Formula, decls: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    ints: set[int] = set()
    floats: set[float] = {0.0, 1.0, -1.0, 0.5, 1e-9, 1e9, -1e9}
    strs: set[str] = {"", "x"}
    nodes = list(ast.walk(formula.tree.body))  # parents before children
    named: set[int] = set()  # sub-expressions that name something or call something
    for node in reversed(nodes):
        if isinstance(node, ast.Name | ast.Call) or any(id(c) in named for c in ast.iter_child_nodes(node)):
            named.add(id(node))
    for node in nodes:
        v = None if id(node) in named else _constant(node)
        if v is not None:
            if isinstance(v, bool) or v is None:
                continue
            if isinstance(v, int):
                ints |= {v - 1, v, v + 1, -v}
            elif isinstance(v, float) and math.isfinite(v):
                floats |= {v, -v, v * 2, v / 2, v + 1, v - 1, v * (1 + 1e-9), v * (1 - 1e-9)}
            elif isinstance(v, str) and len(v) < 200:
                strs |= {v, v + "x"}
    # The formula's own constants and their neighbours first, then the usual suspects; at most 24.
    int_list = sorted(ints, key=lambda x: (abs(x), x))[:18]
    int_list += [v for v in (0, 1, -1, 2, 3, 7, 2**31) if v not in int_list]
    lists: list[Any] = [[], [0], [1], [0, 1], [1, 0], [1, 1], [2, 1, 0], [0.5], ["x"]]
    lists += [[v] for v in int_list[:6]] + [[v] for v in sorted(strs)[:4]]
    out: dict[str, list[Any]] = {}
    for name in formula.names:
        decl = decls.get(name, {})
        kind = decl.get("type")
        values = decl.get("values")
        if isinstance(values, list) and values:
            out[name] = list(values)
            continue
        low, high = decl.get("min"), decl.get("max")
        if kind == "int":
            pool = set(int_list)
            for b in (low, high):
                if isinstance(b, int | float) and math.isfinite(b):
                    pool |= {int(b), int(b) - 1, int(b) + 1}
            finite = [b for b in (low, high) if isinstance(b, int | float) and math.isfinite(b)]
            if len(finite) == 2:
                pool |= {int((finite[0] + finite[1]) // 2)}
            out[name] = sorted(v for v in pool if _within(v, low, high)) or sorted(pool)
        elif kind == "float":
            pool_f = set(floats) | {float(x) for x in int_list}
            for b in (low, high):
                if isinstance(b, int | float) and math.isfinite(b):
                    pool_f |= {float(b), float(b) - 1e-9, float(b) + 1e-9}
            out[name] = sorted(v for v in pool_f if _within(v, low, high)) or sorted(pool_f)
        elif kind == "bool":
            out[name] = [False, True]
        elif kind == "str":
            out[name] = sorted(strs)
        elif kind == "list":
            out[name] = lists
        else:
            out[name] = [*int_list, *sorted(floats), False, True, *sorted(strs), *lists, None]
    return out


class Budget:
    """Work units the corner checks of one file may spend in all (a 1 MiB file of tautologies stays a few seconds)."""

    def __init__(self, units: int = FILE_BUDGET) -> None:
        self.left = units


def cannot_fail(
    formula: Formula, decls: Mapping[str, Mapping[str, Any]], budget: Budget | None = None
) -> str | None:
    """Why the formula cannot fail, or None when some corner falsifies it.

    Raises NotJudged when the file's budget runs out first."""
    budget = budget or Budget()
    if not formula.names:
        value = _value(formula, {}, budget)
        if value is True:
            return "the formula is a constant (true whatever is observed): it names no observable"
        if value is False:
            return "the formula is a constant false: no observation can make it hold"
        return None
    corners = corners_of(formula, decls)
    names = list(corners)
    total = math.prod(len(corners[n]) for n in names)
    points: Iterable[tuple[Any, ...]]
    if total <= MAX_POINTS:
        points = itertools.product(*(corners[n] for n in names))
    else:
        rng = random.Random(0)
        points = (tuple(rng.choice(corners[n]) for n in names) for _ in range(MAX_POINTS))
    count = 0
    for point in points:
        count += 1
        if _value(formula, dict(zip(names, point, strict=True)), budget) is not True:
            return None
    return (
        f"true at all {count} corner points of its inputs ({', '.join(names)}): no observation can falsify it"
    )


def _within(v: float, low: Any, high: Any) -> bool:
    """Inside the declared range: a domain parameter takes no value outside it."""
    if isinstance(low, int | float) and v < low:
        return False
    return not (isinstance(high, int | float) and v > high)


def _constant(node: ast.AST) -> Any:
    """The value of a sub-expression that names nothing (`2**31 + 1`), so its neighbours become corners."""
    if isinstance(node, ast.Constant):
        return node.value
    if not isinstance(node, ast.expr):
        return None
    try:
        return Formula("", ast.Expression(node), ()).evaluate({}, budget=BUDGET)
    except FormulaError:
        return None


class NotJudged(Exception):
    """The file's corner budget ran out before this formula was judged."""


def _value(formula: Formula, values: dict[str, Any], budget: Budget) -> Any:
    if budget.left <= 0:
        raise NotJudged(f"not judged: the file's {FILE_BUDGET:,} work units for corner checks are spent")
    meter: list[int] = []
    allowed = min(BUDGET, budget.left)
    try:
        return formula.evaluate(values, budget=allowed, meter=meter)
    except FormulaError:
        if allowed < BUDGET and sum(meter) >= allowed:  # stopped by the file's budget, not by the formula
            raise NotJudged(
                f"not judged: the file's {FILE_BUDGET:,} work units for corner checks are spent"
            ) from None
        return None
    finally:
        budget.left -= sum(meter) + 1
