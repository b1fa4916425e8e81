"""A test adapter: the reference engine whose run record reports one decode forward fewer than it ran.

Everything it does is the reference engine's (same loop, same forwards, same tokens); only the record lies. The
cancellation falsifiers judge the harness's own counts, so they must falsify it: FALSIFY-SERVE-CANCEL-011 (the
record agrees with the measurements) turns red while every behavioural prediction still holds. Loaded as
`--engine miscounting_engine:MiscountingEngine` with tests/ on PYTHONPATH (tests/test_harness_measures.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference.engine import ReferenceEngine


class MiscountingSession:
    def __init__(self, session: Any) -> None:
        self._session = session

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        run = self._session.generate(*args, **kwargs)
        if run.decode_forwards == 0:
            return run
        return dataclasses.replace(run, decode_forwards=run.decode_forwards - 1)


class MiscountingEngine(ReferenceEngine):
    name = "miscounting"
    capabilities = frozenset({"generate"})

    def session(self, model: Any) -> MiscountingSession:
        return MiscountingSession(super().session(model))
