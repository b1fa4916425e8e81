"""falsify: contracts as validated data, bound to pytest falsifiers, gated in CI, attacked with planted bugs.

The package's folders follow the data flow (each may import only from the ones before it; tests/test_layout.py
enforces it):

    errors, project, table   shared base: named errors, the project's configuration, plain-text tables;
    untrusted/               the layer every untrusted input passes: safefile (the one file layer for user
                             paths), boundedjson (the one reader for JSON falsify did not write) and deadline
                             (a peer's bytes read by one deadline)
    subcommand               how every `falsify` subcommand's parser is made
    contracts/               YAML loading, schema check, formula language, corpus, lint
    engines/                 the engine protocol, loading an engine by name, adapters for engines no one here wrote
    harness/                 falsify.check, the pytest plugin, per-prediction results, the gate
    packs/                   built-in contract packs (data): contracts with their engine-neutral falsifiers
    mutation/                semantic mutants (planted bugs from mutants/*.yaml), mutmut, the Stryker report
    evidence/                the release evidence bundle and its verification
    cli, init, wrapper       the `falsify` command over all of the above; `falsify init`'s starter files; the
                             harness wheel `falsify wrapper` pins in a project for its CI
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from falsify.errors import (
        BindingError,
        ContractError,
        ContractViolation,
        FalsifyError,
        FormulaError,
        ObservationError,
    )
    from falsify.harness.checks import cannot_show, check, corner_examples, corners, strategies
    from falsify.harness.instruments import CountingCancel, CountingModel, Forward

# Imported on first use (PEP 562), so a process that imports one module below (an engine loader, say) does not
# pay for the contract loader, its schema validator and numpy: `falsify.check` and `from falsify import check`
# work as before.
_EXPORTS = {
    "BindingError": "falsify.errors",
    "ContractError": "falsify.errors",
    "ContractViolation": "falsify.errors",
    "FalsifyError": "falsify.errors",
    "FormulaError": "falsify.errors",
    "ObservationError": "falsify.errors",
    "cannot_show": "falsify.harness.checks",
    "check": "falsify.harness.checks",
    "corner_examples": "falsify.harness.checks",
    "corners": "falsify.harness.checks",
    "strategies": "falsify.harness.checks",
    "CountingCancel": "falsify.harness.instruments",
    "CountingModel": "falsify.harness.instruments",
    "Forward": "falsify.harness.instruments",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'falsify' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "BindingError",
    "ContractError",
    "ContractViolation",
    "CountingCancel",
    "CountingModel",
    "FalsifyError",
    "FormulaError",
    "Forward",
    "ObservationError",
    "cannot_show",
    "check",
    "corner_examples",
    "corners",
    "strategies",
]
