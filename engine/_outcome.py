"""What a reconciler returns or raises, why a run was cancelled, and how it ended."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from ._errors import EngineError
from ._refs import ObjectRef, Priority

__all__ = [
    "CancelCause",
    "OutcomeKind",
    "Outcome",
    "Result",
    "TerminalError",
    "DependencyNotReady",
]


class CancelCause(enum.Enum):
    """Why the engine cancelled a run. Recorded by the engine before it cancels."""

    SUPERSEDED = "superseded"
    """A newer trigger for the same key arrived; the key runs again with it."""
    SHUTDOWN = "shutdown"
    """The manager's grace period ended during a graceful shutdown."""
    DEADLINE = "deadline"
    """The controller's per-run timeout expired. Counts as a failure."""
    LEADERSHIP_LOST = "leadership_lost"
    """The process stopped being the leader; another replica takes over."""
    HANDOVER = "handover"
    """The key's range moved to another scale-out replica (or this replica's membership
    lapsed); that replica runs the key next. Not a failure, not retried here."""


class OutcomeKind(enum.Enum):
    """How a run ended."""

    SUCCEEDED = "success"
    REQUEUE_AFTER = "requeue_after"
    FAILED = "error"
    TERMINAL = "terminal_error"
    DEPENDENCY_NOT_READY = "dependency_not_ready"
    SUPERSEDED = "superseded"
    SHUTDOWN = "shutdown"
    DEADLINE = "deadline"
    LEADERSHIP_LOST = "leadership_lost"
    HANDOVER = "handover"

    @property
    def is_failure(self) -> bool:
        """Failed, terminal and deadline runs are failures; cancelled-by-engine runs are not."""
        return self in _FAILURES


_FAILURES = frozenset({OutcomeKind.FAILED, OutcomeKind.TERMINAL, OutcomeKind.DEADLINE})

CAUSE_OUTCOME = {
    CancelCause.SUPERSEDED: OutcomeKind.SUPERSEDED,
    CancelCause.SHUTDOWN: OutcomeKind.SHUTDOWN,
    CancelCause.DEADLINE: OutcomeKind.DEADLINE,
    CancelCause.LEADERSHIP_LOST: OutcomeKind.LEADERSHIP_LOST,
    CancelCause.HANDOVER: OutcomeKind.HANDOVER,
}


@attrs.frozen
class Result:
    """What a reconciler may return. Returning ``None`` means ``Result()``: success."""

    requeue_after: float | None = None
    """Run the key again after this many seconds (a periodic resync), or never if ``None``."""
    priority: Priority | None = None
    """The priority of that run (it becomes ready at it, see :class:`engine.Priority`);
    ``None``: the priority this run was handed out at. Needs ``requeue_after``."""

    def __attrs_post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError("requeue_after must be >= 0")
        if self.priority is not None and self.requeue_after is None:
            raise ValueError("priority is the priority of a requeue: give requeue_after too")


@attrs.frozen
class Outcome:
    """How one run ended, as observers and the live stream see it."""

    kind: OutcomeKind
    requeue_after: float | None = None
    """Delay before the key runs again, when the engine scheduled one."""
    priority: Priority | None = None
    """The priority the reconciler asked for that run (``Result.priority``), if it did."""
    error: BaseException | None = None
    """The exception of a failed or terminal run."""
    dependencies: tuple[ObjectRef, ...] = ()
    """What a ``DEPENDENCY_NOT_READY`` run waits for."""
    reason: str | None = None
    """The human reason passed to ``CancelScope.cancel`` for cancelled runs."""

    @property
    def is_failure(self) -> bool:
        return self.kind.is_failure


SUCCEEDED = Outcome(OutcomeKind.SUCCEEDED)


class TerminalError(EngineError):
    """Raise from a reconciler for an error that retrying cannot fix (no retry, Warning event)."""


class DependencyNotReady(EngineError):
    """Raise from a reconciler when objects it depends on are not ready yet.

    The engine re-triggers the key as soon as any of ``refs`` is reported ready (see
    ``Manager.mark_ready``) and, as a fallback, after ``retry_after`` seconds.
    """

    def __init__(self, refs: Iterable[ObjectRef] | ObjectRef, *, retry_after: float = 30.0) -> None:
        self.refs = (refs,) if isinstance(refs, ObjectRef) else tuple(refs)
        if not self.refs:
            raise ValueError("DependencyNotReady needs at least one ref")
        if retry_after < 0:
            raise ValueError("retry_after must be >= 0")
        self.retry_after = retry_after
        super().__init__("dependencies not ready: " + ", ".join(str(r) for r in self.refs))
