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
* **The server's history went backwards** (an etcd restore, a test server restarted empty):
  detected when a watch hands an object or bookmark whose ``resourceVersion`` is older than
  the one the watcher holds, or when a list comes back older than it. A real API server
  accepts a watch from a future ``resourceVersion`` and stays silent (it sends only changes
  newer than that), so once any watch is established (the first after a list as well as one
  resumed after a stream that ended, even cleanly and after progress: a server shutting down
  to restart on a restored etcd ends its watches cleanly) and before it hands on a single
  event, the watcher asks the server for its current ``resourceVersion`` (a one-item list
  without ``resourceVersion``, which the server answers from etcd or from a watch cache it
  brought up to date first) and takes history to have gone back when that is older than
  the one the watch started from. Asked after the watch is in place, the question also
  covers a restore between the list (or the last event) and the watch's arrival, which a
  question asked before would miss. It is asked at once and without the client's retries:
  each moment lost gives new writes time to bring the server's counter back up to that
  ``resourceVersion``, after which the restore cannot be told. While the server answers
  that list with ``5xx`` or ``429``, the watch is closed unread and the watcher backs off
  and tries again. Establishing a watch is not retried by the client: a failed attempt (the
  server down, perhaps restarting) reaches the watcher, which backs off and checks again
  with the next one. Each case logs a warning saying why, relists from scratch and emits
  :class:`Restarted` with ``reset`` set.
* **"Too large resource version"** (``504`` with cause ``ResourceVersionTooLarge``) is not
  taken for history going back: a kube-apiserver answers it whenever the watch cache of the
  type has not heard of the ``resourceVersion`` asked for within a few seconds, which on
  etcd without progress notifications (etcd 3.4 as envtest runs it) is so for every type
  that nothing wrote to since others were written. A watch refused so is checked as above
  (history gone back: relist from scratch) and otherwise resumed from the same
  ``resourceVersion`` after the backoff, as for a dropped stream.
* **Half-dead connection**: when no bytes at all (not even a bookmark) arrive within
  :attr:`WatchOptions.idle_timeout`, the stream is abandoned and reopened as for a dropped stream.
* **A cache that may have fallen behind** (its process was cut off from the server, and
  streams may be stalled on dead connections that could still deliver old events later):
  :meth:`Watcher.request_relist` abandons the running list or watch, closing its connection,
  and lists again; :attr:`Watcher.relisted` tells when a list begun after the request is done.
* **Malformed data** (a line that is not JSON, an event or list item without
  ``metadata.name``): logged, counted and skipped; the watch goes on.
* **Anything else** (a list that fails once the client's retries are spent, or the
  ``on_event`` callback raising) ends :meth:`Watcher.run` with that exception; run it again to
  start over from a fresh list.

Key ranges (watching a share of the objects)
--------------------------------------------
A watcher given ``key_ranges`` (:class:`~engine.KeyRanges` over the FNV-1a 64 hash of
``metadata.uid``, as KEP-5866 hashes it) hands on only the objects in those ranges: every
listed object and every ``ADDED``, ``MODIFIED`` and ``DELETED`` event outside them is dropped
on this side, always, whatever the server does (counted in
:attr:`WatcherStatistics.out_of_range`). Where the server filters by ``shardSelector`` (asked
once per client, :func:`~engine.kube.filters_shards`) the lists and watches also send the
ranges' selector (with every page), so the server sends only that share. Empty ranges cannot
be said with the parameter (an empty selector selects everything): with none the watcher
lists and watches nothing, and emits one empty :class:`Restarted`.

:meth:`Watcher.set_key_ranges` changes them while running. Ranges that grow beyond what the
last list covered stop the current list or watch and list again with the new ranges (the
:class:`Restarted` that follows reports what changed, as after 410 Gone, so nothing that
happened in between is missed); ranges that only shrink just filter from then on, and with a
filtering server the watch is resumed from the last ``resourceVersion`` with the narrower
selector (no list: the narrower ranges were all covered).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from engine._backoff import jittered_backoff

from ..._errors import LifecycleError
from ..._keyspace import KeyRanges, fnv1a64
from .._client._client import Client, ObjectList, Selector
from .._client._errors import (
    ApiError,
    GoneError,
    ResponseError,
    ServerError,
    TooManyRequestsError,
    TransportError,
    WatchStalledError,
)
from .._client._resource import Resource
from .._client._retry import RetryPolicy
from .._client._watch import WatchEventType, WatchStream
from .._client._wire import resource_version_number
from ._shard_filter import filters_shards
from ._watch_list import INITIAL_EVENTS_END, refuses_watch_list, server_streams_lists, watch_list_answered

__all__ = [
    "WatchOptions",
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
    reset: bool = False
    """The server's history went backwards: ``resourceVersion`` values known before mean
    nothing now, so every listed object is to be taken as changed."""


@attrs.frozen
class Bookmark:
    """The server's progress marker: nothing changed up to ``resource_version``."""

    resource_version: str
    """Where a watch may resume from."""


WatcherEvent = Added | Modified | Deleted | Restarted | Bookmark
"""What a :class:`Watcher` hands to its ``on_event`` callback."""


@attrs.frozen(kw_only=True)
class WatchOptions:
    """How a :class:`Watcher` lists and watches: one value that an :class:`~engine.kube.Informer`
    and a :class:`~engine.kube.Cluster` take and hand down unchanged.

    ::

        options = WatchOptions(label_selector={"app": "web"}, page_size=100)
        informer = Informer(client, await client.resource("v1", "ConfigMap"), namespace="apps", options=options)

    Which objects are watched (the resource, its ``namespace``, the key ranges) is said where
    the watcher is made; these say how. Invalid values raise ``ValueError`` here, naming the
    rule that was broken.
    """

    label_selector: Selector | None = None
    """The label selector of every list and watch (``None``: every object)."""
    field_selector: Selector | None = None
    """The field selector of every list and watch (``None``: every object)."""
    page_size: int = attrs.field(default=500)
    """Objects per list page; a relist holds one page of decoded JSON at a time."""
    idle_timeout: float | None = attrs.field(default=120.0)
    """Seconds a watch may deliver nothing, not even a bookmark, before it is taken for
    half-dead and replaced (``None``: never)."""
    watch_timeout: float = attrs.field(default=300.0)
    """The base of the server-side watch timeout: each watch asks for a random value between
    it and twice it, so that watches of many informers do not end together."""
    min_backoff: float = 0.1
    """The base (seconds) of the jittered exponential backoff before resuming a failed stream,
    and before an informer starts over after an unexpected error."""
    max_backoff: float = 30.0
    """The cap (seconds) of that backoff."""
    watch_list: bool = True
    """Stream the initial state on the watch (``sendInitialEvents``) where the server serves
    it (found once per client, see :func:`~engine.kube.server_streams_lists`); ``False``, or a
    server that does not: list in pages of ``page_size``."""
    rng: random.Random | None = attrs.field(default=None, eq=False)
    """The randomness of the watch timeouts and the backoff jitter (seed it for reproducible
    tests; ``None``: a new unseeded generator per watcher)."""

    @page_size.validator
    def _check_page_size(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value < 1:
            raise ValueError("page_size must be >= 1")

    @idle_timeout.validator
    def _check_idle_timeout(self, attribute: attrs.Attribute[float | None], value: float | None) -> None:
        if value is not None and value <= 0:
            raise ValueError("idle_timeout must be > 0 or None")

    @watch_timeout.validator
    def _check_watch_timeout(self, attribute: attrs.Attribute[float], value: float) -> None:
        if value < 1:
            raise ValueError("watch_timeout must be >= 1")

    def __attrs_post_init__(self) -> None:
        if not 0 < self.min_backoff <= self.max_backoff:
            raise ValueError("backoff bounds must satisfy 0 < min_backoff <= max_backoff")


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
    resets: int = 0
    """Times the server's history was found to have gone backwards (and a relist followed)."""
    out_of_range: int = 0
    """Listed objects and watch events dropped because they are outside the key ranges (with
    a server that filters by ``shardSelector``, only those of ranges that just shrank)."""


_ESTABLISH_ONCE = RetryPolicy(max_attempts=1)
"""Watches are established without the client's retries: the watcher retries them itself,
checking the server's history once each attempt is in place."""


class _NoWatchList(Exception):
    """The server refused a watch-list stream; the message says how."""


class _HistoryWentBack(Exception):
    """The server's resourceVersions went backwards; the message says how it was noticed."""


def _older(rv: str | None, than: str | None) -> bool:
    new, held = resource_version_number(rv), resource_version_number(than)
    return new is not None and held is not None and new < held


def _too_large(exc: ApiError) -> bool:
    """Whether ``exc`` is the server's "too large resource version" answer (as client-go's
    ``isTooLargeResourceVersionError`` reads it: a cause, never the reason)."""
    causes = exc.details.get("causes")
    if exc.code != 504 or not isinstance(causes, list):
        return False
    return any(
        isinstance(c, dict)
        and (c.get("reason") == "ResourceVersionTooLarge" or c.get("message") == "Too large resource version")
        for c in causes
    )


def _key(obj: dict[str, Any]) -> tuple[str | None, str]:
    meta = obj["metadata"]
    return meta.get("namespace"), meta["name"]


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

    ``namespace`` (``None``: every namespace) restricts what is watched; ``options``
    (:class:`WatchOptions`) say how: selectors, page size, timeouts, backoff and randomness.
    All timing uses trio's clock.

    A list is read ``page_size`` objects at a time; ``prepare(obj, reset)`` (if given) is
    applied to each valid listed object as its page arrives, and the page is dropped before
    the next one is read, so a relist holds one page of decoded JSON at a time beside what
    ``prepare`` returns (``reset``: the list's ``resourceVersion`` is older than the one held,
    see :class:`Restarted`). :class:`Restarted` carries what ``prepare`` returned.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        options: WatchOptions = WatchOptions(),
        prepare: Callable[[dict[str, Any], bool], dict[str, Any]] | None = None,
        key_ranges: KeyRanges | None = None,
    ) -> None:
        self._client = client
        self.resource = resource
        self.namespace = namespace
        self.options = options
        """How it lists and watches."""
        self._rng = options.rng or random.Random()
        self._prepare = prepare
        self._running = False
        self._resource_version: str | None = None
        self._lists = 0
        self._watches = 0
        self._gone = 0
        self._stream_failures = 0
        self._skipped = 0
        self._resets = 0
        self._key_ranges = key_ranges
        self._covered = KeyRanges.nothing()
        self._server_filters: bool | None = None
        self._out_of_range = 0
        self._cycle_scope: trio.CancelScope | None = None
        self._stream_scope: trio.CancelScope | None = None
        self._narrowed = False
        self._relists_asked = 0
        self._listing_for = 0
        self._listed_for = 0

    # --- fresh lists ---

    def request_relist(self) -> int:
        """Ask for a complete list made from now on: the running list or watch is abandoned
        (its connection closed, so nothing it would still deliver reaches ``on_event``) and the
        watcher lists again, then watches from that list. Returns the request's number, to
        compare with :attr:`relisted`. Synchronous, not a checkpoint."""
        self._relists_asked += 1
        if self._cycle_scope is not None:
            self._cycle_scope.cancel()
        return self._relists_asked

    @property
    def relisted(self) -> int:
        """The number of the last :meth:`request_relist` that a complete list answered (the
        list was begun after the request): 0 before any."""
        return self._listed_for

    # --- key ranges ---

    @property
    def key_ranges(self) -> KeyRanges | None:
        """The key ranges handed on (``None``: every object)."""
        return self._key_ranges

    @property
    def server_filters(self) -> bool | None:
        """Whether the lists and watches send ``shardSelector`` to a server that honours it
        (``None`` until the watcher had key ranges and asked)."""
        return self._server_filters

    @property
    def covers_key_ranges(self) -> bool:
        """Whether the last complete list covered every current key range (false after the
        ranges grew, until the list that follows is done)."""
        ranges = KeyRanges.everything() if self._key_ranges is None else self._key_ranges
        return not ranges - self._covered

    def wants(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is in the key ranges (hash of its ``metadata.uid``, ``""`` when it
        has none, as the server hashes it)."""
        ranges = self._key_ranges
        if ranges is None:
            return True
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        return fnv1a64(uid if isinstance(uid, str) else "") in ranges

    def set_key_ranges(self, ranges: KeyRanges | None) -> None:
        """Hand on only the objects in ``ranges`` from now on (``None``: all); see the module
        documentation. Synchronous, not a checkpoint: no event outside ``ranges`` is handed
        on after it returns. Grown ranges make the running list or watch start over with a
        new list; shrunk ones resume the watch with the narrower selector."""
        before = self._key_ranges
        self._key_ranges = ranges
        if ranges == before:
            return
        wanted = KeyRanges.everything() if ranges is None else ranges
        self._covered = self._covered & wanted
        log.info(
            "key ranges of %s changed to %s",
            self.resource,
            "everything" if ranges is None else ranges,
            extra={"resource": str(self.resource), "key_share": wanted.share},
        )
        if wanted - self._covered or not wanted:
            if self._cycle_scope is not None:
                self._cycle_scope.cancel()
        elif self._server_filters and self._stream_scope is not None:
            self._stream_scope.cancel()

    def _shard_selector(self) -> str | None:
        ranges = self._key_ranges
        if ranges is None or not ranges or not self._server_filters or ranges == KeyRanges.everything():
            return None
        return ranges.selector()

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
            resets=self._resets,
            out_of_range=self._out_of_range,
        )

    def backoff(self, failures: int) -> float:
        """The jittered delay after ``failures`` consecutive failures, within the bounds."""
        return jittered_backoff(failures, base=self.options.min_backoff, cap=self.options.max_backoff, rng=self._rng)

    async def _list_page(self, continue_token: str | None) -> ObjectList:
        """One page of the list (``page_size`` objects), from ``continue_token`` if given."""
        return await self._client.list(
            self.resource,
            namespace=self.namespace,
            label_selector=self.options.label_selector,
            field_selector=self.options.field_selector,
            limit=self.options.page_size,
            continue_token=continue_token,
            shard_selector=self._shard_selector(),
        )

    async def _relist(self, on_event: Callable[[WatcherEvent], object], *, reset: bool = False) -> WatchStream | None:
        """The complete state, as one :class:`Restarted`: streamed on a watch where the server
        serves it (the stream, open, is returned to go on as the watch), else listed in pages
        (``None`` returned)."""
        self._listing_for = self._relists_asked
        if self.options.watch_list and server_streams_lists(self._client) is not False:
            while True:
                try:
                    return await self._stream_state(on_event, reset=reset)
                except _HistoryWentBack as exc:
                    if reset:
                        raise
                    self._history_went_back(str(exc))
                    reset = True
                except _NoWatchList as exc:
                    watch_list_answered(self._client, False, self.resource, str(exc))
                    break
        await self._list_pages(on_event, reset=reset)
        return None

    async def _stream_state(self, on_event: Callable[[WatcherEvent], object], *, reset: bool) -> WatchStream:
        """A watch-list stream, read until its initial state ended (then handed on as one
        :class:`Restarted`); returned open. Raises :class:`_HistoryWentBack` when the state is
        older than what was held and ``reset`` was not known (the objects were prepared as
        unchanged ones: the caller streams again with ``reset``), :class:`_NoWatchList` when
        the server refuses the stream, the stream's error when it fails otherwise before the
        end, and ``ResponseError`` when it ends before. If cancelled, the stream is closed."""
        timeout = int(self.options.watch_timeout * self._rng.uniform(1.0, 2.0))
        stream = self._client.watch(
            self.resource,
            namespace=self.namespace,
            label_selector=self.options.label_selector,
            field_selector=self.options.field_selector,
            send_initial_events=True,
            timeout_seconds=timeout,
            idle_timeout=self.options.idle_timeout,
            shard_selector=self._shard_selector(),
        )
        prepare = self._prepare
        objects: list[dict[str, Any]] = []
        changed: dict[tuple[str | None, str], dict[str, Any] | None] | None = None
        try:
            await stream.__aenter__()
        except ApiError as exc:
            if refuses_watch_list(exc, in_stream=False):
                raise _NoWatchList(f"{exc.code} {exc.reason}: {exc.message}") from exc
            raise
        try:
            self._watches += 1
            async for event in stream:
                if event.type is WatchEventType.BOOKMARK:
                    annotations = event.object["metadata"].get("annotations") or {}
                    if annotations.get(INITIAL_EVENTS_END) != "true":
                        continue
                    resource_version = event.resource_version
                    assert resource_version is not None
                    if _older(resource_version, self._resource_version) and not reset:
                        raise _HistoryWentBack(
                            f"a streamed state has resourceVersion {resource_version}, "
                            f"older than {self._resource_version} seen before"
                        )
                    watch_list_answered(self._client, True, self.resource)
                    if changed is not None:
                        objects = [obj for obj in changed.values() if obj is not None]
                    self._finish_list(on_event, objects, resource_version, reset)
                    return stream
                obj = event.object
                if not self.wants(obj):
                    self._out_of_range += 1
                    continue
                if event.type is WatchEventType.ADDED and changed is None:
                    objects.append(obj if prepare is None else prepare(obj, reset))
                    continue
                # Not expected before the end: the state as of the end, by key.
                if changed is None:
                    changed = {_key(o): o for o in objects}
                    objects = []
                meta = obj["metadata"]
                key = (meta.get("namespace"), meta["name"])
                if event.type is WatchEventType.DELETED:
                    changed.pop(key, None)
                else:
                    changed.pop(key, None)
                    changed[key] = obj if prepare is None else prepare(obj, reset)
            raise ResponseError(f"the watch-list stream of {self.resource} ended before its initial state did")
        except BaseException as exc:
            self._skipped += stream.skipped
            await stream.aclose()
            if isinstance(exc, ApiError) and refuses_watch_list(exc, in_stream=True):
                raise _NoWatchList(f"{exc.code} {exc.reason}: {exc.message}") from exc
            raise

    def _finish_list(
        self,
        on_event: Callable[[WatcherEvent], object],
        objects: list[dict[str, Any]],
        resource_version: str,
        reset: bool,
    ) -> None:
        self._lists += 1
        if self._key_ranges is not None:
            # Ranges may have shrunk while the state was read.
            objects = [obj for obj in objects if self.wants(obj)]
        on_event(Restarted(objects, resource_version, reset=reset))
        self._listed_for = self._listing_for
        self._covered = KeyRanges.everything() if self._key_ranges is None else self._key_ranges
        self._resource_version = resource_version
        log.debug("listed %d %s at resourceVersion %s", len(objects), self.resource, resource_version)

    async def _list_pages(self, on_event: Callable[[WatcherEvent], object], *, reset: bool = False) -> None:
        objects: list[dict[str, Any]] = []
        resource_version: str | None = None
        token: str | None = None
        prepare = self._prepare
        while True:
            page = await self._list_page(token)
            if resource_version is None:
                resource_version = page.resource_version
                if not reset and _older(resource_version, self._resource_version):
                    reset = True
                    self._history_went_back(
                        f"a list answered resourceVersion {resource_version}, "
                        f"older than {self._resource_version} seen before"
                    )
            for obj in page.items:
                if not _valid(obj):
                    self._skipped += 1
                    log.warning("skipping a malformed list item of %s (no metadata.name)", self.resource)
                    continue
                if not self.wants(obj):
                    self._out_of_range += 1
                    continue
                objects.append(obj if prepare is None else prepare(obj, reset))
            token = page.continue_token
            del page
            if not token:
                break
        assert resource_version is not None
        self._finish_list(on_event, objects, resource_version, reset)

    def _history_went_back(self, why: str) -> None:
        self._resets += 1
        log.warning(
            "the API server's history of %s went backwards (%s); listing again from scratch",
            self.resource,
            why,
            extra={"resource": str(self.resource), "resource_version": self._resource_version},
        )

    async def _check_history(self, resource_version: str) -> None:
        """Raise :class:`_HistoryWentBack` if the server's current ``resourceVersion`` (a
        one-item list without one: etcd's revision, or a watch cache brought up to it) is
        older than ``resource_version``. The list carries no label or shard selector: read
        from etcd, a selective one-item list may scan the whole collection for a match (a
        field selector stays, as a Role limited to one object's name allows only that list). Asked once, without the client's retries: each retry
        would give new writes time to bring the server's counter back up to
        ``resource_version``, after which the rewind can no longer be told. A server that
        cannot answer yet (``5xx``, ``429``) raises that error, so the watch is closed unread
        and the check made again with the next attempt: a server restarted on a restored etcd
        is down for a while, and watching without the check once it is back would go
        unnoticed. Other API errors leave the question open; transport errors propagate."""
        try:
            page = await self._client.list(
                self.resource,
                namespace=self.namespace,
                field_selector=self.options.field_selector,
                limit=1,
                retry=_ESTABLISH_ONCE,
            )
        except ApiError as exc:
            if isinstance(exc, ServerError | TooManyRequestsError):
                raise
            log.debug("could not check the history of %s (%s); watching anyway", self.resource, exc)
            return
        if _older(page.resource_version, resource_version):
            raise _HistoryWentBack(
                f"the server's current resourceVersion is {page.resource_version}, "
                f"older than {resource_version} seen before"
            )

    async def _watch_once(
        self, resource_version: str, on_event: Callable[[WatcherEvent], object], opened: WatchStream | None = None
    ) -> bool:
        """Watch from ``resource_version`` (on ``opened``, a watch-list stream past its initial
        state, when given: it is closed here) until the stream ends; whether it delivered
        anything."""
        self._narrowed = False
        if opened is not None:
            with trio.CancelScope() as self._stream_scope:
                try:
                    await self._consume(opened, on_event)
                finally:
                    self._skipped += opened.skipped
                    await opened.aclose()
            self._narrowed = self._stream_scope.cancelled_caught
            self._stream_scope = None
            return True
        delivered = False
        timeout = int(self.options.watch_timeout * self._rng.uniform(1.0, 2.0))
        with trio.CancelScope() as self._stream_scope:
            async with self._client.watch(
                self.resource,
                namespace=self.namespace,
                label_selector=self.options.label_selector,
                field_selector=self.options.field_selector,
                resource_version=resource_version,
                allow_bookmarks=True,
                timeout_seconds=timeout,
                idle_timeout=self.options.idle_timeout,
                shard_selector=self._shard_selector(),
                retry=_ESTABLISH_ONCE,
            ) as stream:
                self._watches += 1
                try:
                    await self._check_history(resource_version)
                    delivered = await self._consume(stream, on_event)
                finally:
                    self._skipped += stream.skipped
        self._narrowed = self._stream_scope.cancelled_caught
        self._stream_scope = None
        return delivered

    async def _consume(self, stream: WatchStream, on_event: Callable[[WatcherEvent], object]) -> bool:
        delivered = False
        # The revision last seen, as a number: read again only when it changed.
        held: str | None = None
        held_number: int | None = None
        async for event in stream:
            delivered = True
            rv = event.resource_version
            number = resource_version_number(rv)
            if self._resource_version is not held:
                held = self._resource_version
                held_number = resource_version_number(held)
            if number is not None and held_number is not None and number < held_number:
                what = "bookmark" if event.type is WatchEventType.BOOKMARK else f"{event.type.value} event"
                raise _HistoryWentBack(
                    f"a watch {what} has resourceVersion {rv}, older than {self._resource_version} seen before"
                )
            if event.type is WatchEventType.BOOKMARK:
                if rv:
                    on_event(Bookmark(rv))
            elif self.wants(event.object):
                on_event(_BY_TYPE[event.type](event.object))
            else:
                self._out_of_range += 1
            if rv:
                self._resource_version = held = rv
                held_number = number
        return delivered

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
        while True:
            with trio.CancelScope() as self._cycle_scope:
                await self._cycle(on_event)
            self._cycle_scope = self._stream_scope = None
            log.info(
                "listing %s again (%s)", self.resource,
                "a fresh list was asked for" if self._relists_asked > self._listed_for else "its key ranges grew",
                extra={"resource": str(self.resource)},
            )

    async def _cycle(self, on_event: Callable[[WatcherEvent], object]) -> None:
        if self._key_ranges is not None:
            self._server_filters = await filters_shards(self._client, self.resource, namespace=self.namespace)
            if not self._key_ranges:
                self._lists += 1
                on_event(Restarted((), self._resource_version or ""))
                self._listed_for = self._relists_asked
                self._covered = KeyRanges.nothing()
                await trio.sleep_forever()
        opened = await self._relist(on_event)
        failures = 0
        while True:
            start = self._resource_version
            assert start is not None
            stream, opened = opened, None
            try:
                delivered = await self._watch_once(start, on_event, stream)
                if self._narrowed:
                    failures = 0
                    continue
            except _HistoryWentBack as exc:
                self._history_went_back(str(exc))
                opened = await self._relist(on_event, reset=True)
                failures = 0
                continue
            except GoneError:
                self._gone += 1
                log.info(
                    "watch of %s expired (410 Gone); listing again",
                    self.resource,
                    extra={"resource": str(self.resource)},
                )
                opened = await self._relist(on_event)
                failures = 0
                continue
            except (ApiError, TransportError, WatchStalledError, ResponseError) as exc:
                if isinstance(exc, ApiError) and _too_large(exc):
                    try:
                        await self._check_history(start)
                    except _HistoryWentBack as went_back:
                        self._history_went_back(str(went_back))
                        opened = await self._relist(on_event, reset=True)
                        failures = 0
                        continue
                    except (ApiError, TransportError):
                        pass
                self._stream_failures += 1
                delivered = False
                log.warning(
                    "watch of %s failed (%s: %s); resuming from resourceVersion %s",
                    self.resource,
                    type(exc).__name__,
                    exc,
                    self._resource_version,
                    extra={
                        "resource": str(self.resource),
                        "error": type(exc).__name__,
                        "resource_version": self._resource_version,
                    },
                )
            if delivered:
                failures = 0
            await trio.sleep(self.backoff(failures))
            failures += 1
