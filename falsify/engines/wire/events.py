"""What the wire client and the lane host share: the stand-in state a reported forward is replayed on, and the
check of a token-id argument before it is sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(slots=True)
class EventState:
    """The stand-in state a reported forward is replayed with through the session's model object."""

    pos: int
    session: str


def _token_list(tokens: Any, what: str) -> list[int]:
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
        out.append(int(t))
    return out
