"""Non-resource paths: version, health, API discovery and the OpenAPI v3 documents.

Discovery is computed from the served types on every request, so a CRD is discoverable as soon
as it is created and gone as soon as it is deleted.
"""

from __future__ import annotations

from typing import Any

from .._http import Request, Response
from ._errors import RequestRejected
from ._openapi import gv_path, openapi_document, openapi_index
from ._resources import ResourceType
from ._responses import json_response

__all__ = ["SERVER_VERSION", "discovery_response"]

SERVER_VERSION = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.0-engine.testing",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.26.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
"""What ``/version`` answers: the fields of kube-apiserver 1.36, whose emulation version is
its own release and whose minimum compatibility version the one before."""


def _groups(types: list[ResourceType]) -> dict[str, list[ResourceType]]:
    groups: dict[str, list[ResourceType]] = {}
    for rt in types:
        if rt.group:
            groups.setdefault(rt.group, [])
            if all(v.version != rt.version for v in groups[rt.group]):
                groups[rt.group].append(rt)
    return groups


def _group_json(name: str, types: list[ResourceType]) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{t.version}", "version": t.version} for t in types]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def _resource_list(all_types: list[ResourceType], group: str, version: str) -> dict[str, Any] | None:
    """The ``APIResourceList`` of ``group/version``, its resources and subresources sorted by
    name as the real server lists them; ``None`` when nothing is served there."""
    types = [t for t in all_types if t.group == group and t.version == version]
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": sorted((entry for t in types for entry in t.api_resources()), key=lambda e: str(e["name"])),
    }


def discovery_response(
    types: list[ResourceType], request: Request, path: str, *, server_address: str, sharding: bool = False
) -> Response:
    """Answer a non-resource ``path`` given the served ``types`` (``sharding``: the
    ``ShardedListAndWatch`` gate, which the OpenAPI documents show).

    Raises :class:`RequestRejected`: 405 for a method other than GET or HEAD, 404 for an
    unknown path.
    """
    if request.method not in ("GET", "HEAD"):
        raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {path}")
    parts = path.strip("/").split("/") if path != "/" else []
    if path == "/version":
        return json_response(200, SERVER_VERSION)
    if path in ("/healthz", "/livez", "/readyz"):
        return Response(200, [("content-type", "text/plain")], b"ok")
    if path == "/api":
        return json_response(
            200,
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
            },
        )
    if path == "/apis":
        return json_response(
            200,
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_json(g, t) for g, t in _groups(types).items()],
            },
        )
    if parts == ["api", "v1"]:
        doc = _resource_list(types, "", "v1")
        assert doc is not None
        return json_response(200, doc)
    if len(parts) == 2 and parts[0] == "apis":
        group = _groups(types).get(parts[1])
        if group:
            return json_response(200, {"kind": "APIGroup", "apiVersion": "v1", **_group_json(parts[1], group)})
    if len(parts) == 3 and parts[0] == "apis":
        doc = _resource_list(types, parts[1], parts[2])
        if doc is not None:
            return json_response(200, doc)
    if path == "/openapi/v3":
        return json_response(200, openapi_index(types, sharding=sharding))
    if path.startswith("/openapi/v3/"):
        wanted = path[len("/openapi/v3/") :]
        members = [t for t in types if gv_path(t.group, t.version) == wanted]
        if members:
            return json_response(200, openapi_document(members, sharding=sharding))
    if path == "/":
        paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version", "/_faults"]
        paths += [f"/apis/{g}" for g in _groups(types)]
        return json_response(200, {"paths": sorted(paths)})
    raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
