"""What the wheel installs, computed by setuptools from ``pyproject.toml`` as a build computes it:
the ``engine`` package and nothing beside it, the bundled plugins as ``engine.plugins.<name>``,
each listed in the ``engine.plugins`` entry point group."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

from engine.kube import ENTRY_POINT_GROUP, Plugin

ROOT = Path(__file__).resolve().parent.parent


def _distribution() -> Distribution:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools warns that [tool.setuptools] is beta
        return apply_configuration(Distribution(), ROOT / "pyproject.toml")


def _bundled() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "plugins").glob("*/__init__.py"))


def test_the_wheel_installs_the_engine_package_alone() -> None:
    packages = _distribution().packages
    assert packages and "engine" in packages
    beside = sorted(p for p in packages if p != "engine" and not p.startswith("engine."))
    assert beside == [], f"the wheel would install top-level packages beside engine: {beside}"


def test_the_bundled_plugins_install_under_engine_plugins() -> None:
    assert _bundled() == ["bundles", "mirror"]
    packages = _distribution().packages
    assert {"engine.plugins", *(f"engine.plugins.{name}" for name in _bundled())} <= set(packages)


def test_each_bundled_plugin_has_its_entry_point() -> None:
    entry_points = _distribution().entry_points[ENTRY_POINT_GROUP]
    declared = dict(line.replace(" ", "").split("=", 1) for line in entry_points)
    assert declared == {name: f"engine.plugins.{name}:plugin" for name in _bundled()}
    for name, value in declared.items():
        module, _, attr = value.partition(":")
        plugin = getattr(importlib.import_module(module), attr)
        assert isinstance(plugin, Plugin) and plugin.name == name
