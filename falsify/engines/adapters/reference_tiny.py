"""The reference engine's tiny model as the adapters' default weights, found at run time.

The harness does not depend on the reference engine: it is its own distribution (falsify-harness-reference,
packaging/reference). When a user names no weights (`--engine hf`, `--engine llamacpp` without `:PATH.gguf`), the
adapters fall back to the checkpoint the reference engine generates (reference.tiny), only where that
distribution is installed; elsewhere `reference_module` raises NoDefaultWeights saying what to install or pass.
`source()` is the one line `falsify engine check` prints about it.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

DISTRIBUTION = "falsify-harness-reference"
INSTALL = f"pip install ./packaging/reference (distribution {DISTRIBUTION})"


class NoDefaultWeights(RuntimeError):
    """No weights were named and the reference distribution, whose tiny model is the default, is not installed."""


def installed() -> bool:
    """Whether `import reference` would find the reference distribution here."""
    return importlib.util.find_spec("reference") is not None


def reference_module(name: str, named: str) -> ModuleType:
    """reference.<name>, imported by name at run time. `named`: how the user names weights instead."""
    try:
        return importlib.import_module(f"reference.{name}")
    except ImportError as exc:
        raise NoDefaultWeights(
            f"no weights named ({named}) and the default, the reference engine's tiny model, needs the reference "
            f"engine, which is not installed here ({exc}): {INSTALL}"
        ) from None


def source(named: str) -> str:
    """What an adapter given no weights will load, said for `falsify engine check`."""
    if installed():
        return (
            f"the reference engine's tiny model ({DISTRIBUTION} is installed); {named} to load other weights"
        )
    return f"none: {named} ({DISTRIBUTION}, whose tiny model is the default, is not installed)"
