"""What a semantic mutant names and the one matcher that finds it: a statement of one function, matched by its
tokens (whitespace and comments ignored; a compound statement by its first line, the header up to its colon), or op
text's snippet or regex in a file of any language. Each must match exactly once, else the mutant is STALE: the
source drifted. `apply` (edits.py) and `falsify lint` (`match_lines`, for matching.py) both find through here, so
lint and a run never disagree about what a mutant matches. Also the records an edit works with: Edit, Span, Applied
and the two errors.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import json
import math
import signal
import subprocess
import sys
import textwrap
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from falsify.errors import FalsifyError


class StaleMutant(FalsifyError):
    """The function, statement or anchor a mutant names no longer matches exactly once: the source drifted."""


class MutantSpecError(FalsifyError):
    """The mutant itself cannot be applied: bad replacement source, an edit that changes nothing, or a result
    that does not compile. `field` names the mutant file's field at fault, where one is ("" otherwise)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Edit:
    """What an operator needs from a mutant file (mutant-v1.schema.json)."""

    function: str  # qualname, Class.method allowed
    op: str
    statement: str
    anchor: str | None = None
    where: str | None = None  # before | after
    replacement: str | None = None
    snippet: str | None = None  # op text: the exact text replaced, which must occur once
    regex: str | None = None  # op text: or a regular expression (re.MULTILINE) that must match once


def edit_of(mutant: Any) -> Edit:
    """The Edit a mutant file describes (falsify.contracts.corpus.Mutant)."""
    return Edit(
        mutant.function,
        mutant.op,
        mutant.statement,
        mutant.anchor,
        mutant.where,
        mutant.replacement,
        getattr(mutant, "snippet", None),
        getattr(mutant, "regex", None),
    )


@dataclass(frozen=True, slots=True)
class Span:
    """Where a statement sits in the original source; lines and columns start at 1, end is exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True, slots=True)
class Applied:
    source: str
    mutated: str
    span: Span  # the statement the mutant names (for insert: the anchor)
    anchor: Span | None

    def diff(self, path: str) -> str:
        return "".join(
            difflib.unified_diff(
                self.source.splitlines(keepends=True),
                self.mutated.splitlines(keepends=True),
                f"a/{path}",
                f"b/{path}",
                n=2,
            )
        )


@dataclass(frozen=True, slots=True)
class Example:
    edit: Edit
    before: str
    after: str


# -- matching statements by their text -------------------------------------------------------------------------

_SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def tokens(text: str) -> tuple[str, ...]:
    """The statement's tokens, without whitespace and comments: `if  x :  # c` -> ('if', 'x', ':')."""
    try:
        found = [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(textwrap.dedent(text).strip() + "\n").readline)
            if t.type not in _SKIP
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return tuple("".join(text.split()))
    return tuple(found)


def header(tokens_: tuple[str, ...]) -> tuple[str, ...]:
    """A compound statement's first line: its tokens up to the colon that opens its body."""
    depth = 0
    for i, t in enumerate(tokens_):
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == ":" and depth == 0:
            return tokens_[: i + 1]
    return tokens_


# Memoised by node: libcst nodes hash and compare by identity, and a node's code never changes (nodes are
# immutable). lint matches every mutant of a function against the same parsed statements, and a compound
# statement's header is found by generating its whole body's code: without this, `falsify lint` spent ~8 s on this
# repository's 69 mutants.
@functools.lru_cache(maxsize=8192)
def statement_tokens(module: cst.Module, node: cst.BaseStatement) -> tuple[str, ...]:
    if isinstance(node, cst.SimpleStatementLine):
        return tokens(module.code_for_node(node))
    if isinstance(node, cst.FunctionDef | cst.ClassDef):
        node = node.with_changes(decorators=())
    return header(tokens(module.code_for_node(node)))


def tokens_match(wanted: tuple[str, ...], have: tuple[str, ...], compound: bool) -> bool:
    return wanted == have or (compound and wanted == have[:-1] and have[-1:] == (":",))


@dataclass(frozen=True, slots=True)
class Found:
    node: cst.BaseStatement
    span: Span


class _Statements(cst.CSTVisitor):
    """Every statement inside one function, at any depth, with its position."""

    def __init__(self, positions: object) -> None:
        self.found: list[Found] = []
        self.positions = positions

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        for stmt in node.body:
            pos = self.positions[stmt]  # type: ignore[index]
            self.found.append(
                Found(stmt, Span(pos.start.line, pos.start.column + 1, pos.end.line, pos.end.column + 1))
            )


def find_function(module: cst.Module, qualname: str) -> cst.FunctionDef | None:
    """The function `qualname` names: `f`, `Class.method`, `outer.inner`. Where a name is defined more than once
    (typing.overload stubs before the implementation, a later redefinition), the last definition: the one Python
    binds."""
    body: Sequence[cst.CSTNode] = module.body
    node: cst.CSTNode | None = None
    for part in qualname.split("."):
        defs = [n for n in body if isinstance(n, cst.FunctionDef | cst.ClassDef) and n.name.value == part]
        node = defs[-1] if defs else None
        if node is None:
            return None
        inner = node.body
        body = inner.body if isinstance(inner, cst.IndentedBlock) else ()
    return node if isinstance(node, cst.FunctionDef) else None


def hits_of(found: list[Found], module: cst.Module, text: str) -> list[Found]:
    wanted = tokens(text)
    return [
        f
        for f in found
        if tokens_match(
            wanted, statement_tokens(module, f.node), not isinstance(f.node, cst.SimpleStatementLine)
        )
    ]


def only_match(found: list[Found], module: cst.Module, text: str, what: str, function: str) -> Found:
    hits = hits_of(found, module, text)
    if len(hits) != 1:
        where = f" (lines {', '.join(str(h.span.line) for h in hits)})" if hits else ""
        raise StaleMutant(
            f"{what} {text!r} matches {len(hits)} statements of {function}{where}; a mutant needs exactly one"
        )
    return hits[0]


@functools.lru_cache(maxsize=32)
def python_parse_error(source: str) -> str | None:
    """Why CPython's own parser refuses `source`; None when it parses. libcst's native parser has no depth bound:
    3,000 nested parentheses crash the whole process (SIGSEGV), so no source reaches libcst before `ast` accepted
    it. CPython bounds nesting itself (`too many nested parentheses`, its recursion limit)."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except RecursionError:
        return "nested too deeply for Python's parser"
    except (ValueError, MemoryError) as exc:  # null bytes (3.11), a source too large to parse
        return str(exc) or type(exc).__name__
    return None


def parse_statements(source: str, what: str) -> list[cst.BaseStatement]:
    code = textwrap.dedent(source).strip() + "\n"
    if (error := python_parse_error(code)) is not None:
        raise MutantSpecError(f"{what} does not parse: {error}", what)
    try:
        body: list[cst.BaseStatement] = list(cst.parse_module(code).body)
    except cst.ParserSyntaxError as exc:
        raise MutantSpecError(f"{what} does not parse: {str(exc).splitlines()[0]}", what) from None
    if not body:  # only comments or blank lines: nothing to put in the statement's place
        raise MutantSpecError(
            f"{what} holds no statement, only comments or blank lines (to remove a statement: op delete)",
            what,
        )
    return body


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    if outer is inner:
        return True
    return any(contains(child, inner) for child in outer.children)


def function_statements(source: str, function: str, path: str) -> tuple[cst.Module, list[Found]]:
    """The parsed module and every statement of `function` in it, at any depth, with its span; StaleMutant when the
    source does not parse or has no such function."""
    if (error := python_parse_error(source)) is not None:
        raise StaleMutant(f"{path} does not parse: {error}")
    try:
        module, positions = _parsed(source)
    except cst.ParserSyntaxError as exc:
        raise StaleMutant(f"{path} does not parse: {str(exc).splitlines()[0]}") from None
    found = find_function(module, function)
    if found is None:
        raise StaleMutant(f"{path} has no function {function}")
    collector = _Statements(positions)
    found.visit(collector)
    return module, list(collector.found)


@functools.lru_cache(maxsize=32)
def _parsed(source: str) -> tuple[cst.Module, Any]:
    """The module parsed once per source text, with its positions: the mutants of one file share it (a parse
    error is raised again each time, not cached). No caller changes a node: libcst nodes are immutable, and an
    edit builds a new module."""
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    return wrapper.module, wrapper.resolve(PositionProvider)


def text_hits(source: str, edit: Edit) -> list[tuple[int, int]]:
    """(start, end) offsets of every occurrence of op text's snippet (not overlapping) or match of its regex
    (re.MULTILINE), at most MAX_HITS; MutantSpecError when the regex does not compile, cannot be searched within
    REGEX_SECONDS and REGEX_MEMORY, or matches more than MAX_HITS places."""
    if edit.snippet:
        hits: list[tuple[int, int]] = []
        at = source.find(edit.snippet)
        while at >= 0:
            if len(hits) == MAX_HITS:
                raise MutantSpecError(_too_many("snippet"), "snippet")
            hits.append((at, at + len(edit.snippet)))
            at = source.find(edit.snippet, at + len(edit.snippet))
        return hits
    return regex_spans(edit.regex or "", source)


REGEX_SECONDS = 5.0  # how long an op text regex may compile and search its file (lint, falsify mutants)
REGEX_MEMORY = 1 << 30  # bytes of address space the process that searches it may use
MAX_HITS = 10_000  # matches of a snippet or regex counted before the mutant is refused: it needs one

# Run by a separate interpreter (-I -S: no site, no environment), which limits its own memory and CPU first.
# re cannot be stopped from outside while it matches (a real-time timer only reaches the main thread, and lint,
# falsify mutants' worker threads and a Ray worker all match elsewhere): a process can always be killed.
_SEARCH = """\
import json, re, resource, sys
memory, seconds, most = (int(a) for a in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
request = json.load(sys.stdin)
try:
    pattern = re.compile(request["regex"], re.MULTILINE)
except (re.error, OverflowError, RecursionError, ValueError, MemoryError, TypeError) as exc:
    kind = "" if isinstance(exc, re.error) else f"{type(exc).__name__}: "
    print(json.dumps({"error": f"{kind}{exc}"[:500]}))
    sys.exit(0)
spans = []
for match in pattern.finditer(request["source"]):
    if len(spans) == most:
        print(json.dumps({"more": most}))
        sys.exit(0)
    spans.append(match.span())
print(json.dumps({"spans": spans}))
"""


def regex_spans(regex: str, source: str) -> list[tuple[int, int]]:
    """Every match's span of `regex` (re.MULTILINE) in `source`, found in a child process that is killed after
    REGEX_SECONDS and may use at most REGEX_MEMORY: a regex that backtracks without end (`^(a|a)*$` on forty
    a's and a `!`), one re refuses (`a{4294967295}` is an OverflowError, not re.error) or one that needs more
    memory than that is a MutantSpecError naming it, never a hang or a traceback, in whichever thread asks."""
    spans, error = _search(regex, source, REGEX_SECONDS, REGEX_MEMORY, MAX_HITS)
    if error is not None:
        raise MutantSpecError(error, "regex")
    return list(spans)


@functools.lru_cache(maxsize=64)  # lint and a run's preflight ask twice; a refusal is remembered too
def _search(
    regex: str, source: str, seconds: float, memory: int, most: int
) -> tuple[tuple[tuple[int, int], ...], str | None]:
    shown = regex if len(regex) <= 80 else regex[:77] + "..."
    limits = (str(memory), str(math.ceil(seconds)), str(most))
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _SEARCH, *limits],
            input=json.dumps({"regex": regex, "source": source}),
            capture_output=True,
            text=True,
            timeout=seconds,
        )
    except subprocess.TimeoutExpired:  # subprocess.run killed it
        return (), (
            f"regex searched the file for over {seconds:g} s without finishing (it backtracks without end: "
            f"simplify it): {shown!r}"
        )
    except OSError as exc:
        return (), f"regex: cannot start a process to search with it: {exc.strerror}"
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        why = (
            f"killed by {signal.Signals(-done.returncode).name}"
            if done.returncode < 0
            else f"exit code {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:200]}"
        )
        return (), (
            f"regex could not be searched within {seconds:g} s and {memory >> 20} MiB ({why}): {shown!r}"
        )
    if "error" in answer:
        return (), f"regex does not compile: {answer['error']}"
    if "more" in answer:
        return (), _too_many("regex")
    return tuple((int(a), int(b)) for a, b in answer["spans"]), None


def _too_many(field: str) -> str:
    return f"the {field} matches more than {MAX_HITS} places in the file; a mutant needs exactly one"


def match_lines(source: str, edit: Edit, path: str = "<source>") -> dict[str, list[int]]:
    """For `falsify lint`: the lines each part of `edit` that must match exactly once matches in `source`, by field
    name: `statement` (not an insert's: that is the new code) and `anchor` within the function, or op text's
    `snippet` or `regex` in the file. Raises StaleMutant when the source does not parse or lacks the function,
    MutantSpecError when the regex does not compile."""
    if edit.op == "text":
        field = "snippet" if edit.snippet else "regex" if edit.regex else None
        if field is None:
            return {}
        return {field: [source.count("\n", 0, start) + 1 for start, _ in text_hits(source, edit)]}
    module, found = function_statements(source, edit.function, path)
    named = {"statement": edit.statement if edit.op != "insert" else None, "anchor": edit.anchor}
    return {
        field: [h.span.line for h in hits_of(found, module, text)] for field, text in named.items() if text
    }


def apply_text(source: str, edit: Edit, path: str = "<source>") -> Applied:
    """Op text, for a file in any language: replace the one occurrence of `snippet` (or the one match of `regex`)
    with `replacement`, taken literally. No match or several is STALE, as for the statement ops."""
    if (edit.snippet is None) == (edit.regex is None):
        raise MutantSpecError("op text needs exactly one of snippet, regex")
    if edit.replacement is None:
        raise MutantSpecError("op text needs a replacement", "replacement")
    hits = text_hits(source, edit)
    if len(hits) != 1:
        if edit.snippet is not None:
            shown = edit.snippet.strip().splitlines()[0] if edit.snippet.strip() else edit.snippet
            raise StaleMutant(f"{path}: the snippet occurs {len(hits)} times, not once: {shown!r}")
        raise StaleMutant(f"{path}: the regex matches {len(hits)} times, not once: {edit.regex!r}")
    ((start, end),) = hits
    mutated = source[:start] + edit.replacement + source[end:]
    if mutated == source:
        raise MutantSpecError("op text: the replacement equals the text it replaces", "replacement")
    if path.endswith(".py") and (error := python_parse_error(mutated)) is not None:
        # a Python file that no longer parses is killed by an import error, not by a prediction
        raise MutantSpecError(f"the mutated {path} does not parse as Python: {error}", "replacement")
    return Applied(source, mutated, _text_span(source, start, end), None)


def _text_span(source: str, start: int, end: int) -> Span:
    def at(offset: int) -> tuple[int, int]:
        line = source.count("\n", 0, offset) + 1
        return line, offset - (source.rfind("\n", 0, offset) + 1) + 1

    return Span(*at(start), *at(end))
