"""Routing: which resource a Kubernetes REST path names, and which verb a request is."""

from __future__ import annotations

import attrs

from .._http import Request
from ._errors import RequestRejected
from ._faults import RequestInfo
from ._resources import ResourceType
from ._storage import ObjectStorage

__all__ = ["Target", "resolve", "request_info", "flag"]


@attrs.frozen
class Target:
    """The resource a request path names."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool
    """Whether the path is a legacy ``/watch/...`` path."""


def _not_found() -> RequestRejected:
    return RequestRejected(404, "NotFound", "the server could not find the requested resource")


def resolve(storage: ObjectStorage, path: str) -> Target | None:
    """The resource ``path`` names, or ``None`` for a non-resource path (discovery, health).

    Raises :class:`RequestRejected` (404) for a resource path that names nothing served.
    """
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"] and len(parts) > 2:
        group, version, rest = "", "v1", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch_path = False
    if rest[0] == "watch":
        watch_path, rest = True, rest[1:]
        if not rest:
            raise _not_found()
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        candidate = storage.find_type(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = storage.find_type(group, version, rest[0])
    if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
        raise _not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if subresource is not None and not ((subresource == "status" and rt.has_status) or subresource in rt.subresources):
        raise _not_found()
    return Target(rt, namespace, name, subresource, watch_path)


def flag(query: dict[str, str], name: str) -> bool:
    """Whether the boolean query parameter ``name`` is set."""
    return query.get(name, "").lower() in ("true", "1")


def request_info(request: Request, target: Target | None) -> RequestInfo:
    """What fault scopes match on: the verb, resource, group and user agent of ``request``."""
    if target is None:
        return RequestInfo("discovery", None, None, request.user_agent)
    m = request.method
    if m == "GET":
        if target.name is not None:
            verb = "get"
        else:
            verb = "watch" if target.watch_path or flag(request.query, "watch") else "list"
    elif m == "POST":
        verb = "create"
    elif m == "PUT":
        verb = "update"
    elif m == "PATCH":
        verb = "patch"
    elif m == "DELETE":
        verb = "delete" if target.name is not None else "deletecollection"
    else:
        verb = m.lower()
    return RequestInfo(verb, target.rt.plural, target.rt.group, request.user_agent)
