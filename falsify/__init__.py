"""falsify: contracts as validated data, bound to pytest falsifiers, gated in CI, attacked with planted bugs.

The package's folders follow the data flow (each may import only from the ones before it; tests/test_layout.py
enforces it):

    errors, project, table   shared base: named errors, the project's configuration, plain-text tables;
    boundedjson, safefile    the one reader for JSON falsify did not write; the one file layer for user paths
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
