"""REPORT.md and report.html, rendered from the statements alone (so `verify` can render them again and compare).

report.html is one self-contained file: inline CSS, no script, no font, no image, nothing fetched.
"""

from __future__ import annotations

from html import escape
from typing import Any

from falsify.evidence import JUNIT, MUTATION_REPORT


def _outcome_counts(verdict: dict[str, Any]) -> str:
    p = verdict["predictions"]
    return (
        f"{p['PASS']} of {p['total']} passed, {p['FAIL']} failed, {p['ERROR']} errors, {p['NOT RUN']} not run, "
        f"{p['NOT APPLICABLE']} not applicable"
    )


def _test_counts(verdict: dict[str, Any]) -> str:
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
    """The mutants this prediction turned red; "not run" when its listed mutants were not run, never "none"."""
    if p["mutantsKilled"]:
        return ", ".join(m["id"] for m in p["mutantsKilled"])
    if not p["mutants"]:
        return "—"
    return "not run" if all(m["status"] == "NOT RUN" for m in p["mutants"]) else "none"


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(test_result: dict[str, Any], evidence_stmt: dict[str, Any], generated_at: str) -> str:
    ev = evidence_stmt["predicate"]
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
        "## Predictions",
        "",
        "| prediction | contract | outcome | tests | checks | mutants killed | costs | observed / detail |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in ev["predictions"]:
        detail = p["detail"] or _values(p["values"])
        out.append(
            f"| `{p['id']}` | {p['contract']} | **{p['outcome']}** | {len(p['tests'])} | {p['checks']} | "
            f"{_md_cell(_killed(p))} | {_md_cell(_costs(p['costs']))} | {_md_cell(detail)} |"
        )
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
    out += ["## Contracts", "", "| contract | version | file | sha256 |", "| --- | --- | --- | --- |"]
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
.muted{color:#57606a}details pre{white-space:pre-wrap;word-break:break-all;font-size:.8rem}
"""


def _without_word(verdict: dict[str, Any]) -> str:
    """The summary without its leading GO/NO-GO, which the banner already shows in large type."""
    return verdict["summary"].removeprefix(verdict["decision"]).lstrip(" —")


def _cls(word: str) -> str:
    return escape(word.replace(" ", ""))


def render_html(test_result: dict[str, Any], evidence_stmt: dict[str, Any], generated_at: str) -> str:
    ev = evidence_stmt["predicate"]
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
        f"<tr><td>test-result statement</td><td>{e(test_result['predicate']['result'])}</td></tr></table>",
        "<h2>Predictions</h2>",
        "<table><tr><th>prediction</th><th>contract</th><th>outcome</th><th>tests</th><th>checks</th>"
        "<th>mutants killed</th><th>costs</th><th>observed / detail</th></tr>",
    ]
    for p in ev["predictions"]:
        detail = p["detail"] or _values(p["values"])
        h.append(
            f'<tr><td class="mono id">{e(p["id"])}</td><td>{e(p["contract"])}</td>'
            f'<td class="{_cls(p["outcome"])}">{e(p["outcome"])}</td><td>{len(p["tests"])}</td>'
            f"<td>{p['checks']}</td><td>{e(_killed(p))}</td><td>{e(_costs(p['costs']))}</td>"
            f'<td class="mono detail">{e(detail)}</td></tr>'
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
        "<h2>Contracts</h2><table><tr><th>contract</th><th>version</th><th>file</th><th>sha256</th></tr>"
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
