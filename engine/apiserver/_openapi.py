"""Just enough OpenAPI v3 for kubectl: the index and one document per group/version.

Each document lists the resource paths with their operations, the
``x-kubernetes-group-version-kind`` extension and the query parameters the server accepts
(``fieldValidation``, ``fieldManager``, ``dryRun``, ...), so kubectl validates on the server
side. Schemas are left out: kubectl then builds strategic merge patches from its compiled-in
types, and JSON merge patches for custom resources, exactly as with a server without schemas.

With the ``ShardedListAndWatch`` gate the list, watch and deletecollection operations take
``shardSelector`` and the document carries ``ListMeta`` (with ``shardInfo``) and
``ShardInfo``, as a 1.36 server with the gate documents them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ._resources import ResourceType

__all__ = ["openapi_index", "openapi_document", "gv_path"]

_WRITE_PARAMS = ["dryRun", "fieldManager", "fieldValidation", "pretty"]
_PATCH_PARAMS = _WRITE_PARAMS + ["force"]
_READ_PARAMS = [
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
]


_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_SHARD_SCHEMAS: dict[str, Any] = {
    f"{_META}.ListMeta": {
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and "
        "various status objects.",
        "type": "object",
        "properties": {
            "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"},
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"},
            "shardInfo": {
                "description": "shardInfo is set when the list is a filtered subset of the full collection, as "
                "selected by a shard selector on the request.\n\nThis is an alpha field and requires enabling the "
                "ShardedListAndWatch feature gate.",
                "allOf": [{"$ref": f"#/components/schemas/{_META}.ShardInfo"}],
            },
        },
    },
    f"{_META}.ShardInfo": {
        "description": "ShardInfo describes the shard selector that was applied to produce a list response.",
        "type": "object",
        "required": ["selector"],
        "properties": {"selector": {"type": "string", "default": ""}},
    },
}


def gv_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _params(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for n in names]


def _op(rt: ResourceType, action: str, params: list[str]) -> dict[str, Any]:
    return {
        "operationId": f"{action}{rt.kind}",
        "parameters": _params(params),
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    }


def openapi_document(types: list[ResourceType], *, sharding: bool = False) -> dict[str, Any]:
    """The OpenAPI v3 document for the types of one group/version (``sharding``: the
    ``ShardedListAndWatch`` gate is on)."""
    read = sorted(_READ_PARAMS + ["shardSelector"]) if sharding else _READ_PARAMS
    paths: dict[str, Any] = {}
    for rt in types:
        prefix = "/" + gv_path(rt.group, rt.version)
        base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        paths[base] = {
            "get": _op(rt, "list", read),
            "post": _op(rt, "post", _WRITE_PARAMS),
            "delete": _op(rt, "deletecollection", read),
        }
        item = {
            "get": _op(rt, "get", ["pretty"]),
            "put": _op(rt, "put", _WRITE_PARAMS),
            "patch": _op(rt, "patch", _PATCH_PARAMS),
            "delete": _op(rt, "delete", ["dryRun", "gracePeriodSeconds", "propagationPolicy"]),
        }
        paths[f"{base}/{{name}}"] = item
        if rt.has_status:
            paths[f"{base}/{{name}}/status"] = {
                "get": _op(rt, "get", ["pretty"]),
                "put": _op(rt, "put", _WRITE_PARAMS),
                "patch": _op(rt, "patch", _PATCH_PARAMS),
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "1.36"},
        "paths": paths,
        "components": {"schemas": dict(_SHARD_SCHEMAS) if sharding else {}},
    }


def openapi_index(types: list[ResourceType], *, sharding: bool = False) -> dict[str, Any]:
    """The ``/openapi/v3`` index, with a content hash per group/version."""
    groups: dict[str, list[ResourceType]] = {}
    for rt in types:
        groups.setdefault(gv_path(rt.group, rt.version), []).append(rt)
    paths = {}
    for path, members in groups.items():
        digest = hashlib.sha512(json.dumps(openapi_document(members, sharding=sharding), sort_keys=True).encode()).hexdigest()[:32]
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest.upper()}"}
    return {"paths": paths}
