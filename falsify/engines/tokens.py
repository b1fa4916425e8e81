"""A token-id argument, checked before anything uses it: `token_list(tokens, what, vocab=None)` gives plain ints or
one ValueError naming the argument and the offending item (`prompt[1] is 2.0, not an int token id`, `prompt[1] =
512 is outside the vocabulary [0, 512)`). Used by the wire client before a request is sent and by the reference
engine's session before it touches any state."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["token_list"]


def token_list(tokens: Any, what: str, vocab: int | None = None) -> list[int]:
    """Plain int token ids (numpy ints included, bools not), each in [0, vocab) when a vocabulary is given."""
    if isinstance(tokens, str | bytes):
        raise ValueError(f"{what} must be a sequence of token ids, got {type(tokens).__name__}")
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    try:
        items = list(tokens)
    except TypeError:
        raise ValueError(f"{what} must be a sequence of token ids, got {type(tokens).__name__}") from None
    out = []
    for i, t in enumerate(items):
        if isinstance(t, bool) or not isinstance(t, int | np.integer):
            raise ValueError(f"{what}[{i}] is {t!r}, not an int token id")
        if vocab is not None and not 0 <= t < vocab:
            raise ValueError(f"{what}[{i}] = {int(t)} is outside the vocabulary [0, {vocab})")
        out.append(int(t))
    return out
