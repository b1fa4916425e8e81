"""One `generate` call of the Session protocol, for every session the harness itself implements (the library
adapters in engines/adapters/, the wire client in engines/wire/): `CheckedGenerate.generate` states the protocol's
signature once, checks the arguments (`generate_call`: one ValueError naming the argument, before anything is sent
or computed) and hands the checked call to the session's own `_run`.

What is checked depends on who can refuse a bad request itself. A wire engine must refuse an empty prompt, a token
outside its vocabulary or a run past its context with an error of its own (docs/engine-protocol.md), and the
harness judges that refusal, so the wire client checks only what cannot be sent (types, a max_tokens below 0, a
cancel token, callables). A library generates at least one token and has no refusal to judge, so an adapter passes
its vocabulary and context and asks for a prompt and at least one token (`nonempty=True, least=1`). The reference
engine's session, an engine, is a CheckedGenerate too and refuses with these same checks (`nonempty=True`, its
vocabulary and context)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from falsify.engines.cancel import HarnessCancel
from falsify.engines.tokens import token_list

__all__ = ["CheckedGenerate", "GenerateCall", "generate_call"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GenerateCall:
    """One generate call's arguments, checked: plain int ids, and a cancel token (HarnessCancel.never() when
    none was given)."""

    prompt: list[int]
    max_tokens: int
    stops: list[int]
    cancel: Any
    sampler: Callable[[np.ndarray], int] | None
    on_token: Callable[[int], object] | None


def generate_call(
    prompt: Any,
    max_tokens: Any,
    stop_tokens: Any,
    cancel: Any,
    sampler: Any,
    on_token: Any,
    *,
    vocab: int | None = None,
    positions: int | None = None,
    nonempty: bool = False,
    least: int = 0,
) -> GenerateCall:
    """The checked call, or a ValueError naming the first bad argument. With `vocab`, every id must be in
    [0, vocab); with `positions`, the prompt and every emitted token but the last must fit; `nonempty`: the
    prompt must hold a token; max_tokens must be at least `least`."""
    ids = token_list(prompt, "prompt", vocab)
    if nonempty and not ids:
        raise ValueError("prompt is empty: generate needs at least one token to prefill")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int | np.integer) or max_tokens < least:
        raise ValueError(f"max_tokens must be an int >= {least}, got {max_tokens!r}")
    # The prompt fills positions [0, len); each emitted token after the first is fed back at the next one.
    needed = len(ids) + max(int(max_tokens), 1) - 1
    if positions is not None and needed > positions:
        raise ValueError(
            f"prompt of {len(ids)} tokens with max_tokens={max_tokens} needs {needed} positions; "
            f"the context holds {positions} (max_position_embeddings)"
        )
    stops = token_list(stop_tokens, "stop_tokens", vocab)
    cancel = HarnessCancel.never() if cancel is None else cancel
    if not (
        callable(getattr(cancel, "is_cancelled", None)) and isinstance(getattr(cancel, "polls", None), int)
    ):
        raise ValueError(
            f"cancel must be a cancel token (is_cancelled() and polls), got {type(cancel).__name__}"
        )
    if sampler is not None and not callable(sampler):
        raise ValueError(
            f"sampler must be callable (logits [vocab] -> token id), got {type(sampler).__name__}"
        )
    if on_token is not None and not callable(on_token):
        raise ValueError(f"on_token must be callable or None, got {type(on_token).__name__}")
    return GenerateCall(ids, int(max_tokens), stops, cancel, sampler, on_token)


class CheckedGenerate(Generic[T]):
    """The Session protocol's `generate`: subclasses implement `_run(call)` and, to check more than the wire
    client does, `_check`."""

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Any = None,
        stop_tokens: Iterable[int] = (),
        sampler: Callable[[np.ndarray], int] | None = None,
        on_token: Callable[[int], object] | None = None,
    ) -> T:
        return self._run(self._check(prompt, max_tokens, stop_tokens, cancel, sampler, on_token))

    def _check(
        self, prompt: Any, max_tokens: Any, stop_tokens: Any, cancel: Any, sampler: Any, on_token: Any
    ) -> GenerateCall:
        return generate_call(prompt, max_tokens, stop_tokens, cancel, sampler, on_token)

    def _run(self, call: GenerateCall) -> T:
        raise NotImplementedError
