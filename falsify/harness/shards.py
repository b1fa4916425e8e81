"""`falsify gate --jobs N`: the falsifiers split over N pytest processes on the machine's cores, merged back into
the one results.json and junit.xml a single process writes.

Each process collects every falsifier (so the binding check and the collected list are the same in each) and keeps
its share: files are dealt longest first to the least loaded share, by the durations of the previous run on the
same --out (round-robin when there is none). A falsifier marked `falsify_serial` (its verdict depends on time: a
hang-up's latency, a stream's pace) runs after the parallel phase, alone, unless its engine cannot run it anyway.
Hypothesis draws each test's examples from the run's one seed and the test alone, so the split changes no example.
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from falsify.untrusted import safefile

SHARD_OPTION = "--falsify-shard"
COSTS_OPTION = "--falsify-shard-costs"
SERIAL = "serial"
SERIAL_MARK = "falsify_serial"
MAX_JOBS = 8


def parse(value: str) -> tuple[int, int] | str:
    """`K/N` (share K of N, 1-based) or `serial`; ValueError naming the value otherwise (pytest's usage error)."""
    if value == SERIAL:
        return SERIAL
    k, sep, n = value.partition("/")
    if sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n) <= MAX_JOBS:
        return int(k), int(n)
    raise ValueError(f"{value!r}: expected K/N with 1 <= K <= N <= {MAX_JOBS}, or {SERIAL!r}")


def default_jobs() -> int:
    """The cores this process may run on, at most MAX_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS))


def read_costs(results: Path) -> dict[str, float]:
    """Each test's duration in a previous results.json; {} when there is none or it cannot be read (the split is
    then round-robin: a worse balance, the same verdicts)."""
    try:
        tests = json.loads(safefile.read_bytes(results, what="previous results", limit=64 << 20)).get("tests")
    except (safefile.FileLayerError, ValueError, AttributeError):
        return {}
    if not isinstance(tests, dict):
        return {}
    costs = {}
    for nodeid, record in tests.items():
        duration = record.get("duration") if isinstance(record, dict) else None
        if isinstance(duration, int | float) and math.isfinite(duration) and duration >= 0:
            costs[str(nodeid)] = float(duration)
    return costs


def assign(nodeids: Sequence[str], costs: dict[str, float], n: int) -> list[int]:
    """The share (0-based) of each node id. A file's tests stay together (its module fixtures, and the runs its
    falsifiers cache for one another, are built once); files go longest first to the least loaded share, ties by
    name and then the lowest share, so every process computes the same split. Without costs, files go round-robin
    in collection order."""
    files: dict[str, list[int]] = {}
    for i, nodeid in enumerate(nodeids):
        files.setdefault(nodeid.split("::", 1)[0], []).append(i)
    share = [0] * len(nodeids)
    if not costs:
        for k, members in enumerate(files.values()):
            for i in members:
                share[i] = k % n
        return share
    known = sorted(costs.values())
    fallback = known[len(known) // 2]  # a test the previous run did not time: its median
    cost = {f: sum(costs.get(nodeids[i], fallback) for i in members) for f, members in files.items()}
    load = [0.0] * n
    for f in sorted(files, key=lambda f: (-cost[f], f)):
        k = min(range(n), key=lambda s: (load[s], s))
        load[k] += cost[f]
        for i in files[f]:
            share[i] = k
    return share


def merge_results(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One results.json from the shares' (the first share's collection counts: each share collected the same)."""
    first = parts[0]
    merged: dict[str, Any] = {k: v for k, v in first.items() if k not in ("tests", "counts", "collected")}
    collected: dict[str, dict[str, Any]] = {}
    tests: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    for part in parts:
        for entry in part.get("collected", []):
            collected.setdefault(entry["nodeid"], entry)
        tests.update(part.get("tests", {}))
        counts.update(part.get("counts", {}))
    merged["collected"] = list(collected.values())
    merged["tests"] = tests
    merged["counts"] = dict(counts)
    merged.pop("held_back", None)
    coverage = [p["wire_coverage"] for p in parts if p.get("wire_coverage")]
    if coverage:
        # a message exercised by any share was exercised by the run
        unexercised = [m for m in coverage[0]["unexercised"] if all(m in c["unexercised"] for c in coverage)]
        of = coverage[0]["of"]
        restarts = sum(c.get("restarts", 0) for c in coverage)  # each share's engine restarts on its own
        merged["wire_coverage"] = {
            "exercised": of - len(unexercised),
            "of": of,
            "unexercised": unexercised,
            "restarts": restarts,
        }
    # "hypothesis" is the first share's: every share ran under the same environment, so the same profile and seed
    return merged


def held_back(parts: Sequence[dict[str, Any]]) -> int:
    """How many `falsify_serial` falsifiers the parallel shares left for the serial phase."""
    return max((int(p.get("held_back", 0)) for p in parts), default=0)


def merge_junit(paths: Sequence[Path], dest: Path) -> None:
    """The shares' JUnit XML as one document of several <testsuite> elements (those present)."""
    root = ET.Element("testsuites")
    seen: set[tuple[str | None, str | None]] = set()
    for path in paths:
        if not path.is_file():
            continue
        try:
            doc = ET.fromstring(safefile.read_bytes(path, what="JUnit XML", limit=256 << 20))
        except ET.ParseError:
            continue  # a share killed while writing it: its results.json still holds its outcomes
        for suite in doc.iter("testsuite") if doc.tag == "testsuites" else [doc]:
            # a collection error or skip is reported by every share (each collects all): kept once
            for case in list(suite.iter("testcase")):
                key = (case.get("classname"), case.get("name"))
                if key in seen:
                    suite.remove(case)
                    _uncount(suite, case)
                seen.add(key)
            root.append(suite)
    safefile.replace(dest, ET.tostring(root, encoding="utf-8", xml_declaration=True), what="JUnit XML")


def _uncount(suite: ET.Element, case: ET.Element) -> None:
    """The suite's totals less one removed case (evidence compares them with pytest's own count)."""
    kinds = {"skipped": "skipped", "error": "errors", "failure": "failures"}
    for attr in ["tests", *(kinds[child.tag] for child in case if child.tag in kinds)]:
        value = suite.get(attr)
        if value is not None and value.isdigit() and int(value) > 0:
            suite.set(attr, str(int(value) - 1))


# pytest's exit codes, the most telling first: usage error, internal error, interrupted, tests failed, ok
_RANK = (4, 3, 2, 1, 0)
NO_TESTS = 5


def merge_codes(codes: Sequence[int]) -> int:
    """The run's exit code from the shares': a share that had nothing to run (5) counts only when none ran."""
    ran = [c for c in codes if c != NO_TESTS]
    if not ran:
        return NO_TESTS
    return min(ran, key=lambda c: _RANK.index(c) if c in _RANK else -1)
