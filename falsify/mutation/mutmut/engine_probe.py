"""A pytest plugin `falsify mutmut` loads into every pytest run mutmut makes (`-p`): an engine that cannot load
fails the run (exit 1), where the falsify plugin would stop it as a usage error (exit 4).

The falsify plugin loads the engine, and asks it supports() for each capability, before any test runs: an engine
that cannot load is one usage error there, not an ERROR per test. When the engine's own sources are mutated
(the default paths), that load runs mutated code. mutmut's forced-failure check makes every mutated function
raise and needs the tests to fail; a mutant that breaks the engine's load is caught by the tests. Both are a
failed run to mutmut, while exit 4 means to it that pytest could not be run at all
(BadTestExecutionCommandsException, the clean run stopped, or the mutant counted as suspicious).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from falsify.engines.loading import EngineError


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    try:
        return (yield)
    except pytest.UsageError as exc:
        # The falsify plugin raises its engine's EngineError as a UsageError `from None`: still its __context__.
        # Binding problems and other usage errors stay what they are.
        if not isinstance(exc.__context__, EngineError):
            raise
        pytest.exit(
            f"{exc} (falsify mutmut: the engine did not load; a failed run)", pytest.ExitCode.TESTS_FAILED
        )
