"""``coordination.k8s.io/v1`` Leases with optimistic concurrency (the base of leader election)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from .._client._client import Client
from .._client._resource import Resource
from .._client._wire import format_microtime, parse_microtime

__all__ = ["Lease", "LEASE_RESOURCE", "get_lease", "create_lease", "update_lease"]

log = logging.getLogger("engine.kube.lease")

LEASE_RESOURCE = Resource(
    group="coordination.k8s.io",
    version="v1",
    kind="Lease",
    plural="leases",
    namespaced=True,
    verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
)
"""The ``coordination.k8s.io/v1`` ``leases`` resource (stable, so not looked up)."""


@attrs.frozen
class Lease:
    """A Lease's identity, spec and ``resourceVersion``; build one, or read it with
    :func:`get_lease`, and change it with ``attrs.evolve``."""

    name: str
    """``metadata.name``."""
    namespace: str
    """``metadata.namespace``."""
    holder_identity: str | None = None
    """``spec.holderIdentity``: who holds the lease."""
    lease_duration_seconds: int | None = None
    """``spec.leaseDurationSeconds``: how long a holder may go without renewing."""
    acquire_time: dt.datetime | None = None
    """``spec.acquireTime``."""
    renew_time: dt.datetime | None = None
    """``spec.renewTime``."""
    lease_transitions: int | None = None
    """``spec.leaseTransitions``: how many times the holder changed."""
    resource_version: str | None = None
    """``metadata.resourceVersion``; an update succeeds only if it is still current."""
    uid: str | None = None
    """``metadata.uid`` (set by the server)."""
    labels: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """``metadata.labels``."""
    annotations: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """``metadata.annotations``."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Lease:
        """Read a Lease object as the API server returns it."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            holder_identity=spec.get("holderIdentity") or None,
            lease_duration_seconds=duration if isinstance(duration, int) else None,
            acquire_time=parse_microtime(spec.get("acquireTime")),
            renew_time=parse_microtime(spec.get("renewTime")),
            lease_transitions=transitions if isinstance(transitions, int) else None,
            resource_version=meta.get("resourceVersion") or None,
            uid=meta.get("uid") or None,
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
        )

    def to_object(self) -> dict[str, Any]:
        """The Lease object to send (``resourceVersion`` included when known)."""
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.resource_version is not None:
            meta["resourceVersion"] = self.resource_version
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        spec: dict[str, Any] = {}
        if self.holder_identity is not None:
            spec["holderIdentity"] = self.holder_identity
        if self.lease_duration_seconds is not None:
            spec["leaseDurationSeconds"] = self.lease_duration_seconds
        if self.acquire_time is not None:
            spec["acquireTime"] = format_microtime(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_microtime(self.renew_time)
        if self.lease_transitions is not None:
            spec["leaseTransitions"] = self.lease_transitions
        return {
            "apiVersion": LEASE_RESOURCE.api_version,
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


async def get_lease(client: Client, name: str, *, namespace: str | None = None) -> Lease:
    """Read a Lease; raises :class:`NotFoundError` if there is none.

    Cancellation: a checkpoint; nothing to undo.
    """
    return Lease.from_object(await client.get(LEASE_RESOURCE, name, namespace=namespace))


async def create_lease(client: Client, lease: Lease) -> Lease:
    """Create a Lease and return it as stored (with its ``resourceVersion``).

    Raises :class:`AlreadyExistsError` if another holder created it first.
    Cancellation: a checkpoint; if cancelled after sending, the Lease may exist.
    """
    body = attrs.evolve(lease, resource_version=None).to_object()
    return Lease.from_object(await client.create(LEASE_RESOURCE, body))


async def update_lease(client: Client, lease: Lease) -> Lease:
    """Replace a Lease, on the condition that its ``resource_version`` is still current.

    Raises :class:`ConflictError` if the Lease changed since ``lease`` was read, and
    ``ValueError`` if ``lease`` has no ``resource_version`` (an unconditional write would
    defeat the point of a lease).
    Cancellation: a checkpoint; if cancelled after sending, the update may have been applied.
    """
    if lease.resource_version is None:
        raise ValueError("update_lease needs the resource_version the lease was read at")
    updated = Lease.from_object(await client.update(LEASE_RESOURCE, lease.to_object()))
    log.debug(
        "lease %s/%s updated (holder %s)", lease.namespace, lease.name, updated.holder_identity
    )
    return updated
