"""Choosing the engine under test: a registered name (`reference`, `hf`) or `module:factory`."""

from __future__ import annotations

import importlib
from typing import Any

from falsify.errors import FalsifyError

REGISTERED = {
    "reference": "reference.engine:ReferenceEngine",
    "hf": "falsify.engines.adapters.hf:HFEngine",
}


class EngineError(FalsifyError):
    """The engine named on the command line cannot be loaded."""


def load_engine(spec: str) -> Any:
    target = REGISTERED.get(spec, spec)
    if ":" not in target:
        raise EngineError(f"unknown engine {spec!r}: use one of {', '.join(REGISTERED)} or module:factory")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(f"engine {spec!r}: cannot import {module_name}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise EngineError(f"engine {spec!r}: {module_name} has no {attr!r}")
    engine = factory()
    for needed in ("name", "supports"):
        if not hasattr(engine, needed):
            raise EngineError(
                f"engine {spec!r}: the object {target} made has no {needed!r} (see README, Other engines)"
            )
    return engine
