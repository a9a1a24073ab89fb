"""Watched changes owed a trigger: from the server's change feed and what each replica lists and watches, which of its controllers must hear of which change, and by when."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio

from engine import ObjectRef
from engine._keyspace import fnv1a64
from engine.kube.lowlevel import resource_version_number, resource_version_of

from ...apiserver import Change, ObjectStorage, RequestLog, ServedRequest
from ._replica import REPLICA, Replica, Roster
from ._verdict import Verdict

__all__ = ["Notifications", "stored_objects", "WATCH_BOUND"]

WATCH_BOUND = 60.0
"""Seconds within which a watched change that passes a controller's predicates must lead to a
trigger of its key on each live replica that watches it."""

_State = tuple[Any, Any]
"""What a controller's predicates look at: (generation, deletionTimestamp)."""


def _state(obj: Mapping[str, Any]) -> _State:
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), meta.get("deletionTimestamp"))


@attrs.define(eq=False)
class _Owed:
    """A watched change that a replica's controller must hear of from its own watch handler."""

    at: float
    """When the change was committed (or the history rewind that made it)."""
    since: float
    """When the bound started: ``at``, or when the replica had listed again after it."""
    change: str
    base: _State | None
    """The object's state before the change, as the handler last heard of it."""
    rv: int = 0
    """The resourceVersion of the change (a history rewind: of the object as restored, or of
    the storage); a handler that saw an object at least this recent heard of it."""
    key: int | None = None
    """The object's key-space position (scale-out mode: a replica owes only while its ring
    has an interest in it; its sharded informers hold nothing else)."""


def stored_objects(store: ObjectStorage) -> dict[tuple[str, str], dict[Any, Any]]:
    return {key: dict(store.objects_of(key)) for key in store.storage_keys()}


@attrs.define(eq=False)
class Notifications:
    """The watched changes each leading replica's controllers must hear of from their own
    watch handlers (a store listener: :meth:`on_change`), and the check that they do."""

    verdict: Verdict
    roster: Roster
    log: RequestLog = attrs.field(init=False)
    """The embedded server's request log: the outside view the checks read."""
    uids: dict[tuple[str, str, str | None, str], str] = attrs.field(factory=dict)
    """The last uid the store had for each object, deleted ones too."""
    watched: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """``(replica identity, path, label selector, field selector)`` of every collection a
    replica has watched."""
    listed: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """The same of every collection a replica has listed (its informers' lists among others)."""
    resyncing: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """After a history rewind: the watched collections not listed again yet."""
    unsynced: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """The watched collections a replica did not list again in time after a history rewind:
    its cache may hold what the rewind undid, so what its handlers hear of is not what the
    server's changes say until it lists them again; they owe nothing until then."""
    direct: dict[str, set[tuple[str, str, str]]] = attrs.field(factory=dict)
    """Controller -> the watches (path, label selector, field selector) its direct handler may
    be on: those that held every object it was seen triggered for by a watch of its own kind."""
    obligations: dict[tuple[str, str, ObjectRef], _Owed] = attrs.field(factory=dict)
    """``(replica, controller, key)`` -> a watched change that must lead to a trigger of the
    key from the controller's own watch handler."""

    def on_read(self, actor: str, served: ServedRequest) -> None:
        """A request ``served`` to ``actor`` answered: what a list or watch of it tells of what the
        replica can hear."""
        if served.verb == "watch" and served.status == 200 and actor.startswith(REPLICA):
            self.watched.add((actor, served.path, *served.selectors))
            watcher = next((r for r in self.roster.replicas if r.identity == actor), None)
            if watcher is not None:
                watcher.watches[(served.path, *served.selectors)] = served
        if served.reads_state and served.status < 300:
            if actor.startswith(REPLICA):
                self.listed.add((actor, served.path, *served.selectors))
            self.resyncing.discard((actor, served.path, *served.selectors))
            self.unsynced.discard((actor, served.path, *served.selectors))
        if served.verb in ("list", "watch") and served.status >= 300 and self.obligations:
            self._cannot_read(actor, served)

    def learn_direct(self, rep: Replica, controller: str, ref: ObjectRef) -> None:
        obj = self.log.stored(ref.kind, ref.group, ref.namespace, ref.name)
        if obj is None:
            return
        holding = {key for key, w in rep.watches.items()
                   if w.kind == ref.kind and w.group == ref.group and self.log.matches_watch(w, obj)}
        if not holding:
            return  # listed before its watch started (a replica starting): nothing to learn
        known = self.direct.get(controller)
        self.direct[controller] = holding if known is None else known & holding

    def discharge(self, identity: str, controller: str, ref: ObjectRef, change: str, revision: str | None) -> None:
        """A trigger of ``ref`` from ``controller``'s own watch handler (``change`` is the
        informer's ``added``, ``modified`` or ``deleted``; ``revision`` the resourceVersion of
        the object it saw) pays what it owes for ``ref`` once the handler caught up with it
        (``revision`` at least the owed change's; an older event, delivered late, pays
        nothing; a deletion found by a relist carries the cached object's older revision). But
        ``added`` of a revision past a deletion that is still owed means the informer dropped
        the object without a word (a modification would be the two seen together)."""
        key = (identity, controller, ref)
        owed = self.obligations.get(key)
        if owed is None:
            return
        try:
            seen = int(revision) if revision is not None else None
        except ValueError:
            seen = None
        deletion = owed.change.startswith("deletion")
        if change == "added" and owed.change.partition(" (")[0] == "deletion" and (seen is None or seen > owed.rv):
            del self.obligations[key]
            self.verdict.fail(f"{identity} {controller}: {ref} was added again, but the {owed.change} of it at "
                              f"{owed.at - self.verdict.trace.origin:.3f}s never reached its watch handler (a lost notification)")
        elif seen is None or seen >= owed.rv or (change == "deleted" and deletion):
            del self.obligations[key]

    def _cannot_read(self, identity: str, served: ServedRequest) -> None:
        """``identity`` was refused a list or watch of a kind: what it owes for that kind
        starts its bound again (a replica the server does not answer cannot hear of changes)."""
        now = trio.current_time()
        for (who, _, ref), owed in self.obligations.items():
            if who == identity and ref.kind == served.kind and ref.group == served.group:
                owed.since = now

    def forget_obligations(self, identity: str) -> None:
        """``identity`` stopped leading, or did not list again after a history rewind: what its
        informers owe is void."""
        for key in [k for k in self.obligations if k[0] == identity]:
            del self.obligations[key]

    def check_notifications(self) -> None:
        """Every watched change owed a trigger got it within :data:`WATCH_BOUND`, on each
        replica that is still alive."""
        now = trio.current_time()
        leading = {r.identity for r in self.roster.current.values() if r.alive and r.leads()}
        listing = {w[0] for w in self.resyncing}
        interest = {r.identity: r.ring.interest for r in self.roster.current.values() if r.ring is not None}
        for key, owed in list(self.obligations.items()):
            identity, controller, ref = key
            if identity not in leading or (identity in interest and owed.key not in interest[identity]):
                del self.obligations[key]
            elif identity in listing:
                owed.since = now
            elif now - owed.since > WATCH_BOUND:
                self.verdict.fail(f"{identity} {controller}: {owed.change} of {ref} at {owed.at - self.verdict.trace.origin:.3f}s "
                                  f"passed the predicates of its watch handler but led to no trigger of {ref} from that "
                                  f"handler within {WATCH_BOUND:g}s (a lost notification)")

    def on_change(self, change: Change) -> None:
        """A store listener: a committed change of an object that a leading replica watches,
        and that every predicate passes (created, deleted, a new generation or deletion
        timestamp), is owed a trigger of its key by each controller whose own handler watches
        it (see :meth:`check_notifications`)."""
        obj = change.obj
        meta = obj.get("metadata") or {}
        if meta.get("uid") and isinstance(obj.get("kind"), str) and isinstance(meta.get("name"), str):
            self.uids[(obj["kind"], change.key[0], meta.get("namespace") or None, meta["name"])] = meta["uid"]
        before = _state(change.old) if change.old is not None else None
        after = None if change.type == "DELETED" else _state(obj)
        self._owe(change.key[0], obj, [o for o in (change.old, obj) if o is not None], before, after, "", change.rv)

    def on_restore(self, store: ObjectStorage, before: Mapping[tuple[str, str], Mapping[Any, Any]]) -> None:
        """After a history rewind: each object the rewind made vanish, brought back or gave
        another generation or deletion timestamp is owed a trigger as a change (the replicas
        list again and must tell their handlers), counted from when they listed again; ``before``
        is what ``store`` held before (:func:`stored_objects`)."""
        after = stored_objects(store)
        for owed in self.obligations.values():
            owed.rv = 0  # resourceVersions went back: what the relist shows pays it
        for storage_key in sorted(set(before) | set(after)):
            old_objects, new_objects = before.get(storage_key, {}), after.get(storage_key, {})
            for key in sorted(set(old_objects) | set(new_objects)):
                old, new = old_objects.get(key), new_objects.get(key)
                if old is new:
                    continue
                sample = new if new is not None else old
                assert sample is not None
                rv = (resource_version_number(resource_version_of(new)) or 0) if new is not None else store.resource_version
                self._owe(storage_key[0], sample, [o for o in (old, new) if o is not None],
                          _state(old) if old is not None else None, _state(new) if new is not None else None,
                          " (history rewind)", rv)

    def _owe(self, group: str, obj: Mapping[str, Any], shapes: list[Mapping[str, Any]],
             before: _State | None, after: _State | None, note: str, rv: int) -> None:
        if before == after:
            return
        meta = obj.get("metadata") or {}
        kind, name = obj.get("kind"), meta.get("name")
        if not isinstance(kind, str) or not isinstance(name, str):
            return
        ref = ObjectRef(kind, name, meta.get("namespace") or None, group)
        uid = meta.get("uid")
        position = fnv1a64(uid) if isinstance(uid, str) and uid else None
        owing = [k for k in self.obligations if k[2] == ref]
        for key in owing:
            if self.obligations[key].base == after:
                del self.obligations[key]  # back as the handler last heard it: nothing to tell
        if before is None:
            change = "creation"
        elif after is None:
            change = "deletion"
        elif before[1] != after[1]:
            change = "deletion request"
        else:
            change = f"generation {after[0]}"
        now = trio.current_time()
        for rep in self.roster.current.values():
            if rep.harness is None or not rep.alive or not rep.leads():
                continue
            if rep.ring is not None and position not in rep.ring.interest:
                continue
            holding = {key for key, w in rep.watches.items() if w.kind == kind and w.group == group
                       and (rep.identity, *key) not in self.unsynced
                       and any(self.log.matches_watch(w, shape) for shape in shapes)}
            for controller in sorted(c for c, watches in self.direct.items() if watches & holding):
                key = (rep.identity, controller, ref)
                if key not in owing:  # else it still owes an earlier change, from an earlier state
                    self.obligations[key] = _Owed(now, now, change + note, before, rv, position)

