"""The JUnit XML of a gate run, read as untrusted bytes: `falsify evidence --from DIR` takes it from wherever DIR
is, `verify` from the bundle.

`parse` refuses before building anything a document type declaration (pytest never writes one; it is where
entity expansion and external entities live), nesting deeper than MAX_DEPTH (pytest's is 4: testsuites,
testsuite, testcase, failure) and more than MAX_ELEMENTS elements; `totals` reads each count attribute as plain
decimal digits. Every failure is one EvidenceError line naming the file and, for a count, the attribute.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any
from xml.parsers import expat

from falsify.evidence.tree import EvidenceError
from falsify.untrusted.boundedjson import show

MAX_DEPTH = 32
MAX_ELEMENTS = 2_000_000  # ~3 per test: a million-test run's report still fits
COUNTS = ("tests", "failures", "errors", "skipped")
_COUNT = re.compile(r"[0-9]{1,18}\Z")  # ASCII digits only (int() also takes '١', ' 1', '1_0'); < 2**63


class _Refused(Exception):
    pass


def _check(xml: bytes, what: str) -> None:
    """One pass of expat over the bytes, building nothing: a DOCTYPE, depth or size past the bounds raises."""
    parser = expat.ParserCreate()
    depth = elements = 0

    def start(tag: str, attrs: Any) -> None:
        nonlocal depth, elements
        depth += 1
        elements += 1
        if depth > MAX_DEPTH:
            raise _Refused(f"elements nested deeper than {MAX_DEPTH} levels")
        if elements > MAX_ELEMENTS:
            raise _Refused(f"more than {MAX_ELEMENTS} elements")

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1

    def doctype(*args: Any) -> None:
        raise _Refused("a document type declaration (<!DOCTYPE>): a JUnit report has none")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(xml, True)
    except _Refused as exc:
        raise EvidenceError(f"{what}: not a JUnit report: {exc}") from None
    except expat.ExpatError as exc:
        raise EvidenceError(
            f"{what}: not XML ({expat.errors.messages[exc.code]}: line {exc.lineno}, column {exc.offset})"
        ) from None


def parse(xml: bytes, what: str) -> ET.Element:
    """The root <testsuites> or <testsuite> element of a JUnit XML document, within the bounds above."""
    _check(xml, what)
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:  # expat accepted it above; kept so nothing the parser raises is a traceback
        raise EvidenceError(f"{what}: not XML ({exc})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise EvidenceError(
            f"{what}: the root element is <{show(root.tag)[1:-1]}>, not <testsuites> or <testsuite>"
        )
    return root


def totals(xml: bytes, what: str) -> dict[str, int]:
    """tests/failures/errors/skipped summed over the <testsuite> elements; a count that is not plain decimal
    digits is an EvidenceError naming the suite and the attribute."""
    return totals_of(parse(xml, what), what)


def totals_of(root: ET.Element, what: str) -> dict[str, int]:
    """totals() of a document already parsed."""
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = dict.fromkeys(COUNTS, 0)
    for i, suite in enumerate(suites):
        for key in COUNTS:
            text = suite.get(key, "0")
            if not _COUNT.match(text):
                name = show(suite.get("name", ""), 40)
                raise EvidenceError(
                    f"{what}: <testsuite> {i + 1} (name {name}): {key}={show(text)} is not a count "
                    "(expected decimal digits)"
                )
            out[key] += int(text)
    return out
