"""The formula language: a small, total subset of Python expressions, parsed once with `ast`.

Contract text is data. Formulas are never passed to eval/exec: `parse` accepts only the node types below, and
`Formula.evaluate` walks the tree itself. There is no attribute access, no subscript of anything but a list or
string, no call beyond the allow-list, no comprehension, lambda or dunder name.

Evaluation is total and bounded (docs/hardening.md): every value a formula touches is a number, bool, string,
None or list of those; no value holds more than MAX_SIZE items, no integer more than MAX_BITS bits; each step is
charged to a work budget; and every failure is a FormulaError naming the sub-expression, never a raw
RecursionError/OverflowError/ValueError. Types do not mix: ordering takes two numbers (never a bool, a string or a
list), arithmetic takes numbers, `%` never formats a string, and division by zero is an error, not NaN.
The static cost bound that lint checks before a formula ever runs is in `cost.py`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from falsify.errors import FormulaError

MAX_LENGTH = 2000  # characters; a formula is one line of logic
MAX_DEPTH = 40  # nesting of the syntax tree; a 1,000-term `+` chain is 1,000 deep and is refused at parse
MAX_NODES = 600  # syntax-tree nodes
MAX_POW = 64  # largest exponent `**` accepts
MAX_BITS = 4096  # largest integer (in bits) a formula may hold, observed or computed
MAX_SIZE = 1_000_000  # largest value (items, counted through nested lists; characters of a string)
MAX_WORK = (
    10_000_000  # work units (items touched) one evaluation may spend beyond MAX_LINEAR x its inputs' size
)
MAX_LINEAR = 64  # how many times a formula may touch the whole of its inputs
MAX_SEQ = MAX_SIZE  # the old name

_NUMBER = (int, float)


def is_prefix(a: Any, b: Any) -> bool:
    """a is a prefix of b."""
    a, b = list(a), list(b)
    return len(a) <= len(b) and b[: len(a)] == a


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "len": len,
    "all": all,
    "any": any,
    "sum": sum,
    "range": range,
    "is_prefix": is_prefix,
}
ARITY = {"abs": (1, 1), "len": (1, 1), "all": (1, 1), "any": (1, 1), "sum": (1, 1), "is_prefix": (2, 2)}
ARITY |= {"min": (1, 64), "max": (1, 64), "range": (1, 3)}

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_UNARY = (ast.USub, ast.UAdd, ast.Not)
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_COMPARE = (ast.Eq, ast.NotEq, *_ORDER, ast.In, ast.NotIn)
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
    ast.LShift: "`<<`",
    ast.RShift: "`>>`",
    ast.BitAnd: "`&`",
    ast.BitOr: "`|`",
    ast.BitXor: "`^`",
    ast.Invert: "`~`",
    ast.MatMult: "`@`",
    ast.Is: "`is`",
    ast.IsNot: "`is not`",
}


@dataclass(frozen=True, slots=True)
class Formula:
    source: str
    tree: ast.Expression
    names: tuple[str, ...]  # free names in order of first appearance

    def evaluate(
        self, values: Mapping[str, Any], budget: int | None = None, meter: list[int] | None = None
    ) -> Any:
        """The formula's value on `values`; FormulaError for anything else (never another exception).

        `budget`: work units beyond MAX_LINEAR x the inputs' size (default MAX_WORK). `meter`: the units this
        evaluation spent are appended to it, whatever the outcome."""
        missing = [n for n in self.names if n not in values]
        if missing:
            raise FormulaError(f"no value for {', '.join(missing)} in {self.source!r}")
        run = _Eval(values, MAX_WORK if budget is None else budget)
        try:
            return self._run(run)
        finally:
            if meter is not None:
                meter.append(run.spent)

    def _run(self, run: _Eval) -> Any:
        try:
            for name in self.names:
                run.load(name)
            run.left += MAX_LINEAR * run.input_size
            return run.visit(self.tree.body)
        except FormulaError:
            raise
        except RecursionError:
            raise FormulaError(f"{self.source!r}: nested too deep to evaluate") from None
        except MemoryError:
            raise FormulaError(f"{self.source!r}: out of memory") from None
        except (ArithmeticError, ValueError, TypeError, IndexError, KeyError) as exc:
            raise FormulaError(f"{self.source!r}: {type(exc).__name__}: {exc}") from None


@lru_cache(maxsize=4096)  # formulas repeat across contracts; a Formula is immutable
def parse(source: str) -> Formula:
    if not isinstance(source, str):
        raise FormulaError(f"formula must be a string, not {type(source).__name__}")
    if len(source) > MAX_LENGTH:
        raise FormulaError(f"formula is {len(source)} characters, over the {MAX_LENGTH} limit")
    if "\x00" in source:
        raise FormulaError("formula contains a NUL character")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"syntax error at column {exc.offset}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise FormulaError(f"formula is nested too deep to parse (limit {MAX_DEPTH})") from None
    # Depth and size first, iteratively: everything after this (and the evaluator) may recurse.
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise FormulaError(
                f"formula nests deeper than {MAX_DEPTH} levels (column {getattr(node, 'col_offset', 0) + 1}); "
                "split a long chain with parentheses or simplify it"
            )
        if count > MAX_NODES:
            raise FormulaError(f"formula has more than {MAX_NODES} syntax nodes")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
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
                callee = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
                raise FormulaError(
                    f"call to {callee!r} is not allowed; formulas may call {', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords:
                raise FormulaError("keyword arguments are not allowed in a formula")
            low, high = ARITY[node.func.id]
            if not low <= len(node.args) <= high:
                raise FormulaError(f"{node.func.id}() takes {low}..{high} arguments, not {len(node.args)}")
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, int | float | str | bool | type(None)):
                raise FormulaError(f"constant {type(node.value).__name__} is not allowed")
            if isinstance(node.value, int) and node.value.bit_length() > MAX_BITS:
                raise FormulaError(f"integer constant over {MAX_BITS} bits")
            if isinstance(node.value, float) and not math.isfinite(node.value):
                raise FormulaError("float constant overflows to inf")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            raise FormulaError("`%` string formatting is not allowed in a formula")
        if isinstance(node, ast.Compare) and any(isinstance(op, _ORDER) for op in node.ops):
            for side in (node.left, *node.comparators):
                if _is_str(side) or isinstance(side, ast.List | ast.Tuple):
                    raise FormulaError(
                        f"ordering compares numbers only, not {_src(side)} (column {side.col_offset + 1})"
                    )
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


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _src(node: ast.AST, limit: int = 80) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "list"
    if value is None:
        return "None"
    return type(value).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


class _Eval:
    def __init__(self, values: Mapping[str, Any], budget: int):
        self.values = values
        self.left = budget
        self.spent = 0
        self.input_size = 0
        self.loaded: dict[str, Any] = {}
        self._sizes: dict[int, tuple[Any, int]] = {}  # id -> (value kept alive, deep size)

    def charge(self, units: int) -> None:
        self.left -= units
        self.spent += units
        if self.left < 0:
            raise FormulaError(
                "evaluation budget exhausted (the formula does more work than its inputs justify; "
                "see docs/hardening.md)"
            )

    def size(self, value: Any) -> int:
        """Deep size: items through nested lists, characters of a string, 1 for anything else."""
        if isinstance(value, str):
            return len(value) + 1
        if not isinstance(value, list | tuple):
            return 1
        known = self._sizes.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        total, stack = 0, [value]
        while stack:
            item = stack.pop()
            total += 1
            if isinstance(item, list | tuple):
                if len(stack) + len(item) + total > MAX_SIZE + 1:
                    total = MAX_SIZE + 2
                    break
                stack.extend(item)
            elif isinstance(item, str):
                total += len(item)
            if total > MAX_SIZE + 1:
                break
        self._sizes[id(value)] = (value, total)
        return total

    def load(self, name: str) -> Any:
        if name in self.loaded:
            return self.loaded[name]
        value = self.values[name]
        stack = [value]
        seen = 0
        while stack:
            item = stack.pop()
            seen += 1
            if seen > MAX_SIZE + 1:
                raise FormulaError(f"value of {name} holds more than {MAX_SIZE} items")
            kind = type(item)
            # The plain types first, by exact type (a check's values are lists of numbers, ~6,000 checks a gate
            # run); a subclass takes the isinstance chain below, as before.
            if kind is float or kind is bool or item is None:
                continue
            if kind is int and item.bit_length() <= MAX_BITS:
                continue
            if kind is list:
                stack.extend(item)
                continue
            if isinstance(item, list | tuple):
                stack.extend(item)
            elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > MAX_BITS:
                raise FormulaError(f"value of {name} holds an integer over {MAX_BITS} bits")
            elif not isinstance(item, int | float | str | bool | type(None)):
                raise FormulaError(
                    f"value of {name} holds a {type(item).__name__}; formulas take numbers, bools, "
                    "strings, None and lists of them"
                )
            elif isinstance(item, str) and len(item) > MAX_SIZE:
                raise FormulaError(f"value of {name} holds a string over {MAX_SIZE} characters")
        self.input_size += self.size(value)
        self.loaded[name] = value
        return value

    def built(self, value: Any, node: ast.AST, size: int | None = None) -> Any:
        """Check a value the formula computed against the size and integer limits, and charge for it.

        `size`: the value's deep size when the caller knows it (a range, a repetition), to skip counting."""
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            if value.bit_length() > MAX_BITS:
                raise FormulaError(f"{_src(node)}: result is over {MAX_BITS} bits")
            return value
        if isinstance(value, float):
            if math.isnan(value):
                raise FormulaError(f"{_src(node)}: result is NaN")
            return value
        if isinstance(value, complex):
            raise FormulaError(f"{_src(node)}: result is a complex number")
        if size is None:
            size = self.size(value)
        else:
            self._sizes[id(value)] = (value, size)
        if size > MAX_SIZE + 1:
            raise FormulaError(f"{_src(node)}: builds more than {MAX_SIZE} items")
        self.charge(size)
        return value

    def visit(self, node: ast.AST) -> Any:
        self.charge(1)
        method = getattr(self, "visit_" + type(node).__name__)
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        return self.load(node.id)

    def visit_List(self, node: ast.List) -> Any:
        return self.built([self.visit(e) for e in node.elts], node)

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return self.built(tuple(self.visit(e) for e in node.elts), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        result: Any = None
        for e in node.values:
            result = self.visit(e)
            if isinstance(node.op, ast.And) and not result:
                return result
            if isinstance(node.op, ast.Or) and result:
                return result
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return not value
        if not _is_number(value):
            raise FormulaError(f"{_src(node)}: unary minus/plus takes a number, not {_kind(value)}")
        return -value if isinstance(node.op, ast.USub) else +value

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        a, b = self.visit(node.left), self.visit(node.right)
        op = node.op
        if isinstance(op, ast.Add) and isinstance(a, list | tuple | str) and type(a) is type(b):
            size = self.size(a) + self.size(b) - 1
            if size > MAX_SIZE + 1:
                raise FormulaError(f"{_src(node)}: builds more than {MAX_SIZE} items")
            joined: Any = a + b  # type: ignore[operator]  # same type on both sides, checked above
            return self.built(joined, node, size)
        if isinstance(op, ast.Mult) and (
            isinstance(a, list | tuple | str) or isinstance(b, list | tuple | str)
        ):
            seq, count = (a, b) if isinstance(a, list | tuple | str) else (b, a)
            if not isinstance(count, int) or isinstance(count, bool):
                raise FormulaError(f"{_src(node)}: a list or string repeats an int, not {_kind(count)}")
            size = 1 + max(count, 0) * (self.size(seq) - 1)
            if size > MAX_SIZE + 1:
                raise FormulaError(f"{_src(node)}: repetition builds more than {MAX_SIZE} items")
            return self.built(seq * count, node, size)
        if isinstance(op, ast.Mod) and isinstance(a, str):
            raise FormulaError(f"{_src(node)}: `%` string formatting is not allowed")
        if not (_is_number(a) and _is_number(b)):
            raise FormulaError(f"{_src(node)}: arithmetic on {_kind(a)} and {_kind(b)}")
        if isinstance(op, ast.Div | ast.FloorDiv | ast.Mod) and b == 0:
            raise FormulaError(f"{_src(node)}: division by zero")
        if isinstance(op, ast.Pow):
            return self.built(self.power(a, b, node), node)
        big = isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_BITS + 1
        if isinstance(op, ast.Mult) and big:
            raise FormulaError(f"{_src(node)}: result is over {MAX_BITS} bits")
        try:
            result = _ARITH[type(op)](a, b)
        except OverflowError:
            raise FormulaError(f"{_src(node)}: overflow") from None
        if isinstance(result, float) and math.isinf(result) and not (_is_inf(a) or _is_inf(b)):
            raise FormulaError(f"{_src(node)}: float overflow")
        return self.built(result, node)

    def power(self, base: Any, exponent: Any, node: ast.AST) -> Any:
        if abs(exponent) > MAX_POW:
            raise FormulaError(f"{_src(node)}: exponent {exponent} is over the {MAX_POW} limit")
        if base == 0 and exponent < 0:
            raise FormulaError(f"{_src(node)}: division by zero")
        ints = isinstance(base, int) and isinstance(exponent, int)
        if ints and exponent > 0 and base.bit_length() * exponent > MAX_BITS + exponent:
            raise FormulaError(f"{_src(node)}: result is over {MAX_BITS} bits")
        try:
            result = base**exponent
        except OverflowError:
            raise FormulaError(f"{_src(node)}: overflow") from None
        if isinstance(result, float) and math.isinf(result) and not _is_inf(base):
            raise FormulaError(f"{_src(node)}: float overflow")
        return result

    def visit_Compare(self, node: ast.Compare) -> Any:
        left = self.visit(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.visit(comparator)
            if not self.compare(op, left, right, node):
                return False
            left = right
        return True

    def compare(self, op: ast.cmpop, a: Any, b: Any, node: ast.AST) -> bool:
        if isinstance(op, _ORDER):
            if not (_is_number(a) and _is_number(b)):
                raise FormulaError(f"{_src(node)}: cannot order {_kind(a)} and {_kind(b)} (numbers only)")
            if _is_nan(a) or _is_nan(b):
                raise FormulaError(f"{_src(node)}: cannot order NaN")
            return bool(_ORDERING[type(op)](a, b))
        if isinstance(op, ast.In | ast.NotIn):
            if isinstance(b, str):
                if not isinstance(a, str):
                    raise FormulaError(f"{_src(node)}: `in` a string takes a string, not {_kind(a)}")
            elif not isinstance(b, list | tuple):
                raise FormulaError(f"{_src(node)}: `in` takes a list or string on the right, not {_kind(b)}")
            self.charge(self.size(a) + self.size(b))
            found = a in b
            return found if isinstance(op, ast.In) else not found
        self.charge(min(self.size(a), self.size(b)))
        equal = bool(a == b)
        return equal if isinstance(op, ast.Eq) else not equal

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Call(self, node: ast.Call) -> Any:
        assert isinstance(node.func, ast.Name)
        name = node.func.id
        args = [self.visit(a) for a in node.args]
        for arg in args:
            self.charge(self.size(arg))
        if name == "abs":
            if not _is_number(args[0]):
                raise FormulaError(f"{_src(node)}: abs takes a number, not {_kind(args[0])}")
            return abs(args[0])
        if name == "len":
            if not isinstance(args[0], list | tuple | str):
                raise FormulaError(f"{_src(node)}: len takes a list or string, not {_kind(args[0])}")
            return len(args[0])
        if name == "range":
            if not all(_is_number(a) and isinstance(a, int) for a in args):
                raise FormulaError(f"{_src(node)}: range takes ints, not {', '.join(map(_kind, args))}")
            if len(args) == 3 and args[2] == 0:
                raise FormulaError(f"{_src(node)}: range step is zero")
            r = range(*args)
            if len(r) > MAX_SIZE:
                raise FormulaError(f"{_src(node)}: range of {len(r)} items is over the {MAX_SIZE} limit")
            return self.built(list(r), node, len(r) + 1)
        if name == "is_prefix":
            if not all(isinstance(a, list | tuple) for a in args):
                raise FormulaError(
                    f"{_src(node)}: is_prefix takes two lists, not {', '.join(map(_kind, args))}"
                )
            return is_prefix(args[0], args[1])
        items = args[0] if len(args) == 1 else args
        if not isinstance(items, list | tuple):
            raise FormulaError(f"{_src(node)}: {name} takes a list, not {_kind(items)}")
        if name in ("all", "any"):
            return FUNCTIONS[name](items)
        if name == "sum":
            if not all(isinstance(x, _NUMBER) for x in items):
                raise FormulaError(f"{_src(node)}: sum takes numbers only")
            return self.built(_sum(items, node), node)
        # min, max: numbers only, as ordering is
        if not items:
            raise FormulaError(f"{_src(node)}: {name} of an empty list")
        if not all(_is_number(x) and not _is_nan(x) for x in items):
            raise FormulaError(f"{_src(node)}: {name} takes numbers (not NaN, bools, strings or lists)")
        return FUNCTIONS[name](items)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        container = self.visit(node.value)
        if not isinstance(container, list | tuple | str):
            raise FormulaError(f"{_src(node)}: only lists and strings can be indexed, not {_kind(container)}")
        index = self.visit(node.slice)
        if isinstance(index, slice):
            return self.built(container[index], node, self.size(container))
        if not _is_number(index) or not isinstance(index, int):
            raise FormulaError(f"{_src(node)}: an index is an int, not {_kind(index)}")
        if not -len(container) <= index < len(container):
            raise FormulaError(f"{_src(node)}: index {index} out of range for length {len(container)}")
        return container[index]

    def visit_Slice(self, node: ast.Slice) -> Any:
        parts = [None if p is None else self.visit(p) for p in (node.lower, node.upper, node.step)]
        for part in parts:
            if part is not None and not (isinstance(part, int) and not isinstance(part, bool)):
                raise FormulaError(f"{_src(node)}: slice bounds are ints, not {_kind(part)}")
        if parts[2] == 0:
            raise FormulaError(f"{_src(node)}: slice step is zero")
        return slice(*parts)


def _sum(items: Any, node: ast.AST) -> Any:
    # Items are at most MAX_BITS bits and at most MAX_SIZE of them, so the total is at most ~20 bits more.
    try:
        total = sum(items)
    except OverflowError:
        raise FormulaError(f"{_src(node)}: overflow") from None
    if isinstance(total, float) and math.isinf(total) and not any(_is_inf(x) for x in items):
        raise FormulaError(f"{_src(node)}: float overflow")
    return total


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _is_inf(x: Any) -> bool:
    return isinstance(x, float) and math.isinf(x)


_ARITH: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_ORDERING: dict[type, Callable[[Any, Any], Any]] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
