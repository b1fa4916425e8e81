"""The static cost bound lint checks before a formula ever runs (docs/hardening.md).

An abstract evaluation over the syntax tree with each name's declared type (and, for a domain parameter, its
min/max/values). Each sub-expression gets an upper bound on its magnitude (as log2 of |value|), on its size
(items, as `c + k*n` where n is the size of the inputs) and on how many times a power can amplify an observed
integer's bits. Lint refuses a formula when:

- an exponent is not bounded by a constant or a domain parameter's declared range, or exceeds MAX_POW;
- a power or product can reach more than MAX_BITS bits, or chained powers amplify an observed integer more than
  MAX_POW-fold (`(x**64)**64`);
- a list or string it builds can exceed MAX_SIZE items given its constants and declared ranges;
- its total work can exceed MAX_WORK + MAX_LINEAR x (size of the inputs);
- it orders (`<`, `<=`, `>`, `>=`) something declared as a str, list or bool.

The evaluator enforces the same limits at check time; this bound makes lint refuse what would fail there.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from falsify.contracts.formula import (
    _ORDER,
    MAX_BITS,
    MAX_LINEAR,
    MAX_POW,
    MAX_SIZE,
    MAX_WORK,
    Formula,
    _src,
)

NUMBERS = frozenset({"int", "float"})
ALL = frozenset({"int", "float", "bool", "str", "list", "none"})
INF = math.inf


@dataclass(frozen=True, slots=True)
class _A:
    """What is known about one sub-expression's value."""

    kinds: frozenset[str]
    log2: float = INF  # log2 of an upper bound on |value| (numbers); INF = unknown
    c: float = 1.0  # size <= c + k * n
    k: float = 0.0
    amp: float = 1.0  # bits of an integer result <= amp x bits of the largest observed integer
    static: bool = False  # the bound comes from constants and declared ranges only


class CostError(Exception):
    pass


def _log2(x: float) -> float:
    x = abs(x)
    return -INF if x == 0 else math.log2(x) if x != INF else INF


def declared(decl: Mapping[str, Any]) -> _A:
    """The abstract value of a name from its declaration (an observable or a domain parameter)."""
    kind = decl.get("type")
    kinds = frozenset({kind}) if kind in ALL else ALL
    if kind in ("list", "str"):
        return _A(kinds, c=0.0, k=1.0)
    bounds = [v for v in (decl.get("min"), decl.get("max")) if isinstance(v, int | float)]
    values = decl.get("values")
    if isinstance(values, list) and values and all(isinstance(v, int | float) for v in values):
        return _A(kinds, log2=max(_log2(v) for v in values), static=True)
    if len(bounds) == 2 and all(math.isfinite(b) for b in bounds):
        return _A(kinds, log2=max(_log2(b) for b in bounds), static=True)
    return _A(kinds)


def check_cost(formula: Formula, decls: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every reason the formula's cost is not bounded; [] when it is."""
    walker = _Cost({name: declared(decls.get(name, {})) for name in formula.names})
    try:
        walker.visit(formula.tree.body)
    except CostError as exc:
        return [str(exc)]
    problems = []
    if walker.work_c > MAX_WORK:
        problems.append(f"can do {walker.work_c:.3g} units of work, over the {MAX_WORK:.3g} limit")
    if walker.work_k > MAX_LINEAR:
        problems.append(f"touches its inputs {walker.work_k:.0f} times, over the {MAX_LINEAR} limit")
    return problems


def result_kinds(formula: Formula, decls: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """What the formula can give (int, float, bool, str, list, none), from the declared types."""
    try:
        return (
            _Cost({name: declared(decls.get(name, {})) for name in formula.names})
            .visit(formula.tree.body)
            .kinds
        )
    except CostError:
        return ALL


class _Cost:
    def __init__(self, names: dict[str, _A]):
        self.names = names
        self.work_c = 0.0
        self.work_k = 0.0

    def work(self, *values: _A) -> None:
        for v in values:
            self.work_c += min(v.c, MAX_SIZE + 1)
            self.work_k += v.k

    def visit(self, node: ast.AST) -> _A:
        self.work_c += 1
        return getattr(self, "visit_" + type(node).__name__)(node)

    def visit_Constant(self, node: ast.Constant) -> _A:
        v = node.value
        if isinstance(v, bool):
            return _A(frozenset({"bool"}), log2=0.0, static=True)
        if isinstance(v, int | float):
            return _A(frozenset({"int" if isinstance(v, int) else "float"}), log2=_log2(v), static=True)
        if isinstance(v, str):
            return _A(frozenset({"str"}), c=len(v) + 1.0, static=True)
        return _A(frozenset({"none"}), static=True)

    def visit_Name(self, node: ast.Name) -> _A:
        return self.names.get(node.id, _A(ALL))

    def _sequence(self, node: ast.List | ast.Tuple) -> _A:
        items = [self.visit(e) for e in node.elts]
        c = 1.0 + sum(i.c for i in items)
        a = _A(frozenset({"list"}), c=c, k=sum(i.k for i in items), static=all(i.static for i in items))
        self.work(a)
        return a

    visit_List = visit_Tuple = _sequence

    def visit_BoolOp(self, node: ast.BoolOp) -> _A:
        return _join([self.visit(v) for v in node.values])

    def visit_IfExp(self, node: ast.IfExp) -> _A:
        self.visit(node.test)
        return _join([self.visit(node.body), self.visit(node.orelse)])

    def visit_UnaryOp(self, node: ast.UnaryOp) -> _A:
        v = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return _A(frozenset({"bool"}), log2=0.0, static=True)
        return v

    def visit_BinOp(self, node: ast.BinOp) -> _A:
        a, b = self.visit(node.left), self.visit(node.right)
        op = node.op
        seqs = frozenset({"list", "str"})
        if isinstance(op, ast.Mod) and a.kinds == {"str"}:
            raise CostError(f"{_src(node)}: `%` string formatting is not allowed")
        if isinstance(op, ast.Add) and a.kinds <= seqs and b.kinds <= seqs:
            return self.built(node, a.c + b.c - 1, a.k + b.k, a.static and b.static)
        if isinstance(op, ast.Mult) and (a.kinds <= seqs or b.kinds <= seqs):
            seq, count = (a, b) if a.kinds <= seqs else (b, a)
            n = 2.0**count.log2 if count.log2 < 1024 else INF
            return self.built(node, 1 + (seq.c - 1) * n, seq.k * n, seq.static and count.static)
        if isinstance(op, ast.Pow):
            return self.power(node, a, b)
        if isinstance(op, ast.Mult):
            log2 = a.log2 + b.log2
            if log2 > MAX_BITS and a.static and b.static:
                raise CostError(f"{_src(node)}: can reach 2**{log2:.0f}, over the {MAX_BITS}-bit limit")
            return _A(a.kinds | b.kinds, log2=log2, amp=a.amp + b.amp, static=a.static and b.static)
        if isinstance(op, ast.Add | ast.Sub):
            log2 = max(a.log2, b.log2) + 1
            return _A(a.kinds | b.kinds, log2=log2, amp=max(a.amp, b.amp), static=a.static and b.static)
        if isinstance(op, ast.Mod):
            return _A(a.kinds | b.kinds, log2=b.log2, amp=b.amp, static=b.static)
        # Div, FloorDiv: a quotient can be as large as the dividend over the smallest divisor
        return _A(a.kinds | b.kinds | {"float"}, amp=a.amp)

    def power(self, node: ast.BinOp, base: _A, exponent: _A) -> _A:
        if not exponent.static or exponent.log2 == INF:
            raise CostError(
                f"{_src(node)}: the exponent must be bounded by constants or a domain parameter's min/max "
                f"(at most {MAX_POW})"
            )
        e = 2.0**exponent.log2 if exponent.log2 > -INF else 0.0
        if e > MAX_POW:
            raise CostError(f"{_src(node)}: exponent can reach {e:.3g}, over the {MAX_POW} limit")
        e = max(e, 1.0)
        log2 = base.log2 * e if base.log2 > 0 else base.log2
        if base.static and log2 > MAX_BITS:
            raise CostError(f"{_src(node)}: can reach 2**{log2:.0f}, over the {MAX_BITS}-bit limit")
        amp = base.amp * e
        if not base.static and "int" in base.kinds and amp > MAX_POW:
            raise CostError(
                f"{_src(node)}: powers amplify an observed integer {amp:.0f}-fold in bits, over {MAX_POW}"
            )
        return _A(base.kinds | exponent.kinds, log2=log2, amp=amp, static=base.static)

    def built(self, node: ast.AST, c: float, k: float, static: bool) -> _A:
        if c > MAX_SIZE + 1 and static:
            raise CostError(f"{_src(node)}: can build {c:.3g} items, over the {MAX_SIZE} limit")
        # Not static: the evaluator stops a value at MAX_SIZE items, so that is its bound.
        a = _A(frozenset({"list", "str"}), c=min(c, MAX_SIZE + 1), k=min(k, MAX_LINEAR + 1.0), static=static)
        self.work(a)
        return a

    def visit_Compare(self, node: ast.Compare) -> _A:
        sides = [self.visit(node.left), *(self.visit(c) for c in node.comparators)]
        for i, op in enumerate(node.ops):
            pair = sides[i], sides[i + 1]
            if isinstance(op, _ORDER):
                for side, expr in zip(pair, (node.left, *node.comparators)[i : i + 2], strict=True):
                    if not side.kinds & NUMBERS:
                        raise CostError(
                            f"{_src(node)}: orders {_src(expr)}, declared {'/'.join(sorted(side.kinds))}; "
                            "ordering compares numbers only"
                        )
            self.work(*pair)
        return _A(frozenset({"bool"}), log2=0.0)

    def visit_Call(self, node: ast.Call) -> _A:
        assert isinstance(node.func, ast.Name)
        args = [self.visit(a) for a in node.args]
        self.work(*args)
        name = node.func.id
        if name == "range":
            bound = 1 + sum(2.0**a.log2 if a.log2 < 1024 else INF for a in args[:2])
            return self.built(node, bound, 0.0, all(a.static for a in args))
        if name == "len":
            n = args[0].c + (INF if args[0].k else 0.0)
            return _A(frozenset({"int"}), log2=_log2(n), static=args[0].static)
        if name in ("all", "any", "is_prefix"):
            return _A(frozenset({"bool"}), log2=0.0)
        if name == "abs":
            return args[0]
        if name == "sum":
            return _A(NUMBERS, log2=INF, amp=1.0)
        # min, max: one of their items
        if len(args) > 1:
            return _join(args)
        return _A(ALL - {"list", "str"}, c=1.0, k=0.0)

    def visit_Subscript(self, node: ast.Subscript) -> _A:
        container = self.visit(node.value)
        self.visit(node.slice)
        if isinstance(node.slice, ast.Slice):
            self.work(container)
            return container
        return _A(ALL, c=container.c, k=container.k)

    def visit_Slice(self, node: ast.Slice) -> _A:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.visit(part)
        return _A(frozenset({"int"}))


def _join(values: list[_A]) -> _A:
    kinds = frozenset().union(*(v.kinds for v in values))
    return _A(
        kinds,
        log2=max(v.log2 for v in values),
        c=max(v.c for v in values),
        k=max(v.k for v in values),
        amp=max(v.amp for v in values),
        static=all(v.static for v in values),
    )
