"""How public packages present the names they re-export from private modules.

Each public package (``engine``, ``engine.observability``, ``engine.kube``,
``engine.kube.lowlevel``, ``engine.testing``, ``engine.cli``) imports its names from private
modules, lists them in ``__all__`` and calls :func:`publish`, so ``repr()``, tracebacks and
docs show ``engine.kube.Client`` rather than ``engine.kube._client.Client``. Names that moved
keep working through :func:`moved_names`, which warns once per access.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["publish", "moved_names"]


def publish(namespace: dict[str, Any]) -> None:
    """Set ``__module__`` of every class and function in ``namespace["__all__"]`` to the package.

    Only objects defined in a private module of this project are renamed, so re-exported
    third-party objects keep their own module.
    """
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        value = namespace[name]
        module = getattr(value, "__module__", None)
        if not isinstance(value, type) and not callable(value):
            continue
        if isinstance(module, str) and module.startswith("engine.") and "._" in module:
            try:
                value.__module__ = package
            except (AttributeError, TypeError):  # pragma: no cover - builtins refuse
                pass


def moved_names(package: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves each ``moved`` name from its new public module.

    ``moved`` maps an old name to the module it now lives in (``"create_lease":
    "engine.kube.lowlevel"``), or to ``"module:new_name"`` when it was renamed too. Each access
    emits a :class:`DeprecationWarning` naming the new import; any other name raises
    :class:`AttributeError` as a module would.
    """

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, new_name = target.partition(":")
        new_name = new_name or name
        warnings.warn(
            f"{package}.{name} is deprecated: use {module}.{new_name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), new_name)

    return __getattr__
