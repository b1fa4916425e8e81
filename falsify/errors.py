"""Named errors. Bad input never reaches the user as a traceback: each error carries the file, line and field."""

from __future__ import annotations

from dataclasses import dataclass

# Characters a terminal acts on rather than shows: C0 controls but tab, DEL, C1 controls (0x9b is a one-byte CSI),
# and the bidirectional overrides and isolates that reorder what is shown (Trojan Source, CVE-2021-42574), plus
# the Unicode line and paragraph separators; and lone surrogates (a file name's undecodable bytes, as os.fsdecode
# gives them: printing one raised UnicodeEncodeError). Each is shown as Python writes it in a string literal.
_SHOWN = {"\n": "\\n", "\r": "\\r"}
_UNSAFE = [*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F)]
_UNSAFE += [*range(0x2066, 0x206A), 0x2028, 0x2029, 0x200E, 0x200F, 0x061C, *range(0xD800, 0xE000)]
_ESCAPES = {c: _SHOWN.get(chr(c)) or (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}
_ESCAPES_KEEPING_NEWLINES = {c: e for c, e in _ESCAPES.items() if c != 0x0A}


def terminal_safe(text: object, *, newlines: bool = False) -> str:
    r"""`text` as it may reach a terminal or a CI log: every control character (but tab) escaped, `\x1b` style
    (`\n` and `\r` as such), ordinary unicode kept. An engine's error message, a file or engine name is
    untrusted: ESC[2J would clear the screen, an OSC sequence retitle the window, a newline forge a line of ours.
    `newlines`: keep line breaks (a message of ours that is several lines, each made safe)."""
    return str(text).translate(_ESCAPES_KEEPING_NEWLINES if newlines else _ESCAPES)


class FalsifyError(Exception):
    """Base of every error falsify raises on bad input."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One lint finding, jsonschema-style: what is wrong, which rule, where."""

    file: str
    line: int
    path: str  # inside the document, e.g. "predictions[3].formula"; "" for the document itself
    message: str
    rule: str  # the schema keyword or lint rule that failed, e.g. "additionalProperties", "formula-name"

    def __str__(self) -> str:
        # a file name, a key or a message quoting the file's text is the file's, not ours: one terminal-safe line
        where = f"{terminal_safe(self.file)}:{self.line}"
        inside = f" {terminal_safe(self.path)}:" if self.path else ""
        return f"{where}:{inside} {terminal_safe(self.message)} [{terminal_safe(self.rule)}]"


class ContractError(FalsifyError):
    """A contract or mutant file that cannot be used; str() names file:line."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            self.problems: list[Problem] = []
            super().__init__(problems)
            return
        self.problems = [problems] if isinstance(problems, Problem) else problems
        super().__init__("\n".join(str(p) for p in self.problems))


class ObservationError(ContractError):
    """A value given to falsify.check that the contract does not allow: the wrong type, a non-finite float where
    none is declared, or a domain parameter outside its range. The check is an ERROR, never a PASS."""


class FormulaError(FalsifyError):
    """A formula that does not parse, or uses something outside the formula language."""


class BindingError(FalsifyError):
    """Predictions and falsifier tests do not match up."""


class ContractViolation(AssertionError):
    """A prediction's formula evaluated to false on observed values: the contract is falsified."""

    def __init__(self, prediction_id: str, formula: str, values: dict[str, object], contract: str = ""):
        self.prediction_id = prediction_id
        self.formula = formula
        self.values = values
        self.contract = contract
        shown = ", ".join(f"{name} was {_short(value)}" for name, value in values.items())
        source = f" ({contract})" if contract else ""
        super().__init__(f"{prediction_id}{source} falsified: {formula}: {shown}")


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 12] + f"... ({len(text)} chars)"
