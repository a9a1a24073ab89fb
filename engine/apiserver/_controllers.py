"""The controllers a cluster runs beside its API server, working outside the request path.

The API server only records intentions: a deleted owner's dependents, a terminating namespace's
contents and a deleted CustomResourceDefinition's objects are left to controllers, which act
afterwards, so clients see the same intermediate states as on a cluster (``Terminating``, the
``foregroundDeletion`` and ``orphan`` finalizers, objects going away one by one):

- the garbage collector (kube-controller-manager): deletes objects whose owners are all gone
  (or all being deleted in the foreground), drops references to missing owners when another
  owner remains, removes ``orphan`` (after dropping the dependents' references to the owner)
  and ``foregroundDeletion`` (once no dependent with ``blockOwnerDeletion`` remains);
- the namespace controller (kube-controller-manager): deletes everything in a terminating
  namespace, then removes the ``kubernetes`` finalizer, which removes the namespace;
- the CustomResourceDefinition cleanup (part of the API server, so it always runs): deletes the
  definition's objects, then removes ``customresourcecleanup.apiextensions.k8s.io``.

Objects' own finalizers are respected throughout: what they hold stays until released.
Simplified: no retries with backoff (work is redone when a related object changes), no
namespace status conditions, dependents of a foreground deletion are deleted in the background
unless they have dependents themselves.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator

import attrs
import trio

from ._deletion import CRD_CLEANUP, FOREGROUND, NAMESPACE_FINALIZER, ORPHAN
from ._errors import ApiServerError
from ._objects import Key, Obj, meta
from ._resources import REVIEW_TYPES, ResourceType
from ._storage import Change, ObjectStorage

__all__ = ["Controllers"]

logger = logging.getLogger("engine.apiserver.controllers")

_NAMESPACES = ("", "namespaces")
_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")

StorageKey = tuple[str, str]
Ref = tuple[StorageKey, Key]
Work = tuple[str, ...]


def _refs(obj: Obj | None) -> list[dict[str, object]]:
    if obj is None:
        return []
    refs = meta(obj).get("ownerReferences") or []
    return [r for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)]


def _key(obj: Obj) -> Key:
    metadata = meta(obj)
    return (metadata.get("namespace", "") or "", metadata["name"])


@attrs.define(eq=False)
class Controllers:
    """The cluster's controllers over one :class:`ObjectStorage` (see the module docstring).

    ``kube_controller_manager=False`` leaves out the garbage collector and the namespace
    controller, as an API server without a controller manager (envtest) has none: deleted
    namespaces then stay ``Terminating`` until finalized. Work is queued as changes are
    committed and done by :meth:`run` (or :meth:`run_pending`), never inside a request.
    """

    storage: ObjectStorage
    kube_controller_manager: bool = True
    _queue: collections.deque[Work] = attrs.field(factory=collections.deque, init=False, repr=False)
    _queued: set[Work] = attrs.field(factory=set, init=False, repr=False)
    _uids: dict[str, Ref] = attrs.field(factory=dict, init=False, repr=False)
    _dependents: dict[str, set[Ref]] = attrs.field(factory=dict, init=False, repr=False)
    _cleaning: dict[StorageKey, str] = attrs.field(factory=dict, init=False, repr=False)
    _wake: trio.Event | None = attrs.field(default=None, init=False, repr=False)
    _idle: trio.Event | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for storage_key in self.storage.storage_keys():
            for key, obj in self.storage.objects_of(storage_key):
                self._index(storage_key, key, obj, None)
        self.storage.add_listener(self._observe)
        self.storage.add_restore_listener(self._restored)

    # ----- watching the storage -----

    def _index(self, storage_key: StorageKey, key: Key, obj: Obj, old: Obj | None) -> None:
        ref = (storage_key, key)
        uid = meta(obj).get("uid")
        if isinstance(uid, str):
            self._uids[uid] = ref
        for r in _refs(old):
            self._dependents.get(str(r["uid"]), set()).discard(ref)
        for r in _refs(obj):
            self._dependents.setdefault(str(r["uid"]), set()).add(ref)

    def _enqueue(self, *work: str) -> None:
        if work in self._queued:
            return
        self._queued.add(work)
        self._queue.append(work)
        if self._wake is not None:
            self._wake.set()

    def _observe(self, change: Change) -> None:
        obj, storage_key = change.obj, change.key
        metadata = meta(obj)
        uid = str(metadata.get("uid", ""))
        gc = self.kube_controller_manager
        if change.type == "DELETED":
            if self._uids.get(uid) == (storage_key, _key(obj)):
                del self._uids[uid]
            for r in _refs(obj):
                owner = str(r["uid"])
                self._dependents.get(owner, set()).discard((storage_key, _key(obj)))
                if gc:
                    self._enqueue("owner", owner)
            if gc and self._dependents.get(uid):
                self._enqueue("dependents", uid)
            namespace = metadata.get("namespace")
            if gc and namespace:
                ns_obj = self.storage.stored(_NAMESPACES, ("", namespace))
                if ns_obj is not None and meta(ns_obj).get("deletionTimestamp"):
                    self._enqueue("namespace", namespace)
            if storage_key in self._cleaning:
                self._enqueue("crd", self._cleaning[storage_key])
            return
        self._index(storage_key, _key(obj), obj, change.old)
        deleting = bool(metadata.get("deletionTimestamp"))
        if gc and _refs(obj) and (change.old is None or _refs(obj) != _refs(change.old)):
            self._enqueue("object", *storage_key, *_key(obj))
        if gc and deleting and {ORPHAN, FOREGROUND} & set(metadata.get("finalizers") or []):
            self._enqueue("owner", uid)
        if gc and deleting and storage_key == _NAMESPACES:
            self._enqueue("namespace", metadata["name"])
        if deleting and storage_key == _CRDS and CRD_CLEANUP in (metadata.get("finalizers") or []):
            self._enqueue("crd", metadata["name"])

    def _restored(self) -> None:
        """The storage went back to a snapshot: forget everything and look at every object
        again, as controllers starting on a restored cluster do."""
        self._queue.clear()
        self._queued.clear()
        self._uids.clear()
        self._dependents.clear()
        self._cleaning.clear()
        rv = self.storage.resource_version
        for storage_key in self.storage.storage_keys():
            for _, obj in self.storage.objects_of(storage_key):
                self._observe(Change(rv, storage_key, "ADDED", obj, None, 0.0))

    # ----- running -----

    @property
    def pending(self) -> int:
        """How many work items are queued."""
        return len(self._queue)

    def run_pending(self) -> None:
        """Do every queued work item, and the work they cause, until none is left. Not a
        checkpoint."""
        while self._queue:
            self._step()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Do queued work as it arrives, one item per checkpoint, until cancelled.

        Cancellation: stops between two work items (each item is done atomically).
        """
        task_status.started()
        while True:
            if not self._queue:
                if self._idle is not None:
                    self._idle.set()
                    self._idle = None
                self._wake = trio.Event()
                await self._wake.wait()
                self._wake = None
            await trio.lowlevel.checkpoint()
            if self._queue:
                self._step()

    async def wait_idle(self) -> None:
        """Return once no work is queued (at once when none is).

        Cancellation: nothing to undo; the controllers keep working.
        """
        while self._queue:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()

    def _step(self) -> None:
        work = self._queue.popleft()
        self._queued.discard(work)
        try:
            self._do(work)
        except ApiServerError as exc:
            logger.debug("controller work %s failed: %s", work, exc)

    def _do(self, work: Work) -> None:
        kind = work[0]
        if kind == "object":
            self._collect((work[1], work[2]), (work[3], work[4]))
        elif kind == "dependents":
            for storage_key, key in sorted(self._dependents.get(work[1], ())):
                self._collect(storage_key, key)
        elif kind == "owner":
            self._finish_owner(work[1])
        elif kind == "namespace":
            self._clean_namespace(work[1])
        elif kind == "crd":
            self._clean_crd(work[1])

    # ----- helpers -----

    def _type(self, storage_key: StorageKey) -> ResourceType | None:
        return self.storage.storage_type(storage_key)

    def _get(self, storage_key: StorageKey, key: Key) -> Obj | None:
        return self.storage.stored(storage_key, key)

    def _by_uid(self, uid: str) -> tuple[ResourceType, Obj] | None:
        ref = self._uids.get(uid)
        if ref is None:
            return None
        obj, rt = self._get(*ref), self._type(ref[0])
        if obj is None or rt is None or meta(obj).get("uid") != uid:
            return None
        return rt, obj

    def _delete(self, rt: ResourceType, obj: Obj, policy: str) -> None:
        metadata = meta(obj)
        if metadata.get("deletionTimestamp"):
            return
        options = {"propagationPolicy": policy, "preconditions": {"uid": metadata.get("uid")}}
        self.storage.delete(rt, metadata.get("namespace"), metadata["name"], options)

    def _write(self, rt: ResourceType, obj: Obj, subresource: str | None = None) -> None:
        metadata = meta(obj)
        self.storage.update(rt, metadata.get("namespace"), metadata["name"], obj, subresource=subresource, check_version=False)

    def _without_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        new = {**obj, "metadata": {**meta(obj), "finalizers": [f for f in meta(obj).get("finalizers") or [] if f != finalizer]}}
        self._write(rt, new)

    # ----- the garbage collector -----

    def _collect(self, storage_key: StorageKey, key: Key) -> None:
        obj, rt = self._get(storage_key, key), self._type(storage_key)
        if obj is None or rt is None:
            return
        refs = _refs(obj)
        solid, dangling, waiting = [], [], []
        for r in refs:
            found = self._by_uid(str(r["uid"]))
            if found is None:
                dangling.append(r)
            elif meta(found[1]).get("deletionTimestamp") and FOREGROUND in (meta(found[1]).get("finalizers") or []):
                waiting.append(r)
            else:
                solid.append(r)
        if not dangling and not waiting:
            return
        if solid:
            gone = {str(r["uid"]) for r in dangling + waiting}
            new = {**obj, "metadata": {**meta(obj), "ownerReferences": [r for r in refs if str(r["uid"]) not in gone]}}
            self._write(rt, new)
            return
        uid = str(meta(obj).get("uid", ""))
        policy = "Foreground" if waiting and self._dependents.get(uid) else "Background"
        self._delete(rt, obj, policy)

    def _finish_owner(self, uid: str) -> None:
        found = self._by_uid(uid)
        if found is None:
            return
        rt, owner = found
        metadata = meta(owner)
        finalizers = metadata.get("finalizers") or []
        if not metadata.get("deletionTimestamp"):
            return
        dependents = [(k, self._get(*k)) for k in sorted(self._dependents.get(uid, ()))]
        if ORPHAN in finalizers:
            for (storage_key, _), dep in dependents:
                dep_rt = self._type(storage_key)
                if dep is None or dep_rt is None:
                    continue
                refs = [r for r in _refs(dep) if r["uid"] != uid]
                dep_meta = {**meta(dep), "ownerReferences": refs}
                if not refs:
                    del dep_meta["ownerReferences"]
                self._write(dep_rt, {**dep, "metadata": dep_meta})
            self._without_finalizer(rt, owner, ORPHAN)
            return
        if FOREGROUND not in finalizers:
            return
        blocking = False
        for (storage_key, _), dep in dependents:
            dep_rt = self._type(storage_key)
            if dep is None or dep_rt is None:
                continue
            if any(r["uid"] == uid and r.get("blockOwnerDeletion") for r in _refs(dep)):
                blocking = True
            self._collect(storage_key, _key(dep))
        if not blocking:
            self._without_finalizer(rt, owner, FOREGROUND)

    # ----- the namespace controller -----

    def _contents(self, namespace: str) -> Iterator[tuple[ResourceType, Obj]]:
        for storage_key in self.storage.storage_keys():
            if storage_key == _NAMESPACES or storage_key in REVIEW_TYPES:
                continue
            rt = self._type(storage_key)
            if rt is None or not rt.namespaced:
                continue
            for obj in self.storage.objects_in_namespace(storage_key, namespace):
                yield rt, obj

    def _clean_namespace(self, name: str) -> None:
        ns_rt = self._type(_NAMESPACES)
        ns_obj = self._get(_NAMESPACES, ("", name))
        if ns_rt is None or ns_obj is None or not meta(ns_obj).get("deletionTimestamp"):
            return
        spec = ns_obj.get("spec") or {}
        if NAMESPACE_FINALIZER not in (spec.get("finalizers") or []):
            return
        remaining = False
        for rt, obj in self._contents(name):
            remaining = True
            self._delete(rt, obj, "Background")
        if remaining and any(True for _ in self._contents(name)):
            return
        finalizers = [f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER]
        self._write(ns_rt, {**ns_obj, "spec": {**spec, "finalizers": finalizers}}, subresource="finalize")

    # ----- the CustomResourceDefinition cleanup -----

    def _clean_crd(self, name: str) -> None:
        crd_rt = self._type(_CRDS)
        crd = self._get(_CRDS, ("", name))
        if crd_rt is None or crd is None or CRD_CLEANUP not in (meta(crd).get("finalizers") or []):
            return
        types = self.storage.crd_types(name)
        if types:
            storage_key = types[0].storage_key
            self._cleaning[storage_key] = name
            for _, obj in self.storage.objects_of(storage_key):
                self._delete(types[0], obj, "Background")
            if self.storage.objects_of(storage_key):
                return
            self._cleaning.pop(storage_key, None)
        self._without_finalizer(crd_rt, crd, CRD_CLEANUP)
