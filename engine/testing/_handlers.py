"""Resource requests other than watches: get, list, create, update, patch, delete.

Request bodies are decoded here (JSON, YAML, the protobuf envelope); the semantics live in
:class:`ObjectStorage`.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from ..observability._http import Request, Response
from ._errors import RequestRejected
from ._faults import RequestInfo
from ._patch import json_patch, merge_patch, strategic_merge_patch
from ._protobuf import decode_protobuf
from ._resources import BUILTIN_TYPES, ResourceType
from ._responses import json_response, typed
from ._routing import Target, flag
from ._selectors import parse_field_selector, parse_label_selector
from ._storage import ObjectStorage

__all__ = ["handle_resource", "decode_body"]


def decode_body(request: Request) -> Any:
    """The request body as data, ``None`` when empty; raises :class:`RequestRejected` (400,
    415) when it cannot be decoded."""
    if not request.body:
        return None
    content_type = request.headers.get("content-type", "application/json")
    if "protobuf" in content_type:
        return decode_protobuf(request.body)
    if "cbor" in content_type:
        raise RequestRejected(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml (not {content_type.split(';')[0]})",
        )
    try:
        if "yaml" in content_type:
            try:
                return json.loads(request.body)
            except ValueError:
                return yaml.safe_load(request.body)
        return json.loads(request.body)
    except (ValueError, yaml.YAMLError):
        raise RequestRejected(400, "BadRequest", "the request body is not valid JSON or YAML") from None


def _manager(request: Request) -> str:
    manager = request.query.get("fieldManager")
    if manager:
        return manager
    agent = request.user_agent.split("/")[0].strip()
    return agent or "unknown"


def handle_resource(storage: ObjectStorage, request: Request, target: Target, info: RequestInfo) -> Response:
    """Answer a resource request whose verb is not ``watch``; raises :class:`RequestRejected`."""
    rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
    q = request.query
    dry_run = q.get("dryRun") == "All"
    if rt.namespaced and ns is None and info.verb not in ("list", "watch"):
        raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
    if info.verb == "list":
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"))
        if ns is not None:
            storage.check_namespace(rt, ns)
        limit = None
        if q.get("limit"):
            try:
                limit = int(q["limit"])
            except ValueError:
                raise RequestRejected(400, "BadRequest", "limit must be an integer") from None
        items, rv, token, remaining = storage.list_objects(
            rt, ns, labels, fields, limit=limit, continue_token=q.get("continue") or None
        )
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        return json_response(
            200,
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": [typed(rt, o) for o in items]},
        )
    if info.verb == "get":
        assert name is not None
        return json_response(200, typed(rt, storage.get(rt, ns, name)))
    if info.verb == "create":
        if name is not None:
            raise RequestRejected(405, "MethodNotAllowed", "POST is not allowed on a named object")
        obj = storage.create(rt, ns, decode_body(request), dry_run=dry_run, manager=_manager(request))
        return json_response(201, typed(rt, obj))
    if info.verb == "update":
        assert name is not None
        obj = storage.update(
            rt, ns, name, decode_body(request), subresource=sub, dry_run=dry_run, manager=_manager(request)
        )
        return json_response(200, typed(rt, obj))
    if info.verb == "patch":
        assert name is not None
        return _patch(storage, request, target, dry_run)
    if info.verb == "delete":
        assert name is not None
        options = _delete_options(request)
        obj, gone = storage.delete(rt, ns, name, options, dry_run=dry_run)
        if not gone:
            return json_response(200, typed(rt, obj))
        return json_response(200, _success(rt, obj))
    if info.verb == "deletecollection":
        options = _delete_options(request)
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"))
        items, _, _, _ = storage.list_objects(rt, ns, labels, fields)
        for obj in items:
            meta_ = obj["metadata"]
            try:
                storage.delete(rt, meta_.get("namespace"), meta_["name"], options, dry_run=dry_run)
            except RequestRejected as exc:
                if exc.code != 404:
                    raise
        return json_response(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
    raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}")


def _success(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": obj["metadata"]["name"],
            "group": rt.group,
            "kind": rt.plural,
            "uid": obj["metadata"].get("uid"),
        },
    }


def _delete_options(request: Request) -> dict[str, Any]:
    body = decode_body(request) or {}
    if not isinstance(body, dict):
        raise RequestRejected(400, "BadRequest", "DeleteOptions must be a JSON object")
    options = dict(body)
    if request.query.get("propagationPolicy"):
        options["propagationPolicy"] = request.query["propagationPolicy"]
    return options


def _patch(storage: ObjectStorage, request: Request, target: Target, dry_run: bool) -> Response:
    rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
    assert name is not None
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    patch = decode_body(request)
    custom = rt not in BUILTIN_TYPES
    if content_type == "application/apply-patch+yaml":
        manager = request.query.get("fieldManager")
        if not manager:
            raise RequestRejected(
                400, "BadRequest", "PATCH with application/apply-patch+yaml requires the fieldManager parameter"
            )
        obj, created = storage.apply(
            rt, ns, name, patch, manager=manager, force=flag(request.query, "force"), subresource=sub, dry_run=dry_run
        )
        return json_response(201 if created else 200, typed(rt, obj))
    current = storage.get(rt, ns, name)
    if content_type == "application/merge-patch+json":
        new = merge_patch(current, patch)
    elif content_type == "application/json-patch+json":
        new = json_patch(current, patch)
    elif content_type == "application/strategic-merge-patch+json" and not custom:
        new = strategic_merge_patch(current, patch)
    else:
        accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        if not custom:
            accepted += ", application/strategic-merge-patch+json"
        raise RequestRejected(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: {accepted}",
        )
    obj = storage.update(rt, ns, name, new, subresource=sub, dry_run=dry_run, manager=_manager(request))
    return json_response(200, typed(rt, obj))
