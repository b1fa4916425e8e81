"""The `engine` fixture, registered by the plugin only in a project with contracts (a polite plugin)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Any:
    """The engine under test: --engine, FALSIFY_ENGINE, or engine in [tool.falsify], loaded and checked once."""
    plugin = request.config.pluginmanager.get_plugin("falsify-core")
    assert plugin is not None, "registered together with falsify-core"
    return plugin.engine()
