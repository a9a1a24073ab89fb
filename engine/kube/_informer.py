"""Informers: list, then watch, one resource type into a :class:`Store`, calling handlers.

Behaviour under failure
-----------------------
* **Dropped or ended stream** (connection reset, server closed it, watch timeout, a non-410
  ``ERROR`` event, any API error such as ``5xx``, ``429`` or ``403`` on re-establishing once the
  client's own retries are spent): the watch is reopened from the last
  ``resourceVersion`` seen (event or bookmark) after a jittered exponential backoff, which
  resets once a stream delivers something. Nothing is lost and the informer stays synced.
* **410 Gone** (HTTP 410 when establishing, or an ``ERROR`` event with code 410): the informer
  lists again and emits the difference against its store: ``ADDED`` for new objects,
  ``MODIFIED`` for objects whose ``resourceVersion`` changed, ``DELETED`` for objects that are
  gone. Then it watches from the new list's ``resourceVersion``.
* **Half-dead connection**: when no bytes at all (not even a bookmark) arrive within
  ``idle_timeout``, the stream is abandoned and reopened as for a dropped stream.
* **Malformed data** (a line that is not JSON, an event or list item without
  ``metadata.name``): logged and skipped; the watch goes on.
* **Anything else** (a failing list, a bug, an index function raising): the error is logged,
  the informer reports itself unsynced, waits a jittered exponential backoff and starts over
  with a fresh list (emitting the difference). :meth:`Informer.run` only returns by
  cancellation.

Handlers run synchronously, after the store reflects the event they are given; an exception in
a handler is logged and does not disturb the informer or the other handlers.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from ._client import Client, Selector, WatchEvent, WatchEventType
from ._errors import ApiError, GoneError, ResponseError, TransportError, WatchStalledError
from ._resource import Resource
from ._store import Store, object_key

__all__ = ["Informer", "InformerEvent", "InformerStatistics", "Handler"]

log = logging.getLogger("engine.kube.informer")


@attrs.frozen
class InformerEvent:
    """A change an informer applied to its store."""

    type: WatchEventType
    """``ADDED``, ``MODIFIED`` or ``DELETED`` (never ``BOOKMARK``)."""
    obj: dict[str, Any]
    """The object as it is now; for ``DELETED``, its last known state."""
    old: dict[str, Any] | None = None
    """The cached object before the change (``None`` for ``ADDED``)."""


Handler = Callable[[InformerEvent], object]
"""A synchronous callable an informer calls with each :class:`InformerEvent`."""


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


def _rv(obj: Mapping[str, Any]) -> str | None:
    rv = obj.get("metadata", {}).get("resourceVersion")
    return rv if isinstance(rv, str) else None


def _valid(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    name, ns = meta.get("name"), meta.get("namespace")
    return isinstance(name, str) and bool(name) and (ns is None or isinstance(ns, str))


class Informer:
    """Keeps a :class:`Store` of one resource type current and calls handlers on each change.

    ::

        informer = Informer(client, await client.resource("v1", "ConfigMap"), namespace="apps")
        informer.add_handler(on_change)
        await nursery.start(informer.run)
        await informer.wait_synced()

    ``namespace``, ``label_selector`` and ``field_selector`` restrict what is watched.
    ``page_size`` is the list page size. ``idle_timeout`` (seconds, ``None`` to disable) is how
    long a watch may deliver nothing before it is considered half-dead and replaced.
    ``watch_timeout`` is the base of the server-side watch timeout (each watch asks for a
    random value between it and twice it). ``min_backoff``/``max_backoff`` bound the jittered
    exponential backoff between retries. All timing uses trio's clock.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Selector | None = None,
        field_selector: Selector | None = None,
        page_size: int = 500,
        idle_timeout: float | None = 120.0,
        watch_timeout: float = 300.0,
        min_backoff: float = 0.1,
        max_backoff: float = 30.0,
        store: Store | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError("idle_timeout must be > 0 or None")
        if watch_timeout < 1:
            raise ValueError("watch_timeout must be >= 1")
        if not 0 < min_backoff <= max_backoff:
            raise ValueError("backoff bounds must satisfy 0 < min_backoff <= max_backoff")
        self._client = client
        self.resource = resource
        self.namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._page_size = page_size
        self.idle_timeout = idle_timeout
        self._watch_timeout = watch_timeout
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self.store = store if store is not None else Store()
        """The cache this informer writes (and only it)."""
        self._rng = rng or random.Random()
        self._handlers: list[Handler] = []
        self._synced = False
        self._synced_event = trio.Event()
        self._running = False
        self._failures = 0
        self._resource_version: str | None = None
        self._lists = 0
        self._watches = 0
        self._gone = 0
        self._stream_failures = 0
        self._restarts = 0
        self._events = 0
        self._skipped = 0

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
        return self._resource_version

    def statistics(self) -> InformerStatistics:
        """A snapshot of the informer's counters."""
        return InformerStatistics(
            lists=self._lists,
            watches=self._watches,
            gone=self._gone,
            stream_failures=self._stream_failures,
            restarts=self._restarts,
            events=self._events,
            skipped=self._skipped,
        )

    # --- handlers ---

    def add_handler(self, handler: Handler, *, replay: bool = True) -> None:
        """Register a synchronous handler, called with each :class:`InformerEvent`.

        Handlers may be added before or after :meth:`run` starts. With ``replay`` (the default)
        a handler added while the store holds objects is called at once with an ``ADDED`` event
        for each of them, so it misses nothing.
        """
        self._handlers.append(handler)
        if replay:
            for obj in self.store.list():
                self._call(handler, InformerEvent(WatchEventType.ADDED, obj, None))

    def remove_handler(self, handler: Handler) -> None:
        """Unregister a handler; raises ``ValueError`` if it is not registered."""
        self._handlers.remove(handler)

    def _call(self, handler: Handler, event: InformerEvent) -> None:
        try:
            handler(event)
        except Exception:
            log.exception(
                "an informer handler for %s raised on %s %s; ignoring it",
                self.resource,
                event.type.value,
                object_key(event.obj),
            )

    def _dispatch(self, event: InformerEvent) -> None:
        self._events += 1
        for handler in tuple(self._handlers):
            self._call(handler, event)

    # --- the writer ---

    def _set_synced(self, synced: bool) -> None:
        if synced and not self._synced:
            self._synced = True
            self._synced_event.set()
        elif not synced and self._synced:
            self._synced = False
            self._synced_event = trio.Event()

    def _backoff(self, failures: int) -> float:
        delay = min(self._max_backoff, self._min_backoff * 2.0 ** min(failures, 62))
        return delay * self._rng.uniform(0.5, 1.0)

    def _apply(self, event: WatchEvent) -> None:
        obj = event.object
        if event.type is WatchEventType.DELETED:
            old = self.store._remove(object_key(obj))
            self._dispatch(InformerEvent(WatchEventType.DELETED, obj, old))
            return
        key = object_key(obj)
        current = self.store.get(*key)
        if current is not None and _rv(current) == _rv(obj):
            return
        old = self.store._put(obj)
        kind = WatchEventType.ADDED if old is None else WatchEventType.MODIFIED
        self._dispatch(InformerEvent(kind, obj, old))

    async def _relist(self) -> str:
        listing = await self._client.list_all(
            self.resource,
            namespace=self.namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            page_size=self._page_size,
        )
        self._lists += 1
        seen = set()
        for obj in listing.items:
            if not _valid(obj):
                self._skipped += 1
                log.warning("skipping a malformed list item of %s (no metadata.name)", self.resource)
                continue
            key = object_key(obj)
            seen.add(key)
            current = self.store.get(*key)
            if current is not None and _rv(current) == _rv(obj):
                continue
            old = self.store._put(obj)
            kind = WatchEventType.ADDED if old is None else WatchEventType.MODIFIED
            self._dispatch(InformerEvent(kind, obj, old))
        for key in [k for k in self.store.keys() if k not in seen]:
            old = self.store._remove(key)
            if old is not None:
                self._dispatch(InformerEvent(WatchEventType.DELETED, old, old))
        self._resource_version = listing.resource_version
        log.debug(
            "listed %d %s at resourceVersion %s", len(seen), self.resource, listing.resource_version
        )
        return listing.resource_version

    async def _watch_once(self, resource_version: str) -> tuple[str, bool]:
        delivered = False
        timeout = int(self._watch_timeout * self._rng.uniform(1.0, 2.0))
        async with self._client.watch(
            self.resource,
            namespace=self.namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            resource_version=resource_version,
            allow_bookmarks=True,
            timeout_seconds=timeout,
            idle_timeout=self.idle_timeout,
        ) as stream:
            self._watches += 1
            try:
                async for event in stream:
                    delivered = True
                    if event.type is not WatchEventType.BOOKMARK:
                        self._apply(event)
                    rv = event.resource_version
                    if rv:
                        resource_version = rv
                        self._resource_version = rv
            finally:
                self._skipped += stream.skipped
        return resource_version, delivered

    async def _list_and_watch(self) -> None:
        resource_version = await self._relist()
        self._set_synced(True)
        self._failures = 0
        failures = 0
        while True:
            try:
                resource_version, delivered = await self._watch_once(resource_version)
            except GoneError:
                self._gone += 1
                log.info(
                    "watch of %s expired (410 Gone); listing again",
                    self.resource,
                    extra={"resource": str(self.resource)},
                )
                resource_version = await self._relist()
                failures = 0
                continue
            except (ApiError, TransportError, WatchStalledError, ResponseError) as exc:
                self._stream_failures += 1
                delivered = False
                log.warning(
                    "watch of %s failed (%s: %s); resuming from resourceVersion %s",
                    self.resource,
                    type(exc).__name__,
                    exc,
                    resource_version,
                    extra={
                        "resource": str(self.resource),
                        "error": type(exc).__name__,
                        "resource_version": resource_version,
                    },
                )
            if delivered:
                failures = 0
            await trio.sleep(self._backoff(failures))
            failures += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the informer until cancelled; use with ``await nursery.start(informer.run)``.

        ``task_status.started()`` is called once running, before the first list completes
        (use :meth:`wait_synced` to wait for the cache). Never returns normally: any failure is
        logged and the informer starts over after a backoff (see the module documentation).
        Raises ``RuntimeError`` if this informer is already running.

        Cancellation: the only way it ends; the store keeps its contents, and :attr:`synced`
        becomes false.
        """
        if self._running:
            raise RuntimeError("an Informer can run only once at a time")
        self._running = True
        self._failures = 0
        task_status.started()
        try:
            while True:
                try:
                    await self._list_and_watch()
                except Exception as exc:
                    self._set_synced(False)
                    self._restarts += 1
                    delay = self._backoff(self._failures)
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
