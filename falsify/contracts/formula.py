"""The formula language: a small, total subset of Python expressions, parsed once with `ast`.

Contract text is data. Formulas are never passed to eval/exec: `parse` accepts only the node types below, and
`Formula.evaluate` walks the tree itself. There is no attribute access, no subscript of anything but a list or
string, no call beyond the allow-list, no comprehension, lambda or dunder name.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from falsify.errors import FormulaError

MAX_LENGTH = 2000  # characters; a formula is one line of logic
MAX_POW = 64  # largest exponent `**` accepts, so a formula cannot ask for a 10**10**9 integer
MAX_SEQ = 1_000_000  # largest list a formula may build (range, repetition)


def is_prefix(a: Any, b: Any) -> bool:
    """a is a prefix of b."""
    a, b = list(a), list(b)
    return len(a) <= len(b) and b[: len(a)] == a


def _range(*args: int) -> list[int]:
    r = range(*args)
    if len(r) > MAX_SEQ:
        raise FormulaError(f"range of {len(r)} items is over the {MAX_SEQ} limit")
    return list(r)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "len": len,
    "all": all,
    "any": any,
    "sum": sum,
    "range": _range,
    "is_prefix": is_prefix,
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call,
    ast.Constant, ast.Name, ast.Load, ast.List, ast.Tuple, ast.Subscript, ast.Slice,
    *_BINOPS, *_UNARY, *_COMPARE,
)  # fmt: skip

_DESCRIBE = {
    ast.Attribute: "attribute access",
    ast.Lambda: "a lambda",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.NamedExpr: "an assignment expression",
    ast.Starred: "star-unpacking",
    ast.Dict: "a dict literal",
    ast.Set: "a set literal",
    ast.JoinedStr: "an f-string",
    ast.Await: "await",
    ast.Yield: "yield",
}


@dataclass(frozen=True, slots=True)
class Formula:
    source: str
    tree: ast.Expression
    names: tuple[str, ...]  # free names in order of first appearance

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        missing = [n for n in self.names if n not in values]
        if missing:
            raise FormulaError(f"no value for {', '.join(missing)} in {self.source!r}")
        return _Eval(values).visit(self.tree.body)


@lru_cache(maxsize=4096)  # formulas repeat across contracts; a Formula is immutable
def parse(source: str) -> Formula:
    if not isinstance(source, str):
        raise FormulaError(f"formula must be a string, not {type(source).__name__}")
    if len(source) > MAX_LENGTH:
        raise FormulaError(f"formula is {len(source)} characters, over the {MAX_LENGTH} limit")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"syntax error at column {exc.offset}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            what = _DESCRIBE.get(type(node), type(node).__name__)
            raise FormulaError(
                f"{what} is not allowed in a formula (column {getattr(node, 'col_offset', 0) + 1})"
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise FormulaError(f"name {node.id!r} is not allowed (names starting with '_' are reserved)")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                callee = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise FormulaError(
                    f"call to {callee!r} is not allowed; formulas may call {', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords:
                raise FormulaError("keyword arguments are not allowed in a formula")
        if isinstance(node, ast.Constant) and not isinstance(
            node.value, int | float | str | bool | type(None)
        ):
            raise FormulaError(f"constant {node.value!r} is not allowed")
    # Free names: every Name that is not the callee of an allowed call.
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    free = sorted(
        (node.lineno, node.col_offset, node.id)
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and id(node) not in callees
    )
    names: list[str] = []
    for _, _, name in free:
        if name not in names:
            names.append(name)
    return Formula(source, tree, tuple(names))


class _Eval:
    def __init__(self, values: Mapping[str, Any]):
        self.values = values

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        return self.values[node.id]

    def visit_List(self, node: ast.List) -> Any:
        return [self.visit(e) for e in node.elts]

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        if isinstance(node.op, ast.And):
            result: Any = True
            for e in node.values:
                result = self.visit(e)
                if not result:
                    return result
            return result
        result = False
        for e in node.values:
            result = self.visit(e)
            if result:
                return result
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        return _UNARY[type(node.op)](self.visit(node.operand))

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, int | float) and abs(right) > MAX_POW:
            raise FormulaError(f"exponent {right} is over the {MAX_POW} limit")
        if isinstance(node.op, ast.Mult) and (
            isinstance(left, list | str | tuple) or isinstance(right, list | str | tuple)
        ):
            count = right if isinstance(left, list | str | tuple) else left
            seq = left if isinstance(left, list | str | tuple) else right
            if isinstance(count, int) and count * len(seq) > MAX_SEQ:
                raise FormulaError(f"repetition builds {count * len(seq)} items, over the {MAX_SEQ} limit")
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            return math.nan
        except TypeError as exc:
            raise FormulaError(f"{ast.unparse(node)}: {exc}") from None

    def visit_Compare(self, node: ast.Compare) -> Any:
        left = self.visit(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.visit(comparator)
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError as exc:
                raise FormulaError(f"{ast.unparse(node)}: {exc}") from None
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Call(self, node: ast.Call) -> Any:
        assert isinstance(node.func, ast.Name)
        args = [self.visit(a) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as exc:
            raise FormulaError(f"{ast.unparse(node)}: {exc}") from None

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        container = self.visit(node.value)
        if not isinstance(container, list | tuple | str):
            raise FormulaError(f"{ast.unparse(node)}: only lists and strings can be indexed")
        index = self.visit(node.slice)
        try:
            return container[index]
        except (IndexError, TypeError) as exc:
            raise FormulaError(f"{ast.unparse(node)}: {exc}") from None

    def visit_Slice(self, node: ast.Slice) -> Any:
        parts = [None if p is None else self.visit(p) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)
