"""How public packages present the names they re-export from private modules.

Each public package (``engine``, ``engine.observability``, ``engine.kube``,
``engine.kube.lowlevel``, ``engine.testing``, ``engine.cli``) imports its names from private
modules, lists them in ``__all__`` and calls :func:`publish`, so ``repr()``, tracebacks and
docs show ``engine.kube.Client`` rather than ``engine.kube._client._client.Client``. Names whose modules
pull in what a plain runner does not need (the webhook server and its HTTP stack, Prometheus
collectors, plugin hosting) are served by :func:`lazy_names`: imported on first access.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["publish", "lazy_names"]


def _present(value: Any, package: str) -> None:
    module = getattr(value, "__module__", None)
    if not isinstance(value, type) and not callable(value):
        return
    if isinstance(module, str) and module.startswith("engine.") and "._" in module:
        try:
            value.__module__ = package
        except (AttributeError, TypeError):  # pragma: no cover - builtins refuse
            pass


def publish(namespace: dict[str, Any]) -> None:
    """Set ``__module__`` of every class and function in ``namespace["__all__"]`` to the package.

    Only objects defined in a private module of this project are renamed, so re-exported
    third-party objects keep their own module.
    """
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        if name in namespace:
            _present(namespace[name], package)


def lazy_names(namespace: dict[str, Any], lazy: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` that import each ``lazy`` name on first access.

    ``lazy`` maps a public name to the private module defining it (``"WebhookServer":
    "engine.kube._webhooks._server"``). The first access imports the module, presents the value
    as the package's (as :func:`publish` does) and stores it in ``namespace``, so later accesses
    are plain attribute reads. Any other name raises :class:`AttributeError` as a module's
    would. ``__dir__`` lists the lazy names beside the loaded ones.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _present(value, package)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *lazy})

    return __getattr__, __dir__
