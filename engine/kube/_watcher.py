"""The watcher: lists one resource type, then watches it, resuming and relisting as needed.

It produces :data:`WatcherEvent` values and keeps nothing but the ``resourceVersion`` to resume
from; a :class:`Store` applies the events and an :class:`Informer` wires the two together, but
a watcher is usable alone.

Behaviour under failure
-----------------------
* **Dropped or ended stream** (connection reset, server closed it, watch timeout, a non-410
  ``ERROR`` event, any API error such as ``5xx``, ``429`` or ``403`` on re-establishing once the
  client's own retries are spent): the watch is reopened from the last ``resourceVersion``
  seen (event or bookmark) after a jittered exponential backoff, which resets once a stream
  delivers something. Nothing is lost.
* **410 Gone** (HTTP 410 when establishing, or an ``ERROR`` event with code 410): the watcher
  lists again and emits :class:`Restarted` with the complete list, then watches from the new
  list's ``resourceVersion``.
* **Half-dead connection**: when no bytes at all (not even a bookmark) arrive within
  ``idle_timeout``, the stream is abandoned and reopened as for a dropped stream.
* **Malformed data** (a line that is not JSON, an event or list item without
  ``metadata.name``): logged, counted and skipped; the watch goes on.
* **Anything else** (a list that fails once the client's retries are spent, or the
  ``on_event`` callback raising) ends :meth:`Watcher.run` with that exception; run it again to
  start over from a fresh list.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from engine._backoff import jittered_backoff

from .._errors import LifecycleError
from ._client import Client, ObjectList, Selector
from ._errors import ApiError, GoneError, ResponseError, TransportError, WatchStalledError
from ._resource import Resource
from ._watch import WatchEventType

__all__ = [
    "Watcher",
    "WatcherEvent",
    "WatcherStatistics",
    "Added",
    "Modified",
    "Deleted",
    "Restarted",
    "Bookmark",
]

log = logging.getLogger("engine.kube.informer")


@attrs.frozen
class Added:
    """The watch reported a new object."""

    obj: dict[str, Any]
    """The object as it is now."""


@attrs.frozen
class Modified:
    """The watch reported a changed object."""

    obj: dict[str, Any]
    """The object as it is now."""


@attrs.frozen
class Deleted:
    """The watch reported a deleted object."""

    obj: dict[str, Any]
    """The object's last state."""


@attrs.frozen
class Restarted:
    """A complete list: every object that exists now, replacing whatever was known before."""

    objects: Sequence[dict[str, Any]]
    """The listed objects (malformed items already skipped)."""
    resource_version: str
    """The list's ``resourceVersion``, where the watch that follows starts."""


@attrs.frozen
class Bookmark:
    """The server's progress marker: nothing changed up to ``resource_version``."""

    resource_version: str
    """Where a watch may resume from."""


WatcherEvent = Added | Modified | Deleted | Restarted | Bookmark
"""What a :class:`Watcher` hands to its ``on_event`` callback."""

_BY_TYPE: dict[WatchEventType, type[Added] | type[Modified] | type[Deleted]] = {
    WatchEventType.ADDED: Added,
    WatchEventType.MODIFIED: Modified,
    WatchEventType.DELETED: Deleted,
}


@attrs.frozen
class WatcherStatistics:
    """Counters describing a watcher's life so far (see :meth:`Watcher.statistics`)."""

    lists: int
    """Complete lists done."""
    watches: int
    """Watch streams established."""
    gone: int
    """Times the watch answered 410 Gone and forced a relist."""
    stream_failures: int
    """Streams that broke, stalled or failed to establish (and were resumed)."""
    skipped: int
    """Malformed list items and watch lines skipped."""


def _valid(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    name, ns = meta.get("name"), meta.get("namespace")
    return isinstance(name, str) and bool(name) and (ns is None or isinstance(ns, str))


class Watcher:
    """Lists, then watches, one resource type, calling ``on_event`` with each change.

    ::

        watcher = Watcher(client, await client.resource("v1", "ConfigMap"), namespace="apps")
        await watcher.run(print)

    ``namespace``, ``label_selector`` and ``field_selector`` restrict what is watched.
    ``page_size`` is the list page size. ``idle_timeout`` (seconds, ``None`` to disable) is how
    long a watch may deliver nothing before it is considered half-dead and replaced.
    ``watch_timeout`` is the base of the server-side watch timeout (each watch asks for a
    random value between it and twice it). ``min_backoff``/``max_backoff`` bound the jittered
    exponential backoff before resuming a failed stream. ``rng`` drives the randomness (seed it
    for reproducible tests). All timing uses trio's clock.
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
        self._rng = rng or random.Random()
        self._running = False
        self._resource_version: str | None = None
        self._lists = 0
        self._watches = 0
        self._gone = 0
        self._stream_failures = 0
        self._skipped = 0

    @property
    def resource_version(self) -> str | None:
        """The last ``resourceVersion`` seen (list, event or bookmark): where a watch resumes."""
        return self._resource_version

    def statistics(self) -> WatcherStatistics:
        """A snapshot of the watcher's counters."""
        return WatcherStatistics(
            lists=self._lists,
            watches=self._watches,
            gone=self._gone,
            stream_failures=self._stream_failures,
            skipped=self._skipped,
        )

    def backoff(self, failures: int) -> float:
        """The jittered delay after ``failures`` consecutive failures, within the bounds."""
        return jittered_backoff(failures, base=self._min_backoff, cap=self._max_backoff, rng=self._rng)

    async def _list(self) -> ObjectList:
        return await self._client.list_all(
            self.resource,
            namespace=self.namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            page_size=self._page_size,
        )

    async def _relist(self, on_event: Callable[[WatcherEvent], object]) -> str:
        listing = await self._list()
        self._lists += 1
        objects = []
        for obj in listing.items:
            if not _valid(obj):
                self._skipped += 1
                log.warning("skipping a malformed list item of %s (no metadata.name)", self.resource)
                continue
            objects.append(obj)
        on_event(Restarted(objects, listing.resource_version))
        self._resource_version = listing.resource_version
        log.debug(
            "listed %d %s at resourceVersion %s", len(objects), self.resource, listing.resource_version
        )
        return listing.resource_version

    async def _watch_once(
        self, resource_version: str, on_event: Callable[[WatcherEvent], object]
    ) -> tuple[str, bool]:
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
                    rv = event.resource_version
                    if event.type is WatchEventType.BOOKMARK:
                        if rv:
                            on_event(Bookmark(rv))
                    else:
                        on_event(_BY_TYPE[event.type](event.object))
                    if rv:
                        resource_version = rv
                        self._resource_version = rv
            finally:
                self._skipped += stream.skipped
        return resource_version, delivered

    async def run(self, on_event: Callable[[WatcherEvent], object]) -> None:
        """List, then watch until cancelled, calling ``on_event`` synchronously with each event.

        The first event is a :class:`Restarted` with the complete list. Dropped streams are
        resumed and expired ones relisted (see the module documentation); anything else, an
        exception from ``on_event`` included, propagates and ends the run. Raises
        ``LifecycleError`` if this watcher is already running.

        Cancellation: the only way it ends normally; :attr:`resource_version` keeps the last
        point reached.
        """
        if self._running:
            raise LifecycleError("a Watcher can run only once at a time")
        self._running = True
        try:
            await self._list_and_watch(on_event)
        finally:
            self._running = False

    async def _list_and_watch(self, on_event: Callable[[WatcherEvent], object]) -> None:
        resource_version = await self._relist(on_event)
        failures = 0
        while True:
            try:
                resource_version, delivered = await self._watch_once(resource_version, on_event)
            except GoneError:
                self._gone += 1
                log.info(
                    "watch of %s expired (410 Gone); listing again",
                    self.resource,
                    extra={"resource": str(self.resource)},
                )
                resource_version = await self._relist(on_event)
                failures = 0
                continue
            except (ApiError, TransportError, WatchStalledError, ResponseError) as exc:
                self._stream_failures += 1
                # Resume after the last event delivered, not from where this stream began:
                # replaying delivered events would bring deleted objects back into the cache.
                resource_version = self._resource_version or resource_version
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
            await trio.sleep(self.backoff(failures))
            failures += 1
