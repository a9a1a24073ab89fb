"""Object references and triggers: what the queue holds, why a run happens, and what can be triggered."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

__all__ = ["ObjectRef", "Priority", "Trigger", "Triggerable"]


class ObjectRef(NamedTuple):
    """The identity of one reconciled object: what a work queue key is.

    Frozen and hashable. Two refs are equal when kind, name, namespace and group are, so an
    object occupies one slot in a queue whatever the reason it was enqueued for.

    A named tuple, so its hash and field reads are the interpreter's own (a run looks its key
    up about ten times); equality and order are its class's alone, as for an ``attrs`` value:
    a ref never equals, or sorts against, a plain tuple.
    """

    kind: str
    """The object's kind, for example ``"Bundle"``."""
    name: str
    """The object's name."""
    namespace: str | None = None
    """The namespace, or ``None`` for cluster-scoped objects."""
    group: str = ""
    """The API group (``""`` for the core group or for non-Kubernetes objects)."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return tuple.__eq__(self, other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return tuple.__ne__(self, other)
        return True if isinstance(other, tuple) else NotImplemented

    def __lt__(self, other: tuple[Any, ...]) -> bool:
        return tuple.__lt__(self, _same_class(self, other, "<"))

    def __le__(self, other: tuple[Any, ...]) -> bool:
        return tuple.__le__(self, _same_class(self, other, "<="))

    def __gt__(self, other: tuple[Any, ...]) -> bool:
        return tuple.__gt__(self, _same_class(self, other, ">"))

    def __ge__(self, other: tuple[Any, ...]) -> bool:
        return tuple.__ge__(self, _same_class(self, other, ">="))

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


def _same_class(ref: ObjectRef, other: object, op: str) -> ObjectRef:
    if other.__class__ is not ref.__class__:
        raise TypeError(
            f"'{op}' not supported between instances of {type(ref).__name__!r} and {type(other).__name__!r}"
        )
    return other


class Priority(enum.IntEnum):
    """How soon a queued key runs: the highest priority ready first, first in first out within
    a priority, and no key starved (see :class:`engine.WorkQueue` for the bound).

    The values are controller-runtime's (``LowPriority`` is -100), as the ``priority`` label
    of the queue's metrics shows them.
    """

    LOW = -100
    """Work that is not news: objects of an informer's first list or of a relist, and
    periodic resyncs."""
    NORMAL = 0
    """A change: a watch event, a user's or a dependency's trigger (the default)."""
    HIGH = 100
    """What a reconciler asks to run before changes (``Result(priority=Priority.HIGH)``)."""


class Trigger(NamedTuple):
    """Why a key was enqueued: the newest one a run sees as ``ctx.trigger``.

    ``sequence`` is assigned when the change was *observed*; one observation delivered several
    times (for example an update mapped from both the old and the new object) carries one
    sequence number, so it never supersedes the run it already started.

    Frozen and hashable; a named tuple (one is made per trigger, on the hot path) whose
    equality is its class's alone: a trigger never equals a plain tuple.
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
    priority: Priority = Priority.NORMAL
    """The priority it enqueued its key at; for a run's trigger (``ctx.trigger``), the priority
    the run was handed out at: the best any trigger of the key asked for while it waited."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return tuple.__eq__(self, other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return tuple.__ne__(self, other)
        return True if isinstance(other, tuple) else NotImplemented

    def __lt__(self, other: tuple[Any, ...]) -> bool:
        raise TypeError(f"'<' not supported between instances of 'Trigger' and {type(other).__name__!r}")

    def __le__(self, other: tuple[Any, ...]) -> bool:
        raise TypeError(f"'<=' not supported between instances of 'Trigger' and {type(other).__name__!r}")

    def __gt__(self, other: tuple[Any, ...]) -> bool:
        raise TypeError(f"'>' not supported between instances of 'Trigger' and {type(other).__name__!r}")

    def __ge__(self, other: tuple[Any, ...]) -> bool:
        raise TypeError(f"'>=' not supported between instances of 'Trigger' and {type(other).__name__!r}")


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
        priority: Priority = Priority.NORMAL,
    ) -> Trigger | None:
        """Enqueue ``ref`` because of one observed change, at ``priority``; ``None`` if it was
        refused."""
        ...
