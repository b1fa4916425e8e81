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

    def load_model(self, *args: Any, **kwargs: Any) -> Any:
        model = self._engine.load_model(*args, **kwargs)
        if self.boundary_mutant == "state-copy-aliases":
            _alias_copies(model)
        return model

    def prefill(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        if self.boundary_mutant in ("state-reset-between-chunks", "cut-at-multiples-of-the-cap"):
            cap = kwargs.get("chunk_cap", args[2] if len(args) > 2 else None)
            model = _PrefillTap(model, self.boundary_mutant, cap)
        made = self._engine.prefill(model, *args, **kwargs)
        return _PollAfterChunk(made) if self.boundary_mutant == "prefill-polls-after-the-chunk" else made

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


class _PollAfterChunk:
    """A stepped prefill whose run(cancel) polls after each chunk, not before it; every other attribute is the
    prefill's."""

    def __init__(self, prefill: Any) -> None:
        self._prefill = prefill

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prefill, name)

    def run(self, cancel: Any = None) -> bool:
        while not self._prefill.done:
            self._prefill.step()
            if cancel is not None and cancel.is_cancelled():
                return bool(self._prefill.done)
        return True


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


def _alias_copies(model: Any) -> None:
    """Make every state of the model's state class answer copy() with itself. The class is patched, not a
    proxy put in front of each state: the engine's own code gets its own state objects back. The patch lives as
    long as the process, which is the boundary mutant's own pytest run."""
    state = model.new_state()
    cls = type(state)
    if getattr(cls, "_falsify_aliased", False):
        return
    cls.copy = lambda self: self
    cls._falsify_aliased = True
    release = getattr(state, "release", None)
    if callable(release):
        release()


class _PrefillTap:
    """The model a prefill runs on under the prefill mutants: every attribute is the model's; `forward` is the
    engine's chunk, changed as the mutant says (see catalogue.py)."""

    def __init__(self, model: Any, mutant_id: str, chunk_cap: int | None) -> None:
        self._model = model
        self._mutant = mutant_id
        self._cap = chunk_cap
        self._chunks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def forward(self, tokens: Any, state: Any) -> Any:
        self._chunks += 1
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self._mutant == "cut-at-multiples-of-the-cap" and self._cap:
            start = int(state.pos)
            inner = [
                m - start for m in range((start // self._cap + 1) * self._cap, start + len(ids), self._cap)
            ]
            pieces = [self._model.forward(part, state) for part in np.split(ids, inner) if len(part)]
            return None if any(p is None for p in pieces) else np.concatenate(pieces)
        logits = self._model.forward(ids, state)
        if self._mutant == "state-reset-between-chunks" and self._chunks > 1 and logits is not None:
            base = getattr(self._model, "wrapped", self._model)  # not through the harness's recorder
            fresh = base.new_state()
            logits = base.forward(ids, fresh)
            release = getattr(fresh, "release", None)
            if callable(release):
                release()
        return logits


class _PollAfterForward:
    """A cancel token whose poll, when it finds the run cancelled, first makes the forward a poll after the forward
    would have made: a decode forward on the last emitted token, or the prompt's prefill."""

    def __init__(self, token: Any, tap: _Tap, prompt: Sequence[int], emitted: list[int]) -> None:
        self._token = token
        self._tap = tap
        self._prompt = list(prompt)
        self._emitted = emitted
        self._done = False
        self.pending_prefill = False

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
                # made once the run has returned: a wire engine's connection is busy inside its generate
                self.pending_prefill = True
        return cancelled

    def flush(self) -> None:
        """The prefill a poll after it would have thrown away, for a run cancelled before its first token."""
        if self.pending_prefill:
            self.pending_prefill = False
            self._tap.extra_forward(self._prompt, self._tap.new_state())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._token, name)


class _Session:
    def __init__(self, session: Any, tap: _Tap, mutant_id: str) -> None:
        self._session = session
        self._tap = tap
        self._mutant = mutant_id
        self._first: int | None = (
            None  # the first token this session emitted (session-decode-keeps-stale-logits)
        )

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
        if isinstance(cancel, _PollAfterForward):
            cancel.flush()
        ended = str(run.stop_reason) != "cancelled" and len(run.tokens) > 0
        if self._mutant == "forward-after-last-token" and ended and self._tap.last_state is not None:
            self._tap.extra_forward([int(run.tokens[-1])], self._tap.last_state)
        if self._mutant == "record-misses-a-decode":
            return _miscounted(run)
        tokens = [int(t) for t in run.tokens]
        if self._mutant == "cancel-flushes-stale-token" and str(run.stop_reason) == "cancelled" and tokens:
            seen(tokens[-1])
            return _Record(run, tokens=(*tokens, tokens[-1]), emitted=len(tokens) + 1)
        if self._mutant == "session-decode-keeps-stale-logits" and tokens:
            first, self._first = self._first, self._first if self._first is not None else tokens[0]
            if first is not None:
                return _Record(run, tokens=(first, *tokens[1:]))
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
    return _Record(run, decode_forwards=max(decode - 1, 0), claims=claims)


class _Record:
    """A run record with some fields changed; every other is the record's."""

    def __init__(self, run: Any, **changed: Any) -> None:
        self._run = run
        self.__dict__.update(changed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)
