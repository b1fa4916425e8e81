"""The static checks of a contract's formulas and corners at load time, each problem named by file, line and rule:
a formula parses, names only declared observables and parameters, stays within its cost bound, gives true or false,
and (a prediction's, within the file's corner budget) can fail; a corner's `when` is such a formula and its
example lies inside the domain and reaches it; a domain parameter's range holds a value. corpus.py calls these
while it turns a contract file into records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from falsify.contracts.corners import Budget, NotJudged, cannot_fail
from falsify.contracts.cost import check_cost, result_kinds
from falsify.contracts.formula import Formula, parse
from falsify.contracts.yamlfile import Located, format_path
from falsify.errors import FormulaError, Problem


@dataclass(frozen=True, slots=True)
class Corner:
    """A corner of a prediction's domain its checks must reach: `when` holds on some check's values."""

    id: str
    when: Formula  # over the contract's observables and the prediction's domain parameters
    example: dict[str, Any] | None  # domain values that reach it: an explicit example before random cases
    description: str = ""


def checked_formula(
    doc: Located,
    path: tuple[Any, ...],
    source: str,
    decls: dict[str, Any],
    what: str,
    problems: list[Problem],
    budget: Budget | None = None,
) -> Formula | None:
    """The parsed formula, or None with its problems. `budget`: for a prediction, the file's corner budget (the
    cannot-fail rule); None for a cost, which the rule does not apply to."""
    declared = set(decls)
    try:
        formula = parse(source)
    except FormulaError as exc:
        problems.append(Problem(doc.file, doc.line(path), format_path(path), str(exc), "formula-syntax"))
        return None
    unknown = [n for n in formula.names if n not in declared]
    if unknown:
        problems.append(
            Problem(
                doc.file,
                doc.line(path),
                format_path(path),
                f"{', '.join(map(repr, unknown))} not declared; {what}: {', '.join(sorted(declared)) or 'none'}",
                "formula-name",
            )
        )
        return None
    where = (doc.file, doc.line(path), format_path(path))
    found = judge(formula, {n: decls[n] for n in formula.names}, budget)
    if found:
        problems.extend(Problem(*where, message, rule) for rule, message in found)
        return None
    return formula


_JUDGED: dict[tuple[str, str, bool], list[tuple[str, str]]] = {}  # formulas repeat across contracts


def judge(formula: Formula, decls: dict[str, Any], budget: Budget | None) -> list[tuple[str, str]]:
    """(rule, message) of every static problem of the formula given its names' declarations: the cost bound, the
    result type and (with a budget) the cannot-fail rule. Cached by source and declarations: the same formula
    over the same declarations gets the same verdict, and costs no budget the second time."""
    key = (formula.source, json.dumps(decls, sort_keys=True, default=repr), budget is not None)
    if key in _JUDGED:
        return _JUDGED[key]
    found = [("formula-cost", message) for message in check_cost(formula, decls)]
    if not found:
        kinds = result_kinds(formula, decls)
        if "bool" not in kinds:
            found.append(("formula-type", f"gives {'/'.join(sorted(kinds))}, never true or false"))
    if not found and budget is not None:
        try:
            why = cannot_fail(formula, decls, budget)
        except NotJudged as exc:
            return [("cannot-fail", f"{exc}; split the contract")]  # not cached: another file has budget left
        if why:
            found.append(("cannot-fail", why))
    if len(_JUDGED) > 8192:
        _JUDGED.clear()
    _JUDGED[key] = found
    return found


def checked_corners(
    doc: Located,
    i: int,
    p: dict[str, Any],
    observables: dict[str, Any],
    domain: dict[str, Any],
    problems: list[Problem],
) -> tuple[Corner, ...] | None:
    """The prediction's declared corners, or None with their problems: ids unique, `when` a formula over declared
    names, an `example` of domain parameters inside the domain on which `when` (when it names only parameters)
    holds."""
    out: list[Corner] = []
    seen: set[str] = set()
    ok = True
    for j, c in enumerate(p.get("corners", [])):
        base = ("predictions", i, "corners", j)

        def problem(key: str, message: str, rule: str, base: tuple[Any, ...] = base) -> None:
            problems.append(
                Problem(doc.file, doc.line((*base, key)), format_path((*base, key)), message, rule)
            )

        if c["id"] in seen:
            problem("id", f"corner {c['id']!r} is declared twice", "corner-id")
            ok = False
        seen.add(c["id"])
        when = checked_formula(
            doc,
            (*base, "when"),
            c["when"],
            {**observables, **domain},
            "declared observables and parameters",
            problems,
        )
        example = c.get("example")
        if when is None:
            ok = False
            continue
        if example is not None:
            unknown = sorted(set(example) - set(domain))
            outside = [n for n in example if n in domain and outside_domain(example[n], domain[n])]
            if unknown or outside:
                what = f"{', '.join(unknown)} not a domain parameter" if unknown else ""
                what += ("; " if what else "") + ", ".join(
                    f"{n} = {example[n]!r} outside the domain" for n in outside
                )
                problem("example", what, "corner-example")
                ok = False
                continue
            if set(when.names) <= set(example):
                try:
                    reached = when.evaluate(dict(example))
                except FormulaError as exc:
                    reached = f"an error ({exc})"
                if reached is not True:
                    problem(
                        "example",
                        f"the example does not reach the corner: {c['when']} gives {reached!r}",
                        "corner-example",
                    )
                    ok = False
                    continue
        out.append(
            Corner(
                c["id"], when, dict(example) if example else None, " ".join(c.get("description", "").split())
            )
        )
    return tuple(out) if ok else None


def outside_domain(value: Any, decl: dict[str, Any]) -> bool:
    """A value the parameter's declaration does not allow (its `values`, `min`, `max`)."""
    if "values" in decl:
        return value not in decl["values"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return decl.get("type") in ("int", "float")
    if decl.get("type") == "int" and not isinstance(value, int):
        return True
    low, high = decl.get("min"), decl.get("max")
    return (isinstance(low, int | float) and value < low) or (isinstance(high, int | float) and value > high)


def empty_range(decl: dict[str, Any]) -> str | None:
    """Why a domain parameter's declared range holds no value (min above max, a value outside it); else None."""
    low, high = decl.get("min"), decl.get("max")
    if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
        return f"min {low} is above max {high}: no value is in the domain"
    for v in decl.get("values") or []:
        if isinstance(v, int | float) and (
            (isinstance(low, int | float) and v < low) or (isinstance(high, int | float) and v > high)
        ):
            return f"value {v} is outside min {low} .. max {high}"
    return None
