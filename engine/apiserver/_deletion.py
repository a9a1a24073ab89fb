"""Deletion as the API server does it: preconditions, finalizers and propagation policies.

An object that nothing holds is removed at once. One that finalizers hold gets a
``deletionTimestamp`` (``deletionGracePeriodSeconds: 0``, and its ``generation`` bumped when it
has one; namespaces and CustomResourceDefinitions get the timestamp only, as their registries
set it) and is removed by the write that clears its last finalizer. The propagation policy
becomes a finalizer, as on the real server: ``Foreground`` adds ``foregroundDeletion``,
``Orphan`` (or ``orphanDependents: true``) adds ``orphan``, ``Background`` removes both. A
namespace is also held by its ``spec.finalizers`` (``kubernetes``, added at creation): deleting
it answers it in phase ``Terminating``. Deleting a CustomResourceDefinition adds the
``customresourcecleanup.apiextensions.k8s.io`` finalizer and a ``Terminating`` condition.

What happens next is controllers' work, done outside the request (:mod:`._controllers`): the
garbage collector and the namespace controller belong to kube-controller-manager, the
CustomResourceDefinition cleanup to the API server itself.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

from ._errors import RequestRejected
from ._objects import Obj, meta
from ._resources import ResourceType
from ._status import precondition_failed

__all__ = [
    "POLICIES",
    "PROTECTED_NAMESPACES",
    "ORPHAN",
    "FOREGROUND",
    "CRD_CLEANUP",
    "NAMESPACE_FINALIZER",
    "DeletionStorage",
    "delete",
    "remove",
    "held",
]


class DeletionStorage(Protocol):
    """What deletion needs of the storage it deletes from (:class:`~._storage.ObjectStorage`
    provides it; the storage calls this module, never the other way round)."""

    def timestamp(self) -> str: ...

    def storage_type(self, key: tuple[str, str]) -> ResourceType | None: ...

    def unserve_crd(self, crd: Obj) -> None: ...

    def commit(self, rt: ResourceType, type_: str, obj: Obj, old: Obj | None) -> Obj: ...

    def check_namespace(self, rt: ResourceType, namespace: str | None) -> str | None: ...

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj: ...

POLICIES = ("Background", "Foreground", "Orphan")
"""The propagation policies ``DeleteOptions`` accepts."""

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
NAMESPACE_FINALIZER = "kubernetes"

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
"""Namespaces the NamespaceLifecycle admission plugin refuses to delete."""

_NAMESPACES = ("", "namespaces")
_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
_NO_GC_POLICY = frozenset({("", "events")})


def held(rt: ResourceType, obj: Obj) -> bool:
    """Whether finalizers keep ``obj`` (for a namespace, also its ``spec.finalizers``)."""
    if meta(obj).get("finalizers"):
        return True
    if rt.storage_key == _NAMESPACES:
        spec = obj.get("spec")
        return isinstance(spec, dict) and bool(spec.get("finalizers"))
    return False


def remove(storage: DeletionStorage, rt: ResourceType, obj: Obj) -> Obj:
    """Remove ``obj`` for good; returns it as last stored (with the resourceVersion of its
    removal). Removing a CustomResourceDefinition stops serving its resources."""
    stored = storage.commit(rt, "DELETED", obj, obj)
    if rt.storage_key == _CRDS:
        storage.unserve_crd(obj)
    return stored


def _with_policy(rt: ResourceType, finalizers: list[str], policy: str | None) -> list[str]:
    if rt.storage_key in _NO_GC_POLICY or policy is None:
        return finalizers
    kept = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    if policy == "Orphan":
        kept.append(ORPHAN)
    elif policy == "Foreground":
        kept.append(FOREGROUND)
    return kept


def _terminating_condition(storage: DeletionStorage, obj: Obj) -> None:
    status = obj.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
    conditions.append(
        {
            "type": "Terminating",
            "status": "True",
            "lastTransitionTime": storage.timestamp(),
            "reason": "InstanceDeletionPending",
            "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        }
    )
    status["conditions"] = conditions


def _policy(options: dict[str, Any]) -> str | None:
    policy = options.get("propagationPolicy") or None
    if policy is not None and policy not in POLICIES:
        raise RequestRejected(
            400, "BadRequest", f"propagationPolicy must be Background, Foreground or Orphan, not {policy!r}"
        )
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    return policy


def delete(
    storage: DeletionStorage,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    options: dict[str, Any] | None = None,
    *,
    dry_run: bool = False,
) -> tuple[Obj, bool]:
    """Delete an object of ``storage``; see :meth:`~._storage.ObjectStorage.delete`."""
    namespace = storage.check_namespace(rt, namespace) if rt.namespaced else None
    obj = storage.get(rt, namespace, name)
    if rt.storage_key == _NAMESPACES and name in PROTECTED_NAMESPACES:
        raise RequestRejected(
            403,
            "Forbidden",
            f'namespaces "{name}" is forbidden: this namespace may not be deleted',
            details={"name": name, "kind": "namespaces"},
        )
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
    policy = _policy(options)
    deleting = bool(metadata.get("deletionTimestamp"))
    finalizers = list(metadata.get("finalizers") or [])
    new_finalizers = _with_policy(rt, finalizers, policy)
    if rt.storage_key == _CRDS and not deleting and CRD_CLEANUP not in new_finalizers:
        new_finalizers.append(CRD_CLEANUP)
    new = copy.deepcopy(obj)
    if new_finalizers:
        new["metadata"]["finalizers"] = new_finalizers
    else:
        new["metadata"].pop("finalizers", None)
    stored_as = storage.storage_type(rt.storage_key) or rt
    if not held(rt, new):
        if dry_run:
            return obj, True
        return remove(storage, stored_as, new), True
    if not deleting:
        new["metadata"]["deletionTimestamp"] = storage.timestamp()
        if rt.storage_key == _NAMESPACES:
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        elif rt.storage_key != _CRDS:
            # The generic graceful deletion (rest.BeforeDelete); CRDs have their own delete.
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if metadata.get("generation"):
                new["metadata"]["generation"] = int(metadata["generation"]) + 1
        if rt.storage_key == _CRDS:
            _terminating_condition(storage, new)
    elif new_finalizers == finalizers:
        return obj, False
    if dry_run:
        return new, False
    return storage.commit(stored_as, "MODIFIED", new, obj), False
