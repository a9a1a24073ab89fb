"""Fault injection: failures, latency, stale and dropped watches, forced 410s.

Every fault has a scope: ``resource`` (the plural, such as ``"configmaps"``), ``group`` (``""``
for the core group), ``client`` and ``verbs``. A field left ``None`` matches anything. Clients
are identified by their ``User-Agent`` header: ``client="informer-a"`` matches every request
whose User-Agent starts with ``informer-a``, so one test can starve exactly one informer by
giving it its own User-Agent. Requests to ``/_faults`` itself are never faulted.
``withhold_progress`` makes the watch caches lag as when etcd sends them no progress
notifications.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs

__all__ = ["Fault", "FaultScope", "Faults", "RequestInfo"]

_ids = itertools.count(1)


@attrs.frozen
class RequestInfo:
    """What a fault scope is matched against."""

    verb: str
    """``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``,
    ``deletecollection``, or ``discovery`` for everything else."""
    resource: str | None
    """The plural, or ``None`` for non-resource paths."""
    group: str | None
    """The group (``""`` for core), or ``None`` for non-resource paths."""
    user_agent: str
    """The request's User-Agent."""


def _verbs(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


@attrs.frozen
class FaultScope:
    """Which requests a fault applies to; ``None`` matches anything."""

    resource: str | None = None
    """Plural name, such as ``"leases"``."""
    group: str | None = None
    """API group; ``""`` is the core group."""
    client: str | None = None
    """Prefix of the client's User-Agent."""
    verbs: frozenset[str] | None = attrs.field(default=None, converter=_verbs)
    """Verbs such as ``{"list", "watch"}``."""

    def matches(self, info: RequestInfo) -> bool:
        """Whether a request falls in this scope."""
        if self.resource is not None and info.resource != self.resource:
            return False
        if self.group is not None and info.group != self.group:
            return False
        if self.client is not None and not info.user_agent.startswith(self.client):
            return False
        return self.verbs is None or info.verb in self.verbs


@attrs.define(eq=False)
class Fault:
    """One active fault. ``remaining`` counts down (``None``: until removed); ``hits`` counts
    the requests or events it affected."""

    kind: str
    """``fail``, ``latency``, ``delay_watch``, ``expire_watch`` or ``withhold_progress``."""
    scope: FaultScope
    """Which requests it applies to."""
    remaining: int | None = None
    """How many more requests it affects; ``None`` for no limit."""
    status: int = 500
    """For ``fail``: the HTTP status answered."""
    retry_after: float | None = None
    """For ``fail``: the ``Retry-After`` header, in seconds."""
    seconds: float = 0.0
    """For ``latency`` and ``delay_watch``: the delay."""
    hits: int = 0
    """Requests or events affected so far."""
    resource_version: int = 0
    """For ``withhold_progress``: the server's resourceVersion when it was added (the watch
    caches had heard of everything up to it)."""
    id: int = attrs.field(factory=lambda: next(_ids))
    """Identifier used by the ``/_faults`` endpoint."""

    def to_json(self) -> dict[str, Any]:
        """The fault as the ``/_faults`` endpoint shows it."""
        return {
            "id": self.id,
            "type": self.kind,
            "resource": self.scope.resource,
            "group": self.scope.group,
            "client": self.scope.client,
            "verbs": sorted(self.scope.verbs) if self.scope.verbs is not None else None,
            "remaining": self.remaining,
            "status": self.status,
            "retryAfter": self.retry_after,
            "seconds": self.seconds,
            "hits": self.hits,
            "resourceVersion": self.resource_version,
        }


@attrs.define(eq=False)
class Faults:
    """The fault registry of one :class:`~engine.apiserver.ApiServer` (``api.faults``).

    Methods are synchronous and take effect for the next request (and, for ``delay_watch`` and
    ``drop_watches``, for watches already running). Not thread-safe: from another thread, use
    the ``POST /_faults`` endpoint.
    """

    _active: list[Fault] = attrs.field(factory=list, init=False, repr=False)
    _drop: Callable[[FaultScope, bool], int] | None = attrs.field(default=None, init=False, repr=False)
    _counter: Callable[[], int] | None = attrs.field(default=None, init=False, repr=False)

    def connect_watches(self, drop: Callable[[FaultScope, bool], int]) -> None:
        """Called by the server that owns this registry: how :meth:`drop_watches` ends watches."""
        self._drop = drop

    def connect_counter(self, counter: Callable[[], int]) -> None:
        """Called by the server that owns this registry: its latest resourceVersion, for
        :meth:`withhold_progress`."""
        self._counter = counter

    def _add(self, fault: Fault) -> Fault:
        if fault.remaining is not None and fault.remaining < 1:
            raise ValueError("count must be >= 1 or None")
        self._active.append(fault)
        return fault

    def fail(
        self,
        status: int = 500,
        *,
        count: int | None = 1,
        retry_after: float | None = None,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
        verbs: set[str] | frozenset[str] | None = None,
    ) -> Fault:
        """Answer the next ``count`` matching requests with ``status`` (a ``Status`` body with
        reason ``InternalError``, ``TooManyRequests`` or ``ServiceUnavailable``) and, if given,
        a ``Retry-After`` header."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        return self._add(
            Fault("fail", FaultScope(resource, group, client, verbs), count, status, retry_after)
        )

    def throttle(
        self,
        *,
        count: int | None = 1,
        retry_after: float = 1.0,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
        verbs: set[str] | frozenset[str] | None = None,
    ) -> Fault:
        """Answer the next ``count`` matching requests with 429 and ``Retry-After``."""
        return self.fail(
            429, count=count, retry_after=retry_after, resource=resource, group=group, client=client, verbs=verbs
        )

    def add_latency(
        self,
        seconds: float,
        *,
        count: int | None = None,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
        verbs: set[str] | frozenset[str] | None = None,
    ) -> Fault:
        """Delay matching requests by ``seconds`` of trio time before they are handled."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError("seconds must be finite and >= 0")
        return self._add(
            Fault("latency", FaultScope(resource, group, client, verbs), count, seconds=seconds)
        )

    def delay_watch(
        self,
        seconds: float,
        *,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
    ) -> Fault:
        """Deliver watch events no earlier than ``seconds`` (trio time) after their commit,
        on new and running matching watches: a stale cache. Remove it to catch up."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError("seconds must be finite and >= 0")
        return self._add(
            Fault("delay_watch", FaultScope(resource, group, client, {"watch"}), None, seconds=seconds)
        )

    def expire_next_watch(
        self,
        *,
        count: int = 1,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
    ) -> Fault:
        """Answer the next ``count`` matching watches with one ``ERROR`` event carrying a 410
        ``Expired`` Status, then end them, as the real server does for a compacted
        resourceVersion."""
        return self._add(Fault("expire_watch", FaultScope(resource, group, client, {"watch"}), count))

    def withhold_progress(
        self,
        *,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
    ) -> Fault:
        """Serve the matching types' reads at a ``resourceVersion`` as kube-apiserver's watch
        cache does when etcd sends it no progress notifications (etcd 3.4, as envtest runs it,
        without ``--experimental-watch-progress-notify-interval``): from now on the cache of a
        type hears only of that type's own writes, so it stays at the newer of this moment's
        resourceVersion and the type's last write. A ``get`` or ``list`` with a
        ``resourceVersion`` newer than that (``Exact`` or not older than) waits up to 3 s
        (trio time) for a write of the type to reach it, then answers 504 ``Timeout`` with
        cause ``ResourceVersionTooLarge``, ``current`` naming the cache's resourceVersion, as
        kube-apiserver 1.32 on etcd 3.4 answers for a type nothing wrote to since others were
        written. Reads without a ``resourceVersion`` (from etcd) and ``resourceVersion=0``
        are unaffected. Remove it to let the caches catch up."""
        counter = self._counter() if self._counter is not None else 0
        return self._add(
            Fault("withhold_progress", FaultScope(resource, group, client, {"get", "list"}), None,
                  resource_version=counter)
        )

    def drop_watches(
        self,
        *,
        resource: str | None = None,
        group: str | None = None,
        client: str | None = None,
        abrupt: bool = False,
    ) -> int:
        """End the matching watches that are running now; returns how many.

        A clean drop finishes the chunked response (as a server-side watch timeout does);
        ``abrupt=True`` closes the connection mid-response. Not a checkpoint.
        """
        if self._drop is None:
            return 0
        return self._drop(FaultScope(resource, group, client, {"watch"}), abrupt)

    def remove(self, fault: Fault) -> None:
        """Deactivate ``fault``; idempotent."""
        if fault in self._active:
            self._active.remove(fault)

    def clear(self) -> None:
        """Deactivate every fault."""
        self._active.clear()

    @property
    def active(self) -> list[Fault]:
        """The active faults, oldest first."""
        return list(self._active)

    def take(self, kind: str, info: RequestInfo) -> Fault | None:
        """Consume one use of the oldest matching fault of ``kind`` (server internal)."""
        for fault in self._active:
            if fault.kind == kind and fault.scope.matches(info):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._active.remove(fault)
                return fault
        return None

    def watch_delay(self, info: RequestInfo) -> float:
        """The largest active ``delay_watch`` for a watch (server internal)."""
        delays = [f.seconds for f in self._active if f.kind == "delay_watch" and f.scope.matches(info)]
        return max(delays, default=0.0)

    def from_json(self, body: Any) -> Fault | int:
        """Add a fault described by a ``POST /_faults`` body; returns the fault, or the number
        of watches dropped for ``{"type": "drop_watches"}``. Raises ``ValueError`` when the body
        is malformed."""
        if not isinstance(body, dict):
            raise ValueError("a fault must be a JSON object")
        kind = body.get("type")
        scope: dict[str, Any] = {k: body.get(k) for k in ("resource", "group", "client")}
        verbs = body.get("verbs")
        if kind == "fail":
            return self.fail(
                int(body.get("status", 500)),
                count=body.get("count", 1),
                retry_after=body.get("retryAfter"),
                verbs=verbs,
                **scope,
            )
        if kind == "throttle":
            return self.throttle(
                count=body.get("count", 1), retry_after=float(body.get("retryAfter", 1.0)), verbs=verbs, **scope
            )
        if kind == "latency":
            return self.add_latency(float(body["seconds"]), count=body.get("count"), verbs=verbs, **scope)
        if kind == "delay_watch":
            return self.delay_watch(float(body["seconds"]), **scope)
        if kind == "expire_watch":
            return self.expire_next_watch(count=int(body.get("count", 1)), **scope)
        if kind == "drop_watches":
            return self.drop_watches(abrupt=bool(body.get("abrupt", False)), **scope)
        if kind == "withhold_progress":
            return self.withhold_progress(**scope)
        raise ValueError(
            "type must be one of fail, throttle, latency, delay_watch, expire_watch, drop_watches, withhold_progress"
        )
