"""Object references and triggers: what the queue holds, why a run happens, and what can be triggered."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

__all__ = ["ObjectRef", "Trigger", "Triggerable"]


@attrs.frozen(order=True, cache_hash=True)
class ObjectRef:
    """The identity of one reconciled object: what a work queue key is.

    Frozen and hashable. Two refs are equal when kind, group, namespace and name are, so an
    object occupies one slot in a queue whatever the reason it was enqueued for.
    """

    kind: str
    """The object's kind, for example ``"Bundle"``."""
    name: str
    """The object's name."""
    namespace: str | None = None
    """The namespace, or ``None`` for cluster-scoped objects."""
    group: str = ""
    """The API group (``""`` for the core group or for non-Kubernetes objects)."""

    @classmethod
    def from_object(
        cls, obj: Mapping[str, Any], *, kind: str | None = None, group: str | None = None
    ) -> ObjectRef:
        """Build a ref from a Kubernetes-shaped mapping (``apiVersion``, ``kind``, ``metadata``).

        ``kind`` and ``group`` override what the object says, for objects that do not carry
        their type (list items, informer cache entries); :func:`engine.kube.ref_for` passes
        them from the resource.
        """
        if group is None:
            api_version = str(obj.get("apiVersion", ""))
            group = api_version.rpartition("/")[0] if "/" in api_version else ""
        meta = obj.get("metadata") or {}
        return cls(
            kind=str(obj.get("kind", "")) if kind is None else kind,
            name=str(meta.get("name", "")),
            namespace=meta.get("namespace") or None,
            group=group,
        )

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        if self.namespace:
            return f"{kind}/{self.namespace}/{self.name}"
        return f"{kind}/{self.name}"


@attrs.frozen
class Trigger:
    """Why a key was enqueued: the newest one a run sees as ``ctx.trigger``.

    ``sequence`` is assigned when the change was *observed*; one observation delivered several
    times (for example an update mapped from both the old and the new object) carries one
    sequence number, so it never supersedes the run it already started.
    """

    ref: ObjectRef
    """The key this trigger enqueued."""
    sequence: int
    """Observation sequence number, increasing per controller."""
    reason: str = ""
    """Human-readable reason, for logs and the live stream."""
    revision: str | None = None
    """The revision of the triggering state, if the source knows one."""
    observed_at: float = 0.0
    """trio clock time at which the trigger was raised."""


class Triggerable(Protocol):
    """What sources and the dependency index trigger: a :class:`engine.Controller` is one.

    Both methods are synchronous and never checkpoint.
    """

    @property
    def name(self) -> str:
        """A name that orders targets deterministically (a controller's name)."""
        ...

    def next_sequence(self) -> int:
        """Allocate the sequence number of one observed change (see :class:`Trigger`)."""
        ...

    def trigger(
        self,
        ref: ObjectRef,
        *,
        reason: str = "",
        revision: str | None = None,
        sequence: int | None = None,
    ) -> Trigger | None:
        """Enqueue ``ref`` because of one observed change; ``None`` if it was refused."""
        ...
