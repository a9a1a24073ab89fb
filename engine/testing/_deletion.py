"""Deletion: preconditions, finalizers, propagation policies and garbage collection.

An object without finalizers is removed at once; one with finalizers gets a
``deletionTimestamp`` (and a bumped ``generation``) and is removed by the update that clears its
last finalizer. Removing an object garbage-collects its dependents (objects whose
``ownerReferences`` name its uid): a dependent with another live owner only loses the reference,
the others are deleted in the background.

Simplified from the real API server: garbage collection runs synchronously inside the write
that triggers it (no background controller); ``Orphan`` removes the owner references at once
instead of through an ``orphan`` finalizer; ``Foreground`` adds ``foregroundDeletion``, deletes
dependents in the background mode and drops the finalizer once no dependents are left; deleting
a namespace deletes its objects and the namespace disappears once they are gone; deleting a CRD
removes its objects at once, ignoring their finalizers.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ._errors import RequestRejected
from ._objects import Obj, meta
from ._resources import ResourceType
from ._status import precondition_failed

if TYPE_CHECKING:
    from ._storage import ObjectStorage

__all__ = ["POLICIES", "delete", "remove"]

POLICIES = ("Background", "Foreground", "Orphan")
"""The propagation policies ``DeleteOptions`` accepts."""

_NAMESPACES = ("", "namespaces")


def _is_crd(rt: ResourceType) -> bool:
    return rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions")


def _dependents(storage: ObjectStorage, uid: str) -> list[tuple[ResourceType, Obj]]:
    found = []
    for key, bucket in storage._objects.items():
        rt = storage._storage_type(key)
        if rt is None:
            continue
        for obj in bucket.objects.values():
            refs = meta(obj).get("ownerReferences") or []
            if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                found.append((rt, obj))
    return found


def _uid_exists(storage: ObjectStorage, uid: str) -> bool:
    return any(meta(o).get("uid") == uid for bucket in storage._objects.values() for o in bucket.objects.values())


def _find_uid(storage: ObjectStorage, uid: str) -> tuple[ResourceType, Obj] | None:
    for key, bucket in storage._objects.items():
        for obj in bucket.objects.values():
            if meta(obj).get("uid") == uid:
                rt = storage._storage_type(key)
                if rt is not None:
                    return rt, obj
    return None


def _current(storage: ObjectStorage, rt: ResourceType, obj: Obj) -> Obj | None:
    bucket = storage._objects.get(rt.storage_key)
    return bucket.objects.get((meta(obj).get("namespace", ""), meta(obj)["name"])) if bucket else None


def _drop_owner_ref(storage: ObjectStorage, rt: ResourceType, obj: Obj, uid: str) -> None:
    new = copy.deepcopy(obj)
    refs = [r for r in new["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
    if refs:
        new["metadata"]["ownerReferences"] = refs
    else:
        new["metadata"].pop("ownerReferences", None)
    storage._commit(rt, "MODIFIED", new, obj)


def remove(storage: ObjectStorage, rt: ResourceType, obj: Obj) -> Obj:
    """Remove ``obj`` for good and collect the garbage this leaves; returns the removed object
    as last stored (with the resourceVersion of its removal)."""
    metadata = meta(obj)
    stored = storage._commit(rt, "DELETED", obj, obj)
    uid = metadata.get("uid", "")
    if _is_crd(rt):
        storage._unserve_crd(obj)
    for dep_rt, dep in _dependents(storage, uid):
        current = _current(storage, dep_rt, dep)
        if current is None:
            continue
        other_owners = [
            r
            for r in meta(current).get("ownerReferences", [])
            if r.get("uid") != uid and _uid_exists(storage, r.get("uid", ""))
        ]
        if other_owners:
            _drop_owner_ref(storage, dep_rt, current, uid)
        elif not meta(current).get("deletionTimestamp"):
            _delete(storage, dep_rt, current, "Background")
    for ref in metadata.get("ownerReferences") or []:
        _check_foreground(storage, ref.get("uid", ""))
    namespace = metadata.get("namespace")
    if namespace:
        _check_namespace_done(storage, namespace)
    return stored


def _check_foreground(storage: ObjectStorage, uid: str) -> None:
    found = _find_uid(storage, uid)
    if found is None:
        return
    rt, owner = found
    finalizers = meta(owner).get("finalizers") or []
    if "foregroundDeletion" not in finalizers or _dependents(storage, uid):
        return
    new = copy.deepcopy(owner)
    new["metadata"]["finalizers"] = [f for f in finalizers if f != "foregroundDeletion"]
    if not new["metadata"]["finalizers"]:
        del new["metadata"]["finalizers"]
        remove(storage, rt, new)
    else:
        storage._commit(rt, "MODIFIED", new, owner)


def _check_namespace_done(storage: ObjectStorage, namespace: str) -> None:
    ns_obj = storage._objects[_NAMESPACES].objects.get(("", namespace))
    if ns_obj is None or not meta(ns_obj).get("deletionTimestamp") or meta(ns_obj).get("finalizers"):
        return
    for key, bucket in storage._objects.items():
        if key != _NAMESPACES and bucket.in_namespace(namespace):
            return
    ns_rt = storage.find_type("", "v1", "namespaces")
    assert ns_rt is not None
    remove(storage, ns_rt, ns_obj)


def _delete(storage: ObjectStorage, rt: ResourceType, obj: Obj, policy: str) -> tuple[Obj, bool]:
    metadata = meta(obj)
    uid = metadata.get("uid", "")
    if policy == "Orphan":
        for dep_rt, dep in _dependents(storage, uid):
            _drop_owner_ref(storage, dep_rt, dep, uid)
        obj = storage._objects[rt.storage_key].objects[(metadata.get("namespace", ""), metadata["name"])]
        metadata = meta(obj)
    finalizers = list(metadata.get("finalizers") or [])
    is_namespace = rt.storage_key == _NAMESPACES
    dependents = _dependents(storage, uid) if policy == "Foreground" else []
    if dependents and "foregroundDeletion" not in finalizers:
        finalizers.append("foregroundDeletion")
    if not finalizers and not is_namespace:
        return remove(storage, rt, obj), True
    if not metadata.get("deletionTimestamp"):
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = storage._timestamp()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        if metadata.get("generation"):
            new["metadata"]["generation"] = int(metadata["generation"]) + 1
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
        if is_namespace:
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        obj = storage._commit(rt, "MODIFIED", new, obj)
    for dep_rt, dep in dependents:
        current = _current(storage, dep_rt, dep)
        if current is not None and not meta(current).get("deletionTimestamp"):
            _delete(storage, dep_rt, current, "Background")
    if is_namespace:
        name = metadata["name"]
        for key, bucket in list(storage._objects.items()):
            if key == _NAMESPACES:
                continue
            child_rt = storage._storage_type(key)
            if child_rt is None:
                continue
            for k, child in bucket.snapshot(name):
                if not meta(child).get("deletionTimestamp") and k in bucket.objects:
                    _delete(storage, child_rt, child, "Background")
        _check_namespace_done(storage, name)
    if dependents:
        _check_foreground(storage, uid)
    key = (metadata.get("namespace", ""), metadata["name"])
    own = storage._objects.get(rt.storage_key)
    current_obj = own.objects.get(key) if own else None
    return (current_obj if current_obj is not None else obj), current_obj is None


def delete(
    storage: ObjectStorage,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    options: dict[str, Any] | None = None,
    *,
    dry_run: bool = False,
) -> tuple[Obj, bool]:
    """Delete an object of ``storage``; see :meth:`ObjectStorage.delete`."""
    namespace = storage.check_namespace(rt, namespace) if rt.namespaced else None
    obj = storage.get(rt, namespace, name)
    options = options or {}
    preconditions = options.get("preconditions") or {}
    metadata = meta(obj)
    if preconditions.get("uid") not in (None, "") and preconditions["uid"] != metadata.get("uid"):
        raise precondition_failed(
            rt,
            name,
            f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record "
            f"({metadata.get('uid')}). The object might have been deleted and then recreated",
        )
    if preconditions.get("resourceVersion") not in (None, "") and preconditions["resourceVersion"] != metadata.get(
        "resourceVersion"
    ):
        raise precondition_failed(
            rt,
            name,
            f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) does not match "
            f"the ResourceVersion in record ({metadata.get('resourceVersion')}). The object might have been modified",
        )
    policy = options.get("propagationPolicy") or "Background"
    if policy not in POLICIES:
        raise RequestRejected(
            400, "BadRequest", f"propagationPolicy must be Background, Foreground or Orphan, not {policy!r}"
        )
    if options.get("orphanDependents") is True:
        policy = "Orphan"
    if dry_run:
        return obj, not metadata.get("finalizers")
    if metadata.get("deletionTimestamp"):
        return obj, False
    return _delete(storage, rt, obj, policy)
