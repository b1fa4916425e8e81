"""How a `falsify` subcommand's parser is made, whichever module owns the command: its line in `falsify --help`,
a description, and an epilog (exit codes, the rules) printed as written."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def add_subcommand(
    sub: argparse._SubParsersAction, name: str, help: str, doc: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    """NAME's parser. HELP is its line in `falsify --help`; its description is DOC's first line (a module docstring
    or a one-line help), its epilog EPILOG, else the rest of DOC after the blank line below the first."""
    return sub.add_parser(
        name,
        help=help,
        description=doc.splitlines()[0],
        epilog=doc.split("\n", 2)[2] if epilog is None else epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# Every number a command takes is finite and in a documented range (docs/cli.md): `nan` compares false with
# everything and slipped past `< 0` checks, `inf` and 1e300 overflowed the waits they reached, 1e-300 timed out at
# once. The limits here are the ones docs/cli.md and docs/config.md state.
MAX_SECONDS = 7 * 24 * 3600  # a week: longer is a typo, not a run
MIN_SECONDS = 0.01  # a shorter positive timeout ends everything before it starts
MAX_JOBS = 1024
MAX_SEEDS = 10_000


def seconds_problem(value: object, *, zero_is_none: bool) -> str | None:
    """Why `value` is not a timeout in seconds; None when it is. 0 is allowed only where it means "no limit"."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"must be a finite number of seconds, not {value!r}"
    if value == 0 and zero_is_none:
        return None
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        low = "0 (no limit) or " if zero_is_none else ""
        return f"must be {low}between {MIN_SECONDS:g} and {MAX_SECONDS} seconds, not {value!r}"
    return None


def seconds(*, zero_is_none: bool) -> Callable[[str], float]:
    """An argparse `type=` for a timeout option: a bad value is argparse's one-line usage error naming it."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
        problem = seconds_problem(value, zero_is_none=zero_is_none)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    return parse


def whole_number(low: int, high: int, meaning: str = "") -> Callable[[str], int]:
    """An argparse `type=` for a count such as -j or --seeds: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low}{meaning} and {high}, not {value}")
        return value

    return parse


def jobs(text: str) -> int:
    """-j/--jobs: 0 (one per core) to MAX_JOBS."""
    return whole_number(0, MAX_JOBS, " (one per core)")(text)
