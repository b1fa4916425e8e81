"""REPORT.md and report.html, rendered from the statements alone (so `verify` can render them again and compare).

report.html is one self-contained file: inline CSS, no script, no font, no image, nothing fetched.
"""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any

from falsify.evidence import JUNIT, MUTATION_REPORT, REPORT_HTML, REPORT_MD
from falsify.evidence.figures import gaps, kill_matrix, mutmut, tolerances
from falsify.harness.results import counts_text

FIGURES = {"kill-matrix.svg": kill_matrix, "tolerances.svg": tolerances, "decode-gaps.svg": gaps}
FIGURE_TITLES = {
    "kill-matrix.svg": "Kill matrix",
    "tolerances.svg": "Measured against bound",
    "decode-gaps.svg": "Decode gaps per round",
    "mutmut.svg": "mutmut against its floor",
}
Drawn = dict[str, tuple[str, str]]  # figure file name -> (svg, caption)
_HEX = re.compile(r"\b[0-9a-f]{40,}\b")


def render_reports(
    test_result: dict[str, Any], evidence_stmt: dict[str, Any], generated_at: str
) -> dict[str, bytes]:
    """Every file rendered from the two statements, by name, in the order the release statement lists them:
    report.html, REPORT.md, then each figure's SVG by name."""
    ev = evidence_stmt["predicate"]
    drawn = figures(ev)
    return {
        REPORT_HTML: _html(test_result, ev, generated_at, drawn).encode(),
        REPORT_MD: _markdown(test_result, ev, generated_at, drawn).encode(),
        **{name: drawn[name][0].encode() for name in sorted(drawn)},
    }


def figures(ev: dict[str, Any]) -> Drawn:
    """The figures the contract-evidence predicate gives, file name -> (svg, caption); absent when nothing to draw."""
    out = {}
    for name, draw in FIGURES.items():
        drawn = draw(ev)
        if drawn is not None:
            out[name] = drawn
    summary = ev.get("mutmut") if isinstance(ev.get("mutmut"), dict) else None
    drawn = mutmut(summary)
    if drawn is not None:
        out["mutmut.svg"] = drawn
    return out


def _fmt(v: Any) -> str:
    """An observed value for people: floats to 4 significant digits, long hex digests cut to 12 characters."""
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else repr(v)
    if isinstance(v, str):
        return _HEX.sub(lambda m: m.group(0)[:12] + "…", v)
    if isinstance(v, list):
        inner = ", ".join(_fmt(x) for x in v[:12])
        return f"[{inner}{', …' if len(v) > 12 else ''}]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in list(v.items())[:12]) + "}"
    return str(v)


def _observed(values: dict[str, Any] | None, limit: int = 240) -> str:
    if not values:
        return ""
    text = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _domain(domain: Any) -> str:
    if not isinstance(domain, dict) or not domain:
        return ""
    parts = []
    for name, spec in domain.items():
        if isinstance(spec, dict):
            lo, hi = spec.get("min"), spec.get("max")
            rng = f" in [{lo}, {hi}]" if lo is not None or hi is not None else ""
            parts.append(f"{name}: {spec.get('type', '?')}{rng}")
        else:
            parts.append(str(name))
    return "; ".join(parts)


def _source(ev: dict[str, Any]) -> str:
    src = ev.get("source") if isinstance(ev.get("source"), dict) else {}
    if not src or not src.get("commit"):
        return "not a git checkout (no commit recorded)"
    dirty = {True: "dirty (uncommitted changes)", False: "clean", None: "dirty state unknown"}[
        src.get("dirty")
    ]
    tag = f", tag {src['tag']}" if src.get("tag") else ", no tag"
    return f"commit {src['commit']}{tag}, {dirty}"


def _contract_rows(ev: dict[str, Any]) -> list[tuple[str, str, int, dict[str, int], int]]:
    """(contract, title, predictions, outcome counts, turned red by a mutant) per contract, in file order."""
    titles = {c["id"]: c.get("title", "") for c in ev.get("contracts", [])}
    rows: dict[str, tuple[int, dict[str, int], int]] = {c: (0, {}, 0) for c in titles}
    for p in ev["predictions"]:
        n, counts, proven = rows.get(p["contract"], (0, {}, 0))
        counts = {**counts, p["outcome"]: counts.get(p["outcome"], 0) + 1}
        rows[p["contract"]] = (n + 1, counts, proven + bool(p.get("mutantsKilled")))
    return [(c, titles.get(c, ""), n, counts, proven) for c, (n, counts, proven) in rows.items()]


def _counts_text(counts: dict[str, int]) -> str:
    order = ["PASS", "FAIL", "ERROR", "TIMEOUT", "NOT RUN", "NOT APPLICABLE"]
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join(f"{counts[k]} {k}" for k in keys)


def _outcome_counts(verdict: dict[str, Any]) -> str:
    p = verdict["predictions"]
    return (
        f"{p['PASS']} of {p['total']} passed, {p['FAIL']} failed, {p['ERROR']} errors, "
        f"{p.get('TIMEOUT', 0)} timed out, {p['NOT RUN']} not run, {p['NOT APPLICABLE']} not applicable"
    )


def _test_counts(verdict: dict[str, Any]) -> str:
    if "pytest" in verdict:
        return counts_text(verdict["pytest"])
    t = verdict["tests"]
    return f"{t['tests']} tests: {t['failures']} failed, {t['errors']} errors, {t['skipped']} skipped"


def _mutant_counts(verdict: dict[str, Any], evidence: dict[str, Any]) -> str:
    m = verdict["mutants"]
    if not m["run"]:
        reason = evidence["mutants"]["reason"] or "no mutant report"
        return f"NOT RUN — {m['declared']} declared, none run, none counted as killed ({reason})"
    return (
        f"{m['killed']} of {max(m['ran'], m['declared'])} killed ({m['ran']} run, {m['declared']} declared, "
        f"{len(m['missing'])} missing from the report)"
    )


def _values(values: dict[str, Any] | None, limit: int = 200) -> str:
    if not values:
        return ""
    text = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _costs(costs: list[dict[str, Any]]) -> str:
    parts = []
    for c in costs:
        measured = ", ".join(f"{k}={v!r}" for k, v in c["measured"].items()) or "not measured"
        held = {True: "held", False: "VIOLATED", None: "not evaluated"}[c["held"]]
        parts.append(f"{c['name']}: {c['formula']} per {c['per']} — {measured} ({held})")
    return "; ".join(parts) or "—"


def _killed(p: dict[str, Any]) -> str:
    """The mutants this prediction turned red; "not run" when its listed mutants were not run, never "none";
    UNPROVEN when none did, or the contract's reviewed reason."""
    if p["mutantsKilled"]:
        names = ", ".join(m["id"] for m in p["mutantsKilled"])
        return f"{names} (boundary only: a weaker proof)" if p.get("provenBy") == "boundary" else names
    if p.get("proven") == "EXCUSED":
        return f"unproven (reviewed): {p.get('unprovenBecause', '')}"
    if p.get("proven") == "UNPROVEN":
        return "UNPROVEN" + (" (no mutant listed)" if not p["mutants"] else "")
    if p.get("proven") == "CANNOT SHOW":
        return "cannot be shown here (its row says whose reason)"
    if not p["mutants"]:
        return "—"
    return "not run" if all(m["status"] == "NOT RUN" for m in p["mutants"]) else "none"


def _matrix_rows(matrix: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]], list[str]]:
    engines = [str(e) for e in matrix.get("engines", [])]
    outcomes = matrix.get("outcomes", {})
    rows = [(str(pid), [str(o.get(e, "NOT RUN")) for e in engines]) for pid, o in outcomes.items()]
    counts = matrix.get("counts", {})
    totals = [", ".join(f"{n} {k}" for k, n in sorted(counts.get(e, {}).items())) for e in engines]
    return engines, rows, totals


def _matrix_md(matrix: Any) -> list[str]:
    if not isinstance(matrix, dict):
        return []
    engines, rows, totals = _matrix_rows(matrix)
    out = [
        "## Engines",
        "",
        "Predictions x engines, from a `falsify matrix` run (a FAIL is a finding about that engine).",
        "",
    ]
    out += ["| prediction | " + " | ".join(engines) + " |", "| --- |" + " --- |" * len(engines)]
    out += [f"| `{pid}` | " + " | ".join(cells) + " |" for pid, cells in rows]
    out += ["| **totals** | " + " | ".join(totals) + " |", ""]
    return out


def _matrix_html(matrix: Any) -> list[str]:
    if not isinstance(matrix, dict):
        return []
    e = escape
    engines, rows, totals = _matrix_rows(matrix)
    h = [
        "<h2>Engines</h2><p>Predictions × engines, from a <code>falsify matrix</code> run (a FAIL is a finding "
        "about that engine).</p><table><tr><th>prediction</th>"
        + "".join(f"<th>{e(x)}</th>" for x in engines)
        + "</tr>"
    ]
    for pid, cells in rows:
        h.append(
            f'<tr><td class="mono id">{e(pid)}</td>'
            + "".join(f'<td class="{_cls(c)}">{e(c)}</td>' for c in cells)
            + "</tr>"
        )
    h.append("<tr><th>totals</th>" + "".join(f"<td>{e(t)}</td>" for t in totals) + "</tr></table>")
    return h


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _markdown(test_result: dict[str, Any], ev: dict[str, Any], generated_at: str, drawn: Drawn) -> str:
    verdict = ev["verdict"]
    out = [f"# Release evidence: {verdict['decision']}", "", f"**{verdict['summary']}**", ""]
    if verdict["reasons"]:
        out += ["Why not GO:", "", *[f"- {_md_cell(r)}" for r in verdict["reasons"]], ""]
    out += [
        f"Generated {generated_at} on engine `{ev['inputs']['engine']}`. Verify with `falsify verify <this directory>` "
        "from the project root; `evidence.intoto.jsonl` holds the in-toto statements this report is rendered from.",
        "",
        "| part | denominators |",
        "| --- | --- |",
        f"| predictions | {_outcome_counts(verdict)} |",
        f"| falsifier tests (JUnit) | {_test_counts(verdict)} |",
        f"| mutants | {_md_cell(_mutant_counts(verdict, ev))} |",
        f"| test-result statement | {test_result['predicate']['result']} |",
        "",
        f"Source: {_source(ev)}.",
        "",
        "## Contracts",
        "",
        "| contract | title | predictions | outcomes | turned red by a mutant |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c, title, n, counts, proven in _contract_rows(ev):
        out.append(f"| {c} | {_md_cell(title)} | {n} | {_counts_text(counts)} | {proven} of {n} |")
    out += ["", "## Figures", ""]
    for name, title in FIGURE_TITLES.items():
        if name in drawn:
            out += [f"![{title}]({name})", "", _md_cell(drawn[name][1]), ""]
        else:
            out += [f"- {title}: nothing in this bundle to draw.", ""]
    out += _matrix_md(ev.get("matrix"))
    out += [
        "## Predictions",
        "",
        "| prediction | claim / formula | outcome | tests | checks | turned red by | costs | observed / detail |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in ev["predictions"]:
        detail = p["detail"] or _observed(p["values"])
        skipped = p.get("skippedTests", [])
        tests = f"{len(p['tests'])}" + (f" ({len(skipped)} skipped)" if skipped else "")
        domain = _domain(p.get("domain"))
        claim = f"{p.get('claim', '')} `{p.get('formula', '')}`" + (f" over {domain}" if domain else "")
        out.append(
            f"| `{p['id']}` | {_md_cell(claim)} | **{p['outcome']}** | {tests} | {p['checks']}{_corners(p)} | "
            f"{_md_cell(_killed(p))} | {_md_cell(_costs(p['costs']))} | {_md_cell(detail)} |"
        )
    skips = [(p["id"], t) for p in ev["predictions"] for t in p.get("skippedTests", [])]
    if skips:
        out += ["", f"Skipped bound tests ({len(skips)}):", ""]
        out += [f"- `{pid}`: `{t['test']}` — {_md_cell(t['reason'])}" for pid, t in skips]
    out += ["", "## Mutants", ""]
    mutants = ev["mutants"]
    if not mutants["run"]:
        out += [
            f"**Not run.** {_md_cell(mutants['reason'])}. Declared: {', '.join(mutants['declared']) or 'none'}. "
            "No mutant is counted as killed.",
            "",
        ]
    else:
        out += [
            f"Stryker report: `{MUTATION_REPORT}`.",
            "",
            "| mutant | status | file | turned red | diff sha256 |",
            "| --- | --- | --- | --- | --- |",
        ]
        for m in mutants["results"]:
            out.append(
                f"| `{m['id']}` | **{m['status']}** | {m['file']} | {', '.join(m['killedPredictions']) or '—'} "
                f"| `{m['diffDigest']['sha256'][:16]}` |"
            )
        out.append("")
    out += ["## Contract files", "", "| contract | version | file | sha256 |", "| --- | --- | --- | --- |"]
    out += [
        f"| {c['id']} | {c['version']} | {c['file']} | `{c['digest']['sha256']}` |" for c in ev["contracts"]
    ]
    env = ev["environment"]
    out += [
        "",
        "## Environment",
        "",
        f"- Python {env['python']} ({env['implementation']})",
        f"- machine: {env['machine']['system']} {env['machine']['release']} {env['machine']['arch']}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()),
    ]
    if ev["weights"]:
        out.append(f"- weights: {ev['weights']}")
    out += [
        "",
        "## Subjects and files",
        "",
        f"{len(test_result['subject'])} subjects (engine sources and weights), "
        f"{len(test_result['predicate']['configuration'])} configuration files, reports {JUNIT} and others:",
        "",
        "<details><summary>sha256 of every file</summary>",
        "",
        "```",
    ]
    for d in test_result["subject"] + test_result["predicate"]["configuration"] + ev["reports"]:
        out.append(f"{d['digest']['sha256']}  {d['name']}")
    out += ["```", "", "</details>", ""]
    return "\n".join(out)


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
padding:0 1rem;color:#1d232a;background:#fff}
h1{font-size:1.5rem;margin:0 0 .6rem}h2{font-size:1.15rem;margin:2rem 0 .6rem;border-bottom:1px solid #d8dee4;
padding-bottom:.25rem}
.verdict{border-radius:8px;padding:1rem 1.25rem;margin:1rem 0;border:2px solid}
.verdict .word{font-size:2.4rem;font-weight:800;letter-spacing:.03em}
.go{background:#e9f7ee;border-color:#1f883d;color:#0f5323}.nogo{background:#fdecea;border-color:#cf222e;color:#82071e}
.verdict .summary{font-size:1rem;color:#1d232a;margin-top:.3rem}
.verdict ul{margin:.5rem 0 0;color:#1d232a}
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{border:1px solid #d8dee4;padding:.35rem .5rem;
text-align:left;vertical-align:top;overflow-wrap:break-word}th{background:#f3f5f7;white-space:nowrap}
td.id{white-space:nowrap}td.detail{min-width:18rem;overflow-wrap:anywhere}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em}
.PASS,.Killed{color:#1a7f37;font-weight:700}.FAIL,.ERROR,.Survived,.VIOLATED{color:#cf222e;font-weight:700}
.NOTRUN,.NOTAPPLICABLE,.notrun,.Ignored,.Timeout,.RuntimeError,.NoCoverage{color:#9a6700;font-weight:700}
.muted{color:#57606a}tr.group td{background:#f6f8fa;font-weight:700;white-space:nowrap}
figure{margin:1rem 0;overflow-x:auto}figcaption{margin-bottom:.4rem}details pre{white-space:pre-wrap;word-break:break-all;font-size:.8rem}
"""


def _without_word(verdict: dict[str, Any]) -> str:
    """The summary without its leading GO/NO-GO, which the banner already shows in large type."""
    return verdict["summary"].removeprefix(verdict["decision"]).lstrip(" —")


def _cls(word: str) -> str:
    return escape(word.replace(" ", ""))


def _html(test_result: dict[str, Any], ev: dict[str, Any], generated_at: str, drawn: Drawn) -> str:
    verdict = ev["verdict"]
    go = verdict["decision"] == "GO"
    e = escape
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Release evidence: {e(verdict['decision'])}</title><style>{_CSS}</style></head><body>",
        "<h1>Release evidence</h1>",
        f'<div class="verdict {"go" if go else "nogo"}" id="verdict"><div class="word">{e(verdict["decision"])}</div>',
        f'<div class="summary">{e(_without_word(verdict))}</div>',
    ]
    if verdict["reasons"]:
        h.append("<ul>" + "".join(f"<li>{e(r)}</li>" for r in verdict["reasons"]) + "</ul>")
    h += [
        "</div>",
        f'<p class="muted">Generated {e(generated_at)} on engine <code>{e(ev["inputs"]["engine"])}</code>. '
        "Verify with <code>falsify verify DIR</code> from the project root; <code>evidence.intoto.jsonl</code> "
        "holds the in-toto statements this page is rendered from.</p>",
        "<table><tr><th>part</th><th>denominators</th></tr>",
        f"<tr><td>predictions</td><td>{e(_outcome_counts(verdict))}</td></tr>",
        f"<tr><td>falsifier tests (JUnit)</td><td>{e(_test_counts(verdict))}</td></tr>",
        f"<tr><td>mutants</td><td>{e(_mutant_counts(verdict, ev))}</td></tr>",
        f"<tr><td>test-result statement</td><td>{e(test_result['predicate']['result'])}</td></tr>",
        f'<tr><td>source</td><td class="mono">{e(_source(ev))}</td></tr>',
        f"<tr><td>engine</td><td><code>{e(ev['inputs']['engine'])}</code>"
        + "".join(
            f' · weights <span class="mono" title="{e(d["digest"]["sha256"])}">{e(d["name"])} '
            f"{e(d['digest']['sha256'][:12])}…</span>"
            for d in test_result["subject"]
            if d.get("annotations", {}).get("falsify.role") == "weights"
        )
        + "</td></tr></table>",
        "<h2>Contracts</h2>",
        "<table><tr><th>contract</th><th>title</th><th>predictions</th><th>outcomes</th>"
        "<th>turned red by a mutant</th></tr>",
    ]
    for c, title, n, counts, proven in _contract_rows(ev):
        h.append(
            f'<tr><td class="id">{e(c)}</td><td>{e(title)}</td><td>{n}</td><td>{e(_counts_text(counts))}</td>'
            f"<td>{proven} of {n}</td></tr>"
        )
    h.append('</table><h2>Figures</h2><div class="figures">')
    for name, title in FIGURE_TITLES.items():
        if name in drawn:
            svg, caption = drawn[name]
            h.append(
                f'<figure id="{e(name.removesuffix(".svg"))}"><figcaption><b>{e(title)}</b> '
                f"(<code>{e(name)}</code>). {e(caption)}</figcaption>{svg}</figure>"
            )
        else:
            h.append(f'<p class="muted"><b>{e(title)}</b>: nothing in this bundle to draw.</p>')
    h.append("</div>")
    h += _matrix_html(ev.get("matrix"))
    h += [
        "<h2>Predictions</h2>",
        "<table><tr><th>prediction</th><th>claim, formula, domain</th><th>outcome</th><th>tests</th>"
        "<th>checks</th><th>turned red by</th><th>costs</th><th>observed / detail</th></tr>",
    ]
    contract = None
    for p in ev["predictions"]:
        if p["contract"] != contract:
            contract = p["contract"]
            h.append(f'<tr class="group"><td colspan="8">{e(contract)}</td></tr>')
        detail = p["detail"] or _observed(p["values"])
        skipped = p.get("skippedTests", [])
        tests = f"{len(p['tests'])}" + (f" ({len(skipped)} skipped)" if skipped else "")
        domain = _domain(p.get("domain"))
        skip_list = (
            "<details><summary>skipped</summary><ul>"
            + "".join(f"<li><code>{e(t['test'])}</code>: {e(t['reason'])}</li>" for t in skipped)
            + "</ul></details>"
            if skipped
            else ""
        )
        h.append(
            f'<tr><td class="mono id">{e(p["id"])}</td><td>{e(p.get("claim", ""))}<br>'
            f"<code>{e(p.get('formula', ''))}</code>"
            + (f'<br><span class="muted">{e(domain)}</span>' if domain else "")
            + f'</td><td class="{_cls(p["outcome"])}">{e(p["outcome"])}</td><td>{e(tests)}{skip_list}</td>'
            f"<td>{p['checks']}{e(_corners(p))}</td><td>{e(_killed(p))}</td><td>{e(_costs(p['costs']))}</td>"
            f'<td class="mono detail" title="{e(_values(p["values"], limit=4000))}">{e(detail)}</td></tr>'
        )
    h.append("</table><h2>Mutants</h2>")
    mutants = ev["mutants"]
    if not mutants["run"]:
        h.append(
            f'<p><span class="notrun">NOT RUN.</span> {e(mutants["reason"])}. Declared: '
            f"{e(', '.join(mutants['declared']) or 'none')}. No mutant is counted as killed.</p>"
        )
    else:
        h.append(
            f"<p>Stryker report: <code>{MUTATION_REPORT}</code>.</p><table><tr><th>mutant</th><th>status</th>"
            "<th>file</th><th>turned red</th><th>diff sha256</th></tr>"
        )
        for m in mutants["results"]:
            h.append(
                f'<tr><td class="mono id">{e(m["id"])}</td><td class="{_cls(m["status"])}">{e(m["status"])}</td>'
                f'<td>{e(m["file"])}</td><td class="mono">{e(", ".join(m["killedPredictions"]) or "—")}</td>'
                f'<td class="mono">{e(m["diffDigest"]["sha256"][:16])}</td></tr>'
            )
        h.append("</table>")
    h.append(
        "<h2>Contract files</h2><table><tr><th>contract</th><th>version</th><th>file</th><th>sha256</th></tr>"
    )
    h += [
        f"<tr><td>{e(c['id'])}</td><td>{e(c['version'])}</td><td>{e(c['file'])}</td>"
        f'<td class="mono">{e(c["digest"]["sha256"])}</td></tr>'
        for c in ev["contracts"]
    ]
    env = ev["environment"]
    h += [
        "</table><h2>Environment</h2><ul>",
        f"<li>Python {e(env['python'])} ({e(env['implementation'])})</li>",
        f"<li>machine: {e(env['machine']['system'])} {e(env['machine']['release'])} {e(env['machine']['arch'])}</li>",
        "<li>packages: " + e(", ".join(f"{k} {v}" for k, v in env["packages"].items())) + "</li>",
    ]
    if ev["weights"]:
        h.append(f"<li>weights: {e(ev['weights'])}</li>")
    digests = "\n".join(
        f"{d['digest']['sha256']}  {d['name']}"
        for d in test_result["subject"] + test_result["predicate"]["configuration"] + ev["reports"]
    )
    h += [
        "</ul><h2>Subjects and files</h2>",
        f"<p>{len(test_result['subject'])} subjects (engine sources and weights), "
        f"{len(test_result['predicate']['configuration'])} configuration files, {len(ev['reports'])} reports.</p>",
        f"<details><summary>sha256 of every file</summary><pre>{e(digests)}</pre></details>",
        "</body></html>",
        "",
    ]
    return "\n".join(h)


def _corners(p: dict[str, Any]) -> str:
    """ ", corners 6/6" for a prediction with declared corners (older bundles carry none)."""
    c = p.get("corners") or {}
    declared, reached = c.get("declared") or [], c.get("reached") or []
    return f", corners {len(reached)}/{len(declared)}" if declared else ""
