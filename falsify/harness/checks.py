"""`falsify.check`: evaluate a prediction's formula on observed values. The YAML formula is the single source of
truth; a test supplies observations, never the logic.

Every value is checked against the contract before the formula runs: an observable against its declared `type`
(and `items`, the element type of a list; floats finite unless `allow_nonfinite`), a domain parameter against its
type, `min`, `max` and `values`, and every non-`optional` parameter must be given. A value the contract does not
allow raises ObservationError naming the value and the bound: the test is an ERROR, never a PASS.

A check that held is *vacuous* when part of its claim held over nothing: a conjunct of the formula quantifies
over an empty sequence (`all`/`any` of one, a comparison of two, `is_prefix` of one, `in` one), or every
observable given is empty. The plugin counts them; a prediction needs `min_checks` checks (default 1) in which
every part of the claim was exercised before it can PASS.

`strategies(prediction_id)` gives hypothesis strategies drawn from a prediction's domain, so tests do not restate
it; `corner_examples(prediction_id, **fixed)` decorates a @given test with the prediction's declared corners as
explicit examples, run before any random case, and `corners(prediction_id)` lists them for a parametrized test.
Every check records which declared corners its values reach (a corner's `when` formula); the gate counts them.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

from falsify.contracts.corpus import Contract, Corpus, Prediction, project_corpus
from falsify.contracts.formula import Formula, parse
from falsify.errors import ContractError, ContractViolation, FormulaError, ObservationError


@dataclass(frozen=True, slots=True)
class Observation:
    prediction_id: str
    held: bool
    values: dict[str, Any]
    vacuous: bool = False  # held over nothing (see the module docstring)
    corners: tuple[str, ...] = ()  # the prediction's declared corners this check reached
    message: str = ""  # when it did not hold: the violation's message (prediction, formula, every value)


# Set by the pytest plugin: where the contracts are (the project's and its packs'), and who records each
# observation for the running test.
contracts_dirs: tuple[Path, ...] = ()
recorder: Callable[[Observation], None] | None = None


def corpus() -> Corpus:
    loaded = project_corpus(*map(str, contracts_dirs))
    if loaded.problems:
        first = loaded.problems[0]
        raise ContractError(f"contracts do not lint ({len(loaded.problems)} problems); first: {first}")
    return loaded


def _lookup(prediction_id: str) -> tuple[Prediction, Contract]:
    found = corpus().find(prediction_id)
    if found is None:
        raise ContractError(f"unknown prediction {prediction_id!r}: no contract defines it")
    return found


def prediction(prediction_id: str) -> Prediction:
    return _lookup(prediction_id)[0]


MAX_NESTING = 64  # lists in lists an observed value may hold (numpy's own limit on an array's dimensions)


def plain(value: Any, _depth: int = 0) -> Any:
    """Observed values as plain Python: numpy scalars and arrays become numbers and lists. A value nested deeper
    than MAX_NESTING (a list that holds itself, say) raises ObservationError, not RecursionError."""
    if _depth > MAX_NESTING:
        raise ObservationError(f"nested deeper than {MAX_NESTING} lists (a list that contains itself?)")
    if hasattr(value, "tolist") and callable(value.tolist):
        listed = value.tolist()
        # A numpy array of numbers lists plain numbers at most 64 deep: returned as is, not walked again. An
        # object array's items (or another type's tolist()) may be anything: they are made plain below.
        if getattr(getattr(value, "dtype", None), "kind", "O") != "O" or not isinstance(listed, list):
            return listed
        value = listed
    if isinstance(value, tuple | list):
        return [plain(v, _depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


# Whose reason a NOT APPLICABLE is, as its message says it (issue #46): the engine's (it lacks a capability, or
# behaves so that the bug leaves no trace, as an engine that reuses no state), this machine's (an oracle not
# installed, BLAS that gives the same bytes under any thread count), or the configuration's.
WHOSE = {"engine": "on this engine", "machine": "on this machine", "config": "with this configuration"}


class CannotShowHere(Exception):  # a verdict the plugin turns into NOT APPLICABLE, not an error
    """Raised by cannot_show(); the plugin records the test NOT APPLICABLE, the engine's, the machine's or the
    configuration's reason (`whose`)."""

    def __init__(
        self, prediction_id: str, reason: str, control: dict[str, Any], whose: str = "machine"
    ) -> None:
        super().__init__(f"{prediction_id} cannot be shown {WHOSE[whose]}: {reason}")
        self.prediction_id, self.reason, self.control, self.whose = prediction_id, reason, control, whose


def _plain_values(values: dict[str, Any], where: Callable[[str], str]) -> dict[str, Any]:
    """Each value as plain data (`plain`); a value that is not is an ObservationError that starts `where(name): `."""
    out = {}
    for name, v in values.items():
        try:
            out[name] = plain(v)
        except ObservationError as exc:
            raise ObservationError(f"{where(name)}: {exc}") from None
    return out


def cannot_show(prediction_id: str, reason: str, *, whose: str = "machine", **control: Any) -> NoReturn:
    """`prediction_id` cannot be shown false here: the falsifier's own sensitivity control found that the bug
    the prediction is about would leave no trace. `whose` says why: "machine" (FALSIFY-DET-001 where unpinned BLAS
    products give the same bytes under any thread count), "engine" (an engine that reuses no session state, where
    no reuse can run past the common prefix; a server whose replies carry no token ids) or "config".
    `control`: what the control measured, kept in the results. The plugin records the test NOT APPLICABLE
    ("cannot be shown on this engine: <reason>"), and `falsify mutants` reports a mutant that only such
    predictions kill as CANNOT SHOW, not SURVIVED. The test must be bound to that prediction alone and may not have
    checked it yet: a falsifier cannot retreat from a check that failed."""
    __tracebackhide__ = True
    prediction(prediction_id)  # an unknown id is a ContractError
    if whose not in WHOSE:
        raise ContractError(
            f"{prediction_id}: cannot_show whose={whose!r}: give one of {', '.join(map(repr, WHOSE))}"
        )
    if not reason.strip():
        raise ContractError(
            f"{prediction_id}: cannot_show needs the reason it cannot be shown {WHOSE[whose]}"
        )
    values = _plain_values(control, lambda name: f"{prediction_id}: control value {name}")
    raise CannotShowHere(prediction_id, " ".join(reason.split()), values, whose)


def check(prediction_id: str, **observed: Any) -> None:
    """Raise ContractViolation (an AssertionError) unless the prediction's formula holds on `observed`; raise
    ObservationError when a value is not what the contract declares."""
    __tracebackhide__ = True
    p, contract = _lookup(prediction_id)
    declared = set(contract.observables) | set(p.domain)
    unknown = sorted(set(observed) - declared)
    if unknown:
        raise ContractError(
            f"{prediction_id}: {', '.join(unknown)} not declared in {contract.file}; declared: {', '.join(sorted(declared))}"
        )
    where = f"{p.file}:{p.line}"
    values = _plain_values(observed, lambda name: f"{prediction_id}: {name} ({where})")
    for name, value in values.items():
        if name in p.domain:
            _check_parameter(prediction_id, where, name, value, p.domain[name])
        else:
            spec = contract.observables[name]
            _check_type(prediction_id, where, name, value, spec["type"], spec)
    absent = [n for n, spec in p.domain.items() if n not in values and not spec.get("optional")]
    if absent:
        raise ObservationError(
            f"{prediction_id}: domain parameter(s) {', '.join(absent)} not given ({where}); every check states "
            "where in the domain it was made (declare `optional: true` for one that may be absent)"
        )
    shown = {name: values[name] for name in p.formula.names if name in values}
    try:
        result = p.formula.evaluate(values)
    except FormulaError as exc:
        raise ContractError(f"{prediction_id}: {exc}") from None
    if not isinstance(result, bool):
        raise ContractError(f"{prediction_id}: formula {p.formula.source!r} gave {result!r}, not a bool")
    violation = None if result else ContractViolation(prediction_id, p.formula.source, shown, contract.id)
    if recorder is not None:
        empty = result and vacuous(p.formula, values, set(contract.observables))
        recorder(Observation(prediction_id, result, values, empty, reached(p, values), str(violation or "")))
    if violation is not None:
        # The contract's own reading of the failure: pytest prints notes under the message, JUnit keeps them.
        violation.add_note(f"if_fails: {p.if_fails}")
        raise violation


_TYPES = ("int", "float", "bool", "str", "list")


def _type_problem(value: Any, kind: str, nonfinite: bool) -> str | None:
    """Why `value` is not a `kind`, or None."""
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not nonfinite and isinstance(value, float) and not math.isfinite(value):
            return f"{value!r} is not finite (declare `allow_nonfinite: true` to allow NaN and infinities)"
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, list)
    if ok:
        return None
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return f"{shown} is a {type(value).__name__}, not {'an' if kind == 'int' else 'a'} {kind}"


def _check_type(pid: str, where: str, name: str, value: Any, kind: str, spec: dict[str, Any]) -> None:
    nonfinite = bool(spec.get("allow_nonfinite"))
    problem = _type_problem(value, kind, nonfinite)
    if problem:
        raise ObservationError(f"{pid}: {name} = {problem} ({where}: declared type {kind})")
    items = spec.get("items")
    if kind == "list" and items:
        for i, element in enumerate(value):
            problem = _type_problem(element, items, nonfinite)
            if problem:
                raise ObservationError(f"{pid}: {name}[{i}] = {problem} ({where}: declared items {items})")


def _check_parameter(pid: str, where: str, name: str, value: Any, spec: dict[str, Any]) -> None:
    if value is None and spec.get("optional"):
        return
    _check_type(pid, where, name, value, spec["type"], spec)
    if "values" in spec and value not in spec["values"]:
        raise ObservationError(
            f"{pid}: {name} = {value!r} is outside the domain: allowed values {spec['values']} ({where})"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "min" in spec and value < spec["min"]:
            raise ObservationError(
                f"{pid}: {name} = {value!r} is below the domain's min {spec['min']} ({where})"
            )
        if "max" in spec and value > spec["max"]:
            raise ObservationError(
                f"{pid}: {name} = {value!r} is above the domain's max {spec['max']} ({where})"
            )


def reached(p: Prediction, values: dict[str, Any]) -> tuple[str, ...]:
    """The declared corners whose `when` is true on one check's values. A corner naming a value the check did not
    give, or whose formula raises on these values, is not reached by this check."""
    out = []
    for corner in p.corners:
        try:
            if corner.when.evaluate(values) is True:
                out.append(corner.id)
        except FormulaError:
            continue
    return tuple(out)


# -- vacuity --------------------------------------------------------------------------------------------------
def _empty(value: Any) -> bool:
    return isinstance(value, list | tuple | str) and len(value) == 0


# A vacuity step: ("empty", x) is all/any/is_prefix of x; ("in", x) is `a in x`; ("both", right, left) is a
# comparison of two sequences. A sub-formula that does not parse is None: that step never shows emptiness.
_Step = tuple[str, Formula | None, Formula | None]


def _sub_formula(node: ast.AST) -> Formula | None:
    """One subexpression as a formula of its own, through the formula language itself (never eval)."""
    try:
        return parse(ast.unparse(node))
    except FormulaError:
        return None


@lru_cache(maxsize=4096)  # per formula text, as parse is: a check's vacuity is judged on each check's values
def _vacuity_plan(formula: Formula) -> tuple[tuple[_Step, ...], ...]:
    """Per conjunct of the formula, the subexpressions whose emptiness makes it hold over nothing: `all(x)`,
    `any(x)`, `is_prefix(x, ...)` of an empty x, `a == b` (or <, !=, ...) of two empty sequences, or `a in x` of
    an empty x. Built once per formula (unparsing and parsing each subexpression per check cost seconds)."""
    body = formula.tree.body
    conjuncts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
    plan = []
    for conjunct in conjuncts:
        steps: list[_Step] = []
        for node in ast.walk(conjunct):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("all", "any", "is_prefix") and node.args:
                    steps.append(("empty", _sub_formula(node.args[0]), None))
            elif isinstance(node, ast.Compare) and len(node.ops) == 1:
                right = _sub_formula(node.comparators[0])
                if isinstance(node.ops[0], ast.In | ast.NotIn):
                    steps.append(("in", right, None))
                else:
                    steps.append(("both", right, _sub_formula(node.left)))
        plan.append(tuple(steps))
    return tuple(plan)


_UNREAD = object()


def _read(sub: Formula, values: dict[str, Any]) -> Any:
    """A vacuity step's subexpression read without evaluating it: a constant is itself, a bare name its value (the
    check's formula, which holds every name of its steps, has just loaded it, so it passed the evaluator's
    limits); anything else is _UNREAD."""
    body = sub.tree.body
    if isinstance(body, ast.Constant):
        return body.value
    if isinstance(body, ast.Name) and body.id in values:
        return values[body.id]
    return _UNREAD


def _value(sub: Formula, values: dict[str, Any]) -> Any:
    read = _read(sub, values)
    return sub.evaluate(values) if read is _UNREAD else read


def _over_nothing(step: _Step, values: dict[str, Any]) -> bool:
    kind, first, second = step
    if kind == "both" and second is not None:
        left = _read(second, values)
        if left is not _UNREAD and not _empty(left):
            return (
                False  # a comparison whose left side reads as not empty: over something, whatever its right
            )
    if first is None or not _empty(_value(first, values)):
        return False
    if kind == "both":
        return second is not None and _empty(_value(second, values))
    return True


def _quantifies_over_nothing(steps: tuple[_Step, ...], values: dict[str, Any]) -> bool:
    for step in steps:
        try:
            if _over_nothing(step, values):
                return True
        except FormulaError:
            continue
    return False


def vacuous(formula: Formula, values: dict[str, Any], observables: set[str]) -> bool:
    """Whether a check that held held over nothing (see the module docstring)."""
    given = [values[n] for n in formula.names if n in observables and n in values]
    if given and all(_empty(v) for v in given):
        return True
    return any(_quantifies_over_nothing(steps, values) for steps in _vacuity_plan(formula))


# -- strategies -----------------------------------------------------------------------------------------------
def strategies(prediction_id: str) -> dict[str, Any]:
    """Hypothesis strategies for the prediction's domain parameters, by name: `values` -> sampled_from; int and
    float -> integers/floats within min/max (finite floats); bool -> booleans; str -> text. An `optional`
    parameter's strategy draws only present values: the test decides when to leave it out."""
    from hypothesis import strategies as st

    p = prediction(prediction_id)
    out: dict[str, Any] = {}
    for name, spec in p.domain.items():
        kind = spec["type"]
        lo, hi = spec.get("min"), spec.get("max")
        if "values" in spec:
            out[name] = st.sampled_from(spec["values"])
        elif kind == "int":
            out[name] = st.integers(
                None if lo is None else math.ceil(lo), None if hi is None else math.floor(hi)
            )
        elif kind == "float":
            out[name] = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
        elif kind == "bool":
            out[name] = st.booleans()
        elif kind == "str":
            out[name] = st.text()
        else:
            raise ContractError(
                f"{prediction_id}: domain parameter {name} is a {kind}; strategies() draws int, float, bool, "
                "str or `values`"
            )
    return out


def corners(prediction_id: str) -> list[dict[str, Any]]:
    """The `example` of each declared corner of the prediction that has one, in declaration order."""
    return [dict(c.example) for c in prediction(prediction_id).corners if c.example]


def corner_examples(prediction_id: str, **fixed: Any) -> Callable[[Any], Any]:
    """A decorator (put it above @given) that adds each declared corner's example as a hypothesis `@example`, run
    before any random case; `fixed` gives the test's other arguments for those runs. A corner without an
    `example` is left to the test (the gate still counts whether it was reached)."""
    from hypothesis import example

    def decorate(test: Any) -> Any:
        for values in reversed(corners(prediction_id)):
            test = example(**{**fixed, **values})(test)
        return test

    return decorate
