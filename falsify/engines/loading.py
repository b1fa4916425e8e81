"""Choosing the engine under test: a registered name (`reference`, `hf`), `module:factory`, or a wire engine in any
language: `exec:"CMD ARGS"` (a subprocess speaking docs/engine-protocol.md on stdio) or `http://HOST:PORT`."""

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
    if spec.startswith(("exec:", "http://")):
        from falsify.engines.wire.client import WireEngine

        return WireEngine(spec)
    target = REGISTERED.get(spec, spec)
    if ":" not in target:
        raise EngineError(
            f'unknown engine {spec!r}: use one of {", ".join(REGISTERED)}, module:factory, exec:"CMD ARGS" or '
            "http://HOST:PORT"
        )
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
