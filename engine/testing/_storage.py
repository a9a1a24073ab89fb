"""The in-memory object store: API semantics, resourceVersions, history and watch fan-out.

Every method is synchronous and never awaits, so each operation is atomic with respect to every
other task: there are no locks. Stored objects are never mutated after they are stored; every
write stores a fresh copy.

Semantics kept from the real API server: one global, monotonically increasing resourceVersion;
``uid``, ``creationTimestamp`` and ``generation`` (bumped when anything outside ``metadata`` and,
with a status subresource, ``status`` changes, and when deletion starts); optimistic concurrency;
finalizers and ``deletionTimestamp``; owner references with cascading deletion; namespaces that
must exist; watches replayed from a bounded history.

Simplified: garbage collection runs synchronously inside the delete that triggers it (no
background controller); ``Orphan`` removes the owner references at once instead of through an
``orphan`` finalizer; ``Foreground`` adds ``foregroundDeletion``, deletes dependents in the
background mode and drops the finalizer once no dependents are left; deleting a namespace deletes
its objects and the namespace disappears once they are gone; deleting a CRD removes its objects
at once, ignoring their finalizers. Lists always read the latest state (``resourceVersion`` and
``resourceVersionMatch`` on lists are ignored) and a ``continue`` token resumes after the last key
of the previous page rather than from a snapshot. Core ``v1`` events and ``events.k8s.io/v1``
events are stored separately. There is no persistence.
"""

from __future__ import annotations

import base64
import binascii
import collections
import copy
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ._errors import RequestRejected
from ._patch import (
    deep_merge,
    delete_path,
    fields_to_paths,
    get_path,
    leaf_paths,
    paths_to_fields,
)
from ._resources import BUILTIN_TYPES, ResourceType, resource_types_from_crd
from ._selectors import FieldSelector, LabelSelector

__all__ = ["Store", "Change", "Subscription"]

logger = logging.getLogger("engine.testing.store")

Obj = dict[str, Any]
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SYSTEM_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _format_time(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@attrs.frozen
class Change:
    """One committed change, as kept in the watch history."""

    rv: int
    key: tuple[str, str]
    type: str
    obj: Obj
    old: Obj | None
    time: float


@attrs.define(eq=False)
class Subscription:
    """A watcher's view of the change feed: a bounded buffer filled by :class:`Store`.

    When the buffer is full the store closes it (``overflowed`` becomes true): a slow watcher
    loses its stream instead of slowing down writers.
    """

    key: tuple[str, str]
    namespace: str | None
    send: trio.MemorySendChannel[Change]
    receive: trio.MemoryReceiveChannel[Change]
    overflowed: bool = False
    dropped: bool = False
    abrupt: bool = False
    closed: trio.Event = attrs.Factory(trio.Event)


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _not_found(rt: ResourceType, name: str) -> RequestRejected:
    resource = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return RequestRejected(
        404,
        "NotFound",
        f'{resource} "{name}" not found',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def _invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> RequestRejected:
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    return RequestRejected(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {text}',
        details={
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": message, "field": field}
                for field, message in causes
            ],
        },
    )


def _conflict(rt: ResourceType, name: str, message: str, causes: list[dict[str, str]] | None = None) -> RequestRejected:
    resource = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    details: dict[str, Any] = {"name": name, "group": rt.group, "kind": rt.plural}
    if causes:
        details["causes"] = causes
    return RequestRejected(
        409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {message}', details=details
    )


def _tracked_paths(obj: Obj, rt: ResourceType, *, include_status: bool) -> set[tuple[str, ...]]:
    paths = set()
    for path in leaf_paths(obj):
        if path[0] in ("apiVersion", "kind"):
            continue
        if path[0] == "metadata" and (len(path) < 2 or path[1] in _SYSTEM_METADATA):
            continue
        if path[0] == "status" and rt.has_status and not include_status:
            continue
        paths.add(path)
    return paths


def _spec_part(obj: Obj, rt: ResourceType) -> Obj:
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rt.has_status else set())
    return {k: v for k, v in obj.items() if k not in skip}


@attrs.define(eq=False)
class Store:
    """Objects, resource types, the change history and the watch subscriptions.

    ``history_size`` bounds the change history that watches replay from; ``watch_buffer`` bounds
    each watcher's buffer. ``seed`` makes generated uids and names reproducible;
    ``wall_clock`` (seconds since the epoch) dates ``creationTimestamp``, ``deletionTimestamp``
    and ``managedFields``, so a simulation can make those reproducible too.
    """

    history_size: int = 10_000
    watch_buffer: int = 1_000
    seed: int | None = None
    wall_clock: Callable[[], float] = time.time
    _rv: int = attrs.field(default=1, init=False, repr=False)
    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(factory=dict, init=False, repr=False)
    _objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = attrs.field(factory=dict, init=False, repr=False)
    _history: collections.deque[Change] = attrs.field(factory=collections.deque, init=False, repr=False)
    _floor: int = attrs.field(default=0, init=False, repr=False)
    _subs: dict[tuple[str, str], set[Subscription]] = attrs.field(factory=dict, init=False, repr=False)
    _rng: random.Random = attrs.field(init=False, repr=False)
    _crd_types: dict[str, list[ResourceType]] = attrs.field(factory=dict, init=False, repr=False)

    def _timestamp(self) -> str:
        return _format_time(self.wall_clock())

    def __attrs_post_init__(self) -> None:
        if self.history_size < 1:
            raise ValueError("history_size must be >= 1")
        if self.watch_buffer < 1:
            raise ValueError("watch_buffer must be >= 1")
        self._rng = random.Random(self.seed)
        for rt in BUILTIN_TYPES:
            self._register(rt)
        ns = self.find_type("", "v1", "namespaces")
        assert ns is not None
        for name in DEFAULT_NAMESPACES:
            self.create(ns, None, {"metadata": {"name": name}})

    # ----- resource types -----

    def _register(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt
        self._objects.setdefault(rt.storage_key, {})

    def find_type(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The served type ``group/version/plural``, or ``None``."""
        return self._types.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        """Every served type, built-in types first, in registration order."""
        return list(self._types.values())

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        return self._rv

    @property
    def history_floor(self) -> int:
        """Watches from a resourceVersion below this answer 410 Gone."""
        return self._floor

    def _storage_type(self, key: tuple[str, str]) -> ResourceType | None:
        return next((t for t in self._types.values() if t.storage_key == key), None)

    # ----- commits and watch fan-out -----

    def _commit(self, rt: ResourceType, type_: str, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        _meta(obj)["resourceVersion"] = str(self._rv)
        meta = _meta(obj)
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._objects.setdefault(rt.storage_key, {})
        if type_ == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = obj
        change = Change(self._rv, rt.storage_key, type_, obj, old, trio.current_time() if _in_trio() else 0.0)
        if len(self._history) >= self.history_size:
            self._floor = self._history.popleft().rv
        self._history.append(change)
        for sub in list(self._subs.get(rt.storage_key, ())):
            if sub.namespace is not None and key[0] != sub.namespace:
                continue
            try:
                sub.send.send_nowait(change)
            except trio.WouldBlock:
                logger.info("closing a watch on %s whose buffer is full", rt.plural)
                sub.overflowed = sub.dropped = True
                self.unsubscribe(sub)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.unsubscribe(sub)
        return obj

    def subscribe(
        self, rt: ResourceType, namespace: str | None, since: int | None
    ) -> tuple[list[Change], Subscription]:
        """Start a subscription; returns the changes to replay first and the subscription.

        ``since=None`` replays the current objects as ``ADDED``; otherwise the history after
        ``since`` is replayed, or :class:`RequestRejected` (410 Expired) is raised when that part
        of the history is gone. Not a checkpoint.
        """
        if since is not None and since < self._floor:
            raise RequestRejected(
                410, "Expired", f"too old resource version: {since} ({self._floor})"
            )
        now = trio.current_time()
        if since is None:
            replay = [
                Change(int(_meta(o)["resourceVersion"]), rt.storage_key, "ADDED", o, None, now)
                for _, o in sorted(self._objects.get(rt.storage_key, {}).items())
                if namespace is None or _meta(o).get("namespace") == namespace
            ]
        else:
            replay = [
                c
                for c in self._history
                if c.rv > since
                and c.key == rt.storage_key
                and (namespace is None or _meta(c.obj).get("namespace", "") == namespace)
            ]
        send, receive = trio.open_memory_channel[Change](self.watch_buffer)
        sub = Subscription(rt.storage_key, namespace, send, receive)
        self._subs.setdefault(rt.storage_key, set()).add(sub)
        return replay, sub

    def unsubscribe(self, sub: Subscription) -> None:
        """End a subscription; idempotent, not a checkpoint."""
        self._subs.get(sub.key, set()).discard(sub)
        sub.send.close()
        sub.closed.set()

    def subscriptions(self, key: tuple[str, str] | None = None) -> list[Subscription]:
        """Active subscriptions, for one storage key or all."""
        if key is not None:
            return list(self._subs.get(key, ()))
        return [s for subs in self._subs.values() for s in subs]

    # ----- reads -----

    def check_namespace(self, rt: ResourceType, namespace: str | None) -> str | None:
        """The namespace to use for ``rt``; 400 when one is missing, 404 when it does not exist."""
        if not rt.namespaced:
            return None
        if not namespace:
            raise RequestRejected(400, "BadRequest", f"{rt.plural} is namespaced: a namespace is required")
        if ("", namespace) not in self._objects[("", "namespaces")]:
            raise RequestRejected(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )
        return namespace

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object (do not modify it); 404 when absent."""
        key = (namespace or "", name) if rt.namespaced else ("", name)
        obj = self._objects.get(rt.storage_key, {}).get(key)
        if obj is None:
            raise _not_found(rt, name)
        return obj

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], int, str | None, int | None]:
        """``(items, resourceVersion, continue, remainingItemCount)`` for one page.

        Raises :class:`RequestRejected`: 400 for a malformed ``continue`` token, 410 Expired for
        one older than the history.
        """
        list_rv = self._rv
        after: tuple[str, str] | None = None
        if continue_token:
            try:
                state = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                list_rv, after = int(state["rv"]), (str(state["ns"]), str(state["name"]))
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise RequestRejected(400, "BadRequest", "the continue token is malformed") from None
            if list_rv < self._floor:
                raise RequestRejected(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
        matched = [
            (k, o)
            for k, o in sorted(self._objects.get(rt.storage_key, {}).items())
            if (namespace is None or k[0] == namespace)
            and (after is None or k > after)
            and labels.matches(_meta(o).get("labels"))
            and fields.matches(o)
        ]
        if limit is not None and 0 < limit < len(matched):
            page = matched[:limit]
            last = page[-1][0]
            token = base64.urlsafe_b64encode(
                json.dumps({"rv": list_rv, "ns": last[0], "name": last[1]}).encode()
            ).decode()
            return [o for _, o in page], list_rv, token, len(matched) - limit
        return [o for _, o in matched], list_rv, None, None

    # ----- writes -----

    def _validate(self, rt: ResourceType, obj: Obj) -> None:
        meta = _meta(obj)
        name = meta.get("name", "")
        causes: list[tuple[str, str]] = []
        pattern, limit = (_DNS_LABEL, 63) if rt.plural == "namespaces" else (_DNS_SUBDOMAIN, 253)
        if not isinstance(name, str) or not pattern.match(name) or len(name) > limit:
            causes.append(
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 '
                    f'{"label" if limit == 63 else "subdomain"} must consist of lower case '
                    "alphanumeric characters, '-' or '.', and must start and end with an "
                    "alphanumeric character",
                )
            )
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            causes.append(("metadata.labels", "Invalid value: labels must be a map of strings"))
        else:
            for key, value in labels.items():
                if not isinstance(key, str) or not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
                    causes.append(("metadata.labels", f'Invalid value: "{key}": name part must be a valid label key'))
                elif not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
                    causes.append(("metadata.labels", f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\''))
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            causes.append(("metadata.annotations", "Invalid value: annotations must be a map of strings"))
        finalizers = meta.get("finalizers") or []
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            causes.append(("metadata.finalizers", "Invalid value: finalizers must be a list of strings"))
        if causes:
            raise _invalid(rt, str(name), causes)
        if rt.plural == "customresourcedefinitions":
            resource_types_from_crd(obj)

    def _normalize(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        if rt.storage_key == ("", "secrets") and "stringData" in obj:
            string_data = obj.pop("stringData") or {}
            data = dict(obj.get("data") or {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
        if rt.storage_key == ("", "secrets"):
            obj.setdefault("type", "Opaque")
        if rt.storage_key == ("", "secrets") and isinstance(obj.get("data"), dict):
            for k, v in obj["data"].items():
                try:
                    base64.b64decode(str(v), validate=True)
                except binascii.Error:
                    raise _invalid(rt, _meta(obj).get("name", ""), [(f"data[{k}]", "Invalid value: must be base64")]) from None
        if rt.plural == "namespaces" and rt.group == "":
            status = dict(obj.get("status") or {})
            status.setdefault("phase", "Active")
            obj["status"] = status
            labels = dict(_meta(obj).get("labels") or {})
            labels["kubernetes.io/metadata.name"] = _meta(obj)["name"]
            obj["metadata"]["labels"] = labels
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            spec = obj["spec"]
            status = dict(obj.get("status") or {})
            now = self._timestamp()
            status["acceptedNames"] = {k: v for k, v in spec["names"].items()}
            status["acceptedNames"].setdefault("singular", spec["names"]["kind"].lower())
            status["acceptedNames"].setdefault("listKind", spec["names"]["kind"] + "List")
            status["storedVersions"] = [v["name"] for v in spec["versions"] if v.get("storage")]
            status["conditions"] = [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ]
            obj["status"] = status

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _prepare_body(self, rt: ResourceType, namespace: str | None, body: Any, name: str | None) -> Obj:
        if not isinstance(body, dict):
            raise RequestRejected(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(body)
        if obj.get("kind") not in (None, "", rt.kind):
            raise RequestRejected(
                400, "BadRequest", f"the kind of the object ({obj.get('kind')}) does not match the resource ({rt.kind})"
            )
        if obj.get("apiVersion") not in (None, "") and obj["apiVersion"].split("/")[0] != (rt.group or "v1") and obj["apiVersion"] != rt.api_version:
            raise RequestRejected(
                400, "BadRequest", f"the API version of the object ({obj['apiVersion']}) does not match the resource ({rt.api_version})"
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise RequestRejected(400, "BadRequest", "metadata must be a JSON object")
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise RequestRejected(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None:
            if meta.get("name") not in (None, "", name):
                raise RequestRejected(
                    400, "BadRequest", "the name of the object does not match the name on the URL"
                )
            meta["name"] = name
        return obj

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        manager: str | None = None,
        _managed_fields: list[dict[str, Any]] | None = None,
    ) -> Obj:
        """Create an object. Raises :class:`RequestRejected`: 400, 404 (namespace), 409
        AlreadyExists, 403 (namespace terminating), 422 Invalid."""
        obj = self._prepare_body(rt, namespace, body, None)
        namespace = self.check_namespace(rt, namespace)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            alphabet = "bcdfghjklmnpqrstvwxz2456789"
            meta["name"] = meta["generateName"] + "".join(self._rng.choice(alphabet) for _ in range(5))
        if not meta.get("name"):
            raise _invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
        if namespace is not None:
            ns_obj = self._objects[("", "namespaces")][("", namespace)]
            if _meta(ns_obj).get("deletionTimestamp"):
                raise RequestRejected(
                    403,
                    "Forbidden",
                    f'{rt.plural} "{meta["name"]}" is forbidden: unable to create new content in '
                    f"namespace {namespace} because it is being terminated",
                    details={"name": meta["name"], "group": rt.group, "kind": rt.plural},
                )
        key = (namespace or "", meta["name"])
        if key in self._objects[rt.storage_key]:
            resource = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
            raise RequestRejected(
                409,
                "AlreadyExists",
                f'{resource} "{meta["name"]}" already exists',
                details={"name": meta["name"], "group": rt.group, "kind": rt.plural},
            )
        for field in _SYSTEM_METADATA:
            if field not in ("name", "namespace"):
                meta.pop(field, None)
        if rt.has_status:
            obj.pop("status", None)
        self._validate(rt, obj)
        self._normalize(rt, obj, None)
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = self._timestamp()
        meta["generation"] = 1
        if _managed_fields is not None:
            meta["managedFields"] = _managed_fields
        elif manager:
            self._record_update(rt, obj, None, manager)
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._check_crd_collision(obj)
        if dry_run:
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        stored = self._commit(rt, "ADDED", obj, None)
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._serve_crd(stored)
        return stored

    def _check_crd_collision(self, crd: Obj) -> None:
        for t in resource_types_from_crd(crd):
            if (t.group, t.version, t.plural) in self._types:
                raise RequestRejected(
                    409, "AlreadyExists", f"{t.plural}.{t.group} is already served by another definition"
                )

    def _serve_crd(self, crd: Obj) -> None:
        name = _meta(crd)["name"]
        for t in self._crd_types.pop(name, []):
            self._types.pop((t.group, t.version, t.plural), None)
        types = resource_types_from_crd(crd)
        for t in types:
            self._register(t)
        self._crd_types[name] = types

    def _unserve_crd(self, crd: Obj) -> None:
        name = _meta(crd)["name"]
        types = self._crd_types.pop(name, [])
        if not types:
            return
        key = types[0].storage_key
        for obj in list(self._objects.get(key, {}).values()):
            self._commit(types[0], "DELETED", obj, obj)
        for sub in list(self._subs.get(key, ())):
            self.unsubscribe(sub)
        for t in types:
            self._types.pop((t.group, t.version, t.plural), None)
        self._objects.pop(key, None)

    def _record_update(self, rt: ResourceType, new: Obj, old: Obj | None, manager: str) -> None:
        new_paths = _tracked_paths(new, rt, include_status=True)
        old_paths = _tracked_paths(old, rt, include_status=True) if old else set()
        changed = {p for p in new_paths if old is None or get_path(old, p) != get_path(new, p)}
        removed = old_paths - new_paths
        self._set_ownership(rt, new, manager, "Update", changed, removed)

    def _ownership(self, obj: Obj) -> list[dict[str, Any]]:
        entries = _meta(obj).get("managedFields")
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def _set_ownership(
        self,
        rt: ResourceType,
        obj: Obj,
        manager: str,
        operation: str,
        paths: set[tuple[str, ...]],
        removed: set[tuple[str, ...]],
    ) -> None:
        entries = []
        mine: set[tuple[str, ...]] = set()
        for entry in self._ownership(obj):
            owned = fields_to_paths(entry.get("fieldsV1")) - removed
            if entry.get("manager") == manager and entry.get("operation") == operation:
                mine = owned
                continue
            owned -= paths
            if owned:
                entries.append({**entry, "fieldsV1": paths_to_fields(owned)})
        mine |= paths
        if mine:
            entries.append(
                {
                    "manager": manager,
                    "operation": operation,
                    "apiVersion": rt.api_version,
                    "time": self._timestamp(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": paths_to_fields(mine),
                }
            )
        if entries:
            obj["metadata"]["managedFields"] = entries
        else:
            obj["metadata"].pop("managedFields", None)

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        check_version: bool = True,
        _ownership_changed: bool = False,
    ) -> Obj:
        """Replace an object (or its status). Raises :class:`RequestRejected`: 404, 409 Conflict
        on a stale ``metadata.resourceVersion``, 400, 422. A write that changes nothing is a
        no-op that keeps the resourceVersion."""
        namespace = self.check_namespace(rt, namespace)
        old = self.get(rt, namespace, name)
        obj = self._prepare_body(rt, namespace, body, name)
        meta = obj["metadata"]
        sent_rv = meta.get("resourceVersion")
        if check_version and sent_rv not in (None, "") and sent_rv != _meta(old)["resourceVersion"]:
            raise _conflict(
                rt, name, "the object has been modified; please apply your changes to the latest version and try again"
            )
        old_meta = _meta(old)
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            if _ownership_changed and "managedFields" in meta:
                new["metadata"]["managedFields"] = meta["managedFields"]
            obj = new
            meta = obj["metadata"]
        else:
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if field in old_meta:
                    meta[field] = old_meta[field]
                else:
                    meta.pop(field, None)
            if "managedFields" not in meta and "managedFields" in old_meta:
                meta["managedFields"] = old_meta["managedFields"]
            if rt.has_status:
                if "status" in old:
                    obj["status"] = copy.deepcopy(old["status"])
                else:
                    obj.pop("status", None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        self._validate(rt, obj)
        self._normalize(rt, obj, old)
        if old_meta.get("deletionTimestamp"):
            new_finalizers = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if new_finalizers:
                raise RequestRejected(
                    422,
                    "Invalid",
                    f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(new_finalizers)!r}",
                    details={"name": name, "group": rt.group, "kind": rt.kind},
                )
        if _spec_part(obj, rt) != _spec_part(old, rt):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if manager:
            self._record_update(rt, obj, old, manager)
        ignored = () if _ownership_changed else ("managedFields",)
        comparable_new = {**obj, "metadata": {k: v for k, v in meta.items() if k not in ignored}}
        comparable_old = {**old, "metadata": {k: v for k, v in old_meta.items() if k not in ignored}}
        comparable_new["apiVersion"], comparable_new["kind"] = old.get("apiVersion"), old.get("kind")
        if comparable_new == comparable_old:
            return old
        if dry_run:
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rt, obj)
        stored = self._commit(rt, "MODIFIED", obj, old)
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._serve_crd(stored)
        return stored

    def apply(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        config: Any,
        *,
        manager: str,
        force: bool,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Server-side apply (simplified ownership, see the README); returns ``(object, created)``.

        Ownership is a set of leaf paths per manager (lists are atomic leaves). Applying a path
        whose current value differs and that another manager owns is a 409 conflict unless
        ``force``; paths this manager applied before and omits now are removed unless another
        manager owns them too.
        """
        if not isinstance(config, dict):
            raise RequestRejected(400, "BadRequest", "an apply configuration must be an object")
        if not config.get("apiVersion") or not config.get("kind"):
            raise RequestRejected(400, "BadRequest", "an apply configuration must set apiVersion and kind")
        namespace = self.check_namespace(rt, namespace)
        applied = self._prepare_body(rt, namespace, config, name)
        applied.pop("apiVersion", None)
        applied.pop("kind", None)
        include_status = subresource == "status" or not rt.has_status
        paths = _tracked_paths(applied, rt, include_status=include_status)
        if subresource == "status":
            paths = {p for p in paths if p[0] == "status"}
        elif rt.has_status:
            applied.pop("status", None)
        try:
            current = self.get(rt, namespace, name)
        except RequestRejected:
            current = None
        if current is None:
            if subresource == "status":
                raise _not_found(rt, name)
            obj = copy.deepcopy(applied)
            self._set_ownership_apply(rt, obj, manager, paths, set())
            created = self.create(
                rt, namespace, obj, dry_run=dry_run, _managed_fields=obj["metadata"]["managedFields"]
            )
            return created, True
        conflicts: list[dict[str, str]] = []
        for entry in self._ownership(current):
            if entry.get("manager") == manager:
                continue
            owned = fields_to_paths(entry.get("fieldsV1"))
            for path in sorted(paths & owned):
                if get_path(current, path) != get_path(applied, path):
                    conflicts.append(
                        {
                            "reason": "FieldManagerConflict",
                            "message": f'conflict with "{entry.get("manager")}" using {entry.get("apiVersion", rt.api_version)}',
                            "field": "." + ".".join(path),
                        }
                    )
        if conflicts and not force:
            text = "\n".join(f"- {c['message']}: {c['field']}" for c in conflicts)
            raise RequestRejected(
                409,
                "Conflict",
                f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: {text}",
                details={"name": name, "group": rt.group, "kind": rt.plural, "causes": conflicts},
            )
        previous: set[tuple[str, ...]] = set()
        others: set[tuple[str, ...]] = set()
        for entry in self._ownership(current):
            owned = fields_to_paths(entry.get("fieldsV1"))
            if entry.get("manager") == manager and entry.get("operation") == "Apply":
                previous = owned
            else:
                others |= owned
        merged = deep_merge(current, applied)
        for path in previous - paths - others:
            delete_path(merged, path)
        stolen = {p for p in paths if get_path(current, p) != get_path(applied, p)}
        self._set_ownership_apply(rt, merged, manager, paths, stolen)
        merged["metadata"]["resourceVersion"] = _meta(current)["resourceVersion"]
        updated = self.update(
            rt,
            namespace,
            name,
            merged,
            subresource=subresource,
            dry_run=dry_run,
            check_version=False,
            _ownership_changed=True,
        )
        return updated, False

    def _set_ownership_apply(
        self, rt: ResourceType, obj: Obj, manager: str, paths: set[tuple[str, ...]], stolen: set[tuple[str, ...]]
    ) -> None:
        entries = []
        for entry in self._ownership(obj):
            if entry.get("manager") == manager and entry.get("operation") == "Apply":
                continue
            owned = fields_to_paths(entry.get("fieldsV1")) - stolen
            if owned:
                entries.append({**entry, "fieldsV1": paths_to_fields(owned)})
        if paths:
            entries.append(
                {
                    "manager": manager,
                    "operation": "Apply",
                    "apiVersion": rt.api_version,
                    "time": self._timestamp(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": paths_to_fields(paths),
                }
            )
        obj["metadata"]["managedFields"] = entries

    # ----- deletion -----

    def _dependents(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        found = []
        for key, bucket in self._objects.items():
            rt = self._storage_type(key)
            if rt is None:
                continue
            for obj in bucket.values():
                refs = _meta(obj).get("ownerReferences") or []
                if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                    found.append((rt, obj))
        return found

    def _uid_exists(self, uid: str) -> bool:
        return any(_meta(o).get("uid") == uid for bucket in self._objects.values() for o in bucket.values())

    def _drop_owner_ref(self, rt: ResourceType, obj: Obj, uid: str) -> None:
        new = copy.deepcopy(obj)
        refs = [r for r in new["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._commit(rt, "MODIFIED", new, obj)

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = _meta(obj)
        stored = self._commit(rt, "DELETED", obj, obj)
        uid = meta.get("uid", "")
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._unserve_crd(obj)
        for dep_rt, dep in self._dependents(uid):
            current = self._objects.get(dep_rt.storage_key, {}).get(
                (_meta(dep).get("namespace", ""), _meta(dep)["name"])
            )
            if current is None:
                continue
            other_owners = [
                r for r in _meta(current).get("ownerReferences", [])
                if r.get("uid") != uid and self._uid_exists(r.get("uid", ""))
            ]
            if other_owners:
                self._drop_owner_ref(dep_rt, current, uid)
            elif not _meta(current).get("deletionTimestamp"):
                self._delete(dep_rt, current, "Background")
        for ref in meta.get("ownerReferences") or []:
            self._check_foreground(ref.get("uid", ""))
        namespace = meta.get("namespace")
        if namespace:
            self._check_namespace_done(namespace)
        return stored

    def _find_uid(self, uid: str) -> tuple[ResourceType, Obj] | None:
        for key, bucket in self._objects.items():
            for obj in bucket.values():
                if _meta(obj).get("uid") == uid:
                    rt = self._storage_type(key)
                    if rt is not None:
                        return rt, obj
        return None

    def _check_foreground(self, uid: str) -> None:
        found = self._find_uid(uid)
        if found is None:
            return
        rt, owner = found
        finalizers = _meta(owner).get("finalizers") or []
        if "foregroundDeletion" not in finalizers or self._dependents(uid):
            return
        new = copy.deepcopy(owner)
        new["metadata"]["finalizers"] = [f for f in finalizers if f != "foregroundDeletion"]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
            self._remove(rt, new)
        else:
            self._commit(rt, "MODIFIED", new, owner)

    def _check_namespace_done(self, namespace: str) -> None:
        ns_obj = self._objects[("", "namespaces")].get(("", namespace))
        if ns_obj is None or not _meta(ns_obj).get("deletionTimestamp") or _meta(ns_obj).get("finalizers"):
            return
        for key, bucket in self._objects.items():
            if key != ("", "namespaces") and any(k[0] == namespace for k in bucket):
                return
        ns_rt = self.find_type("", "v1", "namespaces")
        assert ns_rt is not None
        self._remove(ns_rt, ns_obj)

    def _delete(self, rt: ResourceType, obj: Obj, policy: str) -> tuple[Obj, bool]:
        meta = _meta(obj)
        uid = meta.get("uid", "")
        if policy == "Orphan":
            for dep_rt, dep in self._dependents(uid):
                self._drop_owner_ref(dep_rt, dep, uid)
            obj = self._objects[rt.storage_key][(meta.get("namespace", ""), meta["name"])]
            meta = _meta(obj)
        finalizers = list(meta.get("finalizers") or [])
        is_namespace = rt.plural == "namespaces" and rt.group == ""
        dependents = self._dependents(uid) if policy == "Foreground" else []
        if dependents and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if not finalizers and not is_namespace:
            return self._remove(rt, obj), True
        if not meta.get("deletionTimestamp"):
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = self._timestamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["generation"] = int(meta.get("generation", 1)) + 1
            if finalizers:
                new["metadata"]["finalizers"] = finalizers
            if is_namespace:
                new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
            obj = self._commit(rt, "MODIFIED", new, obj)
        for dep_rt, dep in dependents:
            current = self._objects.get(dep_rt.storage_key, {}).get((_meta(dep).get("namespace", ""), _meta(dep)["name"]))
            if current is not None and not _meta(current).get("deletionTimestamp"):
                self._delete(dep_rt, current, "Background")
        if is_namespace:
            name = meta["name"]
            for key, bucket in list(self._objects.items()):
                if key == ("", "namespaces"):
                    continue
                child_rt = self._storage_type(key)
                if child_rt is None:
                    continue
                for k, child in sorted(bucket.items()):
                    if k[0] == name and not _meta(child).get("deletionTimestamp") and k in bucket:
                        self._delete(child_rt, child, "Background")
            self._check_namespace_done(name)
        if dependents:
            self._check_foreground(uid)
        key = (meta.get("namespace", ""), meta["name"])
        current_obj = self._objects.get(rt.storage_key, {}).get(key)
        return (current_obj if current_obj is not None else obj), current_obj is None

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete an object; returns ``(object, gone)``; ``gone`` is false while finalizers
        hold it. ``options`` is a ``DeleteOptions`` body (``preconditions``,
        ``propagationPolicy``). Raises :class:`RequestRejected`: 404, 409 on a failed
        precondition, 400 on an unknown propagation policy."""
        namespace = self.check_namespace(rt, namespace) if rt.namespaced else None
        obj = self.get(rt, namespace, name)
        options = options or {}
        preconditions = options.get("preconditions") or {}
        meta = _meta(obj)
        if preconditions.get("uid") not in (None, "") and preconditions["uid"] != meta.get("uid"):
            raise _conflict(
                rt, name, f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta.get('uid')}"
            )
        if preconditions.get("resourceVersion") not in (None, "") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise _conflict(
                rt,
                name,
                f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )
        policy = options.get("propagationPolicy") or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise RequestRejected(400, "BadRequest", f"propagationPolicy must be Background, Foreground or Orphan, not {policy!r}")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        if dry_run:
            return obj, not meta.get("finalizers")
        if meta.get("deletionTimestamp"):
            return obj, False
        return self._delete(rt, obj, policy)


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True

