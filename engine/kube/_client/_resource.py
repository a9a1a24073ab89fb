"""Resource types as API discovery describes them, and the discovery cache."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import attrs

__all__ = ["Resource", "split_api_version"]


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]+").fullmatch
"""What ``quote(segment, safe="")`` leaves as it is (every valid object and namespace name)."""


def _segment(text: str) -> str:
    return text if _UNRESERVED(text) else quote(text, safe="")


def split_api_version(api_version: str) -> tuple[str, str]:
    """Split ``"apps/v1"`` into ``("apps", "v1")`` and ``"v1"`` into ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    if not version:
        raise ValueError(f"apiVersion must be 'version' or 'group/version', got {api_version!r}")
    return group, version


def _strings(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


@attrs.frozen
class Resource:
    """One resource type served by the API server, as discovery reports it.

    Frozen and hashable. Obtain one from :meth:`Client.resource` (which asks discovery), or
    build one by hand for a type whose shape is known.
    """

    group: str
    """The API group, ``""`` for the core group."""
    version: str
    """The API version within the group, for example ``"v1"``."""
    kind: str
    """The kind of a single object, for example ``"ConfigMap"``."""
    plural: str
    """The resource name used in URLs, for example ``"configmaps"``."""
    namespaced: bool
    """Whether objects of this type live in a namespace."""
    subresources: frozenset[str] = attrs.field(default=frozenset(), converter=_strings)
    """The subresources discovery lists, for example ``{"status", "scale"}``."""
    verbs: frozenset[str] = attrs.field(default=frozenset(), converter=_strings, eq=False)
    """The verbs discovery lists (``"get"``, ``"list"``, ``"watch"``, ...)."""

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of objects of this type: ``"v1"`` or ``"group/version"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The URL path for a collection (no ``name``), an object, or one of its subresources.

        ``namespace`` is ignored for cluster-scoped types; ``None`` on a namespaced type means
        the collection across all namespaces.
        """
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [base]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError("object name must not be empty")
            parts.append(_segment(name))
            if subresource is not None:
                parts.append(subresource)
        elif subresource is not None:
            raise ValueError("a subresource needs an object name")
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


def parse_resource_list(group: str, version: str, body: Mapping[str, Any]) -> dict[str, Resource]:
    """Turn an ``APIResourceList`` into resources keyed by kind (and by plural name)."""
    entries = body.get("resources")
    if not isinstance(entries, list):
        return {}
    subs: dict[str, set[str]] = {}
    mains: list[Mapping[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            continue
        if "/" in name:
            parent, _, sub = name.partition("/")
            subs.setdefault(parent, set()).add(sub)
        else:
            mains.append(entry)
    found: dict[str, Resource] = {}
    for entry in mains:
        name = entry["name"]
        kind = entry.get("kind")
        if not isinstance(kind, str) or not kind:
            continue
        verbs = entry.get("verbs")
        res = Resource(
            group=str(entry.get("group") or group),
            version=str(entry.get("version") or version),
            kind=kind,
            plural=name,
            namespaced=bool(entry.get("namespaced", False)),
            subresources=subs.get(name, set()),
            verbs=[v for v in verbs if isinstance(v, str)] if isinstance(verbs, list) else [],
        )
        found.setdefault(kind, res)
        found.setdefault(name, res)
    return found
