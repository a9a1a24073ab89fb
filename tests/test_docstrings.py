"""Every public async function documents its cancellation behaviour (CONVENTIONS.md, rule 4)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

PACKAGES = ["engine", "engine.observability", "engine.kube", "engine.kube.lowlevel", "engine.testing", "engine.cli"]



def _is_async(obj: Any) -> bool:
    return inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj)


def _public_async(package: ModuleType) -> Iterator[tuple[str, Any]]:
    """(qualified name, function) for each public async function and method of ``package``."""
    for name in sorted(getattr(package, "__all__", None) or dir(package)):
        if name.startswith("_"):
            continue
        value = getattr(package, name)
        if inspect.isclass(value):
            seen: set[str] = set()
            for klass in value.__mro__:
                if not klass.__module__.startswith("engine"):
                    continue
                for attr, member in vars(klass).items():
                    if attr.startswith("_") or attr in seen:
                        continue
                    seen.add(attr)
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if _is_async(member):
                        yield f"{package.__name__}.{name}.{attr}", member
        elif _is_async(value):
            yield f"{package.__name__}.{name}", value


def _undocumented(package_name: str) -> list[str]:
    try:
        package = importlib.import_module(package_name)
    except ImportError:  # an optional extra is missing
        pytest.skip(f"{package_name} cannot be imported here")
    return [
        name
        for name, function in _public_async(package)
        if "Cancellation:" not in (inspect.getdoc(function) or "")
    ]


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_async_function_documents_cancellation(package_name: str) -> None:
    assert _undocumented(package_name) == []


def test_the_walk_finds_the_async_api() -> None:
    package = importlib.import_module("engine")
    found = {name for name, _ in _public_async(package)}
    assert {
        "engine.Manager.run",
        "engine.Controller.serve",
        "engine.Reconciler.reconcile",
        "engine.EventSink.deliver",
        "engine.TimerSource.run",
        "engine.WorkQueue.get",
    } <= found
