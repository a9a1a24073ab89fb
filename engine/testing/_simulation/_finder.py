"""Where a plugin's :class:`~engine.testing.Simulation` is found, or loaded by ``module:attr``."""

from __future__ import annotations

import importlib
from typing import Any

from engine.kube import Plugin, PluginError, load_plugin

from ._spec import Simulation

__all__ = ["simulation_for", "find_simulation", "load_simulation", "DEFAULT_ORIGIN"]

DEFAULT_ORIGIN = "the default simulation (examples applied and mutated; converged once every object observed its generation)"
"""How :func:`find_simulation` names the simulation it makes when a plugin has none."""


def _candidates(spec: str, plugin: Plugin) -> list[str]:
    """The modules that may hold the ``simulation`` of ``plugin``, in the order looked at."""
    modules: list[str] = []
    if ":" in spec:
        modules.append(spec.partition(":")[0])
    parts = (getattr(plugin.setup, "__module__", None) or "").split(".")
    modules.extend(".".join(parts[:end]) for end in range(len(parts), 0, -1) if parts[0])
    candidates: list[str] = []
    for module in dict.fromkeys(modules):
        candidates.append(module)
        if not module.rpartition(".")[2].startswith("_"):
            candidates.append(f"{module}_simulation")
        candidates.append(f"{module}._simulation")
    return list(dict.fromkeys(candidates))


def _import_if_present(name: str) -> Any:
    """The module ``name``, or ``None`` when it (or its package) does not exist. A module that
    exists but fails to import raises :class:`~engine.kube.PluginError`."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise PluginError(f"simulation module {name!r} failed to import: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"simulation module {name!r} failed to import: {type(exc).__name__}: {exc}") from exc


def load_simulation(ref: str) -> Simulation:
    """The :class:`Simulation` that ``ref`` (``module:attr``) names. Raises
    :class:`~engine.kube.PluginError` when ``ref`` is not of that form, the module cannot be
    imported, has no such attribute, or the attribute is not a :class:`Simulation`."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise PluginError(f"simulation {ref!r}: expected module:attr")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"simulation {ref!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    found = getattr(module, attr, None)
    if found is None and not hasattr(module, attr):
        raise PluginError(f"simulation {ref!r}: module {module_name!r} has no attribute {attr!r}")
    if not isinstance(found, Simulation):
        raise PluginError(f"simulation {ref!r}: expected an engine.testing.Simulation, got {type(found).__name__}")
    return found


def find_simulation(spec: str) -> tuple[Simulation, str]:
    """The :class:`Simulation` of the plugin ``spec`` names (as ``python -m engine run`` finds
    plugins) and where it was found (``module:simulation``, or :data:`DEFAULT_ORIGIN`).

    Looked for, in this order, as a ``simulation`` attribute for that plugin (same name) of:
    the module a ``module:attr`` spec names; the module that defines the plugin's setup; then
    each of its parent packages. Beside each of these modules ``M`` a module ``M_simulation``
    (``widgets_simulation`` beside a one-file plugin ``widgets``) and ``M._simulation`` (in a
    package) are looked at too. Without one, the default simulation (the plugin's examples
    applied and mutated, the default convergence check). Raises
    :class:`~engine.kube.PluginError` when the plugin cannot be loaded or a simulation module
    that exists fails to import."""
    plugin = load_plugin(spec)
    for name in _candidates(spec, plugin):
        module = _import_if_present(name)
        found = getattr(module, "simulation", None) if module is not None else None
        if isinstance(found, Simulation) and found.plugin.name == plugin.name:
            return found, f"{name}:simulation"
    return Simulation(plugin=plugin), DEFAULT_ORIGIN


def simulation_for(spec: str) -> Simulation:
    """The simulation :func:`find_simulation` finds for the plugin ``spec`` names."""
    return find_simulation(spec)[0]
