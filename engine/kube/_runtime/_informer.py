"""Informers: a :class:`Watcher` feeding a :class:`Store`, and handlers called on each change.

The watcher lists, watches, resumes and relists (see :mod:`engine.kube._runtime._watcher` for its
behaviour under failure); the store applies each of its events (:meth:`Store.apply`, its only
writer); the informer then hands every change the store reports to the handlers. A relist
after 410 Gone thus reaches handlers as the difference against the store: ``ADDED`` for new
objects, ``MODIFIED`` for objects whose ``resourceVersion`` changed, ``DELETED`` for objects
that are gone. Every change a list reports (but a deletion) is marked
:attr:`InformerEvent.listed`: it is not news, and its triggers wait at ``Priority.LOW``.

Anything the watcher does not absorb (a failing list, a bug) is logged; the informer reports
itself unsynced, waits a jittered exponential backoff and starts over with a fresh list
(emitting the difference). :meth:`Informer.run` only returns by cancellation.

One malformed object never stops the informer: an index function or a handler (and so the
predicates, mappers and key functions called inside one) that raises for an object is
contained to that object. The object is left out of that index or handler, every other object
and handler goes on, :attr:`Informer.synced` is unaffected; the exception is logged once per
object, ``resourceVersion`` and index or handler, and counted in
:attr:`InformerStatistics.object_errors`.

Handlers run synchronously, after the store reflects the event they are given.

An informer is a :class:`~engine.WarmSource`: while its triggers are held
(:meth:`Informer.hold_triggers`, a warm standby waiting for leadership) it lists, watches,
resumes and relists as usual and keeps its store current, but calls no handler;
:meth:`Informer.release_triggers` then calls handlers for each change as usual again and,
in batches with checkpoints between them (so that a controller's first runs start while the
rest is replayed), calls every handler with an ``ADDED`` event, marked listed, for each object
cached at the release (what the handlers would have been given by a first list), as it is
cached when its turn comes. An object deleted while held, or before its turn, reaches no
handler through the replay (as an object deleted before a first list); one changed before its
turn reaches the handlers first as that change, then through the replay.

Before an object reaches the store, the informer's ``transform`` (if any) is applied to it
(every listed object of the first list, each object of a relist that is new or has another
``resourceVersion`` than the cached one, and the object of every ``ADDED``, ``MODIFIED`` and
``DELETED`` watch event), and the store and handlers see only the result, like client-go's ``SetTransform``. :func:`strip_managed_fields` is the usual one
(:meth:`Cluster.informer <engine.kube.Cluster.informer>` applies it by default). Then the
object is copied into a compact form that shares interned strings and dictionary key tables
with the other cached objects (:mod:`engine.kube._runtime._compact`); it is still made of plain
``dict`` and ``list`` objects.

An informer restricted to :class:`~engine.KeyRanges` (``key_ranges=``,
:meth:`Informer.set_key_ranges`) caches and hands to handlers only the objects whose
``metadata.uid`` hashes into them (see :mod:`engine.kube._runtime._watcher` for how the server is
asked to filter too, where it can). When the ranges change, objects that leave them are
dropped from the store **silently**: no ``DELETED`` reaches the handlers, since the objects
still exist (whatever runs for them is stopped elsewhere, by the ring's gate); objects that
enter them reach the handlers as ``ADDED`` once the list that follows is done, and a cached
object that changed or was deleted meanwhile as ``MODIFIED`` or ``DELETED``, so nothing in
between is missed. Objects outside the ranges never reach the store or a handler, even from a
server that ignores ``shardSelector``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

from ..._errors import LifecycleError
from ..._keyspace import KeyRanges
from .._client._client import Client
from .._client._resource import Resource
from .._client._watch import WatchEventType
from ._compact import compact
from ._store import InformerEvent, Store, object_key
from ._watcher import Added, Deleted, Modified, Restarted, Watcher, WatcherEvent, WatchOptions

__all__ = ["Informer", "InformerEvent", "InformerStatistics", "Handler", "Transform", "strip_managed_fields"]

log = logging.getLogger("engine.kube.informer")


Handler = Callable[[InformerEvent], object]
"""A synchronous callable an informer calls with each :class:`InformerEvent`."""

Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""A synchronous function an informer applies to each object before caching it (see
:class:`Informer`): it returns the object to cache, which may be the one it was given, changed
in place. It must keep ``metadata.name``, ``metadata.namespace`` and
``metadata.resourceVersion``."""


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Remove ``metadata.managedFields`` from ``obj`` (in place) and return it.

    The server-side apply bookkeeping is often half an object's size and rarely read by
    controllers; this is controller-runtime's ``cache.TransformStripManagedFields()``.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@attrs.frozen
class InformerStatistics:
    """Counters describing an informer's life so far (see :meth:`Informer.statistics`)."""

    lists: int
    """Complete lists done (the first, relists after 410 and after restarts)."""
    watches: int
    """Watch streams established."""
    gone: int
    """Times the watch answered 410 Gone and forced a relist."""
    stream_failures: int
    """Streams that broke, stalled or failed to establish (and were resumed)."""
    restarts: int
    """Times an unexpected error restarted the informer from a fresh list."""
    events: int
    """Events applied to the store and handed to handlers."""
    skipped: int
    """Malformed list items and watch lines skipped."""
    object_errors: int = 0
    """Exceptions raised for one object by an index function or a handler, contained to it."""
    resets: int = 0
    """Times the server's history went backwards and the watcher relisted from scratch."""
    out_of_range: int = 0
    """Listed objects and watch events dropped for being outside the key ranges."""


class Informer:
    """Keeps a :class:`Store` of one resource type current and calls handlers on each change.

    ::

        informer = Informer(client, await client.resource("v1", "ConfigMap"), namespace="apps")
        informer.add_handler(on_change)
        await nursery.start(informer.run)
        await informer.wait_synced()

    ``namespace`` and ``options`` (:class:`WatchOptions`) configure the :class:`Watcher` (see
    there); the options' ``min_backoff``/``max_backoff`` also bound the backoff before the
    informer starts over after an unexpected error. ``store`` is the cache to fill (a new one
    by default).
    All timing uses trio's clock.

    ``transform`` (a :data:`Transform`, none by default) is applied to each object before it
    is stored: every object of the first list, each object of a relist that is new or
    changed (a relisted object with the cached ``resourceVersion`` keeps its cached form, so
    a relist holds no second copy of unchanged objects; after a history reset every object is
    transformed again), and the object of each ``ADDED``, ``MODIFIED`` and ``DELETED`` watch
    event. A relist is read page by page, each page prepared as it arrives. The store and the handlers see only
    its result. A transform that raises for an object, or returns something without the
    object's ``metadata.name`` and ``metadata.namespace``, is contained like an index
    function: the object is cached as it was decoded (or as far as an in-place transform got),
    the exception is logged once per object and ``resourceVersion`` and counted in
    :attr:`InformerStatistics.object_errors`. Pass :func:`strip_managed_fields` to drop
    ``metadata.managedFields`` from the cache.

    ``key_ranges`` (``None``, the default: every object) restricts the informer to the objects
    whose uid hashes into those :class:`~engine.KeyRanges`; see the module documentation
    and :meth:`set_key_ranges`.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        options: WatchOptions = WatchOptions(),
        store: Store | None = None,
        transform: Transform | None = None,
        key_ranges: KeyRanges | None = None,
    ) -> None:
        self.watcher = Watcher(
            client, resource, namespace=namespace, options=options, prepare=self._prepare_listed, key_ranges=key_ranges
        )
        """The watcher feeding the store."""
        self.resource = resource
        self.namespace = namespace
        self.options = options
        """How the watcher lists and watches."""
        self.store = store if store is not None else Store()
        """The cache this informer writes (and only it)."""
        self.store.resource = resource
        self.transform = transform
        """The function applied to each object before it is stored (``None``: none)."""
        self._handlers: list[Handler] = []
        self._synced = False
        self._synced_event = trio.Event()
        self._running = False
        self._failures = 0
        self._restarts = 0
        self._events = 0
        self._listed = trio.Event()
        self._held = False

    # --- readers ---

    @property
    def synced(self) -> bool:
        """Whether the store holds a complete list (and has not been invalidated since)."""
        return self._synced

    def has_synced(self) -> bool:
        """Same as :attr:`synced`, client-go's spelling."""
        return self._synced

    async def wait_synced(self) -> None:
        """Wait until :attr:`synced` is true; returns at once (after a checkpoint) if it is.

        Cancellation: a checkpoint; nothing to undo.
        """
        while not self._synced:
            await self._synced_event.wait()
        await trio.lowlevel.checkpoint()

    @property
    def resource_version(self) -> str | None:
        """The last ``resourceVersion`` seen (list, event or bookmark): where a watch resumes."""
        return self.watcher.resource_version

    def statistics(self) -> InformerStatistics:
        """A snapshot of the informer's counters."""
        watcher = self.watcher.statistics()
        return InformerStatistics(
            lists=watcher.lists,
            watches=watcher.watches,
            gone=watcher.gone,
            stream_failures=watcher.stream_failures,
            restarts=self._restarts,
            events=self._events,
            skipped=watcher.skipped,
            object_errors=self.store.object_errors,
            resets=watcher.resets,
            out_of_range=watcher.out_of_range,
        )

    # --- key ranges ---

    @property
    def key_ranges(self) -> KeyRanges | None:
        """The key ranges the informer holds (``None``: every object)."""
        return self.watcher.key_ranges

    @property
    def server_filters_shards(self) -> bool | None:
        """Whether the server filters this informer's lists and watches by ``shardSelector``
        (``None`` until the informer had key ranges and asked; objects are filtered on this
        side either way)."""
        return self.watcher.server_filters

    def set_key_ranges(self, ranges: KeyRanges | None) -> None:
        """Hold only the objects in ``ranges`` from now on (``None``: every object).

        Synchronous and not a checkpoint: when it returns, the objects outside ``ranges`` are
        gone from the store (silently, no handler is called for them), and no object outside
        ``ranges`` reaches the store or a handler afterwards. Objects that enter the ranges
        reach the handlers as ``ADDED`` when the list that follows is done (see
        :attr:`key_ranges_synced`). Safe before :meth:`run` starts and while it runs.
        """
        self.watcher.set_key_ranges(ranges)
        if ranges is not None:
            dropped = self.store.retain(self.watcher.wants)
            if dropped:
                log.debug("dropped %d %s outside the new key ranges", dropped, self.resource)

    @property
    def key_ranges_synced(self) -> bool:
        """Whether the store holds a complete list of the current key ranges: :attr:`synced`,
        and no range was gained since the last list."""
        return self._synced and self.watcher.covers_key_ranges

    async def wait_key_ranges_synced(self) -> None:
        """Wait until :attr:`key_ranges_synced` holds; returns at once (after a checkpoint) if
        it does.

        Cancellation: a checkpoint; nothing to undo.
        """
        while not self.key_ranges_synced:
            await self._listed.wait()
        await trio.lowlevel.checkpoint()

    # --- fresh lists ---

    def relist(self) -> int:
        """Make the store complete again from a list begun now: the running watch is abandoned
        (nothing it would still deliver reaches the store), a new list reaches the handlers as
        after 410 Gone (the difference against the store), and the watch goes on from it.
        Returns a ticket for :meth:`wait_relisted`. Synchronous, not a checkpoint; the store
        keeps its contents until the list is done."""
        return self.watcher.request_relist()

    def relisted(self, ticket: int) -> bool:
        """Whether a list begun after :meth:`relist` returned ``ticket`` is in the store."""
        return self.watcher.relisted >= ticket

    async def wait_relisted(self, ticket: int) -> None:
        """Wait until :meth:`relisted` holds for ``ticket``; returns at once (after a
        checkpoint) if it does.

        Cancellation: a checkpoint; nothing to undo (the list goes on).
        """
        while not self.relisted(ticket):
            await self._listed.wait()
        await trio.lowlevel.checkpoint()

    # --- handlers ---

    def add_handler(self, handler: Handler, *, replay: bool = True) -> None:
        """Register a synchronous handler, called with each :class:`InformerEvent`.

        Handlers may be added before or after :meth:`run` starts. With ``replay`` (the default)
        a handler added while the store holds objects is called at once with an ``ADDED`` event
        for each of them, so it misses nothing. While triggers are held
        (:meth:`hold_triggers`) it is not called until :meth:`release_triggers`, which replays
        the store to every handler.
        """
        self._handlers.append(handler)
        if replay and not self._held:
            self._replay((handler,), self.store.list())

    @property
    def triggers_held(self) -> bool:
        """Whether handlers are held (:meth:`hold_triggers`): the store is kept current, no
        handler is called."""
        return self._held

    def hold_triggers(self) -> None:
        """Call no handler from now on, until :meth:`release_triggers`; the store is kept
        current as usual (a warm standby's cache). Synchronous, not a checkpoint; idempotent."""
        self._held = True

    async def release_triggers(self, *, batch: int = 256) -> None:
        """Call handlers for each change as usual from now on (synchronously, before the first
        checkpoint), and replay the store: call every handler registered now with an ``ADDED``
        event, marked listed, for each object cached now that is still cached when its turn
        comes (as it is cached then), ``batch`` objects between checkpoints. Returns once the
        replay is done; does nothing (but a checkpoint) when triggers are not held.

        Cancellation: the objects not replayed yet are not; handlers are still called for each
        change.
        """
        if not self._held:
            await trio.lowlevel.checkpoint()
            return
        if batch < 1:
            raise ValueError("batch must be >= 1")
        self._held = False
        handlers = tuple(self._handlers)
        keys = self.store.keys()
        for start in range(0, len(keys), batch):
            if start:
                await trio.lowlevel.checkpoint()
            cached = (self.store.get(namespace, name) for namespace, name in keys[start:start + batch])
            self._replay(handlers, (obj for obj in cached if obj is not None))
        await trio.lowlevel.checkpoint()

    def _replay(self, handlers: tuple[Handler, ...], objects: Iterable[dict[str, Any]]) -> None:
        """Call ``handlers`` with a listed ``ADDED`` event for each of ``objects``."""
        for obj in objects:
            event = InformerEvent(WatchEventType.ADDED, obj, None, True)
            for handler in handlers:
                self._call(handler, event)

    def remove_handler(self, handler: Handler) -> None:
        """Unregister a handler; raises ``ValueError`` if it is not registered."""
        self._handlers.remove(handler)

    def _call(self, handler: Handler, event: InformerEvent) -> None:
        try:
            handler(event)
        except Exception as exc:
            self._handler_failed(handler, event, exc)

    def _handler_failed(self, handler: Handler, event: InformerEvent, exc: Exception) -> None:
        name = getattr(handler, "__qualname__", type(handler).__qualname__)
        self.store.report_object_error(f"informer handler {name} on {event.type.value}", handler, event.obj, exc)

    # --- the writer ---

    def _set_synced(self, synced: bool) -> None:
        if synced and not self._synced:
            self._synced = True
            self._synced_event.set()
        elif not synced and self._synced:
            self._synced = False
            self._synced_event = trio.Event()

    def _transformed(self, obj: dict[str, Any]) -> dict[str, Any]:
        transform = self.transform
        if transform is None:
            return obj
        if transform is strip_managed_fields:
            meta = obj.get("metadata")
            if type(meta) is dict and "name" in meta:
                # Keeps the name and namespace, and cannot raise: nothing to check.
                meta.pop("managedFields", None)
                return obj
        key = object_key(obj)
        try:
            result = transform(obj)
            if not isinstance(result, dict) or object_key(result) != key:
                raise TypeError(
                    "a transform must return a dict with the object's metadata.name and metadata.namespace, "
                    f"and returned {type(result).__name__}"
                )
        except Exception as exc:
            name = getattr(transform, "__qualname__", type(transform).__qualname__)
            self.store.report_object_error(f"informer transform {name}", ("transform", transform), obj, exc)
            return obj
        return result

    def _prepared(self, event: WatcherEvent) -> WatcherEvent:
        if isinstance(event, Added):
            return Added(compact(self._transformed(event.obj)))
        if isinstance(event, Modified):
            return Modified(compact(self._transformed(event.obj)))
        if isinstance(event, Deleted):
            return event if self.transform is None else Deleted(self._transformed(event.obj))
        return event

    def _prepare_listed(self, obj: dict[str, Any], reset: bool) -> dict[str, Any]:
        """A listed object as the store will keep it, made as its page arrives: the cached
        object itself when it has the same ``resourceVersion`` (and the list is no reset), so
        a relist of unchanged objects allocates nothing that outlives its page."""
        if not reset:
            meta = obj["metadata"]
            cached = self.store.get(meta.get("namespace"), meta["name"])
            if cached is not None and cached["metadata"].get("resourceVersion") == meta.get("resourceVersion"):
                return cached
        return compact(self._transformed(obj))

    def _on_event(self, event: WatcherEvent) -> None:
        event = self._prepared(event)
        for change in self.store.apply(event):
            self._events += 1
            if self._held:
                continue
            for handler in tuple(self._handlers):
                # self._call(handler, change), inlined: this is every event's path.
                try:
                    handler(change)
                except Exception as exc:
                    self._handler_failed(handler, change, exc)
        if isinstance(event, Restarted):
            self._set_synced(True)
            self._failures = 0
            self._listed.set()
            self._listed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the informer until cancelled; use with ``await nursery.start(informer.run)``.

        ``task_status.started()`` is called once running, before the first list completes
        (use :meth:`wait_synced` to wait for the cache). Never returns normally: any failure is
        logged and the informer starts over after a backoff (see the module documentation).
        Raises :class:`~engine.LifecycleError` if this informer is already running.

        Cancellation: the only way it ends; the store keeps its contents, and :attr:`synced`
        becomes false.
        """
        if self._running:
            raise LifecycleError("an Informer can run only once at a time")
        self._running = True
        self._failures = 0
        task_status.started()
        try:
            while True:
                try:
                    await self.watcher.run(self._on_event)
                except Exception as exc:
                    self._set_synced(False)
                    self._restarts += 1
                    delay = self.watcher.backoff(self._failures)
                    self._failures += 1
                    log.error(
                        "informer for %s failed; restarting in %.2fs",
                        self.resource,
                        delay,
                        exc_info=exc,
                        extra={
                            "resource": str(self.resource),
                            "error": type(exc).__name__,
                            "delay": delay,
                            "restarts": self._restarts,
                        },
                    )
                    await trio.sleep(delay)
        finally:
            self._running = False
            self._set_synced(False)
