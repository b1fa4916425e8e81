"""`falsify.check`: evaluate a prediction's formula on observed values. The YAML formula is the single source of
truth; a test supplies observations, never the logic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.contracts.corpus import Corpus, Prediction, project_corpus
from falsify.errors import ContractError, ContractViolation, FormulaError


@dataclass(frozen=True, slots=True)
class Observation:
    prediction_id: str
    held: bool
    values: dict[str, Any]


# Set by the pytest plugin: where the contracts are (the project's and its packs'), and who records each
# observation for the running test.
contracts_dirs: tuple[Path, ...] = ()
recorder: Callable[[Observation], None] | None = None


def corpus() -> Corpus:
    loaded = project_corpus(*map(str, contracts_dirs))
    if loaded.problems:
        first = loaded.problems[0]
        raise ContractError(f"contracts do not lint ({len(loaded.problems)} problems); first: {first}")
    return loaded


def prediction(prediction_id: str) -> Prediction:
    predictions = corpus().predictions
    if prediction_id not in predictions:
        raise ContractError(f"unknown prediction {prediction_id!r}: no contract defines it")
    return predictions[prediction_id]


def plain(value: Any) -> Any:
    """Observed values as plain Python: numpy scalars and arrays become numbers and lists."""
    if hasattr(value, "tolist") and callable(value.tolist):
        return value.tolist()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def check(prediction_id: str, **observed: Any) -> None:
    """Raise ContractViolation (an AssertionError) unless the prediction's formula holds on `observed`."""
    __tracebackhide__ = True
    p = prediction(prediction_id)
    contract = corpus().contract_of(prediction_id)
    declared = set(contract.observables) | set(p.domain)
    unknown = sorted(set(observed) - declared)
    if unknown:
        raise ContractError(
            f"{prediction_id}: {', '.join(unknown)} not declared in {contract.file}; declared: {', '.join(sorted(declared))}"
        )
    values = {name: plain(v) for name, v in observed.items()}
    shown = {name: values[name] for name in p.formula.names if name in values}
    try:
        result = p.formula.evaluate(values)
    except FormulaError as exc:
        raise ContractError(f"{prediction_id}: {exc}") from None
    if not isinstance(result, bool):
        raise ContractError(f"{prediction_id}: formula {p.formula.source!r} gave {result!r}, not a bool")
    if recorder is not None:
        recorder(Observation(prediction_id, result, values))
    if not result:
        raise ContractViolation(prediction_id, p.formula.source, shown, contract.id)
