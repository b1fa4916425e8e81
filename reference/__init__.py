"""A pure-numpy reference inference engine that the falsify contracts are proven on.

Public API: `Q4_K`, `tiny_model`, `load_model`, `Session`, `CancelToken`, `LaneHost`. Names resolve lazily so that
importing one part of the engine does not import the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Q4_K": "reference.q4k",
    "tiny_model": "reference.tiny",
    "load_model": "reference.model",
    "Session": "reference.session",
    "CancelToken": "reference.cancel",
    "LaneHost": "reference.lanes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reference' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
