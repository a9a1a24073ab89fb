"""An :class:`engine.EventSink` that records engine events as Kubernetes Events.

The recorder has already correlated events (client-go's aggregation and spam limits) before a
sink sees them; this sink turns the first occurrence into an ``events.k8s.io/v1`` Event and a
repeat (``count > 1``) into a patch of that Event's series, as client-go's event broadcaster
does.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import random
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio

from engine._backoff import jittered_backoff
from engine._events import Event
from engine._refs import ObjectRef
from engine._text import summarize

from .._access._rbac import EVENT_RULES, PolicyRule
from .._client._client import Client
from .._client._errors import (
    AlreadyExistsError,
    KubeError,
    NotFoundError,
    ResourceNotFoundError,
    ServerError,
    TooManyRequestsError,
    TransportError,
)
from .._client._retry import retry_after_of
from ._events import EVENTS_RESOURCE, build_event, create_event, patch_event_series

__all__ = ["KubernetesEventSink"]

logger = logging.getLogger("engine.kube.event_sink")

T = TypeVar("T")

_Key = tuple[ObjectRef, str, str, str, str]
_RETRYABLE = (TooManyRequestsError, ServerError, TransportError)


class KubernetesEventSink:
    """Posts each event to the API server as an ``events.k8s.io/v1`` Event about
    ``event.involved``.

    The regarding object's ``apiVersion`` is resolved through ``client`` discovery from the
    ref's group and kind (the group's first listed, that is preferred, version) and cached; a
    kind discovery does not know (checked again after ``discovery_ttl`` seconds) or a failed
    discovery gives a reference without ``apiVersion``, and the Event is still posted. Its
    ``uid`` is read from the object itself (kept ``uid_ttl`` seconds per object), so that
    ``kubectl describe``, which looks events up by uid, shows them; an object that cannot be
    read gives a reference without ``uid``. A
    cluster-scoped object's Events go to ``namespace_default``. ``reporting_instance``
    defaults to the host name.

    An aggregated repeat (``event.count > 1``, same object, type, reason, message and
    controller) patches the series of the Event this sink created for the first occurrence
    (remembered in an LRU map of ``cache_size`` entries) instead of creating another; if that
    Event is unknown or expired, a new one is created.

    Errors raise, so the recorder counts the event as failed: 4xx answers at once; 429, 5xx
    and transport errors after ``max_attempts`` attempts with jittered exponential backoff from
    ``backoff`` to ``max_backoff``, honouring ``Retry-After``. The client's own retry policy
    applies inside each attempt. All of one delivery, discovery included, is bounded by
    ``delivery_timeout`` seconds of trio time; past it :class:`TransportError` is raised. A
    create retried after an ambiguous failure that finds its Event already there counts as
    delivered. Deliveries are meant to be sequential (one sink task), and block nothing else.
    """

    def __init__(
        self,
        client: Client,
        *,
        reporting_controller: str,
        reporting_instance: str | None = None,
        namespace_default: str = "default",
        name: str = "kubernetes",
        action: str = "Reconcile",
        max_attempts: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        delivery_timeout: float = 10.0,
        cache_size: int = 1024,
        discovery_ttl: float = 300.0,
        uid_ttl: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        if not reporting_controller:
            raise ValueError("reporting_controller must not be empty")
        if not namespace_default:
            raise ValueError("namespace_default must not be empty")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not backoff > 0 or not max_backoff >= backoff:
            raise ValueError("backoff must be > 0 and max_backoff >= backoff")
        if not delivery_timeout > 0:
            raise ValueError("delivery_timeout must be > 0")
        if cache_size < 1:
            raise ValueError("cache_size must be >= 1")
        self.name = name
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance or socket.gethostname()
        self.namespace_default = namespace_default
        self._client = client
        self._action = action
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._timeout = delivery_timeout
        self._cache_size = cache_size
        self._discovery_ttl = discovery_ttl
        self._rng = rng or random.Random()
        self._created: collections.OrderedDict[_Key, dict[str, Any]] = collections.OrderedDict()
        self._versions: dict[tuple[str, str], str] = {}
        self._unknown: dict[tuple[str, str], float] = {}
        self._discovered_at: float | None = None
        self._uid_ttl = uid_ttl
        self._uids: collections.OrderedDict[ObjectRef, tuple[str | None, float]] = collections.OrderedDict()
        self._last_stamp = 0
        self.created = 0
        """Events created."""
        self.patched = 0
        """Series patches of Events created before."""
        self.retries = 0
        """Attempts repeated after a 429, 5xx or transport error."""

    @property
    def rules(self) -> tuple[PolicyRule, ...]:
        """The RBAC rules this sink needs: :data:`EVENT_RULES` in the namespace the plugins run
        for (where the objects its events are about live)."""
        return EVENT_RULES

    def __repr__(self) -> str:
        return f"KubernetesEventSink(name={self.name!r}, reporting_controller={self.reporting_controller!r})"

    async def deliver(self, event: Event) -> None:
        """Create the Event for ``event``, or patch the series of the one created before.

        Raises :class:`KubeError` (or ``ValueError`` for an event that cannot be an Event, such
        as one without a reason) when it could not be delivered; see the class documentation
        for retries and the ``delivery_timeout`` bound.

        Cancellation: a checkpoint; the attempt in flight is abandoned (an Event may then exist
        that this sink does not remember, so a later repeat creates a new one).
        """
        deadline = trio.current_time() + self._timeout
        last: list[BaseException] = []
        with trio.move_on_at(deadline):
            await self._deliver(event, deadline, last)
            return
        error = TransportError(
            f"delivering event {event.reason} about {event.involved} must finish within "
            f"{self._timeout:g}s (delivery_timeout), and it did not"
            + (f"; last error: {summarize(last[-1])}" if last else "")
        )
        raise error from (last[-1] if last else None)

    async def _deliver(self, event: Event, deadline: float, last: list[BaseException]) -> None:
        key: _Key = (event.involved, event.type.value, event.reason, event.message, event.controller)
        when = self._timestamp(event.timestamp)
        previous = self._created.get(key) if event.count > 1 else None
        if previous is not None:
            self._created.move_to_end(key)
            try:
                await self._retrying(
                    lambda: patch_event_series(self._client, previous, count=event.count, now=when),
                    deadline,
                    last,
                )
            except NotFoundError:
                logger.debug("event %s expired; creating a new one", previous["metadata"]["name"])
                self._created.pop(key, None)
            else:
                self.patched += 1
                return
        regarding = await self._regarding(event.involved)
        created = await self._create(event, regarding, when, deadline, last)
        self.created += 1
        self._created[key] = {
            "apiVersion": created.get("apiVersion", EVENTS_RESOURCE.api_version),
            "kind": "Event",
            "metadata": {
                "name": created["metadata"]["name"],
                "namespace": created["metadata"]["namespace"],
            },
        }
        self._created.move_to_end(key)
        while len(self._created) > self._cache_size:
            self._created.popitem(last=False)

    def _timestamp(self, timestamp: float) -> dt.datetime:
        stamp = max(int(timestamp * 1_000_000), self._last_stamp + 1)
        self._last_stamp = stamp
        return dt.datetime.fromtimestamp(stamp / 1_000_000, dt.UTC)

    def _body(self, event: Event, regarding: Mapping[str, Any], when: dt.datetime) -> dict[str, Any]:
        body = build_event(
            regarding,
            reason=event.reason,
            note=event.message,
            action=self._action,
            reporting_controller=self.reporting_controller,
            reporting_instance=self.reporting_instance,
            type=event.type.value,
            now=when,
        )
        body["metadata"]["namespace"] = event.involved.namespace or self.namespace_default
        return body

    async def _create(
        self,
        event: Event,
        regarding: Mapping[str, Any],
        when: dt.datetime,
        deadline: float,
        last: list[BaseException],
    ) -> dict[str, Any]:
        body = self._body(event, regarding, when)

        async def attempt() -> dict[str, Any]:
            nonlocal body
            try:
                return await create_event(self._client, body)
            except AlreadyExistsError:
                meta = body["metadata"]
                existing = await self._client.get(EVENTS_RESOURCE, meta["name"], namespace=meta["namespace"])
                if all(existing.get(k) == body.get(k) for k in ("reason", "note", "reportingController", "regarding")):
                    return existing
                body = self._body(event, regarding, self._timestamp(event.timestamp))
                raise

        return await self._retrying(attempt, deadline, last, retry_on=(*_RETRYABLE, AlreadyExistsError))

    async def _retrying(
        self,
        operation: Callable[[], Awaitable[T]],
        deadline: float,
        last: list[BaseException],
        *,
        retry_on: tuple[type[Exception], ...] = _RETRYABLE,
    ) -> T:
        backoffs = 0
        for attempt in range(1, self._max_attempts + 1):
            try:
                return await operation()
            except retry_on as exc:
                last.append(exc)
                if attempt == self._max_attempts:
                    raise
                if isinstance(exc, AlreadyExistsError):
                    wait = 0.0
                else:
                    demanded = retry_after_of(exc)
                    if demanded is not None:
                        wait = demanded
                    else:
                        wait = jittered_backoff(
                            backoffs, base=self._backoff, cap=self._max_backoff, rng=self._rng
                        )
                    backoffs += 1
                if trio.current_time() + wait >= deadline:
                    raise
                logger.info(
                    "event sink %s retrying in %.3fs after %s (attempt %d of %d)",
                    self.name, wait, type(exc).__name__, attempt + 1, self._max_attempts,
                )
                self.retries += 1
                await trio.sleep(wait)
        raise AssertionError("unreachable")

    # -- discovery -------------------------------------------------------------------------------

    async def _regarding(self, ref: ObjectRef) -> dict[str, Any]:
        meta = {"name": ref.name}
        if ref.namespace:
            meta["namespace"] = ref.namespace
        regarding: dict[str, Any] = {"kind": ref.kind, "metadata": meta}
        api_version = await self._api_version(ref)
        if api_version is not None:
            regarding["apiVersion"] = api_version
            uid = await self._uid(ref, api_version)
            if uid is not None:
                meta["uid"] = uid
        return regarding

    async def _uid(self, ref: ObjectRef, api_version: str) -> str | None:
        now = trio.current_time()
        cached = self._uids.get(ref)
        if cached is not None and now < cached[1]:
            return cached[0]
        uid: str | None = None
        try:
            resource = await self._client.resource(api_version, ref.kind)
            obj = await self._client.get(resource, ref.name, namespace=ref.namespace)
            found = (obj.get("metadata") or {}).get("uid")
            uid = found if isinstance(found, str) and found else None
        except KubeError as exc:
            logger.debug("event sink %s could not read %s for its uid (%s)", self.name, ref, summarize(exc))
        self._uids[ref] = (uid, now + self._uid_ttl)
        self._uids.move_to_end(ref)
        while len(self._uids) > self._cache_size:
            self._uids.popitem(last=False)
        return uid

    async def _api_version(self, ref: ObjectRef) -> str | None:
        key = (ref.group, ref.kind)
        known = self._versions.get(key)
        if known is not None:
            return known
        now = trio.current_time()
        unknown_until = self._unknown.get(key)
        if unknown_until is not None and now < unknown_until:
            return None
        try:
            if ref.group:
                if self._discovered_at is None or now >= self._discovered_at + self._discovery_ttl:
                    resources = await self._client.discover()
                    self._discovered_at = trio.current_time()
                    for resource in resources:
                        self._versions.setdefault((resource.group, resource.kind), resource.api_version)
            else:
                try:
                    resource = await self._client.resource("v1", ref.kind)
                except ResourceNotFoundError:
                    pass
                else:
                    self._versions[key] = resource.api_version
        except KubeError as exc:
            logger.info(
                "event sink %s could not resolve the apiVersion of %s (%s); posting without it",
                self.name, ref, summarize(exc),
            )
            return None
        found = self._versions.get(key)
        if found is None:
            self._unknown[key] = now + self._discovery_ttl
        else:
            self._unknown.pop(key, None)
        return found
