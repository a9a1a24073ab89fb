"""Watch requests: replay, the change stream, bookmarks, timeouts and injected watch faults."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import trio

from .._http import AbortStream, Request, Response
from ._conversion import Conversions
from ._errors import RequestRejected
from ._events import field_selector
from ._faults import Faults, FaultScope, RequestInfo
from ._resources import ResourceType
from ._responses import typed
from ._routing import Target, flag
from ._selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from ._shards import ShardSelector, shard_selector_of
from ._storage import Change, ObjectStorage, Subscription
from ._tables import Conversion, as_partial, as_table, include_option, negotiate

__all__ = ["Watches", "WatchObserver"]

logger = logging.getLogger("engine.apiserver.watch")


WatchObserver = Callable[[RequestInfo, str, Mapping[str, Any]], None]
"""Called with the watch's request, the event type (``ADDED``, ``MODIFIED``, ``DELETED``) and
the object as stored, right before an event is sent on a watch."""


@attrs.define(eq=False)
class _ActiveWatch:
    info: RequestInfo
    sub: Subscription


def _event_line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _translate(
    change: Change, labels: LabelSelector, fields: FieldSelector, shard: ShardSelector | None = None
) -> tuple[str, dict[str, Any]] | None:
    def ok(obj: dict[str, Any] | None) -> bool:
        return (
            obj is not None
            and labels.matches(obj.get("metadata", {}).get("labels"))
            and fields.matches(obj)
            and (shard is None or shard.matches(obj))
        )

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


@attrs.define(eq=False)
class _Converter:
    """Turns each watched object into what the watch's ``Accept`` header asked for: itself, a
    ``PartialObjectMetadata``, or a one-row ``Table`` whose ``columnDefinitions`` only the
    first event carries (the real server prints the headers once per watch, ``null`` after)."""

    rt: ResourceType
    store: ObjectStorage
    conversion: Conversion | None
    include_object: str | None
    headers_sent: bool = False

    def __call__(self, obj: dict[str, Any]) -> dict[str, Any]:
        answered = typed(self.rt, obj)
        if self.conversion is None:
            return answered
        if self.conversion.kind != "Table":
            return as_partial(answered, self.conversion)
        version = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
        table = as_table(
            self.rt,
            [(obj, answered)],
            version,
            self.conversion,
            now=self.store.wall_clock(),
            include_object=self.include_object,
            no_headers=self.headers_sent,
        )
        self.headers_sent = True
        return table


@attrs.define(eq=False)
class Watches:
    """The open watches of one server; ``bookmark_interval`` is in seconds of trio time."""

    store: ObjectStorage
    faults: Faults
    bookmark_interval: float = 60.0
    sharding: bool = False
    """The ``ShardedListAndWatch`` gate: honour ``shardSelector`` (see :mod:`._shards`)."""
    conversions: Conversions | None = None
    """Converts the events of custom resources whose CRD names a conversion webhook."""
    observers: list[WatchObserver] = attrs.field(factory=list)
    """Told of every object event sent on a watch (not bookmarks, not errors); must not raise."""
    _active: set[_ActiveWatch] = attrs.field(factory=set, init=False, repr=False)

    def drop(self, scope: FaultScope, abrupt: bool) -> int:
        """End the watches ``scope`` matches (cleanly, or ``abrupt``ly by resetting the
        connection); returns how many. Not a checkpoint."""
        dropped = 0
        for watch in list(self._active):
            if scope.matches(watch.info):
                watch.sub.dropped = True
                watch.sub.abrupt = abrupt
                self.store.unsubscribe(watch.sub)
                self._active.discard(watch)
                dropped += 1
        return dropped

    def open(self, request: Request, target: Target, info: RequestInfo) -> Response:
        """Start a watch and return its streaming response; raises :class:`RequestRejected`
        for malformed parameters. An expired resourceVersion is answered in the stream, as an
        ``ERROR`` event. A resourceVersion newer than the latest is, as on the real server (see
        ``Cacher.waitUntilWatchCacheFreshAndForceAllEvents``), refused in the stream (504
        ``ResourceVersionTooLarge``) with ``sendInitialEvents``, and otherwise accepted: the
        watch then reports only changes newer than it. An ``Accept`` asking for a ``Table``
        (``kubectl get -w``) or ``PartialObjectMetadata`` converts each event's object (see
        ``_Converter``); one asking for a list conversion is 406. With :attr:`sharding`, a
        ``shardSelector`` filters every event (replayed and live) and a malformed one is a 500
        before the stream starts; bookmarks are unchanged. Not a checkpoint."""
        rt, ns, q = target.rt, target.namespace, request.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = field_selector(rt, parse_field_selector(q.get("fieldSelector"), rt))
        shard = shard_selector_of(request.query_values, self.sharding)
        if target.name is not None:
            fields = attrs.evolve(fields, requirements=fields.requirements + (("metadata.name", "=", target.name),))
        if ns is not None:
            self.store.check_namespace(rt, ns)
        conversion = negotiate(request.headers.get("accept"))
        if conversion is not None and conversion.kind == "PartialObjectMetadataList":
            raise RequestRejected(
                406, "NotAcceptable", "you requested PartialObjectMetadataList, but the requested object is not a list"
            )
        include = include_option(q.get("includeObject")) if conversion is not None else None
        converter = _Converter(rt, self.store, conversion, include)
        bookmarks = flag(q, "allowWatchBookmarks")
        initial_events = flag(q, "sendInitialEvents")
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
                raise RequestRejected(
                    400, "BadRequest", f"resourceVersion {raw_rv!r} is not a valid resource version"
                ) from None
        expired: RequestRejected | None = None
        if initial_events:
            try:
                self.store.check_not_newer(raw_rv)
            except RequestRejected as exc:
                expired = exc
        if expired is None and self.faults.take("expire_watch", info) is not None:
            expired = RequestRejected(
                410, "Expired", f"too old resource version: {raw_rv or 0} ({self.store.resource_version})"
            )
        replay: list[Change] = []
        sub: Subscription | None = None
        snapshot = 0
        if expired is None:
            try:
                replay, sub = self.store.subscribe(rt, ns, since)
                snapshot = self.store.resource_version
            except RequestRejected as exc:
                expired = exc
        headers = [("content-type", "application/json")]
        if expired is not None:
            error = expired

            async def gone() -> AsyncIterator[bytes]:
                yield _event_line("ERROR", error.status)

            return Response(200, headers, stream=gone())
        assert sub is not None
        active = _ActiveWatch(info, sub)
        self._active.add(active)
        stream = self._stream(
            rt, sub, active, replay, (labels, fields, shard), bookmarks, initial_events and bookmarks, timeout, since or 0,
            snapshot, converter,
        )
        return Response(200, headers, stream=stream)

    def _tell(self, info: RequestInfo, event: tuple[str, dict[str, Any]]) -> None:
        for observer in self.observers:
            observer(info, event[0], event[1])

    async def _versioned(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any] | None:
        """``obj`` in ``rt``'s version; ``None`` when its conversion failed: the real server
        then ends the watch (it cannot encode the event) and logs why."""
        if self.conversions is None:
            return obj
        try:
            return (await self.conversions.convert(rt, [obj]))[0]
        except RequestRejected as exc:
            logger.warning("ending a watch of %s: %s", rt.plural, exc)
            return None

    def _next_bookmark(self, now: float, deadline: float) -> float:
        """When the next BOOKMARK is due: after ``bookmark_interval``, or 2 s before the watch's
        deadline if that comes first and is still ahead, as the real server's watch cache
        sends one before a watch times out."""
        due = now + self.bookmark_interval
        before_end = deadline - 2.0
        if now < before_end < due:
            return before_end
        return due

    async def _stream(
        self,
        rt: ResourceType,
        sub: Subscription,
        active: _ActiveWatch,
        replay: list[Change],
        selection: tuple[LabelSelector, FieldSelector, ShardSelector | None],
        bookmarks: bool,
        initial_end: bool,
        timeout: float | None,
        since: int,
        snapshot: int,
        convert: _Converter,
    ) -> AsyncIterator[bytes]:
        """The watch's event lines: ``replay``, then the subscription's changes. With
        ``initial_end`` the replay (the state at ``snapshot``, the store's resourceVersion when
        the watch subscribed) ends with the ``k8s.io/initial-events-end`` bookmark at
        ``snapshot``: changes queued meanwhile come after it, each newer than it."""
        store = self.store
        last_rv = since

        def bookmark(annotations: dict[str, str] | None = None) -> bytes:
            rv = store.resource_version if sub.receive.statistics().current_buffer_used == 0 else last_rv
            meta: dict[str, Any] = {"resourceVersion": str(max(rv, last_rv))}
            if annotations:
                meta["annotations"] = annotations
            return _event_line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})

        # No ``yield`` may happen inside a cancel scope (an async generator suspended there
        # corrupts trio's cancel scope stack), so the watch timeout is checked by hand.
        deadline = trio.current_time() + timeout if timeout is not None else math.inf
        try:
            for replayed in replay:
                event = _translate(replayed, *selection)
                last_rv = max(last_rv, replayed.rv)
                if event is not None:
                    converted = await self._versioned(rt, event[1])
                    if converted is None:
                        return
                    self._tell(active.info, event)
                    yield _event_line(event[0], convert(converted))
            if initial_end:
                last_rv = max(last_rv, snapshot)
                yield bookmark({"k8s.io/initial-events-end": "true"})
            next_bookmark = self._next_bookmark(trio.current_time(), deadline)
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
                    next_bookmark = self._next_bookmark(trio.current_time(), deadline)
                    continue
                delay = self.faults.watch_delay(active.info)
                if delay > 0:
                    with trio.move_on_at(min(change.time + delay, deadline)):
                        await sub.closed.wait()
                    if sub.dropped or trio.current_time() >= deadline:
                        break
                if change.rv <= since:
                    continue
                last_rv = max(last_rv, change.rv)
                event = _translate(change, *selection)
                if event is not None:
                    converted = await self._versioned(rt, event[1])
                    if converted is None:
                        return
                    self._tell(active.info, event)
                    yield _event_line(event[0], convert(converted))
            if sub.dropped and sub.abrupt:
                raise AbortStream("watch dropped by fault injection")
        finally:
            store.unsubscribe(sub)
            self._active.discard(active)
