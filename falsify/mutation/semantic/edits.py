"""Statement-level edits with libcst: find one statement of one function by its text (targets.py, the one matcher),
then move, delete, replace, swap or insert. Formatting and comments are kept; comments stay where they were, only
code moves. Op text (any language) is targets.apply_text.

Each operator carries (before, after) examples that are themselves tests (tests/test_mutants_edits.py), as
cosmic-ray's operators do.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from falsify.mutation.semantic.targets import (
    Applied,
    Edit,
    Example,
    MutantSpecError,
    Span,
    StaleMutant,
    apply_text,
    contains,
    edit_of,
    function_statements,
    header,
    match_lines,
    only_match,
    parse_statements,
    statement_tokens,
    tokens,
    tokens_match,
)

# Re-exported: importers take the records and the lint matcher from here, where the operators are.
__all__ = [
    "OPERATORS",
    "Applied",
    "Edit",
    "Example",
    "MutantSpecError",
    "Operator",
    "Span",
    "StaleMutant",
    "apply",
    "edit_of",
    "header",
    "match_lines",
    "tokens",
]


# -- operators ---------------------------------------------------------------------------------------------------


Rewrite = Callable[[cst.BaseStatement], list[cst.BaseStatement]]  # a statement -> what stands in its place


@dataclass(frozen=True, slots=True)
class Site:
    """Where an edit applies: the statement it names (for insert: the anchor), the anchor, the new statements
    (replace, insert) and before/after (move, insert)."""

    target: cst.BaseStatement
    anchor: cst.BaseStatement | None
    new: list[cst.BaseStatement]
    where: str | None


class Operator:
    """One kind of statement edit. `rewrites` says which statements change (by id) and what each becomes; the one
    applier (`_rebuild`) does the rest, keeping comments above a removed statement in place."""

    name: ClassVar[str]
    examples: ClassVar[tuple[Example, ...]]
    needs_anchor: ClassVar[bool] = False

    def prepare(self, edit: Edit, target: cst.BaseStatement, module: cst.Module) -> list[cst.BaseStatement]:
        """New statements this edit brings in (replace, insert); none by default."""
        return []

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
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

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
        return {id(site.target): lambda node: []}


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
            parsed = parse_statements(text + "\n    pass", "replacement")[0]
            if type(parsed) is not type(target):
                raise MutantSpecError(
                    f"replacement {text!r} is a {type(parsed).__name__}, the statement a "
                    f"{type(target).__name__}; a new first line must keep the statement's kind",
                    "replacement",
                )
            blocks = {
                f: getattr(target, f)
                for f in ("body", "orelse", "handlers", "finalbody")
                if hasattr(parsed, f)
            }
            return [parsed.with_changes(**blocks)]
        return parse_statements(text, "replacement")

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
        new = site.new

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

        return {id(site.target): replace}


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

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
        target, where = site.target, site.where
        return {id(target): lambda node: [], id(site.anchor): lambda node: _place(node, [target], where)}


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

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
        target, anchor = site.target, site.anchor
        assert anchor is not None
        return {
            id(target): lambda node: [anchor.with_changes(leading_lines=_lines(node))],
            id(anchor): lambda node: [target.with_changes(leading_lines=_lines(node))],
        }


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
        new = parse_statements(edit.replacement, "replacement")
        first = statement_tokens(cst.Module([]), new[0])
        if not tokens_match(tokens(edit.statement), first, not isinstance(new[0], cst.SimpleStatementLine)):
            raise MutantSpecError(
                f"insert: statement {edit.statement!r} must be the first line of the replacement "
                f"({' '.join(first)!r})",
                "statement",
            )
        return new

    def rewrites(self, site: Site) -> dict[int, Rewrite]:
        return {id(site.target): lambda node: _place(node, site.new, site.where)}


OPERATORS: dict[str, Operator] = {op.name: op for op in (Move(), Delete(), Replace(), Swap(), Insert())}


# -- applying --------------------------------------------------------------------------------------------------


def _rebuild(
    original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement], edits: dict[int, Rewrite]
) -> list[cst.BaseStatement]:
    """A block's statements with the edits applied; comments above a removed statement stay in place."""
    out: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for orig, upd in zip(original, updated, strict=True):
        edit = edits.get(id(orig))
        emitted = [upd] if edit is None else edit(upd)
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
    """Applies an operator's rewrites in the one block that holds the statements they name."""

    def __init__(self, rewrites: dict[int, Rewrite]) -> None:
        self.rewrites = rewrites

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not any(id(s) in self.rewrites for s in original_node.body):
            return updated_node
        return updated_node.with_changes(body=_rebuild(original_node.body, updated_node.body, self.rewrites))


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
        raise MutantSpecError(f"op {edit.op} needs a replacement", "replacement")
    module, found = function_statements(source, edit.function, path)
    anchor = only_match(found, module, edit.anchor, "anchor", edit.function) if edit.anchor else None
    if edit.op == "insert":
        assert anchor is not None
        target, anchor_node = anchor, None
        new = operator.prepare(edit, anchor.node, module)
    else:
        target = only_match(found, module, edit.statement, "statement", edit.function)
        anchor_node = anchor.node if anchor else None
        if anchor_node is not None:
            if anchor_node is target.node:
                raise MutantSpecError(
                    f"statement and anchor are the same statement (line {target.span.line})"
                )
            if contains(target.node, anchor_node) or (
                edit.op == "swap" and contains(anchor_node, target.node)
            ):
                raise MutantSpecError(
                    f"op {edit.op}: the anchor (line {anchor.span.line}) and the statement "  # type: ignore[union-attr]
                    f"(line {target.span.line}) are nested in one another"
                )
        new = operator.prepare(edit, target.node, module)
    mutated = module.visit(_Rewrite(operator.rewrites(Site(target.node, anchor_node, new, edit.where)))).code
    if mutated == source:
        raise MutantSpecError("the edit changes nothing")
    try:
        compile(mutated, path, "exec")
    except SyntaxError as exc:
        raise MutantSpecError(
            f"the mutated {path} does not compile: {exc.msg} (line {exc.lineno})", "replacement"
        ) from None
    if edit.op == "insert":
        return Applied(source, mutated, target.span, None)
    return Applied(source, mutated, target.span, anchor.span if anchor else None)
