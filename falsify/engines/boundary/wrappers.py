"""The boundary mutants' wrappers: the adopter's engine object with one bug class injected where the falsifiers
meet it (catalogue.py says which predictions each must turn red).

`wrap(engine, mutant_id)` returns a `BoundaryEngine`: every attribute is the engine's, but `session` (the
cancellation mutants) or `sampler` / `greedy` (the sampler mutants). A wrapped session runs the engine's own
`generate` on a `_Tap` of the model it was given, which remembers the state each forward advanced, so a mutant that
adds a forward makes it through that same model object: the harness's CountingModel counts it as it counts the
engine's own. An added forward runs on a copy of the state (`state.copy()`, when the state offers one), so the
session's own state is not advanced behind its back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from falsify.engines.boundary.catalogue import by_id


class BoundaryError(ValueError):
    """An unknown boundary mutant id (FALSIFY_BOUNDARY_MUTANT)."""


def wrap(engine: Any, mutant_id: str) -> Any:
    """`engine` with the boundary mutant `mutant_id` switched on."""
    if by_id(mutant_id) is None:
        raise BoundaryError(
            f"unknown boundary mutant {mutant_id!r} (falsify mutants --list-boundary lists them)"
        )
    return BoundaryEngine(engine, mutant_id)


class BoundaryEngine:
    """The engine under test with one boundary mutant on; see the module docstring."""

    def __init__(self, engine: Any, mutant_id: str) -> None:
        self._engine = engine
        self.boundary_mutant = mutant_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    @property
    def name(self) -> str:
        return str(self._engine.name)

    def supports(self, capability: str) -> str | None:
        return self._engine.supports(capability)

    def session(self, model: Any) -> Any:
        tap = _Tap(model)
        return _Session(self._engine.session(tap), tap, self.boundary_mutant)

    def sampler(
        self, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0
    ) -> Any:
        inner = self._engine.sampler
        m = self.boundary_mutant
        if m == "top-p-unchecked" and top_p is not None and not _in_unit(top_p):
            top_p = None
        made = inner(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)  # refuses what it refuses
        if m == "temperature-ignored":
            return inner(temperature=1.0, top_k=top_k, top_p=top_p, seed=seed)
        if m == "top-k-ignored":
            return inner(temperature=temperature, top_k=None, top_p=top_p, seed=seed)
        if m == "top-p-ignored":
            return inner(temperature=temperature, top_k=top_k, top_p=None, seed=seed)
        return made

    def greedy(self) -> Any:
        inner = self._engine.greedy()
        if self.boundary_mutant != "greedy-in-half-precision":
            return inner
        return lambda logits: inner(np.asarray(logits, np.float32).astype(np.float16).astype(np.float32))


def _in_unit(top_p: Any) -> bool:
    try:
        return 0.0 < float(top_p) <= 1.0
    except (TypeError, ValueError):
        return False


class _Tap:
    """The model a wrapped session is given: every attribute is the model's; `forward` (and an adapter's
    `record`) remember the state they advanced, so a mutant can add a forward on it."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.last_state: Any = None

    def forward(self, tokens: Any, state: Any) -> Any:
        self.last_state = state
        return self._model.forward(tokens, state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def extra_forward(self, tokens: Sequence[int], state: Any) -> None:
        """One forward the engine would not have made, on a copy of `state` when it offers one."""
        copy = getattr(state, "copy", None)
        target = copy() if callable(copy) else state
        self._model.forward(np.asarray(list(tokens), dtype=np.int64), target)


class _PollAfterForward:
    """A cancel token whose poll, when it finds the run cancelled, first makes the forward a poll after the forward
    would have made: a decode forward on the last emitted token, or the prompt's prefill."""

    def __init__(self, token: Any, tap: _Tap, prompt: Sequence[int], emitted: list[int]) -> None:
        self._token = token
        self._tap = tap
        self._prompt = list(prompt)
        self._emitted = emitted
        self._done = False

    @property
    def polls(self) -> int:
        return int(self._token.polls)

    def cancel(self) -> None:
        self._token.cancel()

    def is_cancelled(self) -> bool:
        cancelled = bool(self._token.is_cancelled())
        if cancelled and not self._done:
            self._done = True
            if self._emitted and self._tap.last_state is not None:
                self._tap.extra_forward([self._emitted[-1]], self._tap.last_state)
            elif not self._emitted:
                self._tap.extra_forward(self._prompt, self._tap.new_state())
        return cancelled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._token, name)


class _Session:
    def __init__(self, session: Any, tap: _Tap, mutant_id: str) -> None:
        self._session = session
        self._tap = tap
        self._mutant = mutant_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Any = None,
        stop_tokens: Any = (),
        sampler: Callable[[Any], int] | None = None,
        on_token: Callable[[int], object] | None = None,
    ) -> Any:
        emitted: list[int] = []

        def seen(token: int) -> object:
            emitted.append(int(token))
            return on_token(token) if on_token is not None else None

        if self._mutant == "poll-deleted":
            cancel = None
        elif self._mutant == "poll-after-forward" and cancel is not None:
            cancel = _PollAfterForward(cancel, self._tap, prompt, emitted)
        kwargs: dict[str, Any] = {"cancel": cancel, "stop_tokens": stop_tokens, "on_token": seen}
        if sampler is not None:
            kwargs["sampler"] = sampler
        run = self._session.generate(prompt, max_tokens, **kwargs)
        ended = str(run.stop_reason) != "cancelled" and len(run.tokens) > 0
        if self._mutant == "forward-after-last-token" and ended and self._tap.last_state is not None:
            self._tap.extra_forward([int(run.tokens[-1])], self._tap.last_state)
        if self._mutant == "record-misses-a-decode":
            return _miscounted(run)
        return run


def _miscounted(run: Any) -> Any:
    """The run record with one decode forward fewer (its claims too, where a wire engine made some)."""
    decode = int(run.decode_forwards)
    claims = dict(getattr(run, "claims", None) or {})
    if "decode_forwards" in claims:
        claims["decode_forwards"] = max(int(claims["decode_forwards"]) - 1, 0)
    if dataclasses.is_dataclass(run) and not isinstance(run, type):
        fields = {f.name for f in dataclasses.fields(run)}
        changes: dict[str, Any] = {"decode_forwards": max(decode - 1, 0)}
        if "claims" in fields:
            changes["claims"] = claims
        try:
            return dataclasses.replace(run, **changes)
        except (TypeError, ValueError):
            pass
    return _Record(run, max(decode - 1, 0), claims)


class _Record:
    def __init__(self, run: Any, decode_forwards: int, claims: dict[str, Any]) -> None:
        self._run = run
        self.decode_forwards = decode_forwards
        self.claims = claims

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)
