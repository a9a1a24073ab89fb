"""Watches for controllers: informers shared by controllers, feeding ``Controller.trigger``.

Every trigger raised here comes from an informer handler, which runs only after the informer's
store holds the triggering object (read-your-trigger), and goes through ``Controller.trigger``,
so a supersede is always paired with its enqueue. Predicates, mappers and key functions run
inside those handlers: one that raises for an object skips that object for that watch only,
and is logged once per object and ``resourceVersion`` and counted by the informer (see
:mod:`engine.kube._runtime._informer`); every other object and watch goes on.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from ..._controller import Controller
from ..._keyspace import KeyRanges, fnv1a64
from ..._manager import Manager
from ..._refs import ObjectRef, Priority
from ..._sources import MappedSource
from .._access._rbac import PolicyRule, rules_for
from .._client._client import Client, Selector, WatchEventType, join_selectors
from .._client._resource import Resource, split_api_version
from .._client._wire import resource_version_number, resource_version_of
from ._informer import Informer, InformerEvent, Transform, strip_managed_fields
from ._status import is_ready
from ._watcher import WatchOptions

__all__ = [
    "Cluster",
    "Predicate",
    "REQUESTED_AT_ANNOTATION",
    "SHARD_LABEL",
    "generation_changed",
    "annotation_changed",
    "requested_at_changed",
    "labels_match",
    "any_of",
    "ref_for",
]

logger = logging.getLogger("engine.kube.watches")

REQUESTED_AT_ANNOTATION = "reconcile.engine.dev/requestedAt"
"""Set this annotation to any new value to request a reconcile (like Flux's ``requestedAt``)."""
SHARD_LABEL = "sharding.engine.dev/key"
"""A replica started with ``--shard NAME`` watches only objects with this label set to NAME."""

Predicate = Callable[[InformerEvent], bool]


class _Unset(enum.Enum):
    UNSET = "unset"


_UNSET = _Unset.UNSET


def generation_changed(event: InformerEvent) -> bool:
    """Adds, deletes, spec changes (``metadata.generation``), the start of a deletion, and an
    object older than the one cached (the server's history went back, as after an etcd
    restore: whatever was written since, status included, is undone)."""
    if event.type is not WatchEventType.MODIFIED or event.old is None:
        return True
    old, new = event.old.get("metadata", {}), event.obj.get("metadata", {})
    return bool(
        old.get("generation") != new.get("generation")
        or old.get("deletionTimestamp") != new.get("deletionTimestamp")
        or _went_back(event.old, event.obj)
    )


def _went_back(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    before, after = resource_version_number(resource_version_of(old)), resource_version_number(resource_version_of(new))
    return before is not None and after is not None and after < before


def annotation_changed(key: str) -> Predicate:
    """Events whose annotation ``key`` changed (or that are not updates)."""

    def predicate(event: InformerEvent) -> bool:
        if event.type is not WatchEventType.MODIFIED or event.old is None:
            return True
        old = (event.old.get("metadata", {}).get("annotations") or {}).get(key)
        new = (event.obj.get("metadata", {}).get("annotations") or {}).get(key)
        return old != new

    return predicate


requested_at_changed = annotation_changed(REQUESTED_AT_ANNOTATION)
"""A manual reconcile request through :data:`REQUESTED_AT_ANNOTATION`."""


def labels_match(selector: Mapping[str, str]) -> Predicate:
    """Events on objects carrying every label of ``selector``."""

    def predicate(event: InformerEvent) -> bool:
        labels = event.obj.get("metadata", {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in selector.items())

    return predicate


def any_of(*predicates: Predicate) -> Predicate:
    """Events any of ``predicates`` accepts."""

    def predicate(event: InformerEvent) -> bool:
        return any(p(event) for p in predicates)

    return predicate


def ref_for(resource: Resource, obj: Mapping[str, Any]) -> ObjectRef:
    """The queue key of ``obj``, an object of ``resource`` (:meth:`ObjectRef.from_object` with the
    resource's kind and group, since cached objects need not carry their type)."""
    return ObjectRef.from_object(obj, kind=resource.kind, group=resource.group)


@runtime_checkable
class _RefreshesCaches(Protocol):
    """A leader election that asks for fresh caches when it leads after it could not reach the
    server (``engine.kube.LeaderElector``)."""

    cache_refresh: list[Callable[[], None]]


class Cluster:
    """Informers on one cluster, shared by a manager's controllers.

    :meth:`informer` creates (once per resource, namespace and selector) an informer that runs
    as a source of ``manager``; the manager starts controllers only after every informer
    synced, and with a :class:`LeaderElector` whose attempts to reach the server failed while
    it stood by, only after every informer listed again once it leads (a warm standby cut off
    from the server may hold what its stalled watches left behind). ``label_selector`` (a
    shard) applies to the informers of primary objects.
    ``options`` (:class:`WatchOptions`) are handed to every :class:`Informer`; ``transform``
    is the default transform of :meth:`informer` (:func:`strip_managed_fields` unless given).

    The cluster records the RBAC rules of what is set up on it (:attr:`rules`): each call of
    :meth:`informer` adds ``get, list, watch`` on its type where it watches, and
    :meth:`require` adds others. Nothing needs the cluster to run for that: setting plugins up
    on a cluster whose manager never runs tells what they need.
    """

    def __init__(
        self,
        client: Client,
        manager: Manager,
        *,
        namespace: str | None = None,
        label_selector: Selector | None = None,
        options: WatchOptions = WatchOptions(),
        transform: Transform | None = strip_managed_fields,
    ) -> None:
        self.client = client
        self.manager = manager
        self.namespace = namespace
        self.label_selector = label_selector
        self.options = options
        """How every informer of the cluster lists and watches."""
        self._transform = transform
        self._informers: dict[tuple[Resource, str | None, str, Transform | None, bool], Informer] = {}
        self._sharded: list[Informer] = []
        self._key_ranges: KeyRanges | None = None
        self._rules: list[PolicyRule] = []
        self._keys: dict[ObjectRef, tuple[str, int]] = {}
        self._refreshing: dict[Informer, int] = {}
        manager.add_start_gate(self._wait_startable)
        leader = manager.leader_election
        if isinstance(leader, _RefreshesCaches):
            leader.cache_refresh.append(self.refresh)

    @property
    def rules(self) -> list[PolicyRule]:
        """The rules recorded so far, in the order they were (a copy; see
        :func:`merge_rules`). A rule without a namespace is for this cluster's
        :attr:`namespace`."""
        return list(self._rules)

    def require(self, *rules: PolicyRule) -> None:
        """Record that what runs on this cluster needs ``rules``."""
        self._rules.extend(rules)

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Resolve a type through discovery (cached by the client).

        Cancellation: if cancelled, nothing is cached and nothing changes.
        """
        return await self.client.resource(api_version, kind)

    async def informer(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None | _Unset = _UNSET,
        label_selector: Selector | None = None,
        transform: Transform | None | _Unset = _UNSET,
        sharded: bool = False,
    ) -> Informer:
        """The informer for a type (created and added to the manager on first use).

        ``sharded`` makes it an informer of the cluster's key ranges (:meth:`set_key_ranges`:
        it holds only the objects whose uid hashes into them); one sharded and one whole
        informer are kept per resource, namespace, selector and transform.

        ``namespace`` defaults to the cluster's; ``None`` means all namespaces.
        ``label_selector`` is added to the label selector of the cluster's :attr:`options`.

        ``transform`` is applied to each object before it is cached (see :class:`Informer`).
        By default it is :func:`strip_managed_fields`: cached objects have no
        ``metadata.managedFields``, often half their size (objects read from the API, and
        objects written, are untouched). Pass ``transform=None`` to cache objects whole, or
        your own :data:`~engine.kube.Transform`; one informer is shared per resource,
        namespace, selector and transform.

        Each call records ``get, list, watch`` on the type (:attr:`rules`): in the cluster's
        namespace, in ``namespace``, or cluster-wide for all namespaces of a cluster that has a
        namespace and for a cluster-scoped type.

        Cancellation: the only checkpoint is discovery; if cancelled, no informer is created
        and nothing is recorded.
        """
        resource = await self.resource(api_version, kind)
        ns = self.namespace if isinstance(namespace, _Unset) else namespace
        if not resource.namespaced:
            ns = None
        self._rules.extend(rules_for(
            resource, "informer", namespace=None if ns == self.namespace else ns,
            cluster_wide=ns is None and self.namespace is not None,
        ))
        chosen = self._transform if isinstance(transform, _Unset) else transform
        key = (resource, ns, str(label_selector), chosen, sharded)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client,
                resource,
                namespace=ns,
                options=attrs.evolve(self.options, label_selector=join_selectors(self.options.label_selector, label_selector)),
                transform=chosen,
                key_ranges=self._key_ranges if sharded else None,
            )
            if sharded:
                self._sharded.append(informer)
            self._informers[key] = informer
            self.manager.add_source(informer)
        return informer

    def key_of(self, ref: ObjectRef) -> int | None:
        """The key-space position of ``ref`` (FNV-1a 64 of its ``metadata.uid``, as KEP-5866
        hashes it), from the informers of its type; ``None`` while no informer has seen it.

        The uid is remembered, so a deleted object keeps its key for the run that cleans up
        after it (an object re-created under the same name gets the new uid's key).
        The ownership gate of a scale-out replica calls it. Synchronous.
        """
        for (resource, _, _, _, _), informer in self._informers.items():
            if resource.kind != ref.kind or resource.group != ref.group:
                continue
            obj = informer.store.get(ref.namespace, ref.name)
            uid = obj.get("metadata", {}).get("uid") if obj is not None else None
            if uid:
                known = self._keys.get(ref)
                if known is None or known[0] != uid:
                    known = self._keys[ref] = (uid, fnv1a64(uid))
                return known[1]
        remembered = self._keys.get(ref)
        return remembered[1] if remembered is not None else None

    @property
    def key_ranges(self) -> KeyRanges | None:
        """The key ranges of the sharded informers (``None``: every object)."""
        return self._key_ranges

    def set_key_ranges(self, ranges: KeyRanges | None) -> None:
        """Restrict every sharded informer (``informer(..., sharded=True)``, also those made
        later) to ``ranges``; see :meth:`Informer.set_key_ranges`. Synchronous, not a
        checkpoint."""
        self._key_ranges = ranges
        for informer in self._sharded:
            informer.set_key_ranges(ranges)

    async def wait_key_ranges_synced(self) -> None:
        """Wait until every sharded informer holds a complete list of its key ranges (see
        :meth:`Informer.wait_key_ranges_synced`).

        Cancellation: a checkpoint; nothing to undo.
        """
        for informer in list(self._sharded):
            await informer.wait_key_ranges_synced()
        await trio.lowlevel.checkpoint()

    def refresh(self) -> None:
        """Make every informer list again from now on (:meth:`Informer.relist`): their watches
        may have fallen behind, or stalled on connections that could still deliver old events
        (a replica cut off from the server); :meth:`wait_refreshed` waits for the lists.
        Synchronous, not a checkpoint."""
        for informer in self._informers.values():
            self._refreshing[informer] = informer.relist()

    @property
    def refreshing(self) -> bool:
        """Whether the lists asked for by :meth:`refresh` may not all be done yet (until
        :meth:`wait_refreshed` saw them done)."""
        return bool(self._refreshing)

    async def wait_refreshed(self) -> None:
        """Wait until every informer holds a list begun after the last :meth:`refresh`
        (returns at once, after a checkpoint, if none was asked for).

        Cancellation: a checkpoint; the lists go on.
        """
        for informer, ticket in list(self._refreshing.items()):
            await informer.wait_relisted(ticket)
            if self._refreshing.get(informer) == ticket:
                del self._refreshing[informer]
        await trio.lowlevel.checkpoint()

    async def _wait_startable(self) -> None:
        await self.wait_synced()
        if self.refreshing:
            await self.wait_refreshed()

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    @property
    def synced(self) -> bool:
        """Whether every informer holds a complete list (for ``/readyz``)."""
        return all(i.synced for i in self._informers.values())

    async def wait_synced(self) -> None:
        """Wait until every informer synced.

        Cancellation: if cancelled, nothing changes.
        """
        for informer in list(self._informers.values()):
            await informer.wait_synced()

    def watches(
        self,
        controller: Controller,
        informer: Informer,
        *,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        """Trigger ``controller`` for each event on its primary objects that passes every
        predicate: at ``Priority.LOW`` for what a list reported, else at ``NORMAL``.

        Only a change of ``status`` alone can be the watch echo of a run's own (status) write
        and be dropped as one (:meth:`Controller.trigger <engine.Controller.trigger>`): any
        other change of a primary object is news, even when a run's write answered its
        ``resourceVersion`` (a write that changed nothing answers the object as someone else
        left it; a relist may show someone else's change and the run's write as one).
        """
        resource = informer.resource
        kind, group = resource.kind, resource.group
        reasons = {change: f"{kind} {change.value.lower()}" for change in WatchEventType}

        def handle(event: InformerEvent) -> None:
            for check in predicates:
                if not check(event):
                    return
            meta = event.obj.get("metadata") or {}
            # ref_for(resource, event.obj), inlined: the same fields, one metadata lookup.
            ref = _new_tuple(ObjectRef, (kind, str(meta.get("name", "")), meta.get("namespace") or None, group))
            controller.trigger(
                ref,
                reason=reasons[event.type],
                revision=meta.get("resourceVersion"),
                news=not _status_only(event),
                priority=Priority.LOW if event.listed else Priority.NORMAL,
            )

        informer.add_handler(handle)

    def owns(
        self,
        controller: Controller,
        informer: Informer,
        *,
        owner_kind: str,
        owner_api_version: str,
        owner_namespaced: bool = True,
    ) -> None:
        """Trigger the owner (through ``ownerReferences``) of each changed child object (at
        ``Priority.LOW`` for what a list reported), with the child's ``resourceVersion`` as the
        trigger's revision (so the echo of the owner's own write of the child is not news).

        A namespaced owner is in its child's namespace; pass ``owner_namespaced=False`` for a
        cluster-scoped owner type.
        """
        owner_group, _ = split_api_version(owner_api_version)
        mapped: MappedSource[dict[str, Any]] = MappedSource(
            controller,
            lambda obj: _owners(obj, owner_kind, owner_group, owner_namespaced),
            reason=f"owned {informer.resource.kind} changed",
        )
        informer.add_handler(lambda event: mapped.handle_many(
            _views(event), revision=event.obj.get("metadata", {}).get("resourceVersion"), priority=_priority(event),
        ))

    def watches_mapped(
        self,
        controller: Controller,
        informer: Informer,
        mapper: Callable[[Mapping[str, Any]], Iterable[ObjectRef]],
        *,
        predicates: Sequence[Predicate] = (),
        reason: str | None = None,
    ) -> None:
        """Map each event on another type to keys of ``controller`` (through an index lookup in
        ``mapper``, never a list call). An update maps both the old and the new object as one
        observation, so it supersedes a run at most once. What a list reported triggers at
        ``Priority.LOW``."""
        mapped: MappedSource[Mapping[str, Any]] = MappedSource(
            controller, mapper, reason=reason or f"{informer.resource.kind} changed"
        )

        def handle(event: InformerEvent) -> None:
            if all(p(event) for p in predicates):
                mapped.handle_many(
                    _views(event), revision=event.obj.get("metadata", {}).get("resourceVersion"),
                    priority=_priority(event),
                )

        informer.add_handler(handle)

    def reports_readiness(self, informer: Informer) -> None:
        """Feed the manager's dependency index: when an object becomes ``Ready`` for its
        current generation, its dependents are triggered at once (from the watch path)."""
        resource = informer.resource

        def handle(event: InformerEvent) -> None:
            if event.type is WatchEventType.DELETED or not is_ready(event.obj):
                return
            if event.old is not None and is_ready(event.old):
                return
            self.manager.mark_ready(
                ref_for(resource, event.obj), revision=event.obj.get("metadata", {}).get("resourceVersion")
            )

        informer.add_handler(handle)


_new_tuple = tuple.__new__

_NOT_CHANGES = frozenset({"resourceVersion", "managedFields"})


def _status_only(event: InformerEvent) -> bool:
    """Whether ``event`` modified nothing but the object's ``status`` (what the echo of a status
    write is), its ``resourceVersion`` going forward."""
    old, new = event.old, event.obj
    if event.type is not WatchEventType.MODIFIED or old is None:
        return False
    # The comparisons first: a change of anything else (a spec change) ends it before the
    # resourceVersions are read as numbers.
    for key in old.keys() | new.keys():
        if key != "status" and key != "metadata" and old.get(key) != new.get(key):
            return False
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    if not all(before.get(key) == after.get(key) for key in (before.keys() | after.keys()) - _NOT_CHANGES):
        return False
    return not _went_back(old, new)


def _priority(event: InformerEvent) -> Priority:
    return Priority.LOW if event.listed else Priority.NORMAL


def _views(event: InformerEvent) -> list[dict[str, Any]]:
    return [event.obj] if event.old is None else [event.old, event.obj]


def _owners(obj: Mapping[str, Any], kind: str, group: str, namespaced: bool) -> list[ObjectRef]:
    meta = obj.get("metadata") or {}
    namespace = (meta.get("namespace") or None) if namespaced else None
    out = []
    for owner in meta.get("ownerReferences") or ():
        if owner.get("kind") != kind:
            continue
        owner_group, _ = split_api_version(str(owner.get("apiVersion", "")))
        if owner_group == group and owner.get("name"):
            out.append(ObjectRef(kind=kind, name=owner["name"], namespace=namespace, group=group))
    return out
