from __future__ import annotations

import os
from importlib.metadata import distributions

import pytest
import trio.testing

ENGINE_PYTEST_PLUGIN = "engine.testing._pytest_plugin"


def _engine_plugin_autoloaded() -> bool:
    """Whether pytest loads the plugin itself (the package is installed with its ``pytest11``
    entry point); registering it again under its module name would be an error."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(
        ep.group == "pytest11" and ep.value == ENGINE_PYTEST_PLUGIN
        for dist in distributions()
        for ep in dist.entry_points
    )


pytest_plugins = ["pytester"] + ([] if _engine_plugin_autoloaded() else [ENGINE_PYTEST_PLUGIN])


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)
