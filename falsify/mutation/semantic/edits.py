"""Statement-level edits with libcst: find one statement of one function by its text, then move, delete, replace,
swap or insert. Formatting and comments are kept; comments stay where they were, only code moves.

A statement is matched by its tokens (whitespace and comments ignored); a compound statement (`if`, `for`,
`while`, `with`, `try`, `def`, ...) by its first line, the header up to its colon. The statement and the anchor
must each match exactly one statement of the function, else the mutant is STALE: the source drifted.

Each operator carries (before, after) examples that are themselves tests (tests/test_mutants_edits.py), as
cosmic-ray's operators do.
"""

from __future__ import annotations

import difflib
import io
import re
import textwrap
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from falsify.errors import FalsifyError


class StaleMutant(FalsifyError):
    """The function, statement or anchor a mutant names no longer matches exactly once: the source drifted."""


class MutantSpecError(FalsifyError):
    """The mutant itself cannot be applied: bad replacement source, an edit that changes nothing, or a result
    that does not compile."""


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


def _statement_tokens(module: cst.Module, node: cst.BaseStatement) -> tuple[str, ...]:
    if isinstance(node, cst.SimpleStatementLine):
        return tokens(module.code_for_node(node))
    if isinstance(node, cst.FunctionDef | cst.ClassDef):
        node = node.with_changes(decorators=())
    return header(tokens(module.code_for_node(node)))


def _matches(wanted: tuple[str, ...], have: tuple[str, ...], compound: bool) -> bool:
    return wanted == have or (compound and wanted == have[:-1] and have[-1:] == (":",))


@dataclass(frozen=True, slots=True)
class _Found:
    node: cst.BaseStatement
    span: Span


class _Statements(cst.CSTVisitor):
    """Every statement inside one function, at any depth, with its position."""

    def __init__(self, positions: object) -> None:
        self.found: list[_Found] = []
        self.positions = positions

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        for stmt in node.body:
            pos = self.positions[stmt]  # type: ignore[index]
            self.found.append(
                _Found(stmt, Span(pos.start.line, pos.start.column + 1, pos.end.line, pos.end.column + 1))
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


def _hits(found: list[_Found], module: cst.Module, text: str) -> list[_Found]:
    wanted = tokens(text)
    return [
        f
        for f in found
        if _matches(
            wanted, _statement_tokens(module, f.node), not isinstance(f.node, cst.SimpleStatementLine)
        )
    ]


def _one(found: list[_Found], module: cst.Module, text: str, what: str, function: str) -> _Found:
    hits = _hits(found, module, text)
    if len(hits) != 1:
        where = f" (lines {', '.join(str(h.span.line) for h in hits)})" if hits else ""
        raise StaleMutant(
            f"{what} {text!r} matches {len(hits)} statements of {function}{where}; a mutant needs exactly one"
        )
    return hits[0]


def _parse_statements(source: str, what: str) -> list[cst.BaseStatement]:
    try:
        return list(cst.parse_module(textwrap.dedent(source).strip() + "\n").body)
    except cst.ParserSyntaxError as exc:
        raise MutantSpecError(f"{what} does not parse: {str(exc).splitlines()[0]}") from None


def _contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    if outer is inner:
        return True
    return any(_contains(child, inner) for child in outer.children)


# -- operators ---------------------------------------------------------------------------------------------------


class Operator:
    """One kind of statement edit. `rewrite` turns one block's statements into the mutated block's statements."""

    name: ClassVar[str]
    examples: ClassVar[tuple[Example, ...]]
    needs_anchor: ClassVar[bool] = False

    def prepare(self, edit: Edit, target: cst.BaseStatement, module: cst.Module) -> list[cst.BaseStatement]:
        """New statements this edit brings in (replace, insert); none by default."""
        return []

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        raise NotImplementedError


def _lines(node: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The blank and comment lines above a statement (both kinds of statement have them; BaseStatement does not
    declare them)."""
    lines: Sequence[cst.EmptyLine] = getattr(node, "leading_lines", ())
    return lines


def _without_lines(node: cst.BaseStatement) -> cst.BaseStatement:
    return node.with_changes(leading_lines=())


def _place(
    anchor: cst.BaseStatement, moved: list[cst.BaseStatement], where: str | None
) -> list[cst.BaseStatement]:
    """`moved` right before or after the anchor; comments above the anchor stay right above it."""
    moved = [_without_lines(m) for m in moved]
    return [*moved, anchor] if where == "before" else [anchor, *moved]


class Delete(Operator):
    name = "delete"
    examples = (
        Example(
            Edit("loop", "delete", "if cancel.is_cancelled():"),
            before="""\
def loop(cancel):
    while True:
        # poll before the forward
        if cancel.is_cancelled():
            break
        forward()
""",
            after="""\
def loop(cancel):
    while True:
        # poll before the forward
        forward()
""",
        ),
        Example(
            Edit("Host.release", "delete", "self.free.append(lane)"),
            before="""\
class Host:
    def release(self, lane):
        self.free.append(lane)  # back to the pool
""",
            after="""\
class Host:
    def release(self, lane):
        pass
""",
        ),
    )

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        return _rebuild(original, updated, {id(target): lambda node: []})


class Replace(Operator):
    name = "replace"
    examples = (
        Example(
            Edit("step", "replace", "state.pos += n", replacement="state.pos += n - 1"),
            before="""\
def step(state, n):
    state.pos += n  # advance
    return state
""",
            after="""\
def step(state, n):
    state.pos += n - 1  # advance
    return state
""",
        ),
        # A compound statement replaced by a new first line keeps its body.
        Example(
            Edit(
                "ended",
                "replace",
                "if len(tokens) >= max_tokens:",
                replacement="if len(tokens) > max_tokens:",
            ),
            before="""\
def ended(tokens, max_tokens):
    if len(tokens) >= max_tokens:
        return True
    return False
""",
            after="""\
def ended(tokens, max_tokens):
    if len(tokens) > max_tokens:
        return True
    return False
""",
        ),
    )

    def prepare(self, edit: Edit, target: cst.BaseStatement, module: cst.Module) -> list[cst.BaseStatement]:
        assert edit.replacement is not None
        text = textwrap.dedent(edit.replacement).strip()
        if isinstance(target, cst.BaseCompoundStatement) and text.endswith(":") and "\n" not in text:
            # A new header for the same compound statement: parse it with a placeholder body, keep the old body.
            (parsed,) = _parse_statements(text + "\n    pass", "replacement")
            if type(parsed) is not type(target):
                raise MutantSpecError(
                    f"replacement {text!r} is a {type(parsed).__name__}, the statement a "
                    f"{type(target).__name__}; a new first line must keep the statement's kind"
                )
            blocks = {
                f: getattr(target, f)
                for f in ("body", "orelse", "handlers", "finalbody")
                if hasattr(parsed, f)
            }
            return [parsed.with_changes(**blocks)]
        return _parse_statements(text, "replacement")

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        def replace(node: cst.BaseStatement) -> list[cst.BaseStatement]:
            first = new[0].with_changes(leading_lines=_lines(node))
            if (
                len(new) == 1
                and isinstance(node, cst.SimpleStatementLine)
                and isinstance(first, cst.SimpleStatementLine)
            ):
                first = first.with_changes(
                    trailing_whitespace=node.trailing_whitespace
                )  # keeps a trailing comment
            return [first, *new[1:]]

        return _rebuild(original, updated, {id(target): replace})


class Move(Operator):
    name = "move"
    needs_anchor = True
    examples = (
        # The bug this project comes from: the poll placed after the forward.
        Example(
            Edit(
                "loop", "move", "if cancel.is_cancelled():", anchor="logits = forward(tokens)", where="after"
            ),
            before="""\
def loop(cancel, tokens):
    while True:
        if cancel.is_cancelled():
            break
        logits = forward(tokens)
        tokens.append(sample(logits))
""",
            after="""\
def loop(cancel, tokens):
    while True:
        logits = forward(tokens)
        if cancel.is_cancelled():
            break
        tokens.append(sample(logits))
""",
        ),
        Example(
            Edit("run", "move", "state.reset()", anchor="for chunk in chunks:", where="before"),
            before="""\
def run(state, chunks):
    for chunk in chunks:
        state.reset()
        state.feed(chunk)
""",
            after="""\
def run(state, chunks):
    state.reset()
    for chunk in chunks:
        state.feed(chunk)
""",
        ),
    )

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        assert anchor is not None
        return _rebuild(
            original,
            updated,
            {id(target): lambda node: [], id(anchor): lambda node: _place(node, [target], where)},
        )


class Swap(Operator):
    name = "swap"
    needs_anchor = True
    examples = (
        Example(
            Edit("finish", "swap", "lane.release()", anchor="results.append(lane.output)"),
            before="""\
def finish(lane, results):
    # hand the output over, then free the lane
    results.append(lane.output)
    lane.release()
""",
            after="""\
def finish(lane, results):
    # hand the output over, then free the lane
    lane.release()
    results.append(lane.output)
""",
        ),
    )

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        assert anchor is not None
        return _rebuild(
            original,
            updated,
            {
                id(target): lambda node: [anchor.with_changes(leading_lines=_lines(node))],
                id(anchor): lambda node: [target.with_changes(leading_lines=_lines(node))],
            },
        )


class Insert(Operator):
    """`replacement` goes before or after `anchor`; `statement` names the inserted statement (its first line)
    and must agree with the replacement."""

    name = "insert"
    needs_anchor = True
    examples = (
        Example(
            Edit(
                "prefill",
                "insert",
                "state.reset()",
                anchor="state.feed(chunk)",
                where="before",
                replacement="state.reset()",
            ),
            before="""\
def prefill(state, chunks):
    for chunk in chunks:
        state.feed(chunk)
""",
            after="""\
def prefill(state, chunks):
    for chunk in chunks:
        state.reset()
        state.feed(chunk)
""",
        ),
    )

    def prepare(self, edit: Edit, target: cst.BaseStatement, module: cst.Module) -> list[cst.BaseStatement]:
        assert edit.replacement is not None
        new = _parse_statements(edit.replacement, "replacement")
        first = _statement_tokens(cst.Module([]), new[0])
        if not _matches(tokens(edit.statement), first, not isinstance(new[0], cst.SimpleStatementLine)):
            raise MutantSpecError(
                f"insert: statement {edit.statement!r} must be the first line of the replacement "
                f"({' '.join(first)!r})"
            )
        return new

    def rewrite(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> list[cst.BaseStatement]:
        return _rebuild(original, updated, {id(target): lambda node: _place(node, new, where)})


OPERATORS: dict[str, Operator] = {op.name: op for op in (Move(), Delete(), Replace(), Swap(), Insert())}


# -- applying --------------------------------------------------------------------------------------------------


def _rebuild(
    original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement], edits: dict[int, object]
) -> list[cst.BaseStatement]:
    """A block's statements with the edits applied; comments above a removed statement stay in place."""
    out: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for orig, upd in zip(original, updated, strict=True):
        edit = edits.get(id(orig))
        emitted = [upd] if edit is None else edit(upd)  # type: ignore[operator]
        if not emitted:
            carried.extend(_lines(upd))
            continue
        if carried:
            emitted[0] = emitted[0].with_changes(leading_lines=[*carried, *_lines(emitted[0])])
            carried = []
        out.extend(emitted)
    if carried or (original and not out):
        out.append(cst.SimpleStatementLine([cst.Pass()], leading_lines=carried))
    return out


class _Rewrite(cst.CSTTransformer):
    def __init__(
        self,
        operator: Operator,
        target: cst.BaseStatement,
        anchor: cst.BaseStatement | None,
        new: list[cst.BaseStatement],
        where: str | None,
    ) -> None:
        self.args = (target, anchor, new, where)
        self.operator = operator
        self.keys = {id(target)} | ({id(anchor)} if anchor is not None else set())

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not any(id(s) in self.keys for s in original_node.body):
            return updated_node
        body = self.operator.rewrite(original_node.body, updated_node.body, *self.args)
        return updated_node.with_changes(body=body)


def apply(source: str, edit: Edit, path: str = "<source>") -> Applied:
    """The mutated source. Raises StaleMutant when the function, statement or anchor does not match exactly once,
    MutantSpecError when the edit is malformed or its result does not compile."""
    if edit.op == "text":
        return apply_text(source, edit, path)
    operator = OPERATORS.get(edit.op)
    if operator is None:
        raise MutantSpecError(f"unknown op {edit.op!r} (known: {', '.join(OPERATORS)}, text)")
    if operator.needs_anchor and not edit.anchor:
        raise MutantSpecError(f"op {edit.op} needs an anchor")
    if edit.op in ("move", "insert") and edit.where not in ("before", "after"):
        raise MutantSpecError(f"op {edit.op} needs where: before or after, got {edit.where!r}")
    if edit.op in ("replace", "insert") and not edit.replacement:
        raise MutantSpecError(f"op {edit.op} needs a replacement")
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise StaleMutant(f"{path} does not parse: {str(exc).splitlines()[0]}") from None
    module = wrapper.module
    function = find_function(module, edit.function)
    if function is None:
        raise StaleMutant(f"{path} has no function {edit.function}")
    collector = _Statements(wrapper.resolve(PositionProvider))
    function.visit(collector)
    found = collector.found
    anchor = _one(found, module, edit.anchor, "anchor", edit.function) if edit.anchor else None
    if edit.op == "insert":
        assert anchor is not None
        target, anchor_node = anchor, None
        new = operator.prepare(edit, anchor.node, module)
    else:
        target = _one(found, module, edit.statement, "statement", edit.function)
        anchor_node = anchor.node if anchor else None
        if anchor_node is not None:
            if anchor_node is target.node:
                raise MutantSpecError(
                    f"statement and anchor are the same statement (line {target.span.line})"
                )
            if _contains(target.node, anchor_node) or (
                edit.op == "swap" and _contains(anchor_node, target.node)
            ):
                raise MutantSpecError(
                    f"op {edit.op}: the anchor (line {anchor.span.line}) and the statement "  # type: ignore[union-attr]
                    f"(line {target.span.line}) are nested in one another"
                )
        new = operator.prepare(edit, target.node, module)
    mutated = module.visit(_Rewrite(operator, target.node, anchor_node, new, edit.where)).code
    if mutated == source:
        raise MutantSpecError("the edit changes nothing")
    try:
        compile(mutated, path, "exec")
    except SyntaxError as exc:
        raise MutantSpecError(f"the mutated {path} does not compile: {exc.msg} (line {exc.lineno})") from None
    if edit.op == "insert":
        return Applied(source, mutated, target.span, None)
    return Applied(source, mutated, target.span, anchor.span if anchor else None)


def match_lines(source: str, edit: Edit, path: str = "<source>") -> dict[str, list[int]]:
    """For `falsify lint`: the lines each part of `edit` that must match exactly once matches in `source`, by field
    name: `statement` (not an insert's: that is the new code) and `anchor` within the function, or op text's
    `snippet` or `regex` in the file. Raises StaleMutant when the source does not parse or lacks the function,
    MutantSpecError when the regex does not compile."""
    if edit.op == "text":
        if edit.snippet:
            starts, at = [], source.find(edit.snippet)
            while at >= 0:
                starts.append(at)
                at = source.find(edit.snippet, at + 1)
            return {"snippet": [source.count("\n", 0, i) + 1 for i in starts]}
        if edit.regex:
            try:
                pattern = re.compile(edit.regex, re.MULTILINE)
            except re.error as exc:
                raise MutantSpecError(f"regex does not compile: {exc}") from None
            return {"regex": [source.count("\n", 0, m.start()) + 1 for m in pattern.finditer(source)]}
        return {}
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise StaleMutant(f"{path} does not parse: {str(exc).splitlines()[0]}") from None
    function = find_function(wrapper.module, edit.function)
    if function is None:
        raise StaleMutant(f"{path} has no function {edit.function}")
    collector = _Statements(wrapper.resolve(PositionProvider))
    function.visit(collector)
    named = {"statement": edit.statement if edit.op != "insert" else None, "anchor": edit.anchor}
    return {
        field: [h.span.line for h in _hits(collector.found, wrapper.module, text)]
        for field, text in named.items()
        if text
    }


def apply_text(source: str, edit: Edit, path: str = "<source>") -> Applied:
    """Op text, for a file in any language: replace the one occurrence of `snippet` (or the one match of `regex`)
    with `replacement`, taken literally. No match or several is STALE, as for the statement ops."""
    if (edit.snippet is None) == (edit.regex is None):
        raise MutantSpecError("op text needs exactly one of snippet, regex")
    if edit.replacement is None:
        raise MutantSpecError("op text needs a replacement")
    if edit.snippet is not None:
        count = source.count(edit.snippet)
        shown = edit.snippet.strip().splitlines()[0] if edit.snippet.strip() else edit.snippet
        if count != 1:
            raise StaleMutant(f"{path}: the snippet occurs {count} times, not once: {shown!r}")
        start = source.index(edit.snippet)
        end = start + len(edit.snippet)
    else:
        assert edit.regex is not None
        try:
            pattern = re.compile(edit.regex, re.MULTILINE)
        except re.error as exc:
            raise MutantSpecError(f"regex does not compile: {exc}") from None
        matches = list(pattern.finditer(source))
        if len(matches) != 1:
            raise StaleMutant(f"{path}: the regex matches {len(matches)} times, not once: {edit.regex!r}")
        start, end = matches[0].span()
    mutated = source[:start] + edit.replacement + source[end:]
    if mutated == source:
        raise MutantSpecError("op text: the replacement equals the text it replaces")
    return Applied(source, mutated, _text_span(source, start, end), None)


def _text_span(source: str, start: int, end: int) -> Span:
    def at(offset: int) -> tuple[int, int]:
        line = source.count("\n", 0, offset) + 1
        return line, offset - (source.rfind("\n", 0, offset) + 1) + 1

    return Span(*at(start), *at(end))
