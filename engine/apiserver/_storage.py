"""Object storage: API semantics over per-resource maps, resourceVersions and the watch history.

Every method is synchronous and never awaits, so each operation is atomic with respect to every
other task: there are no locks. Stored objects are never mutated after they are stored; every
write stores a fresh copy.

Semantics kept from the real API server: one global, monotonically increasing resourceVersion;
``uid``, ``creationTimestamp`` and ``generation`` (bumped when anything outside ``metadata`` and,
with a status subresource, ``status`` changes, and when deletion starts); optimistic concurrency;
namespaces that must exist; watches replayed from a bounded history. The rest lives next door:
each resource's objects in key order and the pages lists cut from them in :mod:`._buckets`,
per-type validation and defaults in :mod:`._strategies`, field ownership and server-side apply
in :mod:`._apply`, deletion in :mod:`._deletion`, garbage collection in :mod:`._controllers`.

Lists read the latest state, or with ``resourceVersionMatch=Exact`` the state at a
resourceVersion the history still covers; the pages after the first read the first page's
state, as on the real server; a ``resourceVersion`` newer than the latest is refused (see
:meth:`ObjectStorage.check_not_newer`). Core ``v1`` and ``events.k8s.io/v1`` Events are one
storage (the core form) with two views (:mod:`._events`). There is no persistence, but
:meth:`ObjectStorage.snapshot` and :meth:`ObjectStorage.restore` take the state back to an
earlier moment, resourceVersions included, as an etcd restore does.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import copy
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio

from . import _apply, _deletion, _events, _services
from ._buckets import Bucket, decode_continue, encode_continue
from ._errors import RequestRejected
from ._fields import FieldCheck
from ._objects import SYSTEM_METADATA, Key, Obj, format_time, meta
from ._resources import BUILTIN_TYPES, ResourceType, resource_types_from_crd
from ._selectors import FieldSelector, LabelSelector
from ._status import already_exists, conflict, invalid, invalid_causes, namespace_terminating, not_found
from ._strategies import strategy_for

__all__ = [
    "ObjectStorage", "StorageSnapshot", "Change", "Subscription", "DEFAULT_NAMESPACES", "too_large_resource_version",
]

logger = logging.getLogger("engine.apiserver.storage")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAMESPACES = ("", "namespaces")
WATCH_WINDOW_EVENTS = 100
"""Events of one type a watch can always start after (the real watch cache's smallest size)."""
WATCH_WINDOW_SECONDS = 75.0
"""Seconds for which every event of a type stays watchable (the watch cache's freshness)."""
FUTURE_RV_WAIT = 3.0
"""Seconds a read from a resourceVersion not handed out yet waits for it before its 504."""


def too_large_resource_version(wanted: int, current: int) -> RequestRejected:
    """The real server's answer to a read from ``wanted`` when what serves it (its watch cache)
    has got only to ``current``: 504 ``Timeout`` with cause ``ResourceVersionTooLarge``."""
    return RequestRejected(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {wanted}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


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
    """A watcher's view of the change feed: a bounded buffer filled by :class:`ObjectStorage`.

    When the buffer is full the storage closes it (``overflowed`` becomes true): a slow watcher
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


@attrs.frozen(eq=False)
class StorageSnapshot:
    """The state of an :class:`ObjectStorage` at one moment, as :meth:`ObjectStorage.snapshot`
    took it: every object, the served types and the resourceVersion counter. Opaque: hand it
    to :meth:`ObjectStorage.restore` (or :meth:`ApiServer.restore`) of the same storage."""

    _owner: ObjectStorage = attrs.field(alias="owner", repr=False)
    resource_version: int
    """The latest resourceVersion handed out when it was taken."""
    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(alias="types", repr=False)
    _crd_types: dict[str, list[ResourceType]] = attrs.field(alias="crd_types", repr=False)
    _objects: dict[tuple[str, str], dict[Key, Obj]] = attrs.field(alias="objects", repr=False)


_FENCE: contextvars.ContextVar[tuple[ObjectStorage, int] | None] = contextvars.ContextVar("fence", default=None)
"""The storage and its restore count a task's writes were fenced at (see
:meth:`ObjectStorage.fence_writes`)."""

_RESTARTED = "the API server restarted on restored storage while answering; the request was not carried out"


@attrs.define(eq=False)
class ObjectStorage:
    """The embedded server's state: resource types, objects, the change history and watches.

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
    _objects: dict[tuple[str, str], Bucket] = attrs.field(factory=dict, init=False, repr=False)
    _history: collections.deque[Change] = attrs.field(factory=collections.deque, init=False, repr=False)
    _floor: int = attrs.field(default=0, init=False, repr=False)
    _windows: dict[tuple[str, str], collections.deque[tuple[int, float]]] = attrs.field(
        factory=dict, init=False, repr=False
    )
    _window_floors: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False, repr=False)
    _subs: dict[tuple[str, str], set[Subscription]] = attrs.field(factory=dict, init=False, repr=False)
    _rng: random.Random = attrs.field(init=False, repr=False)
    _crd_types: dict[str, list[ResourceType]] = attrs.field(factory=dict, init=False, repr=False)
    _listeners: list[Callable[[Change], None]] = attrs.field(factory=list, init=False, repr=False)
    _restore_listeners: list[Callable[[], None]] = attrs.field(factory=list, init=False, repr=False)
    _rv_waiters: list[tuple[int, trio.Event]] = attrs.field(factory=list, init=False, repr=False)
    _write_waiters: list[tuple[tuple[str, str], int, trio.Event]] = attrs.field(factory=list, init=False, repr=False)
    _restores: int = attrs.field(default=0, init=False, repr=False)

    def timestamp(self) -> str:
        """Now by :attr:`wall_clock`, formatted as the server writes timestamps into objects."""
        return format_time(self.wall_clock())

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
        self._objects.setdefault(rt.storage_key, Bucket())

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

    def check_not_newer(self, resource_version: str | None) -> None:
        """Refuse a read from a ``resourceVersion`` newer than the latest handed out, as the
        real server does once its wait for it runs out (:meth:`wait_for_resource_version`):
        504 ``Timeout`` with cause ``ResourceVersionTooLarge`` and ``retryAfterSeconds: 1``.
        This one answers at once. Values that are not integers are left to the caller. Not a
        checkpoint."""
        try:
            wanted = int(resource_version or 0)
        except ValueError:
            return
        if wanted > self._rv:
            raise too_large_resource_version(wanted, self._rv)

    async def wait_for_resource_version(self, resource_version: str | None, timeout: float = FUTURE_RV_WAIT) -> None:
        """Wait (``timeout`` seconds of trio time at most) until the ``resourceVersion`` a read
        asks for has been handed out, as the real server waits for its watch cache to catch up;
        returns at once for one already handed out or not an integer. What is still too new
        afterwards is for :meth:`check_not_newer` to refuse."""
        try:
            wanted = int(resource_version or 0)
        except ValueError:
            return
        if wanted <= self._rv:
            return
        event = trio.Event()
        waiter = (wanted, event)
        self._rv_waiters.append(waiter)
        try:
            with trio.move_on_after(timeout):
                await event.wait()
        finally:
            if waiter in self._rv_waiters:
                self._rv_waiters.remove(waiter)

    def last_write(self, key: tuple[str, str]) -> int:
        """The resourceVersion of the latest change to the type stored under ``key`` since the
        server started or was last restored (0: none). Not a checkpoint."""
        window = self._windows.get(key)
        return window[-1][0] if window else 0

    async def wait_for_write(self, key: tuple[str, str], resource_version: int, timeout: float = FUTURE_RV_WAIT) -> bool:
        """Wait (``timeout`` seconds of trio time at most) for a change to the type stored
        under ``key`` at ``resource_version`` or newer; whether one came (at once when
        :meth:`last_write` is there already). If cancelled, nothing is left waiting."""
        if self.last_write(key) >= resource_version:
            return True
        waiter = (key, resource_version, trio.Event())
        self._write_waiters.append(waiter)
        try:
            with trio.move_on_after(timeout):
                await waiter[2].wait()
        finally:
            if waiter in self._write_waiters:
                self._write_waiters.remove(waiter)
        return waiter[2].is_set()

    def storage_type(self, key: tuple[str, str]) -> ResourceType | None:
        """The served type whose objects are stored under ``key`` (``(group, plural)``), or
        ``None``; of several versions, the first registered."""
        return next((t for t in self._types.values() if t.storage_key == key), None)

    def _check_crd_collision(self, crd: Obj) -> None:
        for t in resource_types_from_crd(crd):
            if (t.group, t.version, t.plural) in self._types:
                raise RequestRejected(
                    409, "AlreadyExists", f"{t.plural}.{t.group} is already served by another definition"
                )

    def _serve_crd(self, crd: Obj) -> None:
        name = meta(crd)["name"]
        for t in self._crd_types.pop(name, []):
            self._types.pop((t.group, t.version, t.plural), None)
        types = resource_types_from_crd(crd)
        for t in types:
            self._register(t)
        self._crd_types[name] = types
        schema = types[0].schema if types else None
        bucket = self._objects.get(types[0].storage_key) if types else None
        if schema is not None and bucket is not None:
            # Defaulting on read: objects stored before a default was added read with it.
            for key, obj in bucket.objects.items():
                fresh = copy.deepcopy(obj)
                schema.root.apply_defaults(fresh)
                if fresh != obj:
                    bucket.objects[key] = fresh

    def unserve_crd(self, crd: Obj) -> None:
        """Stop serving the types of the CustomResourceDefinition ``crd`` (being removed):
        its remaining objects are committed as deleted, its watches closed and its types
        forgotten. Not a checkpoint."""
        name = meta(crd)["name"]
        types = self._crd_types.pop(name, [])
        if not types:
            return
        key = types[0].storage_key
        bucket = self._objects.get(key)
        for obj in list(bucket.objects.values()) if bucket else []:
            self.commit(types[0], "DELETED", obj, obj)
        for sub in list(self._subs.get(key, ())):
            self.unsubscribe(sub)
        for t in types:
            self._types.pop((t.group, t.version, t.plural), None)
        self._objects.pop(key, None)

    # ----- commits and watch fan-out -----

    def commit(self, rt: ResourceType, type_: str, obj: Obj, old: Obj | None) -> Obj:
        """Store a copy of ``obj`` as ``rt`` (``type_`` ``DELETED`` removes it) under the next
        resourceVersion and tell watches and listeners; returns the stored copy.

        The last step of every write, for the server's own rules (deletion, controllers): it
        checks nothing, so the caller has validated, defaulted and admitted ``obj``. ``old`` is
        the object it replaces, as listeners see it. Within :meth:`fence_writes` after a
        :meth:`restore` since, raises :class:`RequestRejected` (503) and stores nothing. Not a
        checkpoint.
        """
        fence = _FENCE.get()
        if fence is not None and fence[0] is self and fence[1] != self._restores:
            raise RequestRejected(503, "ServiceUnavailable", _RESTARTED)
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        meta(obj)["resourceVersion"] = str(self._rv)
        metadata = meta(obj)
        key = (metadata.get("namespace", ""), metadata["name"])
        bucket = self._objects.setdefault(rt.storage_key, Bucket())
        if type_ == "DELETED":
            bucket.pop(key)
        else:
            bucket.put(key, obj)
        change = Change(self._rv, rt.storage_key, type_, obj, old, trio.current_time() if _in_trio() else 0.0)
        if len(self._history) >= self.history_size:
            self._floor = self._history.popleft().rv
        self._history.append(change)
        self._slide_window(rt.storage_key, change)
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
        for listener in self._listeners:
            listener(change)
        self._wake_rv_waiters()
        if self._write_waiters:
            for waiter in [w for w in self._write_waiters if w[0] == rt.storage_key and w[1] <= self._rv]:
                self._write_waiters.remove(waiter)
                waiter[2].set()
        return obj

    def _wake_rv_waiters(self) -> None:
        if self._rv_waiters:
            reached = [w for w in self._rv_waiters if w[0] <= self._rv]
            for waiter in reached:
                self._rv_waiters.remove(waiter)
                waiter[1].set()

    def _slide_window(self, key: tuple[str, str], change: Change) -> None:
        """Keep ``key``'s watch window as the real watch cache keeps its events: at least the
        last :data:`WATCH_WINDOW_EVENTS`, and every event younger than
        :data:`WATCH_WINDOW_SECONDS` (trio time)."""
        window = self._windows.setdefault(key, collections.deque())
        window.append((change.rv, change.time))
        while window and (
            window[0][0] <= self._floor
            or (len(window) > WATCH_WINDOW_EVENTS and window[0][1] < change.time - WATCH_WINDOW_SECONDS)
        ):
            self._window_floors[key] = window.popleft()[0]

    def watch_floor(self, key: tuple[str, str]) -> int:
        """Watches of the type stored under ``key`` from a resourceVersion below this answer
        410 Expired: the change history's floor, or where that type's watch window starts."""
        return max(self._floor, self._window_floors.get(key, 0))

    def add_listener(self, listener: Callable[[Change], None]) -> None:
        """Call ``listener(change)`` after every committed change, synchronously (it must not
        write to the storage itself). Not a checkpoint."""
        self._listeners.append(listener)

    def add_restore_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every :meth:`restore`, synchronously, once the restored
        state is in place (the server's controllers index it again). Not a checkpoint."""
        self._restore_listeners.append(listener)

    # ----- snapshots -----

    def snapshot(self) -> StorageSnapshot:
        """The current state, for a later :meth:`restore`: every object, the served types and
        the resourceVersion counter (not the watch history). Cheap: stored objects are never
        modified, so the snapshot shares them. Not a checkpoint."""
        return StorageSnapshot(
            owner=self,
            resource_version=self._rv,
            types=dict(self._types),
            crd_types={name: list(types) for name, types in self._crd_types.items()},
            objects={key: dict(bucket.objects) for key, bucket in self._objects.items()},
        )

    @contextlib.contextmanager
    def fence_writes(self) -> Iterator[None]:
        """Within, in this task: once this storage is restored (:meth:`restore`), every write
        is refused with ``503`` and stores nothing, as a request that was being answered when
        the API server went down to restart on a restored etcd never lands in the restored
        state. The server answers each request within one. Not a checkpoint."""
        token = _FENCE.set((self, self._restores))
        try:
            yield
        finally:
            _FENCE.reset(token)

    def restore(self, snapshot: StorageSnapshot) -> None:
        """Put the state back to ``snapshot``, as an etcd restore does: the objects (uids,
        generations, resourceVersions and all) and the served types as they were, and the
        resourceVersion counter back to the snapshot's, so resourceVersions go backwards and
        the next writes hand out numbers already seen before. Objects created since are gone,
        deleted ones are back; nothing is reported to watches as a change.

        The watch history is emptied (watches from before the snapshot's resourceVersion then
        answer 410 Expired) and every open watch ends abruptly, as the connections of a server
        restarted on a restored etcd do, and the writes of requests still being answered are
        refused (see :meth:`fence_writes`). Then the restore listeners run. Generated uids and
        names go on from where they were (new objects do not reuse the uids of the ones that
        vanished). Synchronous and atomic: not a checkpoint, so no request sees a half-restored
        state. Raises ``ValueError`` for a snapshot another storage took.
        """
        if snapshot._owner is not self:
            raise ValueError("a snapshot can be restored only into the storage that took it")
        self._restores += 1
        self._rv = snapshot.resource_version
        self._types = dict(snapshot._types)
        self._crd_types = {name: list(kinds) for name, kinds in snapshot._crd_types.items()}
        self._objects = {key: Bucket.of(dict(stored)) for key, stored in snapshot._objects.items()}
        self._history.clear()
        self._windows.clear()
        self._window_floors.clear()
        self._floor = snapshot.resource_version
        for sub in self.subscriptions():
            sub.dropped = sub.abrupt = True
            self.unsubscribe(sub)
        self._wake_rv_waiters()
        logger.info("storage restored to resourceVersion %d", snapshot.resource_version)
        for listener in self._restore_listeners:
            listener()

    def subscribe(
        self, rt: ResourceType, namespace: str | None, since: int | None
    ) -> tuple[list[Change], Subscription]:
        """Start a subscription; returns the changes to replay first and the subscription.

        ``since=None`` replays the current objects as ``ADDED``; otherwise the history after
        ``since`` is replayed, or :class:`RequestRejected` (410 Expired) is raised when that part
        of the history is gone. Not a checkpoint.
        """
        floor = self.watch_floor(rt.storage_key)
        if since is not None and since < floor:
            raise RequestRejected(410, "Expired", f"too old resource version: {since} ({floor})")
        now = trio.current_time()
        if since is None:
            bucket = self._objects.get(rt.storage_key)
            replay = [
                Change(int(meta(o)["resourceVersion"]), rt.storage_key, "ADDED", o, None, now)
                for _, o in (bucket.snapshot(namespace) if bucket else [])
            ]
        else:
            replay = [
                c
                for c in self._history
                if c.rv > since
                and c.key == rt.storage_key
                and (namespace is None or meta(c.obj).get("namespace", "") == namespace)
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
        if ("", namespace) not in self._objects[_NAMESPACES].objects:
            raise RequestRejected(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )
        return namespace

    def storage_keys(self) -> list[tuple[str, str]]:
        """The storage key of every resource that has objects or is served, in the order
        first registered."""
        return list(self._objects)

    def stored(self, storage_key: tuple[str, str], key: Key) -> Obj | None:
        """The object stored under ``key`` for ``storage_key`` (do not modify it), or ``None``;
        unlike :meth:`lookup`, whatever version serves it and without namespace rules."""
        bucket = self._objects.get(storage_key)
        return bucket.objects.get(key) if bucket else None

    def objects_of(self, storage_key: tuple[str, str]) -> list[tuple[Key, Obj]]:
        """``(key, object)`` for every object stored for ``storage_key``, in the order first
        stored (do not modify them)."""
        bucket = self._objects.get(storage_key)
        return list(bucket.objects.items()) if bucket else []

    def objects_in_namespace(self, storage_key: tuple[str, str], namespace: str) -> list[Obj]:
        """The objects stored for ``storage_key`` in ``namespace``, in key order (do not
        modify them)."""
        bucket = self._objects.get(storage_key)
        return [obj for _, obj in bucket.snapshot(namespace)] if bucket else []

    def crd_types(self, name: str) -> list[ResourceType]:
        """The types the CustomResourceDefinition ``name`` has the server serve, or ``[]``."""
        return list(self._crd_types.get(name) or [])

    def lookup(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """The stored object (do not modify it), or ``None``."""
        key = (namespace or "", name) if rt.namespaced else ("", name)
        bucket = self._objects.get(rt.storage_key)
        return bucket.objects.get(key) if bucket else None

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object (do not modify it); 404 when absent."""
        obj = self.lookup(rt, namespace, name)
        if obj is None:
            raise not_found(rt, name)
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
        exact: int | None = None,
        shard: Callable[[Obj], bool] | None = None,
    ) -> tuple[list[Obj], int, str | None, int | None]:
        """``(items, resourceVersion, continue, remainingItemCount)`` for one page, in
        ``(namespace, name)`` order. ``remainingItemCount`` is ``None`` unless the page is cut
        short by ``limit`` and there are no selectors (a real server cannot count what its
        selectors would match beyond the page, so it leaves the count out).

        ``shard`` (a ``shardSelector``'s predicate) filters like a selector, but pages are
        filled with matching objects and ``remainingItemCount`` still counts every object after
        the page's start minus ``limit`` when there is no label or field selector, as the real
        server's predicate ignores the shard selector when it decides whether it can count.

        ``exact`` lists the objects as they were at that resourceVersion
        (``resourceVersionMatch=Exact``); the pages after the first are read at the first
        page's resourceVersion, as the real server reads them from etcd's history. A page of
        the latest state costs a bisection plus its own length when there are no selectors;
        with selectors, matching stops at the first match after the page. Raises
        :class:`RequestRejected`: 400 for a malformed ``continue`` token, 410 Expired for one
        (or an ``exact`` resourceVersion) older than the history.
        """
        list_rv = self._rv
        if exact is not None:
            if exact < self._floor:
                raise RequestRejected(
                    410, "Expired", f"too old resource version: {exact} ({self._floor})"
                )
            list_rv = min(exact, self._rv)
        after: Key | None = None
        if continue_token:
            list_rv, after = decode_continue(continue_token)
            if list_rv < self._floor:
                raise RequestRejected(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            if list_rv > self._rv:
                # A token from before a restore: etcd refuses to read at a future revision.
                raise RequestRejected(500, "", "etcdserver: mvcc: required revision is a future revision")
        bucket = self._objects.get(rt.storage_key) or Bucket()
        if list_rv < self._rv:
            bucket = bucket.rewound(self._undo(rt.storage_key, list_rv))
        selected = bool(labels.requirements or fields.requirements)

        def matches(obj: Obj) -> bool:
            return labels.matches(meta(obj).get("labels")) and fields.matches(obj) and (shard is None or shard(obj))

        wanted = limit if limit is not None and limit > 0 else None
        page, matched, span = bucket.page(namespace, after, wanted, matches if selected or shard is not None else None)
        items = [bucket.objects[k] for k in page]
        if wanted is not None and wanted < matched:
            token = encode_continue(list_rv, page[-1])
            return items, list_rv, token, None if selected else span - wanted
        return items, list_rv, None, None

    def _undo(self, storage_key: tuple[str, str], rv: int) -> Iterator[tuple[Key, Obj | None]]:
        """What undoes the changes to ``storage_key`` after ``rv`` (which the history must
        still cover), newest first: each changed key with its object before the change."""
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.key != storage_key:
                continue
            key = (meta(change.obj).get("namespace", "") or "", meta(change.obj)["name"])
            yield key, None if change.type == "ADDED" else change.old

    # ----- writes -----

    def _event_for_storage(self, rt: ResourceType, obj: Obj, stored_old: Obj | None) -> tuple[Obj, ResourceType]:
        """An Event written through ``rt`` in its stored form, validated; with the type it is
        stored as."""
        stored = _events.to_storage(rt, obj)
        causes = _events.validate(rt, stored, stored_old)
        storage_rt = self.storage_type(rt.storage_key)
        assert storage_rt is not None
        if causes:
            raise invalid_causes(storage_rt, str(meta(stored).get("name", "")), causes)
        _events.canonicalize_core(stored)
        return stored, storage_rt

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def prepare_body(self, rt: ResourceType, namespace: str | None, body: Any, name: str | None) -> Obj:
        """A copy of a write's ``body`` with the URL's namespace (and ``name``) filled in, as
        admission sees it; raises :class:`RequestRejected` (400, 422) for a body of another kind,
        version, namespace or name."""
        return self._prepare_body(rt, namespace, body, name)

    def _prepare_body(self, rt: ResourceType, namespace: str | None, body: Any, name: str | None) -> Obj:
        if not isinstance(body, dict):
            raise RequestRejected(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(body)
        if obj.get("metadata") is not None and not isinstance(obj["metadata"], dict):
            raise RequestRejected(400, "BadRequest", "metadata must be a JSON object")
        _check_metadata_strings(rt, obj.get("metadata"))
        if obj.get("kind") not in (None, "", rt.kind) and rt.schema is not None:
            kind = str(obj["kind"])
            name_ = str((obj.get("metadata") or {}).get("name") or name or "")
            raise invalid(rt, name_, [("kind", f'Invalid value: "{kind}": must be {rt.kind}')], kind=kind)
        if obj.get("kind") not in (None, "", rt.kind):
            raise RequestRejected(
                400, "BadRequest", f"the kind of the object ({obj.get('kind')}) does not match the resource ({rt.kind})"
            )
        if (
            obj.get("apiVersion") not in (None, "")
            and (not isinstance(obj["apiVersion"], str) or obj["apiVersion"].split("/")[0] != (rt.group or "v1"))
            and obj["apiVersion"] != rt.api_version
        ):
            raise RequestRejected(
                400,
                "BadRequest",
                f"the API version of the object ({obj['apiVersion']}) does not match the resource ({rt.api_version})",
            )
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise RequestRejected(400, "BadRequest", "metadata must be a JSON object")
        if rt.namespaced:
            if metadata.get("namespace") not in (None, "", namespace):
                raise RequestRejected(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        if name is not None:
            if metadata.get("name") not in (None, "", name):
                raise RequestRejected(400, "BadRequest", "the name of the object does not match the name on the URL")
            metadata["name"] = name
        return obj

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        manager: str | None = None,
        check_size: bool = False,
        fields: FieldCheck | None = None,
        _managed_fields: list[dict[str, Any]] | None = None,
        _uid: str | None = None,
    ) -> Obj:
        """Create an object. Raises :class:`RequestRejected`: 400, 404 (namespace), 409
        AlreadyExists, 403 (namespace terminating), 422 Invalid; with ``check_size``, 400 (custom)
        or 500 (built-in) for an object larger than etcd stores (:data:`MAX_OBJECT_BYTES`). ``fields`` hears of the unknown
        fields a custom resource's schema pruned (400 under ``fieldValidation=Strict``)."""
        obj = self._prepare_body(rt, namespace, body, None)
        namespace = self.check_namespace(rt, namespace)
        metadata = obj["metadata"]
        if not metadata.get("name") and metadata.get("generateName"):
            alphabet = "bcdfghjklmnpqrstvwxz2456789"
            metadata["name"] = metadata["generateName"] + "".join(self._rng.choice(alphabet) for _ in range(5))
        if not metadata.get("name"):
            raise invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
        if namespace is not None:
            ns_obj = self._objects[_NAMESPACES].objects[("", namespace)]
            if meta(ns_obj).get("deletionTimestamp"):
                raise namespace_terminating(rt, metadata["name"], namespace)
        if (namespace or "", metadata["name"]) in self._objects[rt.storage_key].objects:
            raise already_exists(rt, metadata["name"])
        base = _apply.managed_base(None, obj, None)
        for field in SYSTEM_METADATA:
            if field not in ("name", "namespace"):
                metadata.pop(field, None)
        if rt.has_status:
            obj.pop("status", None)
        strategy = strategy_for(rt)
        status_before = obj.get("status")
        unknown = strategy.prepare(rt, obj, self.timestamp)
        if fields is not None:
            fields.report(unknown)
        strategy.check(rt, obj, None)
        if _managed_fields is None and manager:
            _managed_fields = _apply.record_update(rt, None, obj, manager, self.timestamp, base=base)
        metadata["uid"] = _uid or self._new_uid()
        metadata["creationTimestamp"] = self.timestamp()
        if rt.has_generation:
            metadata["generation"] = 1
        if _managed_fields:
            metadata["managedFields"] = _managed_fields
        self._record_status_writer(rt, obj, status_before)
        strategy.prepare_create(rt, obj)
        if rt.storage_key == _services.SERVICES:
            _services.allocate(obj, self._objects[rt.storage_key].objects.values(), self._rng)
        if _events.is_event(rt):
            obj, rt = self._event_for_storage(rt, obj, None)
        is_crd = rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions")
        if is_crd:
            self._check_crd_collision(obj)
        if check_size:
            _check_size(rt, obj)
        if is_crd:
            return self._create_crd(rt, obj, dry_run=dry_run)
        if dry_run:
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        return self.commit(rt, "ADDED", obj, None)

    def _create_crd(self, rt: ResourceType, obj: Obj, *, dry_run: bool) -> Obj:
        """Store a new CustomResourceDefinition as the real server does: written without
        conditions (the answer), then the naming controller's write (``NamesAccepted``,
        ``Established`` still ``False``) and the establishing controller's (``Established``),
        each a resourceVersion of its own, by ``kube-apiserver`` through ``status``. Here the
        two follow at once, so the resource is served when the create is answered."""
        status = obj.get("status") or {}
        first = copy.deepcopy(obj)
        first["status"] = {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": status.get("storedVersions", [])}
        managed = [e for e in meta(first).get("managedFields") or [] if e.get("subresource") != "status"]
        if managed:
            meta(first)["managedFields"] = managed
        else:
            meta(first).pop("managedFields", None)
        if dry_run:
            first["apiVersion"], first["kind"] = rt.api_version, rt.kind
            return first
        created = self.commit(rt, "ADDED", first, None)
        installing = copy.deepcopy(obj)
        installing["status"]["conditions"] = [
            {**c, "status": "False", "reason": "Installing"} if c.get("type") == "Established" else c
            for c in installing["status"]["conditions"]
        ]
        named = self.commit(rt, "MODIFIED", installing, created)
        established = self.commit(rt, "MODIFIED", obj, named)
        self._serve_crd(established)
        return created

    def _record_status_writer(self, rt: ResourceType, obj: Obj, status_before: Any) -> None:
        """Give the strategy's status writer the status fields its canonicalization changed (the
        real server's controllers write them through the status subresource)."""
        writer = strategy_for(rt).status_writer
        if writer is None or obj.get("status") == status_before:
            return
        before = {k: v for k, v in obj.items() if k != "status"}
        if status_before is not None:
            before["status"] = status_before
        base = list(meta(obj).get("managedFields") or [])
        managed = _apply.record_update(rt, before, obj, writer, self.timestamp, subresource="status", base=base)
        if managed:
            obj["metadata"]["managedFields"] = managed

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
        check_size: bool = False,
        fields: FieldCheck | None = None,
        _managed_fields: list[dict[str, Any]] | None = None,
    ) -> Obj:
        """Replace an object (or its status). Raises :class:`RequestRejected`: 404, 409 Conflict
        on a stale ``metadata.resourceVersion``, 400, 422. A write that changes nothing is a
        no-op that keeps the resourceVersion; one that clears the last finalizer of an object
        being deleted removes it."""
        namespace = self.check_namespace(rt, namespace)
        stored_old = self.get(rt, namespace, name)
        old = _events.from_storage(rt, stored_old)
        obj = self._prepare_body(rt, namespace, body, name)
        metadata = obj["metadata"]
        sent_rv = metadata.get("resourceVersion")
        if check_version and sent_rv not in (None, "") and sent_rv != meta(old)["resourceVersion"]:
            raise conflict(
                rt, name, "the object has been modified; please apply your changes to the latest version and try again"
            )
        old_meta = meta(old)
        strategy = strategy_for(rt)
        base = _apply.managed_base(old, obj, subresource)
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            obj = new
            metadata = obj["metadata"]
        else:
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if field in old_meta:
                    metadata[field] = old_meta[field]
                else:
                    metadata.pop(field, None)
            if rt.has_status:
                if "status" in old:
                    obj["status"] = copy.deepcopy(old["status"])
                else:
                    obj.pop("status", None)
        metadata["resourceVersion"] = old_meta["resourceVersion"]
        strategy.prepare_update(rt, obj, old, subresource)
        metadata = obj["metadata"]
        if rt.storage_key == _services.SERVICES:
            _services.keep_allocated(obj, old)
        status_before = copy.deepcopy(obj.get("status")) if strategy.status_writer else None
        unknown = strategy.prepare(rt, obj, self.timestamp, old=old, subresource=subresource)
        if fields is not None:
            fields.report(unknown)
        strategy.check(rt, obj, old)
        managed = _managed_fields
        if managed is None:
            if manager:
                managed = _apply.record_update(rt, old, obj, manager, self.timestamp, subresource=subresource, base=base)
            else:
                managed = base
        if managed:
            metadata["managedFields"] = managed
        else:
            metadata.pop("managedFields", None)
        self._record_status_writer(rt, obj, status_before)
        if old_meta.get("deletionTimestamp"):
            new_finalizers = set(metadata.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if new_finalizers:
                quoted = ", ".join(json.dumps(f) for f in sorted(new_finalizers))
                message = (
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{quoted}}}"
                )
                # The real server validates object metadata twice on update (generic checks and the
                # type's own), so this cause comes twice.
                raise invalid(rt, name, [("metadata.finalizers", message)] * 2)
        if rt.has_generation and _spec_part(obj, rt) != _spec_part(old, rt):
            metadata["generation"] = int(old_meta.get("generation", 1)) + 1
        if _events.is_event(rt):
            obj, rt = self._event_for_storage(rt, obj, stored_old)
            old, metadata = stored_old, obj["metadata"]
        if {**obj, "apiVersion": old.get("apiVersion"), "kind": old.get("kind")} == old:
            return old
        if check_size:
            _check_size(rt, obj)
        if dry_run:
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        if metadata.get("deletionTimestamp") and not _deletion.held(rt, obj):
            # Removed instead of written: the answer is the object as this write left it, still
            # at the resourceVersion it was read at (the watch sees the removal's).
            _deletion.remove(self, rt, obj)
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        stored = self.commit(rt, "MODIFIED", obj, old)
        if rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
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
        _current: Obj | None = None,
    ) -> tuple[Obj, bool]:
        """Server-side apply of ``config``; returns ``(object, created)``. Ownership is kept as
        :mod:`._apply` describes. ``_current``: the live object as the request's version shows it
        (converted by a conversion webhook), instead of the stored one.

        Raises :class:`RequestRejected`: 400 for a malformed configuration, 404 (namespace, or
        the object for a status apply), 500 when the configuration or the live custom object
        does not fit the schema's types (:func:`._apply.check_typed`), 409 on conflicts without
        ``force``, and whatever the create or update it turns into raises.
        """
        if not isinstance(config, dict):
            raise RequestRejected(400, "BadRequest", "an apply configuration must be an object")
        if not config.get("apiVersion") or not config.get("kind"):
            raise RequestRejected(400, "BadRequest", "an apply configuration must set apiVersion and kind")
        namespace = self.check_namespace(rt, namespace)
        applied = self._prepare_body(rt, namespace, config, name)
        if applied["metadata"].get("managedFields") is not None:
            raise RequestRejected(400, "BadRequest", "metadata.managedFields must be nil")
        current = _current if _current is not None else self.lookup(rt, namespace, name)
        if current is None and subresource == "status":
            raise not_found(rt, name)
        _apply.check_typed(rt, config, current)
        if current is None:
            obj = _apply.apply_config(rt, None, name, applied, manager, self.timestamp, force=force)
            managed = obj["metadata"].pop("managedFields", [])
            return self.create(rt, namespace, obj, dry_run=dry_run, _managed_fields=managed), True
        merged = _apply.apply_config(
            rt, current, name, applied, manager, self.timestamp, force=force, subresource=subresource
        )
        merged["metadata"]["resourceVersion"] = meta(current)["resourceVersion"]
        updated = self.update(
            rt,
            namespace,
            name,
            merged,
            subresource=subresource,
            dry_run=dry_run,
            check_version=False,
            _managed_fields=merged["metadata"].get("managedFields", []),
        )
        return updated, False

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
        precondition, 400 on an unknown propagation policy, 403 for the namespaces that may not
        be deleted. The propagation policy becomes a finalizer; collecting the dependents is
        the controllers' work, after the call (see :mod:`._controllers`)."""
        return _deletion.delete(self, rt, namespace, name, options, dry_run=dry_run)


def _check_metadata_strings(rt: ResourceType, metadata: Any) -> None:
    """Refuse a name, generateName, namespace, uid or resourceVersion that is not a string
    with the real server's 400 for a body its decoder cannot read (seen on kube-apiserver
    1.36.2 for a ConfigMap: ``json: cannot unmarshal array into Go struct field
    ObjectMeta.metadata.name of type string``)."""
    if not isinstance(metadata, dict):
        return
    for field in ("name", "generateName", "namespace", "uid", "resourceVersion"):
        value = metadata.get(field)
        if value is None or isinstance(value, str):
            continue
        kind = "bool" if isinstance(value, bool) else "number" if isinstance(value, int | float) else (
            "array" if isinstance(value, list) else "object")
        raise RequestRejected(
            400, "BadRequest", f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: json: cannot '
            f"unmarshal {kind} into Go struct field ObjectMeta.metadata.{field} of type string",
        )


MAX_OBJECT_BYTES = 1536 * 1024
"""The largest object etcd stores (its default ``--max-request-bytes``, 1.5 MiB)."""


def _check_size(rt: ResourceType, obj: Obj) -> None:
    """Refuse an object larger than etcd stores: a custom object with 400 ``BadRequest``, as a
    real kube-apiserver 1.32.6 and 1.36.2 answered the conformance suite; a built-in one with
    etcd's own 500."""
    size = len(json.dumps(obj, separators=(",", ":")))
    if size <= MAX_OBJECT_BYTES:
        return
    if rt.schema is not None:
        raise RequestRejected(400, "BadRequest", f"the object is too large to store: {size} bytes, limit {MAX_OBJECT_BYTES}")
    raise RequestRejected(500, "", "etcdserver: request is too large")


def _spec_part(obj: Obj, rt: ResourceType) -> Obj:
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rt.has_status else set())
    return {k: v for k, v in obj.items() if k not in skip}


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
