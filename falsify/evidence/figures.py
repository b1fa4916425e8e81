"""The evidence report's figures, as SVG written here by hand: same statements in, same bytes out (no plotting
library, no date, no random id), so `falsify verify`'s byte-for-byte rebuild holds and the page stays offline.

    kill_matrix(ev)     predictions x mutants: which mutant turned which prediction red, and which a prediction
                        lists without being turned red by it
    tolerances(ev)      every prediction whose formula is one `A <= B` (or `<`) with positive numbers on both
                        sides in its recorded values: A (measured) against B (bound) on a log scale
    gaps(ev)            every prediction whose recorded values hold a list of numbers named *gap*: one bar each
    mutmut(summary)     mutmut's killed / survived / timeout / no-tests counts against the kill-rate floor

Each returns (svg, caption), or None when the statements hold nothing to draw (the report then says so).
"""

from __future__ import annotations

import ast
import math
from html import escape
from typing import Any

from falsify.contracts.formula import parse
from falsify.errors import FalsifyError

FONT = 'font-family="ui-monospace,Menlo,Consolas,monospace" font-size="11"'
RED, AMBER, GREEN, GREY, INK = "#cf222e", "#d4a72c", "#1a7f37", "#d8dee4", "#1d232a"


def _n(x: float) -> str:
    """A coordinate with a fixed format: the same number always prints the same."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _short(pid: str) -> str:
    return pid.removeprefix("FALSIFY-")


def kill_matrix(ev: dict[str, Any]) -> tuple[str, str] | None:
    predictions = [p for p in ev.get("predictions", []) if isinstance(p, dict)]
    results = ev.get("mutants", {}).get("results", []) if isinstance(ev.get("mutants"), dict) else []
    mutants = sorted({str(m["id"]) for m in results if isinstance(m, dict) and "id" in m})
    mutants = sorted(set(mutants) | {str(m["id"]) for p in predictions for m in p.get("mutants", [])})
    if not predictions or not mutants:
        return None
    cell, left, top = 12.0, 8.0 + 7.0 * max(len(_short(str(p["id"]))) for p in predictions), 0.0
    top = 10.0 + 5.2 * max(len(m) for m in mutants)
    width, height = left + cell * len(mutants) + 10, top + cell * len(predictions) + 10
    body = []
    for j, mid in enumerate(mutants):
        x = left + cell * j + cell / 2
        body.append(
            f'<text x="{_n(x)}" y="{_n(top - 4)}" transform="rotate(-60 {_n(x)} {_n(top - 4)})" {FONT}>'
            f"{escape(mid)}</text>"
        )
    red = declared_only = 0
    for i, p in enumerate(predictions):
        y = top + cell * i
        body.append(
            f'<text x="{_n(left - 4)}" y="{_n(y + cell - 3)}" text-anchor="end" {FONT}>'
            f"{escape(_short(str(p['id'])))}</text>"
        )
        killed = {str(m.get("id")) for m in p.get("mutantsKilled", []) if isinstance(m, dict)}
        listed = {str(m.get("id")) for m in p.get("mutants", []) if isinstance(m, dict)}
        for j, mid in enumerate(mutants):
            x = left + cell * j
            if mid in killed:
                red += 1
                body.append(
                    f'<rect x="{_n(x + 1)}" y="{_n(y + 1)}" width="{_n(cell - 2)}" height="{_n(cell - 2)}" '
                    f'fill="{RED}"><title>{escape(mid)} turned {escape(str(p["id"]))} red</title></rect>'
                )
            elif mid in listed:
                declared_only += 1
                body.append(
                    f'<rect x="{_n(x + 1.5)}" y="{_n(y + 1.5)}" width="{_n(cell - 3)}" height="{_n(cell - 3)}" '
                    f'fill="none" stroke="{AMBER}" stroke-width="2"><title>{escape(str(p["id"]))} lists '
                    f"{escape(mid)}, which did not turn it red</title></rect>"
                )
            else:
                body.append(
                    f'<rect x="{_n(x + 1)}" y="{_n(y + 1)}" width="{_n(cell - 2)}" height="{_n(cell - 2)}" '
                    f'fill="{GREY}" fill-opacity="0.35"/>'
                )
    unproven = sum(1 for p in predictions if not p.get("mutantsKilled"))
    caption = (
        f"Kill matrix: {len(predictions)} predictions x {len(mutants)} mutants. Red: the mutant turned the "
        f"prediction red ({red} cells). Amber outline: listed by the prediction but not turned red by it "
        f"({declared_only}). {unproven} of {len(predictions)} predictions turned red by no mutant."
    )
    return _svg(width, height, body, "prediction x mutant kill matrix"), caption


def _sides(formula: str) -> tuple[str, str, str] | None:
    try:
        tree = ast.parse(formula.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.LtE | ast.Lt):
        return (
            ast.unparse(tree.left),
            ast.unparse(tree.comparators[0]),
            "<=" if isinstance(tree.ops[0], ast.LtE) else "<",
        )
    return None


def _number(source: str, values: dict[str, Any]) -> float | None:
    try:
        x = parse(source).evaluate(values)
    except (FalsifyError, ArithmeticError, TypeError, ValueError, RecursionError):
        return None
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= 0:
        return None
    return float(x)


def tolerance_rows(ev: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    """(prediction, the `A <= B` formula, A, B) for every tolerance-shaped prediction with positive sides."""
    rows = []
    for p in ev.get("predictions", []):
        if not isinstance(p, dict) or not isinstance(p.get("values"), dict):
            continue
        sides = _sides(str(p.get("formula", "")))
        if sides is None:
            continue
        a, b = _number(sides[0], p["values"]), _number(sides[1], p["values"])
        if a is not None and b is not None:
            rows.append((str(p["id"]), str(p["formula"]), a, b))
    return rows


def tolerances(ev: dict[str, Any]) -> tuple[str, str] | None:
    rows = tolerance_rows(ev)
    if not rows:
        return None
    lo = math.floor(math.log10(min(min(a, b) for _, _, a, b in rows)))
    hi = math.ceil(math.log10(max(max(a, b) for _, _, a, b in rows)))
    hi = max(hi, lo + 1)
    left = 8.0 + 7.0 * max(len(_short(pid)) for pid, *_ in rows)
    plot, row_h, top = 520.0, 18.0, 26.0
    width, height = left + plot + 130, top + row_h * len(rows) + 12

    def x_of(v: float) -> float:
        return left + plot * (math.log10(v) - lo) / (hi - lo)

    body = []
    for k in range(lo, hi + 1):
        x = x_of(10.0**k)
        body.append(
            f'<line x1="{_n(x)}" y1="{_n(top - 6)}" x2="{_n(x)}" y2="{_n(height - 8)}" stroke="{GREY}"/>'
        )
        body.append(f'<text x="{_n(x)}" y="{_n(top - 10)}" text-anchor="middle" {FONT}>1e{k}</text>')
    over = 0
    for i, (pid, formula, a, b) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        ok = a <= b
        over += not ok
        body.append(
            f'<text x="{_n(left - 6)}" y="{_n(y + 4)}" text-anchor="end" {FONT}>{escape(_short(pid))}</text>'
        )
        body.append(
            f'<line x1="{_n(x_of(a))}" y1="{_n(y)}" x2="{_n(x_of(b))}" y2="{_n(y)}" stroke="{GREY}" stroke-width="3"/>'
        )
        body.append(
            f'<line x1="{_n(x_of(b))}" y1="{_n(y - 7)}" x2="{_n(x_of(b))}" y2="{_n(y + 7)}" stroke="{INK}" '
            f'stroke-width="2"><title>bound {b:.3g}</title></line>'
        )
        body.append(
            f'<circle cx="{_n(x_of(a))}" cy="{_n(y)}" r="4.5" fill="{GREEN if ok else RED}">'
            f"<title>{escape(pid)}: {escape(formula)}: measured {a:.3g}, bound {b:.3g}</title></circle>"
        )
        body.append(f'<text x="{_n(left + plot + 8)}" y="{_n(y + 4)}" {FONT}>{a / b:.2g} of bound</text>')
    caption = (
        f"Measured value (dot) against its bound (bar), log scale, for the {len(rows)} predictions whose formula "
        f"is one `measured <= bound` comparison with positive values recorded; {over} over the bound."
    )
    return _svg(width, height, body, "measured value against bound"), caption


def gap_rows(ev: dict[str, Any]) -> list[tuple[str, str, list[float]]]:
    rows = []
    for p in ev.get("predictions", []):
        values = p.get("values") if isinstance(p, dict) else None
        if not isinstance(values, dict):
            continue
        for name, v in sorted(values.items()):
            if (
                "gap" in name
                and isinstance(v, list)
                and v
                and all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in v
                )
            ):
                rows.append((str(p["id"]), name, [float(x) for x in v]))
    return rows


def gaps(ev: dict[str, Any]) -> tuple[str, str] | None:
    rows = gap_rows(ev)
    if not rows:
        return None
    left, bar, row_h, top = (
        8.0 + 7.0 * max(len(_short(pid)) + len(n) + 1 for pid, n, _ in rows),
        6.0,
        46.0,
        8.0,
    )
    most = max(max(v) for _, _, v in rows) or 1.0
    longest = max(len(v) for _, _, v in rows)
    width, height = left + bar * longest + 80, top + row_h * len(rows) + 8
    body = []
    for i, (pid, name, v) in enumerate(rows):
        base = top + row_h * (i + 1) - 8
        body.append(
            f'<text x="{_n(left - 6)}" y="{_n(base)}" text-anchor="end" {FONT}>'
            f"{escape(_short(pid))} {escape(name)}</text>"
        )
        for j, g in enumerate(v):
            h = (row_h - 14) * g / most
            body.append(
                f'<rect x="{_n(left + bar * j)}" y="{_n(base - h)}" width="{_n(bar - 1)}" height="{_n(h)}" '
                f'fill="{INK}"><title>round {j}: {g:g}</title></rect>'
            )
        body.append(f'<text x="{_n(left + bar * len(v) + 6)}" y="{_n(base)}" {FONT}>max {max(v):g}</text>')
    caption = (
        f"Decode gaps per round, as recorded by {len(rows)} prediction(s) (bar height: the gap, scaled to the "
        f"largest, {most:g})."
    )
    return _svg(width, height, body, "decode gaps per round"), caption


def mutmut(summary: dict[str, Any] | None) -> tuple[str, str] | None:
    """summary: {"killed", "survived", "timeout", "no_tests", "floor" (kill-rate floor, 0..1), "sample" ([K, N] or
    None)} or None."""
    if not summary:
        return None
    parts = [("killed", GREEN), ("survived", RED), ("timeout", AMBER), ("no_tests", GREY)]
    counts = [(name, int(summary.get(name, 0)), colour) for name, colour in parts]
    total = sum(c for _, c, _ in counts)
    if total <= 0:
        return None
    width, left, plot = 640.0, 10.0, 600.0
    body, x = [], left
    for name, c, colour in counts:
        w = plot * c / total
        body.append(
            f'<rect x="{_n(x)}" y="20" width="{_n(w)}" height="24" fill="{colour}"><title>{name}: {c}</title></rect>'
        )
        x += w
    floor = summary.get("floor")
    if isinstance(floor, int | float) and 0 <= floor <= 1:
        fx = left + plot * floor
        body.append(f'<line x1="{_n(fx)}" y1="12" x2="{_n(fx)}" y2="52" stroke="{INK}" stroke-width="2"/>')
        body.append(f'<text x="{_n(fx)}" y="64" text-anchor="middle" {FONT}>floor {floor:.0%}</text>')
    killed = counts[0][1]
    caption = (
        "mutmut: "
        + ", ".join(f"{c} {name.replace('_', ' ')}" for name, c, _ in counts)
        + (f" of {total}; kill rate {killed / total:.1%}")
    )
    sample = summary.get("sample")
    if isinstance(sample, list) and len(sample) == 2:
        caption += f" (sample {sample[0]} of {sample[1]} of the mutants: falsify mutmut --sample)"
    return _svg(width, 70.0, body, "mutmut outcomes against the floor"), caption
