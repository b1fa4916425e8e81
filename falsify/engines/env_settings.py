"""Numbers an engine adapter reads from the environment (FALSIFY_WIRE_TIMEOUT, FALSIFY_WIRE_MAX_LINE,
FALSIFY_OPENAI_TIMEOUT): unset means the default; anything but a finite number > 0 is the adapter's own named
error, `NAME='value' ...`, never a float() traceback."""

from __future__ import annotations

import math
import os


def positive_number(name: str, default: float, error: type[Exception]) -> float:
    """The environment variable NAME as a finite float > 0; DEFAULT when unset; ERROR naming it otherwise."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise error(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise error(f"{name}={raw!r} must be a finite number > 0")
    return value
