"""How a run draws its hypothesis examples: the plugin's profiles, the gate's one seed per run, and the record of
them in results.json.

Without a seed hypothesis draws one per test, so a falsifier parametrized over predictions draws other examples for
each copy. With one seed for the run the copies draw the same examples, and a falsifier that caches its engine run
per example (the lane falsifiers) runs the engine once for all of them; each test still runs all its examples.
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the gate imports this module without pytest
    import pytest

SEED_OPTION = "--hypothesis-seed"
SEED_ENV = "FALSIFY_HYPOTHESIS_SEED"  # the gate's seed for its pytest (apply_seed)


def register_profiles() -> None:
    """The profiles the plugin offers (HYPOTHESIS_PROFILE, CI loads "ci"; `falsify mutants` loads "mutation")."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:  # hypothesis is a dependency, but the plugin must not break a project without it
        return
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile("dev", deadline=None)
    # CI: same examples every run, nothing remembered between runs, failures printed as a reproduction blob.
    settings.register_profile(
        "ci", derandomize=True, database=None, deadline=None, print_blob=True, suppress_health_check=quiet
    )
    # Campaigns (falsify campaign): many examples, each shard seeded by --hypothesis-seed, a failure printed as a
    # reproduction blob, nothing shared between shards through a database.
    settings.register_profile(
        "thorough",
        max_examples=1000,
        deadline=None,
        print_blob=True,
        database=None,
        suppress_health_check=quiet,
    )
    # Mutation runs only need the first counterexample, fast: no shrinking, no database, fixed seed.
    settings.register_profile(
        "mutation",
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=25,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=quiet,
    )


def chosen_profile() -> str | None:
    """The profile the environment chooses: HYPOTHESIS_PROFILE, else "ci" under CI; None: hypothesis' own."""
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else None)


def seeded(pytest_args: list[str]) -> dict[str, str] | None:
    """The environment for the gate's pytest: SEED_ENV set to a seed drawn afresh each run, unless the caller chose
    a seed (SEED_ENV, --hypothesis-seed) or a profile (HYPOTHESIS_PROFILE or CI: the plugin loads that profile, and
    a derandomized one ignores any seed); None: the gate's own environment unchanged. An environment variable, not
    --hypothesis-seed, so that a project whose pytest runs without hypothesis' plugin still starts."""
    if chosen_profile() or os.environ.get(SEED_ENV):
        return None
    if any(a == SEED_OPTION or a.startswith(SEED_OPTION + "=") for a in pytest_args):
        return None
    return {**os.environ, SEED_ENV: str(secrets.randbelow(2**32))}


def apply_seed(config: pytest.Config) -> None:
    """SEED_ENV as hypothesis' --hypothesis-seed, unless that was given (run before hypothesis' own configure,
    which reads it). Nothing when hypothesis' pytest plugin is not active."""
    seed = os.environ.get(SEED_ENV)
    if not seed:
        return
    try:
        given = config.getoption("hypothesis_seed")
    except ValueError:  # hypothesis' pytest plugin is not active (-p no:hypothesispytest)
        return
    if given is None:
        config.option.hypothesis_seed = seed


def draws(config: pytest.Config) -> dict[str, Any] | None:
    """This run's profile, whether it is derandomized (the same examples every run) and its --hypothesis-seed
    (None: a seed per test). Read at session start, after every plugin's configure; None without hypothesis."""
    if "hypothesis" not in sys.modules:
        return None
    from hypothesis import settings

    try:
        seed = config.getoption("hypothesis_seed")
    except ValueError:  # hypothesis' pytest plugin is disabled (-p no:hypothesispytest)
        seed = None
    return {
        "profile": settings.get_current_profile_name(),
        "derandomize": bool(settings().derandomize),  # settings() is the loaded profile's
        "seed": None if seed is None else str(seed),
    }


def hypothesis_line(results: dict[str, object]) -> str | None:
    """The gate's line on how the run drew its examples, from the plugin's record in results.json."""
    info = results.get("hypothesis")
    if not isinstance(info, dict):
        return None
    profile = info.get("profile")
    if info.get("derandomize"):
        return f"gate: hypothesis profile {profile!r} is derandomized: every run draws the same examples"
    seed = info.get("seed")
    if seed is None:
        return f"gate: hypothesis profile {profile!r}, a seed per test (not recorded: not reproducible)"
    return (
        f"gate: hypothesis profile {profile!r}, seed {seed}: `falsify gate -- {SEED_OPTION}={seed}` draws this "
        "run's examples again"
    )
