"""A request log: who wrote what, when, under which identity and lease.

:class:`RequestLog` is a request observer (``api.add_request_observer(log)``) that keeps one
:class:`RequestRecord` per answered write (and, with ``reads=True``, per read): the
User-Agent's identity, when the request arrived and when it was answered, the object's uid
and resourceVersion once answered, and the Lease the identity held then as the server saw it
(from its own successful Lease writes: a holder renews until ``leaseDurationSeconds`` after
its last renewal; a release or another holder's write ends it). It is what an observer
outside the controllers could see; the simulator's checks read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import trio

from ._api import ServedRequest
from ._selectors import parse_field_selector, parse_label_selector
from ._storage import ObjectStorage

__all__ = ["RequestLog", "RequestRecord", "LeaseHolding", "WRITE_VERBS"]

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""The verbs a :class:`RequestLog` counts as writes."""


@attrs.frozen
class LeaseHolding:
    """A Lease an identity held, as the server saw it."""

    namespace: str
    name: str
    since: float
    """trio time of the write that made it the holder."""
    until: float
    """trio time its last renewal expires (``leaseDurationSeconds`` after it), or when it
    released the Lease or another identity wrote it."""


@attrs.frozen
class RequestRecord:
    """One answered request."""

    served: ServedRequest
    actor: str
    """The User-Agent up to its first ``/`` (a replica's identity)."""
    name: str | None
    """The object's name (of a create: the one in its body)."""
    received_at: float
    answered_at: float
    uid: str | None
    """The object's uid once answered (``None`` when it does not exist then)."""
    resource_version: str | None
    lease: LeaseHolding | None
    """The Lease ``actor`` held when the request arrived, if any."""

    @property
    def ok(self) -> bool:
        """Whether the server accepted it (2xx)."""
        return 200 <= self.served.status < 300

    @property
    def write(self) -> bool:
        return self.served.verb in WRITE_VERBS

    def body(self) -> Any:
        """The request body as JSON, or ``None`` when it is empty or not JSON."""
        return _json(self.served.body)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError:
        return None


@attrs.define(eq=False)
class RequestLog:
    """Records answered requests; call it as a request observer. Never raises, never checkpoints."""

    store: ObjectStorage
    reads: bool = False
    """Whether reads (``get``, ``list``, ``watch``) are recorded too."""
    records: list[RequestRecord] = attrs.field(factory=list)
    restores: list[float] = attrs.field(factory=list)
    """trio times at which the server's storage was restored (see :meth:`mark_restore`)."""
    restored_after: list[int] = attrs.field(factory=list)
    """For each restore: how many records came before it (records answered in the same
    instant may fall on either side, which its time alone cannot tell)."""
    _holdings: dict[str, LeaseHolding] = attrs.field(factory=dict)

    def __call__(self, served: ServedRequest) -> None:
        write = served.verb in WRITE_VERBS
        if not write and not self.reads:
            return
        now = trio.current_time()
        actor = served.user_agent.split("/", 1)[0] or "?"
        holding = self.holding(actor, served.received_at)
        name = served.name
        if name is None and served.verb == "create":
            body = _json(served.body)
            meta = body.get("metadata") if isinstance(body, Mapping) else None
            name = meta.get("name") if isinstance(meta, Mapping) and isinstance(meta.get("name"), str) else None
        obj = self.stored(served.kind, served.group, served.namespace, name)
        meta = obj.get("metadata") or {} if obj is not None else {}
        self.records.append(RequestRecord(
            served, actor, name, served.received_at, now, meta.get("uid"), meta.get("resourceVersion"), holding,
        ))
        if write and served.kind == "Lease" and 200 <= served.status < 300 and obj is not None:
            self._lease_written(actor, served.namespace or "", name or "", obj, now)

    def stored(self, kind: str, group: str, namespace: str | None, name: str | None) -> dict[str, Any] | None:
        """The object as stored now, or ``None``. Read it, do not modify it."""
        if name is None:
            return None
        for rt in self.store.types():
            if rt.kind == kind and rt.group == group:
                return self.store.lookup(rt, namespace if rt.namespaced else None, name)
        return None

    def _lease_written(self, actor: str, ns: str, name: str, lease: Mapping[str, Any], now: float) -> None:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        for who, held in list(self._holdings.items()):
            if (held.namespace, held.name) == (ns, name) and who != holder:
                self._holdings[who] = attrs.evolve(held, until=min(held.until, now))
        if holder == actor:
            previous = self._holdings.get(actor)
            since = previous.since if previous is not None and previous.until >= now else now
            duration = float(spec.get("leaseDurationSeconds") or 0)
            self._holdings[actor] = LeaseHolding(ns, name, since, now + duration)

    def holding(self, actor: str, at: float | None = None) -> LeaseHolding | None:
        """The Lease ``actor`` held at trio time ``at`` (default now), by its last recorded
        holding, or ``None``."""
        held = self._holdings.get(actor)
        when = trio.current_time() if at is None else at
        if held is None or not held.since <= when <= held.until:
            return None
        return held

    def since_last_restore(self) -> list[RequestRecord]:
        """The records answered after the last restore (all of them without one)."""
        return self.records[self.restored_after[-1]:] if self.restored_after else list(self.records)

    def mark_restore(self) -> None:
        """Note that the server's storage was restored now: Leases are as they were, so every
        holding recorded so far ends."""
        now = trio.current_time()
        self.restores.append(now)
        self.restored_after.append(len(self.records))
        self._holdings = {who: attrs.evolve(h, until=min(h.until, now)) for who, h in self._holdings.items()}

    def writes(self, *, actor: str | None = None, kind: str | None = None, since: float = -1.0) -> Iterator[RequestRecord]:
        """The recorded writes, in the order answered, optionally of one actor or kind,
        answered at or after ``since``."""
        for record in self.records:
            if record.write and record.answered_at >= since and (actor is None or record.actor == actor) \
                    and (kind is None or record.served.kind == kind):
                yield record

    def matches_watch(self, watch: ServedRequest, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` falls in what the list or watch ``watch`` asked for: its namespace,
        label selector and field selector."""
        meta = obj.get("metadata") or {}
        if watch.namespace is not None and meta.get("namespace") != watch.namespace:
            return False
        labels, fields = watch.selectors
        if labels and not parse_label_selector(labels).matches(meta.get("labels") or {}):
            return False
        return not fields or parse_field_selector(fields).matches(obj)
