"""Resource requests other than watches: get, list, create, update, patch, delete.

Request bodies are decoded here (JSON, YAML, the protobuf envelope); the semantics live in
:class:`ObjectStorage`.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any

import attrs
import yaml

from .._http import Request, Response
from ._access import review, token_request
from ._admission import Admission, AdmissionRequest
from ._authn import ADMIN, Authenticator, UserInfo
from ._conversion import Conversions
from ._deletion import POLICIES
from ._errors import RequestRejected
from ._events import field_selector, from_storage
from ._faults import RequestInfo
from ._fields import FieldCheck, field_validation, loads_with_duplicates, unknown_fields
from ._objects import Obj, meta
from ._patch import MERGE_KEYS, apply_json_patch, merge_patch, strategic_merge_patch
from ._protobuf import decode_protobuf
from ._resources import BUILTIN_TYPES, REVIEW_TYPES, ResourceType
from ._responses import json_response, list_item, status_response, typed
from ._routing import Target, flag
from ._selectors import parse_field_selector, parse_label_selector
from ._shards import ShardSelector, shard_selector_of
from ._status import CauseSpec, conflict, details, invalid_causes
from ._storage import ObjectStorage
from ._tables import Conversion, as_partial, as_partial_list, as_table, negotiate
from ._webhookconfigs import MUTATING, VALIDATING
from ._workloads import selector_string

__all__ = ["handle_resource", "decode_body"]


def decode_body(request: Request) -> Any:
    """The request body as data, ``None`` when empty; raises :class:`RequestRejected` (400,
    415) when it cannot be decoded."""
    return decode_checked(request)[0]


_OBJECT_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def check_object_media_type(request: Request) -> None:
    """Raise 415 for a create's or update's body in any media type but JSON, YAML or protobuf
    (a patch type too), as kube-apiserver does; a request without ``Content-Type`` is JSON."""
    raw = request.headers.get("content-type")
    if raw is None or raw.split(";")[0].strip().lower() in _OBJECT_MEDIA_TYPES:
        return
    raise RequestRejected(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(_OBJECT_MEDIA_TYPES),
    )


def decode_checked(request: Request) -> tuple[Any, list[str]]:
    """:func:`decode_body` and the paths of the fields a JSON body gives twice."""
    if not request.body:
        return None, []
    content_type = request.headers.get("content-type", "application/json")
    if "protobuf" in content_type:
        return decode_protobuf(request.body), []
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
                decoded = loads_with_duplicates(request.body)
            except ValueError:
                decoded = _load_yaml(request.body), []
        else:
            decoded = loads_with_duplicates(request.body)
    except (ValueError, yaml.YAMLError):
        raise RequestRejected(400, "BadRequest", "the request body is not valid JSON or YAML") from None
    except RecursionError:
        raise _too_deep() from None
    _check_shape(decoded[0], len(request.body))
    return decoded


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it: the pure-Python one takes seconds for a body of a
few megabytes, all that time without a checkpoint (every other request waits)."""

def _load_yaml(body: bytes) -> Any:
    """One YAML document, checked for depth first: libyaml's composer recurses in C, so a
    document nested thousands deep would overflow the stack rather than raise."""
    depth = 0
    for event in yaml.parse(body, Loader=_YAML_LOADER):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise _too_deep()
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    return yaml.load(body, Loader=_YAML_LOADER)


MAX_NESTING = 100
"""How deep a request body may nest (objects and arrays). kube-apiserver's limit is 10,000;
this server's code walks objects recursively, so it refuses bodies deeper than this with a
400 rather than fail on them later (a stored object nested thousands deep would break every
read of it)."""


def _too_deep() -> RequestRejected:
    return RequestRejected(400, "BadRequest", f"the request body nests deeper than {MAX_NESTING} levels")


def _check_shape(data: Any, size: int) -> None:
    """Raise :class:`RequestRejected` (400) when decoded ``data`` nests deeper than
    :data:`MAX_NESTING` or (YAML aliases repeating a node) holds far more values than a body of
    ``size`` bytes can spell out, as Go's YAML decoder refuses excessive aliasing."""
    budget = 4 * size + 1000
    stack: list[tuple[Any, int]] = [(data, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            raise _too_deep()
        values += len(children)
        if values > budget:
            raise RequestRejected(400, "BadRequest", "the request body contains excessive aliasing")
        stack.extend((child, depth + 1) for child in children)


def _field_check(rt: ResourceType, request: Request, obj: Any, duplicates: list[str]) -> FieldCheck:
    """The ``fieldValidation`` of a write of ``obj``: a built-in type's unknown fields are
    dropped and reported here (a custom resource's by its schema, in the storage); raises
    :class:`RequestRejected` (400) under ``Strict``."""
    check = FieldCheck(field_validation(request.query), rt.kind, rt.version, duplicates)
    if rt in BUILTIN_TYPES:
        check.report(unknown_fields(f"{rt.api_version}/{rt.kind}", obj) if isinstance(obj, dict) else [])
    return check


def _warnings(check: FieldCheck) -> list[tuple[str, str]]:
    return [("warning", w) for w in check.warnings]


MAX_BODY_BYTES = 3 * 1024 * 1024
"""The largest request body the server reads (kube-apiserver's ``--max-resource-write-bytes``)."""


def _large(request: Request) -> bool:
    return len(request.body or b"") > 256 * 1024


def _manager(request: Request) -> str:
    manager = request.query.get("fieldManager")
    if manager:
        return manager
    agent = request.user_agent.split("/")[0].strip()
    return agent or "unknown"


_RETRIES = 5
"""How often a write whose object changed while webhooks were called is tried again (the
real server's ``GuaranteedUpdate`` retries such conflicts likewise)."""

_SERVER_SET = ("uid", "creationTimestamp", "resourceVersion", "generation")


@attrs.define(eq=False)
class _Writes:
    """The writes of one request, through admission when webhooks are configured: mutating
    webhooks, the storage's validation (a dry run), validating webhooks, then the write."""

    storage: ObjectStorage
    admission: Admission | None
    user: UserInfo
    request: Request
    conversions: Conversions | None = None
    warnings: list[str] = attrs.field(factory=list)

    def _storage_type(self, rt: ResourceType) -> ResourceType | None:
        return self.conversions.storage_type(rt) if self.conversions is not None else None

    async def converted(self, rt: ResourceType, objects: list[Obj], *, listed: bool = False) -> list[Obj]:
        """``objects`` in ``rt``'s version (through the CRD's conversion webhook)."""
        if self.conversions is None:
            return objects
        return await self.conversions.convert(rt, objects, listed=listed)

    def active(self) -> Admission | None:
        """The admission to run, ``None`` when no webhook is configured."""
        admission = self.admission
        if admission is None or not (admission.configured(MUTATING) or admission.configured(VALIDATING)):
            return None
        return admission

    def options(self, kind: str, dry_run: bool) -> dict[str, Any]:
        """The ``options`` of a review of this request's write."""
        q = self.request.query
        out: dict[str, Any] = {"kind": kind}
        if dry_run:
            out["dryRun"] = ["All"]
        if kind == "PatchOptions" and "force" in q:
            out["force"] = flag(q, "force")
        if q.get("fieldManager"):
            out["fieldManager"] = q["fieldManager"]
        if q.get("fieldValidation"):
            out["fieldValidation"] = q["fieldValidation"]
        return out

    async def create(self, rt: ResourceType, ns: str | None, body: Any, *, dry_run: bool, fields: FieldCheck) -> Obj:
        manager, large = _manager(self.request), _large(self.request)
        admission, storage_rt = self.active(), self._storage_type(rt)
        if admission is None and storage_rt is None:
            return self.storage.create(rt, ns, body, dry_run=dry_run, manager=manager, check_size=large, fields=fields)
        self.storage.check_namespace(rt, ns)
        obj = self.storage.prepare_body(rt, ns, body, None)
        request = AdmissionRequest(
            rt, "CREATE", ns, str(meta(obj).get("name") or ""), None, obj, None, self.user, dry_run,
            self.options("CreateOptions", dry_run),
        )
        mutated = await admission.mutate(request, self.warnings) if admission is not None else obj
        candidate = self.storage.create(rt, ns, mutated, dry_run=True, manager=manager, check_size=large, fields=fields)
        if admission is not None:
            await admission.validate(attrs.evolve(request, obj=candidate), self.warnings)
        if dry_run:
            return candidate
        if storage_rt is not None:
            [converted] = await self.converted(storage_rt, [candidate])
            stored = self.storage.create(
                storage_rt, ns, converted, check_size=large, _uid=meta(candidate).get("uid"),
                _managed_fields=meta(candidate).get("managedFields") or [],
            )
            return (await self.converted(rt, [stored]))[0]
        final = copy.deepcopy(mutated)
        assert final is not None
        final["metadata"]["name"] = meta(candidate)["name"]
        return self.storage.create(rt, ns, final, manager=manager, check_size=large, _uid=meta(candidate).get("uid"))

    async def update(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        body_for: Callable[[Obj], tuple[Any, FieldCheck]],
        sub: str | None,
        *,
        dry_run: bool,
        retry: bool,
        options: str,
    ) -> tuple[Obj, FieldCheck]:
        """An update (or patch: ``body_for`` makes the new object from the current one)."""
        manager, large = _manager(self.request), _large(self.request)
        admission, storage_rt = self.active(), self._storage_type(rt)
        if admission is None and storage_rt is None:
            body, check = body_for(from_storage(rt, self.storage.get(rt, ns, name)))
            obj = self.storage.update(
                rt, ns, name, body, subresource=sub, dry_run=dry_run, manager=manager, check_size=large, fields=check
            )
            return obj, check
        mark = len(self.warnings)
        for attempt in range(_RETRIES):
            del self.warnings[mark:]
            [current] = await self.converted(rt, [from_storage(rt, self.storage.get(rt, ns, name))])
            body, check = body_for(current)
            obj = self.storage.prepare_body(rt, ns, body, name)
            request = AdmissionRequest(
                rt, "UPDATE", ns, name, sub, obj, current, self.user, dry_run, self.options(options, dry_run)
            )
            mutated = await admission.mutate(request, self.warnings) if admission is not None else obj
            candidate = self.storage.update(
                rt, ns, name, mutated, subresource=sub, dry_run=True, manager=manager, check_size=large, fields=check
            )
            if admission is not None:
                await admission.validate(attrs.evolve(request, obj=candidate), self.warnings)
            if dry_run:
                return candidate, check
            final = copy.deepcopy(mutated)
            assert final is not None
            final["metadata"]["resourceVersion"] = meta(current)["resourceVersion"]
            try:
                if storage_rt is not None:
                    [converted] = await self.converted(storage_rt, [candidate])
                    stored = self.storage.update(
                        storage_rt, ns, name, converted, subresource=sub, check_size=large,
                        _managed_fields=meta(candidate).get("managedFields") or [],
                    )
                    return (await self.converted(rt, [stored]))[0], check
                return self.storage.update(rt, ns, name, final, subresource=sub, manager=manager, check_size=large), check
            except RequestRejected as exc:
                if exc.code != 409 or not retry or attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def apply(
        self, rt: ResourceType, ns: str | None, name: str, config: Any, sub: str | None, *, dry_run: bool
    ) -> tuple[Obj, bool]:
        manager, force = self.request.query["fieldManager"], flag(self.request.query, "force")
        admission, storage_rt = self.active(), self._storage_type(rt)
        if admission is None and storage_rt is None:
            return self.storage.apply(rt, ns, name, config, manager=manager, force=force, subresource=sub, dry_run=dry_run)
        mark = len(self.warnings)
        for attempt in range(_RETRIES):
            del self.warnings[mark:]
            stored = self.storage.lookup(rt, ns, name)
            current = from_storage(rt, stored) if stored is not None else None
            if current is not None and storage_rt is not None:
                [current] = await self.converted(rt, [current])
            result, created = self.storage.apply(
                rt, ns, name, config, manager=manager, force=force, subresource=sub, dry_run=True, _current=current
            )
            managed = meta(result).get("managedFields") or []
            sent = copy.deepcopy(result)
            if created:
                for field in _SERVER_SET:
                    sent["metadata"].pop(field, None)
            request = AdmissionRequest(
                rt, "CREATE" if created else "UPDATE", ns, name, sub, sent, current, self.user, dry_run,
                self.options("PatchOptions", dry_run),
            )
            mutated = await admission.mutate(request, self.warnings) if admission is not None else sent
            assert mutated is not None
            changed = mutated != sent
            candidate = result
            if changed:
                candidate = self._store_mutated(rt, ns, name, mutated, sub, current, managed, dry_run=True, uid=None)
            if admission is not None:
                await admission.validate(attrs.evolve(request, obj=candidate), self.warnings)
            if dry_run:
                return candidate, created
            latest = self.storage.lookup(rt, ns, name)
            if (latest and meta(latest).get("resourceVersion")) != (stored and meta(stored).get("resourceVersion")):
                if attempt < _RETRIES - 1:
                    continue
                raise conflict(rt, name, "the object has been modified; please apply your changes to the latest "
                               "version and try again")
            uid = meta(candidate).get("uid")
            if storage_rt is not None:
                [converted] = await self.converted(storage_rt, [candidate])
                written = self._store_mutated(storage_rt, ns, name, converted, sub, stored, managed, dry_run=False, uid=uid)
                return (await self.converted(rt, [written]))[0], created
            if changed:
                return self._store_mutated(rt, ns, name, mutated, sub, current, managed, dry_run=False, uid=uid), created
            return self.storage.apply(rt, ns, name, config, manager=manager, force=force, subresource=sub)
        raise AssertionError("unreachable")

    def _store_mutated(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        obj: Obj,
        sub: str | None,
        current: Obj | None,
        managed: list[dict[str, Any]],
        *,
        dry_run: bool,
        uid: str | None,
    ) -> Obj:
        """An applied object a mutating webhook changed: stored with the apply's field
        ownership (the webhook's changes are owned by no manager)."""
        if current is None:
            return self.storage.create(rt, ns, obj, dry_run=dry_run, _managed_fields=managed, _uid=uid)
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = meta(current)["resourceVersion"]
        return self.storage.update(rt, ns, name, body, subresource=sub, dry_run=dry_run, _managed_fields=managed)

    async def delete(
        self, rt: ResourceType, ns: str | None, name: str, options: dict[str, Any], *, dry_run: bool
    ) -> tuple[Obj, bool]:
        admission, storage_rt = self.active(), self._storage_type(rt)
        if admission is not None:
            [old] = await self.converted(rt, [from_storage(rt, self.storage.get(rt, ns, name))])
            shown = {k: v for k, v in options.items() if k not in ("kind", "apiVersion")}
            request = AdmissionRequest(
                rt, "DELETE", ns, name, None, None, old, self.user, dry_run, {"kind": "DeleteOptions", **shown}
            )
            await admission.mutate(request, self.warnings)
            await admission.validate(request, self.warnings)
        obj, gone = self.storage.delete(rt, ns, name, options, dry_run=dry_run)
        if storage_rt is not None and not gone:
            [obj] = await self.converted(rt, [obj])
        return obj, gone


async def handle_resource(
    storage: ObjectStorage,
    request: Request,
    target: Target,
    info: RequestInfo,
    *,
    caller: UserInfo = ADMIN,
    tokens: Authenticator | None = None,
    sharding: bool = False,
    admission: Admission | None = None,
    conversions: Conversions | None = None,
) -> Response:
    """Answer a resource request whose verb is not ``watch`` made by ``caller`` (reviews
    answer for it; ``tokens`` signs TokenRequests; writes pass ``admission``'s webhooks;
    ``conversions`` converts the objects of webhook-converted custom resources);
    raises :class:`RequestRejected`. ``sharding`` (the ``ShardedListAndWatch`` gate) makes list
    and deletecollection honour ``shardSelector`` (see :mod:`._shards`). The warnings webhooks
    gave are ``Warning`` headers of the answer, a refusal's too. Cancellation propagates (a
    write cancelled while webhooks are called stores nothing)."""
    writes = _Writes(storage, admission, caller, request, conversions)
    try:
        response = await _handle(storage, request, target, info, caller, tokens, writes, sharding)
    except RequestRejected as exc:
        if writes.warnings:
            return status_response(exc, _warning_headers(writes.warnings))
        raise
    response.headers.extend(_warning_headers(writes.warnings))
    return response


def _warning_headers(warnings: list[str]) -> list[tuple[str, str]]:
    """``Warning`` headers, each text once (the real server's warning recorder drops repeats)."""
    return [("warning", f"299 - {json.dumps(w)}") for w in dict.fromkeys(warnings)]


async def _handle(
    storage: ObjectStorage,
    request: Request,
    target: Target,
    info: RequestInfo,
    caller: UserInfo,
    tokens: Authenticator | None,
    writes: _Writes,
    sharding: bool,
) -> Response:
    rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
    q = request.query
    dry_run = q.get("dryRun") == "All"
    if rt.namespaced and ns is None and info.verb not in ("list", "watch"):
        raise RequestRejected(404, "NotFound", "the server could not find the requested resource")
    if len(request.body or b"") > MAX_BODY_BYTES:
        raise RequestRejected(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY_BYTES}")
    if (sub is None and info.verb not in rt.verbs) or (name is None and info.verb in ("update", "patch")):
        raise RequestRejected(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if rt.storage_key in REVIEW_TYPES:
        return json_response(201, review(storage, rt, ns, decode_body(request), caller, _manager(request)))
    if sub == "token":
        if info.verb != "create":
            raise RequestRejected(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        assert name is not None
        if tokens is None:
            raise RequestRejected(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        answer = token_request(storage, tokens, rt, ns, name, decode_body(request))
        answer["metadata"]["managedFields"] = [
            {
                "manager": _manager(request),
                "operation": "Update",
                "apiVersion": "authentication.k8s.io/v1",
                "time": answer["metadata"]["creationTimestamp"],
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {f"f:{k}": {} for k in sorted((decode_body(request) or {}).get("spec") or {})}},
                "subresource": "token",
            }
        ]
        return json_response(201, answer)
    if sub == "scale":
        return await _scale(storage, request, target, info, dry_run, writes)
    if info.verb == "list":
        conversion = negotiate(request.headers.get("accept"))
        labels = parse_label_selector(q.get("labelSelector"))
        fields = field_selector(rt, parse_field_selector(q.get("fieldSelector"), rt))
        shard = shard_selector_of(request.query_values, sharding)
        if ns is not None:
            storage.check_namespace(rt, ns)
        exact = _list_resource_version(q)
        storage.check_not_newer(q.get("resourceVersion"))
        limit = None
        if q.get("limit"):
            try:
                limit = int(q["limit"])
            except ValueError:
                raise RequestRejected(400, "BadRequest", "limit must be an integer") from None
        if q.get("resourceVersion") == "0" and not q.get("continue"):
            limit = None
        items, rv, token, remaining = storage.list_objects(
            rt,
            ns,
            labels,
            fields,
            limit=limit,
            continue_token=q.get("continue") or None,
            exact=exact,
            shard=None if shard is None else shard.matches,
        )
        items = await writes.converted(rt, items, listed=True)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        if conversion is not None:
            return json_response(200, _converted(storage, request, rt, items, meta, conversion, single=False))
        _shard_info(rt, meta, shard)
        if rt not in BUILTIN_TYPES:
            # An unstructured list: ``continue`` always, members in key order.
            meta = dict(sorted({"continue": "", **meta}.items()))
        return json_response(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": meta,
                "items": [list_item(rt, o) for o in items],
            },
        )
    if info.verb == "get":
        assert name is not None
        storage.check_not_newer(q.get("resourceVersion"))
        conversion = negotiate(request.headers.get("accept"))
        [obj] = await writes.converted(rt, [storage.get(rt, ns, name)])
        if conversion is not None:
            version = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return json_response(200, _converted(storage, request, rt, [obj], version, conversion, single=True))
        return json_response(200, typed(rt, obj))
    if info.verb == "create":
        if name is not None:
            raise RequestRejected(405, "MethodNotAllowed", "POST is not allowed on a named object")
        _check_write_options(request, "CreateOptions")
        check_object_media_type(request)
        body, duplicates = decode_checked(request)
        check = _field_check(rt, request, body, duplicates)
        obj = await writes.create(rt, ns, body, dry_run=dry_run, fields=check)
        return json_response(201, typed(rt, obj), _warnings(check))
    if info.verb == "update":
        assert name is not None
        _check_write_options(request, "UpdateOptions")
        check_object_media_type(request)
        body, duplicates = decode_checked(request)
        check = _field_check(rt, request, body, duplicates)
        sent_meta = body.get("metadata") if isinstance(body, dict) else None
        explicit = isinstance(sent_meta, dict) and bool(sent_meta.get("resourceVersion"))
        obj, check = await writes.update(
            rt, ns, name, lambda current: (body, check), sub, dry_run=dry_run, retry=not explicit, options="UpdateOptions"
        )
        return json_response(200, typed(rt, obj), _warnings(check))
    if info.verb == "patch":
        assert name is not None
        return await _patch(storage, request, target, dry_run, writes)
    if info.verb == "delete":
        assert name is not None
        options = _delete_options(request)
        dry_run = dry_run or options.get("dryRun") == ["All"]
        obj, gone = await writes.delete(rt, ns, name, options, dry_run=dry_run)
        if not gone:
            # The real server answers 202 to a cascading delete asked for the deprecated way.
            return json_response(202 if options.get("orphanDependents") is False else 200, typed(rt, obj))
        return json_response(200, _success(rt, obj))
    if info.verb == "deletecollection":
        options = _delete_options(request)
        labels = parse_label_selector(q.get("labelSelector"))
        fields = field_selector(rt, parse_field_selector(q.get("fieldSelector"), rt))
        shard = shard_selector_of(request.query_values, sharding)
        items, _, _, _ = storage.list_objects(rt, ns, labels, fields, shard=None if shard is None else shard.matches)
        deleted = []
        for obj in items:
            meta_ = obj["metadata"]
            try:
                answer, gone = await writes.delete(rt, meta_.get("namespace"), meta_["name"], options, dry_run=dry_run)
            except RequestRejected as exc:
                if exc.code != 404:
                    raise
                continue
            if gone:
                # As etcd's delete returns it: the object as last stored, at its resourceVersion then.
                answer = {**answer, "metadata": {**answer["metadata"], "resourceVersion": meta_["resourceVersion"]}}
            deleted.append(answer)
        collection_meta: dict[str, Any] = {"resourceVersion": str(storage.resource_version)}
        _shard_info(rt, collection_meta, shard)
        return json_response(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": collection_meta,
                "items": [list_item(rt, o) for o in deleted],
            },
        )
    raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}")


def _shard_info(rt: ResourceType, meta: dict[str, Any], shard: ShardSelector | None) -> None:
    """Echo the applied selector as a 1.36 server does: on lists of built-in kinds only (a
    custom resource list is unstructured and has no ``shardInfo`` to set)."""
    if shard is not None and rt in BUILTIN_TYPES:
        meta["shardInfo"] = {"selector": shard.canonical}


def _list_resource_version(query: dict[str, str]) -> int | None:
    """Validate a list's ``resourceVersion``/``resourceVersionMatch`` as ``ValidateListOptions``
    does (422 on ``ListOptions``); the resourceVersion to list at exactly, if any. ``0`` (or
    none) lists the latest state, any other number the latest state not older than it."""
    rv, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch", "")
    causes: list[CauseSpec] = []
    if match:
        if not rv:
            causes.append(("FieldValueForbidden", "resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if query.get("continue"):
            causes.append(("FieldValueForbidden", "resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            causes.append(("FieldValueNotSupported", "resourceVersionMatch", f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""'))
        if match == "Exact" and rv == "0":
            causes.append(("FieldValueForbidden", "resourceVersionMatch", 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if causes:
        raise invalid_causes(_LIST_OPTIONS_RT, "", causes)
    if rv:
        try:
            number = int(rv)
        except ValueError:
            raise RequestRejected(400, "BadRequest", f'invalid resource version "{rv}"') from None
        if match == "Exact":
            return number
    return None


_LIST_OPTIONS_RT = ResourceType("meta.k8s.io", "v1", "listoptions", "listoptions", "ListOptions", False)

SERVICE_MERGE_KEYS = {**MERGE_KEYS, "ports": "port"}


def _scale_of(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in metadata},
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": status.get("replicas", 0), "selector": _scale_selector(rt, spec.get("selector"))},
    }


def _scale_selector(rt: ResourceType, selector: Any) -> str:
    """The selector a ``Scale`` reports: a ReplicationController's is a plain label map."""
    if rt.storage_key == ("", "replicationcontrollers"):
        return ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items()))
    return selector_string(selector)


_SCALE_RT = ResourceType("autoscaling", "v1", "scales", "scale", "Scale", True)
_SCALE_KIND = {"group": "autoscaling", "version": "v1", "kind": "Scale"}


async def _scale(
    storage: ObjectStorage, request: Request, target: Target, info: RequestInfo, dry_run: bool, writes: _Writes
) -> Response:
    rt, ns, name = target.rt, target.namespace, target.name
    assert name is not None
    obj = storage.get(rt, ns, name)
    current = _scale_of(rt, obj)
    if info.verb == "get":
        return json_response(200, current)
    if info.verb == "update":
        check_object_media_type(request)
        new = decode_body(request)
    elif info.verb == "patch":
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        patch = decode_body(request)
        if content_type == "application/json-patch+json":
            new = apply_json_patch(current, patch)
        elif content_type == "application/strategic-merge-patch+json":
            new = strategic_merge_patch(current, patch)
        elif content_type in ("application/merge-patch+json", "application/apply-patch+yaml"):
            new = merge_patch(current, patch)
        else:
            raise RequestRejected(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format ({content_type})", details={}
            )
    else:
        raise RequestRejected(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if not isinstance(new, dict):
        raise RequestRejected(400, "BadRequest", "the request body must be a JSON object")
    admission = writes.active()
    scale_request = None
    if admission is not None:
        sent = {**new, "apiVersion": "autoscaling/v1", "kind": "Scale"}
        sent["metadata"] = {**current["metadata"], **(new.get("metadata") or {})}
        scale_request = AdmissionRequest(
            rt, "UPDATE", ns, name, "scale", sent, current, writes.user, dry_run,
            writes.options("UpdateOptions" if info.verb == "update" else "PatchOptions", dry_run), kind=_SCALE_KIND,
        )
        new = await admission.mutate(scale_request, writes.warnings) or new
    replicas = (new.get("spec") or {}).get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid_causes(
            _SCALE_RT, name, [("FieldValueInvalid", "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")]
        )
    body = copy.deepcopy(obj)
    body["spec"]["replicas"] = replicas
    sent_rv = (new.get("metadata") or {}).get("resourceVersion")
    if sent_rv:
        body["metadata"]["resourceVersion"] = sent_rv
    else:
        body["metadata"].pop("resourceVersion", None)
    if admission is not None and scale_request is not None:
        candidate = storage.update(rt, ns, name, body, subresource="scale", dry_run=True, manager=_manager(request))
        await admission.validate(attrs.evolve(scale_request, obj=_scale_of(rt, candidate)), writes.warnings)
        if dry_run:
            return json_response(200, _scale_of(rt, candidate))
        body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
    stored = storage.update(rt, ns, name, body, subresource="scale", dry_run=dry_run, manager=_manager(request))
    return json_response(200, _scale_of(rt, stored))


def _converted(
    storage: ObjectStorage,
    request: Request,
    rt: ResourceType,
    stored: list[dict[str, Any]],
    list_meta: dict[str, Any],
    conversion: Conversion,
    *,
    single: bool,
) -> dict[str, Any]:
    """A get's or list's answer converted as the ``Accept`` header asked (:mod:`._tables`)."""
    if conversion.kind == "Table":
        return as_table(
            rt,
            [(o, typed(rt, o)) for o in stored],
            list_meta,
            conversion,
            now=storage.wall_clock(),
            include_object=request.query.get("includeObject") or None,
            no_headers=flag(request.query, "noHeaders"),
        )
    if single:
        return as_partial(typed(rt, stored[0]), conversion)
    return as_partial_list([typed(rt, o) for o in stored], list_meta, conversion)


def _success(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details(rt.group, rt.plural, obj["metadata"]["name"], uid=obj["metadata"].get("uid")),
    }


def _delete_options(request: Request) -> dict[str, Any]:
    """The ``DeleteOptions`` of a delete (body and query parameters), validated as the real
    server does: 422 Invalid (``meta.k8s.io`` ``DeleteOptions``) for both ``orphanDependents``
    and ``propagationPolicy``, an unknown policy or a ``dryRun`` other than ``All``."""
    body = decode_body(request) or {}
    if not isinstance(body, dict):
        raise RequestRejected(400, "BadRequest", "DeleteOptions must be a JSON object")
    options = dict(body)
    q = request.query
    if q.get("propagationPolicy"):
        options["propagationPolicy"] = q["propagationPolicy"]
    for key in ("orphanDependents", "gracePeriodSeconds"):
        if q.get(key):
            try:
                options[key] = {"true": True, "false": False}[q[key]] if key == "orphanDependents" else int(q[key])
            except (KeyError, ValueError):
                raise RequestRejected(400, "BadRequest", f"invalid value for {key}: {q[key]!r}") from None
    if q.get("dryRun"):
        options["dryRun"] = [q["dryRun"]]
    policy = options.get("propagationPolicy")
    causes = []
    if options.get("orphanDependents") is not None and policy is not None:
        causes.append(
            (
                "FieldValueInvalid",
                "propagationPolicy",
                f'Invalid value: "{policy}": orphanDependents and deletionPropagation cannot be both set',
            )
        )
    if policy is not None and policy not in POLICIES:
        causes.append(
            (
                "FieldValueNotSupported",
                "propagationPolicy",
                f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        )
    dry_run = options.get("dryRun")
    if dry_run is not None and (not isinstance(dry_run, list) or any(v != "All" for v in dry_run)):
        causes.append(("FieldValueNotSupported", "dryRun", f'Unsupported value: {dry_run!r}: supported values: "All"'))
    if causes:
        text = ", ".join(f"{field}: {message}" for _, field, message in causes)
        raise RequestRejected(
            422,
            "Invalid",
            f'DeleteOptions.meta.k8s.io "" is invalid: {text}',
            details=details(
                "meta.k8s.io",
                "DeleteOptions",
                causes=[{"reason": reason, "message": message, "field": field} for reason, field, message in causes],
            ),
        )
    return options


def _check_write_options(request: Request, kind: str, *, apply: bool = False) -> None:
    """Validate a write's options as ``ValidateCreateOptions``/``ValidateUpdateOptions``/
    ``ValidatePatchOptions`` do, before anything else: 422 Invalid on ``meta.k8s.io`` ``kind``
    for ``force`` on a patch other than apply, apply without ``fieldManager``, and a
    ``fieldManager`` over 128 bytes or with unprintable characters."""
    q = request.query
    manager = q.get("fieldManager", "")
    causes: list[tuple[str, str, str]] = []
    if kind == "PatchOptions" and not apply and "force" in q:
        causes.append(("FieldValueForbidden", "force", "Forbidden: may not be specified for non-apply patch"))
    if apply and not manager:
        causes.append(("FieldValueRequired", "fieldManager", "Required value: is required for apply patch"))
    if len(manager.encode()) > 128:
        causes.append(("FieldValueTooLong", "fieldManager", "Too long: may not be more than 128 bytes"))
    elif any(not c.isprintable() for c in manager):
        causes.append(("FieldValueInvalid", "fieldManager", f"Invalid value: {json.dumps(manager)}: must only contain printable characters"))
    if causes:
        text = ", ".join(f"{field}: {message}" for _, field, message in causes)
        raise RequestRejected(
            422,
            "Invalid",
            f'{kind}.meta.k8s.io "" is invalid: {text}',
            details=details(
                "meta.k8s.io",
                kind,
                causes=[{"reason": reason, "message": message, "field": field} for reason, field, message in causes],
            ),
        )


async def _patch(storage: ObjectStorage, request: Request, target: Target, dry_run: bool, writes: _Writes) -> Response:
    rt, ns, name, sub = target.rt, target.namespace, target.name, target.subresource
    assert name is not None
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    _check_write_options(request, "PatchOptions", apply=content_type == "application/apply-patch+yaml")
    patch, duplicates = decode_checked(request)
    custom = rt not in BUILTIN_TYPES
    if content_type == "application/apply-patch+yaml":
        check = _field_check(rt, request, patch, duplicates)
        obj, created = await writes.apply(rt, ns, name, patch, sub, dry_run=dry_run)
        return json_response(201 if created else 200, typed(rt, obj), _warnings(check))
    if content_type == "application/merge-patch+json":
        patched = functools.partial(merge_patch, patch=patch)
    elif content_type == "application/json-patch+json":
        patched = functools.partial(apply_json_patch, operations=patch)
    elif content_type == "application/strategic-merge-patch+json" and not custom:
        keys = SERVICE_MERGE_KEYS if rt.storage_key == ("", "services") else None
        patched = functools.partial(strategic_merge_patch, patch=patch, merge_keys=keys)
    else:
        accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        if not custom:
            accepted += ", application/strategic-merge-patch+json"
        raise RequestRejected(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: {accepted}",
            details={},
        )

    def patch_current(current: Obj) -> tuple[Any, FieldCheck]:
        new = patched(current)
        return new, _field_check(rt, request, new, duplicates)

    obj, check = await writes.update(rt, ns, name, patch_current, sub, dry_run=dry_run, retry=True, options="PatchOptions")
    return json_response(200, typed(rt, obj), _warnings(check))
