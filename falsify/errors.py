"""Named errors. Bad input never reaches the user as a traceback: each error carries the file, line and field."""

from __future__ import annotations

from dataclasses import dataclass


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
        where = f"{self.file}:{self.line}"
        inside = f" {self.path}:" if self.path else ""
        return f"{where}:{inside} {self.message} [{self.rule}]"


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
