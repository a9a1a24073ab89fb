"""The request router: maps Kubernetes REST paths onto the store, discovery and faults."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio
import yaml  # type: ignore[import-untyped]  # no types-PyYAML installed

from ..observability._http import AbortStream, Request, Response
from ._errors import RequestRejected
from ._faults import Fault, Faults, FaultScope, RequestInfo
from ._openapi import gv_path, openapi_document, openapi_index
from ._patch import json_patch, merge_patch, strategic_merge_patch
from ._protobuf import decode_protobuf
from ._resources import BUILTIN_TYPES, ResourceType
from ._selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from ._store import Change, Store, Subscription

__all__ = ["Router", "SERVER_VERSION"]

logger = logging.getLogger("engine.testing.api")

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-engine.testing",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_JSON = [("content-type", "application/json")]
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def _json(status: int, body: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, _JSON + (headers or []), json.dumps(body, separators=(",", ":")).encode())


def _status(exc: RequestRejected, headers: list[tuple[str, str]] | None = None) -> Response:
    return _json(exc.code, exc.status, headers)


def _out(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": rt.api_version, "kind": rt.kind, **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


@attrs.define(eq=False)
class _ActiveWatch:
    info: RequestInfo
    sub: Subscription


@attrs.frozen
class _Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


@attrs.define(eq=False)
class Router:
    """Turns :class:`Request` objects into :class:`Response` objects.

    ``require_identity`` answers 401 to requests without an authenticated identity (TLS mode).
    ``bookmark_interval`` is in seconds of trio time.
    """

    store: Store
    faults: Faults
    bookmark_interval: float = 60.0
    require_identity: bool = False
    server_address: str = "127.0.0.1:0"
    _watches: set[_ActiveWatch] = attrs.field(factory=set, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.faults._drop = self._drop_watches

    # ----- entry point -----

    async def handle(self, request: Request) -> Response:
        """Answer one request. Cancellation propagates (the connection is then closed)."""
        try:
            if self.require_identity and request.identity is None:
                raise RequestRejected(401, "Unauthorized", "Unauthorized: a client certificate is required")
            path = request.path.rstrip("/") or "/"
            if path == "/_faults" or path.startswith("/_faults/"):
                return self._admin(request, path)
            target = self._resolve(path)
            info = self._info(request, target)
            fault = self.faults.take("latency", info)
            if fault is not None:
                await trio.sleep(fault.seconds)
            fault = self.faults.take("fail", info)
            if fault is not None:
                return self._failure(fault)
            if target is None:
                return self._non_resource(request, path)
            return await self._resource(request, target, info)
        except RequestRejected as exc:
            return _status(exc)
        except Exception:
            logger.exception("internal error answering %s %s", request.method, request.path)
            return _status(RequestRejected(500, "InternalError", "an internal error occurred in the embedded API server"))

    def _failure(self, fault: Fault) -> Response:
        reason = _REASONS.get(fault.status, "InternalError")
        details: dict[str, Any] = {}
        headers = []
        if fault.retry_after is not None:
            seconds = max(1, math.ceil(fault.retry_after))
            headers.append(("retry-after", str(seconds)))
            details["retryAfterSeconds"] = seconds
        exc = RequestRejected(
            fault.status, reason, f"injected fault: answering {fault.status} {reason}", details=details or None
        )
        return _status(exc, headers)

    # ----- routing -----

    def _resolve(self, path: str) -> _Target | None:
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
                raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self.store.find_type(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = self.store.find_type(group, version, rest[0])
        if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
            raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and not (subresource == "status" and rt.has_status):
            raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
        return _Target(rt, namespace, name, subresource, watch_path)

    def _info(self, request: Request, target: _Target | None) -> RequestInfo:
        if target is None:
            return RequestInfo("discovery", None, None, request.user_agent)
        m = request.method
        if m == "GET":
            if target.name is not None:
                verb = "get"
            else:
                verb = "watch" if target.watch_path or _flag(request.query, "watch") else "list"
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

    # ----- non-resource paths -----

    def _groups(self) -> dict[str, list[ResourceType]]:
        groups: dict[str, list[ResourceType]] = {}
        for rt in self.store.types():
            if rt.group:
                groups.setdefault(rt.group, [])
                if all(v.version != rt.version for v in groups[rt.group]):
                    groups[rt.group].append(rt)
        return groups

    def _group_json(self, name: str, types: list[ResourceType]) -> dict[str, Any]:
        versions = [{"groupVersion": f"{name}/{t.version}", "version": t.version} for t in types]
        return {"name": name, "versions": versions, "preferredVersion": versions[0]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        types = [t for t in self.store.types() if t.group == group and t.version == version]
        if not types:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": [entry for t in types for entry in t.api_resources()],
        }

    def _non_resource(self, request: Request, path: str) -> Response:
        if request.method not in ("GET", "HEAD"):
            raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {path}")
        parts = path.strip("/").split("/") if path != "/" else []
        if path == "/version":
            return _json(200, SERVER_VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return Response(200, [("content-type", "text/plain")], b"ok")
        if path == "/api":
            return _json(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}],
                },
            )
        if path == "/apis":
            return _json(
                200,
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group_json(g, t) for g, t in self._groups().items()],
                },
            )
        if parts == ["api", "v1"]:
            doc = self._resource_list("", "v1")
            assert doc is not None
            return _json(200, doc)
        if len(parts) == 2 and parts[0] == "apis":
            types = self._groups().get(parts[1])
            if types:
                return _json(200, {"kind": "APIGroup", "apiVersion": "v1", **self._group_json(parts[1], types)})
        if len(parts) == 3 and parts[0] == "apis":
            doc = self._resource_list(parts[1], parts[2])
            if doc is not None:
                return _json(200, doc)
        if path == "/openapi/v3":
            return _json(200, openapi_index(self.store.types()))
        if path.startswith("/openapi/v3/"):
            wanted = path[len("/openapi/v3/") :]
            members = [t for t in self.store.types() if gv_path(t.group, t.version) == wanted]
            if members:
                return _json(200, openapi_document(members))
        if path == "/":
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version", "/_faults"]
            paths += [f"/apis/{g}" for g in self._groups()]
            return _json(200, {"paths": sorted(paths)})
        raise RequestRejected(404, "NotFound", "the server could not find the requested resource")

    # ----- admin -----

    def _admin(self, request: Request, path: str) -> Response:
        if path == "/_faults" and request.method == "GET":
            return _json(200, {"faults": [f.to_json() for f in self.faults.active]})
        if path == "/_faults" and request.method == "DELETE":
            self.faults.clear()
            return _json(200, {"faults": []})
        if path == "/_faults" and request.method == "POST":
            try:
                result = self.faults.from_json(json.loads(request.body or b"null"))
            except (ValueError, TypeError, KeyError) as exc:
                raise RequestRejected(400, "BadRequest", f"malformed fault: {exc}") from None
            if isinstance(result, int):
                return _json(200, {"dropped": result})
            return _json(201, result.to_json())
        if request.method == "DELETE":
            ident = path.rsplit("/", 1)[1]
            for fault in self.faults.active:
                if str(fault.id) == ident:
                    self.faults.remove(fault)
                    return _json(200, fault.to_json())
            raise RequestRejected(404, "NotFound", f"fault {ident!r} not found")
        raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {path}")

    # ----- resources -----

    def _body(self, request: Request) -> Any:
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
                return yaml.safe_load(request.body)
            return json.loads(request.body)
        except (ValueError, yaml.YAMLError):
            raise RequestRejected(400, "BadRequest", "the request body is not valid JSON or YAML") from None

    def _manager(self, request: Request) -> str:
        manager = request.query.get("fieldManager")
        if manager:
            return manager
        agent = request.user_agent.split("/")[0].strip()
        return agent or "unknown"

    async def _resource(self, request: Request, target: _Target, info: RequestInfo) -> Response:
        rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
        q = request.query
        dry_run = q.get("dryRun") == "All"
        store = self.store
        if rt.namespaced and ns is None and info.verb not in ("list", "watch"):
            raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
        if info.verb == "watch":
            return await self._watch(request, target, info)
        if info.verb == "list":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            if ns is not None:
                store.check_namespace(rt, ns)
            limit = None
            if q.get("limit"):
                try:
                    limit = int(q["limit"])
                except ValueError:
                    raise RequestRejected(400, "BadRequest", "limit must be an integer") from None
            items, rv, token, remaining = store.list_objects(
                rt, ns, labels, fields, limit=limit, continue_token=q.get("continue") or None
            )
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if token:
                meta["continue"] = token
                meta["remainingItemCount"] = remaining
            return _json(
                200,
                {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": [_out(rt, o) for o in items]},
            )
        if info.verb == "get":
            assert name is not None
            return _json(200, _out(rt, store.get(rt, ns, name)))
        if info.verb == "create":
            if name is not None:
                raise RequestRejected(405, "MethodNotAllowed", "POST is not allowed on a named object")
            obj = store.create(rt, ns, self._body(request), dry_run=dry_run, manager=self._manager(request))
            return _json(201, _out(rt, obj))
        if info.verb == "update":
            assert name is not None
            obj = store.update(
                rt, ns, name, self._body(request), subresource=sub, dry_run=dry_run, manager=self._manager(request)
            )
            return _json(200, _out(rt, obj))
        if info.verb == "patch":
            assert name is not None
            return self._patch(request, target, dry_run)
        if info.verb == "delete":
            assert name is not None
            options = self._delete_options(request)
            obj, gone = store.delete(rt, ns, name, options, dry_run=dry_run)
            if not gone:
                return _json(200, _out(rt, obj))
            return _json(200, self._success(rt, obj))
        if info.verb == "deletecollection":
            options = self._delete_options(request)
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            items, _, _, _ = store.list_objects(rt, ns, labels, fields)
            for obj in items:
                meta_ = obj["metadata"]
                try:
                    store.delete(rt, meta_.get("namespace"), meta_["name"], options, dry_run=dry_run)
                except RequestRejected as exc:
                    if exc.code != 404:
                        raise
            return _json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}")

    def _success(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": obj["metadata"]["name"], "group": rt.group, "kind": rt.plural, "uid": obj["metadata"].get("uid")},
        }

    def _delete_options(self, request: Request) -> dict[str, Any]:
        body = self._body(request) or {}
        if not isinstance(body, dict):
            raise RequestRejected(400, "BadRequest", "DeleteOptions must be a JSON object")
        options = dict(body)
        if request.query.get("propagationPolicy"):
            options["propagationPolicy"] = request.query["propagationPolicy"]
        return options

    def _patch(self, request: Request, target: _Target, dry_run: bool) -> Response:
        rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
        assert name is not None
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        patch = self._body(request)
        custom = rt not in BUILTIN_TYPES
        if content_type == "application/apply-patch+yaml":
            manager = request.query.get("fieldManager")
            if not manager:
                raise RequestRejected(400, "BadRequest", "PATCH with application/apply-patch+yaml requires the fieldManager parameter")
            obj, created = self.store.apply(
                rt, ns, name, patch, manager=manager, force=_flag(request.query, "force"), subresource=sub, dry_run=dry_run
            )
            return _json(201 if created else 200, _out(rt, obj))
        current = self.store.get(rt, ns, name)
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
        obj = self.store.update(rt, ns, name, new, subresource=sub, dry_run=dry_run, manager=self._manager(request))
        return _json(200, _out(rt, obj))

    # ----- watch -----

    def _drop_watches(self, scope: FaultScope, abrupt: bool) -> int:
        dropped = 0
        for watch in list(self._watches):
            if scope.matches(watch.info):
                watch.sub.dropped = True
                watch.sub.abrupt = abrupt
                self.store.unsubscribe(watch.sub)
                self._watches.discard(watch)
                dropped += 1
        return dropped

    def _event_line(self, type_: str, obj: dict[str, Any]) -> bytes:
        return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"

    async def _watch(self, request: Request, target: _Target, info: RequestInfo) -> Response:
        rt, ns, q = target.rt, target.namespace, request.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"))
        if target.name is not None:
            fields = FieldSelector(fields.requirements + (("metadata.name", "=", target.name),))
        if ns is not None:
            self.store.check_namespace(rt, ns)
        bookmarks = _flag(q, "allowWatchBookmarks")
        initial_events = _flag(q, "sendInitialEvents")
        timeout: float | None = None
        if q.get("timeoutSeconds"):
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError:
                raise RequestRejected(400, "BadRequest", "timeoutSeconds must be a number") from None
        raw_rv = q.get("resourceVersion", "")
        since: int | None
        if raw_rv in ("", "0") or initial_events:
            since = None
        else:
            try:
                since = int(raw_rv)
            except ValueError:
                raise RequestRejected(400, "BadRequest", f"resourceVersion {raw_rv!r} is not a valid resource version") from None
        expired: RequestRejected | None = None
        if self.faults.take("expire_watch", info) is not None:
            expired = RequestRejected(
                410, "Expired", f"too old resource version: {raw_rv or 0} ({self.store.resource_version})"
            )
        replay: list[Change] = []
        sub: Subscription | None = None
        if expired is None:
            try:
                replay, sub = self.store.subscribe(rt, ns, since)
            except RequestRejected as exc:
                expired = exc
        headers = [("content-type", "application/json")]
        if expired is not None:
            error = expired

            async def gone() -> AsyncIterator[bytes]:
                yield self._event_line("ERROR", error.status)

            return Response(200, headers, stream=gone())
        assert sub is not None
        active = _ActiveWatch(info, sub)
        self._watches.add(active)
        stream = self._stream(rt, sub, active, replay, labels, fields, bookmarks, initial_events and bookmarks, timeout)
        return Response(200, headers, stream=stream)

    def _translate(
        self, change: Change, labels: LabelSelector, fields: FieldSelector
    ) -> tuple[str, dict[str, Any]] | None:
        def ok(obj: dict[str, Any] | None) -> bool:
            return obj is not None and labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)

        if change.type == "MODIFIED":
            was, now = ok(change.old), ok(change.obj)
            if was and now:
                return "MODIFIED", change.obj
            if was:
                return "DELETED", change.obj
            if now:
                return "ADDED", change.obj
            return None
        return (change.type, change.obj) if ok(change.obj) else None

    async def _stream(
        self,
        rt: ResourceType,
        sub: Subscription,
        active: _ActiveWatch,
        replay: list[Change],
        labels: LabelSelector,
        fields: FieldSelector,
        bookmarks: bool,
        initial_end: bool,
        timeout: float | None,
    ) -> AsyncIterator[bytes]:
        store = self.store
        last_rv = 0

        def bookmark(annotations: dict[str, str] | None = None) -> bytes:
            rv = store.resource_version if sub.receive.statistics().current_buffer_used == 0 else last_rv
            meta: dict[str, Any] = {"resourceVersion": str(max(rv, last_rv))}
            if annotations:
                meta["annotations"] = annotations
            return self._event_line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})

        # No ``yield`` may happen inside a cancel scope (an async generator suspended there
        # corrupts trio's cancel scope stack), so the watch timeout is checked by hand.
        deadline = trio.current_time() + timeout if timeout is not None else math.inf
        try:
            for replayed in replay:
                event = self._translate(replayed, labels, fields)
                last_rv = max(last_rv, replayed.rv)
                if event is not None:
                    yield self._event_line(event[0], _out(rt, event[1]))
            if initial_end:
                last_rv = max(last_rv, store.resource_version)
                yield bookmark({"k8s.io/initial-events-end": "true"})
            next_bookmark = trio.current_time() + self.bookmark_interval
            while not sub.dropped and trio.current_time() < deadline:
                change: Change | None = None
                with trio.move_on_at(min(next_bookmark if bookmarks else math.inf, deadline)):
                    try:
                        change = await sub.receive.receive()
                    except trio.EndOfChannel:
                        break
                if sub.dropped:
                    break
                if change is None:
                    if trio.current_time() >= deadline:
                        break
                    yield bookmark()
                    next_bookmark = trio.current_time() + self.bookmark_interval
                    continue
                delay = self.faults.watch_delay(active.info)
                if delay > 0:
                    with trio.move_on_at(min(change.time + delay, deadline)):
                        await sub.closed.wait()
                    if sub.dropped or trio.current_time() >= deadline:
                        break
                last_rv = max(last_rv, change.rv)
                event = self._translate(change, labels, fields)
                if event is not None:
                    yield self._event_line(event[0], _out(rt, event[1]))
            if sub.dropped and sub.abrupt:
                raise AbortStream("watch dropped by fault injection")
        finally:
            store.unsubscribe(sub)
            self._watches.discard(active)
