"""Mutation reports in Stryker's mutation-testing-report-schema (schemaVersion 2), and an HTML page that renders
one offline: self-contained, no script or stylesheet fetched from anywhere.

Both `falsify mutants` (semantic mutants) and `falsify mutmut` write this format, so one viewer and one schema
test (tests/test_mutants_report.py, against the schema file from the npm package) cover both.
https://github.com/stryker-mutator/mutation-testing-elements/tree/master/packages/report-schema
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "2"
THRESHOLDS = {"high": 80, "low": 60}
DETECTED = ("Killed", "Timeout")
UNDETECTED = ("Survived", "NoCoverage")


def add_out_option(p: argparse.ArgumentParser, default: Path) -> None:
    """--out of a command that writes this report (`write_report`), DEFAULT when not given."""
    p.add_argument(
        "--out",
        type=Path,
        default=default,
        help=f"where mutation-report.json (Stryker schema) and .html go (default: {default})",
    )


def write_report(data: dict[str, Any], out: Path, title: str) -> tuple[Path, Path]:
    """DATA as OUT/mutation-report.json and the page that renders it, OUT/mutation-report.html (OUT created).
    Both replaced atomically through the file layer: a link in a report's place is refused, never written
    through (issue #27)."""
    from falsify.untrusted import safefile

    safefile.make_dirs(out, what="--out directory")
    json_path, html_path = out / "mutation-report.json", out / "mutation-report.html"
    safefile.replace(json_path, json.dumps(data, indent=1).encode(), what="mutation report")
    safefile.replace(html_path, render_html(data, title).encode(), what="mutation report")
    return json_path, html_path


@dataclass(frozen=True, slots=True)
class Location:
    line: int
    column: int
    end_line: int
    end_column: int

    def as_json(self) -> dict[str, Any]:
        return {
            "start": {"line": max(self.line, 1), "column": max(self.column, 1)},
            "end": {"line": max(self.end_line, 1), "column": max(self.end_column, 1)},
        }


def mutant(
    id: str,
    mutator: str,
    location: Location,
    status: str,
    *,
    description: str = "",
    replacement: str | None = None,
    killed_by: list[str] | None = None,
    covered_by: list[str] | None = None,
    reason: str = "",
    duration_ms: float | None = None,
    tests_completed: int | None = None,
) -> dict[str, Any]:
    """One MutantResult of the schema."""
    entry: dict[str, Any] = {
        "id": id,
        "mutatorName": mutator,
        "location": location.as_json(),
        "status": status,
    }
    if description:
        entry["description"] = description
    if replacement is not None:
        entry["replacement"] = replacement
    if killed_by is not None:
        entry["killedBy"] = killed_by
    if covered_by is not None:
        entry["coveredBy"] = covered_by
    if reason:
        entry["statusReason"] = reason
    if duration_ms is not None:
        entry["duration"] = round(duration_ms, 1)
    if tests_completed is not None:
        entry["testsCompleted"] = tests_completed
    return entry


def report(
    files: dict[str, tuple[str, list[dict[str, Any]]]],
    *,
    framework: str,
    version: str,
    config: dict[str, Any] | None = None,
    tests: list[str] | None = None,
    performance: dict[str, float] | None = None,
    project_root: str | None = None,
) -> dict[str, Any]:
    """A MutationTestResult: `files` maps a path (relative to the project root) to (its source, its mutants)."""
    out: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "thresholds": dict(THRESHOLDS),
        "files": {
            path: {"language": "python", "source": source, "mutants": ms}
            for path, (source, ms) in sorted(files.items())
        },
        "framework": {"name": framework, "version": version},
        "system": {
            "ci": bool(os.environ.get("CI")),
            "os": {"platform": platform.system().lower()},
            "cpu": {"logicalCores": os.cpu_count() or 1},
        },
    }
    if config is not None:
        out["config"] = config
    if project_root is not None:
        out["projectRoot"] = project_root
    if performance is not None:
        out["performance"] = {k: round(v, 1) for k, v in performance.items()}
    if tests:
        by_file: dict[str, list[dict[str, str]]] = {}
        for nodeid in tests:
            path, _, name = nodeid.partition("::")
            by_file.setdefault(path, []).append({"id": nodeid, "name": name or nodeid})
        out["testFiles"] = {path: {"tests": ts} for path, ts in sorted(by_file.items())}
    return out


def score(data: dict[str, Any]) -> tuple[Counter[str], float | None]:
    """Status counts and Stryker's mutation score: detected / (detected + undetected), in percent."""
    counts: Counter[str] = Counter(m["status"] for f in data["files"].values() for m in f["mutants"])
    detected = sum(counts[s] for s in DETECTED)
    valid = detected + sum(counts[s] for s in UNDETECTED)
    return counts, (100.0 * detected / valid if valid else None)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}
th{background:#f3f3f3;text-align:left}
.Killed,.Timeout{background:#d6f5d6}.Survived,.NoCoverage{background:#f8d0d0}
.Ignored{background:#eee}.RuntimeError,.CompileError{background:#fbe3b5}.Pending{background:#fff}
pre{margin:0;font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap}
.src td{border:none;padding:0 6px}.src .n{color:#888;text-align:right;user-select:none}
.src tr.hit td{font-weight:bold}
"""


def render_html(data: dict[str, Any], title: str = "Mutation report") -> str:
    """A static page for a report: summary, one table of mutants per file, the file's source with the mutated
    lines marked. The report itself is embedded as JSON for tools."""
    e = html.escape
    counts, pct = score(data)
    total = sum(counts.values())
    parts = [
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
    ]
    framework = data.get("framework", {})
    parts.append(
        f"<p>{e(framework.get('name', ''))} {e(framework.get('version', ''))} — {total} mutants; "
        f"mutation score {'n/a' if pct is None else f'{pct:.1f}%'} "
        f"(thresholds: high {data['thresholds']['high']}, low {data['thresholds']['low']})</p>"
    )
    parts.append(
        "<table><tr>"
        + "".join(f"<th class={e(s)}>{e(s)}</th>" for s in sorted(counts))
        + "</tr><tr>"
        + "".join(f"<td>{counts[s]}</td>" for s in sorted(counts))
        + "</tr></table>"
    )
    for path, f in data["files"].items():
        ms = sorted(f["mutants"], key=lambda m: (m["location"]["start"]["line"], m["id"]))
        file_counts = Counter(m["status"] for m in ms)
        parts.append(
            f"<h2 id='{e(path, quote=True)}'>{e(path)}</h2><p>"
            + ", ".join(f"{n} {e(s)}" for s, n in sorted(file_counts.items()))
            + "</p>"
        )
        parts.append(
            "<table><tr><th>mutant</th><th>status</th><th>mutator</th><th>line</th><th>description</th>"
            "<th>replacement</th><th>killed by</th><th>reason</th></tr>"
        )
        for m in ms:
            parts.append(
                f"<tr class={e(m['status'])}><td>{e(m['id'])}</td><td>{e(m['status'])}</td>"
                f"<td>{e(m['mutatorName'])}</td><td><a href='#{e(path, quote=True)}:{m['location']['start']['line']}'>"
                f"{m['location']['start']['line']}</a></td><td>{e(m.get('description', ''))}</td>"
                f"<td><pre>{e(m.get('replacement', ''))}</pre></td><td>{e(', '.join(m.get('killedBy', [])))}</td>"
                f"<td><pre>{e(m.get('statusReason', ''))}</pre></td></tr>"
            )
        parts.append("</table>")
        hit: dict[int, str] = {}
        for m in ms:
            for line in range(m["location"]["start"]["line"], m["location"]["end"]["line"] + 1):
                worse = hit.get(line) in UNDETECTED
                hit[line] = hit[line] if worse else m["status"]
        parts.append("<details><summary>source</summary><table class=src>")
        for n, text in enumerate(f["source"].splitlines(), 1):
            cls = f" class='hit {e(hit[n])}'" if n in hit else ""
            parts.append(
                f"<tr id='{e(path, quote=True)}:{n}'{cls}><td class=n>{n}</td><td><pre>{e(text)}</pre>"
                "</td></tr>"
            )
        parts.append("</table></details>")
    # `</` cannot close the script element early once escaped; the JSON stays parseable.
    blob = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    parts.append(f"<script type='application/json' id=report>{blob}</script></body></html>")
    return "\n".join(parts)
