"""What is wrong with a mutant file that no run could get past, found before any copy is made: a target that is
not UTF-8 text or is too large to parse, a `build` or exec: `engine` that no shell line could be, a replacement
that is no Python statement, an op text edit that leaves a .py file unparseable, a regex re refuses or cannot
search in bounded time (targets.regex_spans). `falsify lint` reports these (matching.py) and `falsify mutants`
refuses to start on them (exit 2); the runner checks the same again where it applies a mutant.

Each finding is (field, message): the mutant file's field at fault, and one line saying what is wrong.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import textwrap
from pathlib import Path

from falsify.contracts.corpus import Mutant
from falsify.mutation.semantic.targets import (
    MutantSpecError,
    StaleMutant,
    apply_text,
    edit_of,
    parse_statements,
)
from falsify.project import source_problem

# libcst parses a statement op's whole module, at ~45 µs a byte (lint, and each run): 256 KiB is some 11 s. Op
# text only searches its file (a snippet with str.find, a regex in a bounded child process).
MAX_PYTHON_BYTES = 256 << 10
MAX_TEXT_BYTES = 1 << 20

Finding = tuple[str, str]  # (field, message)


def read_target(root: Path, m: Mutant) -> str:
    """The text of the file `m` edits: MutantSpecError (field `file`) when it is not a regular file inside the
    project, is larger than a mutant's target may be, cannot be read or is not UTF-8."""
    bad = source_problem(root, m.file)
    if bad:
        raise MutantSpecError(bad, "file")
    limit = MAX_TEXT_BYTES if m.op == "text" else MAX_PYTHON_BYTES
    try:
        # O_NONBLOCK: a FIFO planted after the check above opens without waiting for a writer, and is refused
        fd = os.open(root / m.file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise MutantSpecError(f"{m.file} is not a regular file", "file")
            data = f.read(limit + 1)
    except OSError as exc:
        raise MutantSpecError(f"{m.file} cannot be read: {exc.strerror}", "file") from None
    if len(data) > limit:
        what = "op text" if m.op == "text" else f"op {m.op} (parsed whole with libcst)"
        raise MutantSpecError(f"{m.file} is over the {limit >> 10} KiB a mutant of {what} may edit", "file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MutantSpecError(
            f"{m.file} is not UTF-8 text (byte {exc.start}: {exc.reason}); a mutant edits text files only",
            "file",
        ) from None


def split_line(command: str, field: str) -> list[str]:
    """`command` split as a POSIX shell would (the runner runs it without a shell): MutantSpecError naming
    `field` when it holds a NUL byte, an unbalanced quote or nothing."""
    if "\0" in command:
        raise MutantSpecError("holds a NUL byte, which no program's arguments can carry", field)
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise MutantSpecError(f"cannot split {command!r} as a shell would: {exc}", field) from None
    if not argv:
        raise MutantSpecError("names no command", field)
    return argv


def static_findings(m: Mutant, source: str | None = None) -> list[Finding]:
    """What is wrong with `m` whatever the machine: its `build` and exec: `engine` lines, its replacement
    (statement ops: one Python statement or more; for a new first line of a compound statement, that line) and,
    given the target's `source`, an op text edit that leaves a .py file unparseable. A snippet or regex that
    matches other than once is not one of these: at run time that mutant is STALE (lint says so itself)."""
    found: list[Finding] = []
    lines = [("build", m.build), ("engine", m.engine.removeprefix("exec:") if m.engine else None)]
    for field, line in lines:
        if line is None or (field == "engine" and not (m.engine or "").startswith("exec:")):
            continue
        try:
            split_line(line, field)
        except MutantSpecError as exc:
            found.append((field, str(exc)))
    if m.op in ("replace", "insert") and m.replacement:
        text = textwrap.dedent(m.replacement).strip()
        if m.op == "replace" and text.endswith(":") and "\n" not in text:
            text += "\n    pass"  # a compound statement's new first line keeps the old body (edits.Replace)
        try:
            parse_statements(text, "replacement")
        except MutantSpecError as exc:
            found.append(("replacement", str(exc)))
    if m.op == "text" and source is not None:
        try:
            apply_text(source, edit_of(m), m.file)
        except StaleMutant:
            pass
        except MutantSpecError as exc:
            found.append((exc.field or "replacement", str(exc)))
    return found


def preflight(m: Mutant, root: Path) -> list[Finding]:
    """static_findings, with the target read, and the `build` program looked up as the run will start it (in the
    copy's root, on PATH): for `falsify mutants`, before anything runs."""
    try:
        source = read_target(root, m)
    except MutantSpecError as exc:
        return [(exc.field, str(exc))]
    found = static_findings(m, source)
    if m.build and not any(field == "build" for field, _ in found):
        program = split_line(m.build, "build")[0]
        if "/" in program:
            where = root / program
            usable = where.is_file() and os.access(where, os.X_OK)
        else:
            usable = shutil.which(program) is not None
        if not usable:
            found.append(("build", f"no program {program!r} to run (not on PATH, or not an executable file)"))
    return found
