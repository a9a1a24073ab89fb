"""One reconcile of one key: its record (:class:`Run`) and what the reconciler sees (:class:`RunContext`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import trio

from ._events import EventRecorder, ObjectEvents
from ._outcome import CancelCause, Outcome
from ._refs import ObjectRef, Trigger

__all__ = ["Run", "RunContext"]

logger = logging.getLogger("engine.run")


class Run:
    """The engine's record of one reconcile: the cause of its cancellation is kept here.

    The engine writes :attr:`cause` *before* it cancels :attr:`scope`, so how a run ended is
    known from this record, never parsed from an exception message.

    Made once per run on the engine's hot path, so it is a plain class rather than an attrs
    class: its constructor sets only what every run has, and the rarely used cancellation
    state (cause, reason, shields, interruptible sections) reads its default from the class
    until the engine sets it. The run id is made from the run's number when first read.
    """

    __match_args__ = ("id", "controller", "key", "trigger", "attempt", "started_at")

    controller: str
    key: ObjectRef
    trigger: Trigger
    """The newest trigger when the run started."""
    attempt: int
    """1 for a first attempt; n+1 after n rate-limited retries."""
    started_at: float
    """trio clock time the run started."""
    scope: trio.CancelScope
    cause: CancelCause | None = None
    """Why the engine cancelled the run, or ``None``."""
    cancel_reason: str | None = None
    """The human reason given to ``CancelScope.cancel``."""
    interruptible_depth: int = 0
    supersede_pending: str | None = None
    """Under the interruptible policy: the reason of a supersede waiting for an interruptible section."""
    shields: frozenset[trio.CancelScope] | set[trio.CancelScope] = frozenset()
    """The ``ctx.shield`` sections open now (a set of its own from the run's first shield on)."""
    shields_at_cancel: frozenset[trio.CancelScope] = frozenset()
    """The ``ctx.shield`` sections that were open when the cause was recorded: a final write
    begun in one of them was decided before the cancellation, and finishes after it."""
    forced: bool = False
    """Set by a forced shutdown: shields are cancelled, and new ones start cancelled."""
    dependency_epoch: int = 0
    """The dependency index's epoch when the run started."""
    outcome: Outcome | None = None
    finished_at: float | None = None
    trace_id: str | None = None
    """The run's OpenTelemetry trace id (32 hex digits) when it is traced (see :class:`engine.RunTracer`)."""

    def __init__(
        self,
        number: int,
        controller: str,
        key: ObjectRef,
        trigger: Trigger,
        attempt: int,
        started_at: float,
        scope: trio.CancelScope,
    ) -> None:
        self._number = number
        self.controller = controller
        self.key = key
        self.trigger = trigger
        self.attempt = attempt
        self.started_at = started_at
        self.scope = scope

    @property
    def id(self) -> str:
        """Unique per process (``<controller>-<n>``): the ``reconcileID`` of logs."""
        return f"{self.controller}-{self._number}"

    def __repr__(self) -> str:
        return (
            f"Run(id={self.id!r}, controller={self.controller!r}, key={self.key!r}, attempt={self.attempt}, "
            f"started_at={self.started_at!r}, cause={self.cause!r}, finished_at={self.finished_at!r})"
        )

    def cancel(self, cause: CancelCause, reason: str) -> None:
        """Record ``cause`` (the first one wins) and cancel the run's scope. Not a checkpoint.

        Does nothing once the run has ended.
        """
        if self.finished_at is not None:
            return
        if self.cause is None and self.scope.cancel_called:
            # Already cancelled by its deadline (trio cancels at the deadline on its own).
            self.cause = CancelCause.DEADLINE
            self.cancel_reason = "run exceeded the controller timeout"
        if self.cause is None:
            self.cause = cause
            self.cancel_reason = reason
            self.shields_at_cancel = frozenset(self.shields)
        self.scope.cancel(reason=reason)

    def force_cancel(self, cause: CancelCause, reason: str) -> None:
        """Cancel the run and every ``ctx.shield`` section in it."""
        self.forced = True
        self.cancel(cause, reason)
        for shield in list(self.shields):
            shield.cancel(reason=reason)


class _RunLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Adds the run's keys to every record, merged with the call's own ``extra``."""

    def process(self, msg: object, kwargs: MutableMapping[str, Any]) -> tuple[object, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class _Shield:
    """The context manager :meth:`RunContext.shield` returns: a shielded cancel scope with a
    deadline, known to the run while it is open (a class rather than a generator: one per
    status write)."""

    __slots__ = ("_run", "_seconds", "_scope", "_shields")

    def __init__(self, run: Run, seconds: float) -> None:
        self._run = run
        self._seconds = seconds

    def __enter__(self) -> trio.CancelScope:
        run = self._run
        scope = self._scope = trio.CancelScope(shield=True, deadline=trio.current_time() + self._seconds)
        scope.__enter__()
        if run.forced:
            scope.cancel(reason=run.cancel_reason)
        shields = run.shields
        if not isinstance(shields, set):
            shields = run.shields = set()
        shields.add(scope)
        self._shields = shields
        return scope

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        scope = self._scope
        self._shields.discard(scope)
        return scope.__exit__(exc_type, exc, tb)


class RunContext:
    """What a reconciler receives: the key, the trigger, events, logging and cancellation tools.

    The controller makes one per run, with the event recorder its events go to.
    """

    __slots__ = ("_run", "_recorder", "_events", "_log")
    _events: ObjectEvents
    _log: logging.LoggerAdapter[logging.Logger]

    def __init__(self, run: Run, recorder: EventRecorder) -> None:
        self._run = run
        self._recorder = recorder
        # _events and _log are set on first use (an unset slot reads as AttributeError).

    @property
    def ref(self) -> ObjectRef:
        """The key being reconciled."""
        return self._run.key

    @property
    def trigger(self) -> Trigger:
        """The newest trigger when this run started (many triggers collapse into one run)."""
        return self._run.trigger

    @property
    def run_id(self) -> str:
        return self._run.id

    @property
    def attempt(self) -> int:
        """1 on a first attempt, n+1 after n failed attempts."""
        return self._run.attempt

    @property
    def controller(self) -> str:
        """The name of the controller running this reconcile."""
        return self._run.controller

    @property
    def cancel_cause(self) -> CancelCause | None:
        """Why the engine cancelled this run, if it did (for example to skip a failure status)."""
        return self._run.cause

    @property
    def events(self) -> ObjectEvents:
        """Emit events about this object: ``ctx.events.normal(reason, message)``. Never awaits."""
        try:
            return self._events
        except AttributeError:
            run = self._run
            self._events = self._recorder.for_object(run.key, controller=run.controller, run_id=run.id)
            return self._events

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry ``controller``, ``object`` and ``reconcileID``."""
        try:
            return self._log
        except AttributeError:
            key = self._run.key
            controller = self._run.controller
            self._log = _RunLogger(
                logging.getLogger(f"engine.reconciler.{controller}"),
                {
                    "controller": controller,
                    "object": str(key),
                    "namespace": key.namespace,
                    "object_name": key.name,
                    "reconcileID": self._run.id,
                },
            )
        return self._log

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Mark a section a newer trigger may cancel (for example a health-check wait).

        Under the ``INTERRUPTIBLE`` supersede policy a newer trigger cancels the run only while
        it is inside such a section (or when it enters one with a supersede pending); the run
        then ends as ``SUPERSEDED`` and the key runs again. Under ``CANCEL_RUN`` the whole run
        is cancellable anyway; under ``NEVER`` nothing is. Not a checkpoint.
        """
        run = self._run
        run.interruptible_depth += 1
        try:
            if run.supersede_pending is not None:
                run.cancel(CancelCause.SUPERSEDED, run.supersede_pending)
            yield
        finally:
            run.interruptible_depth -= 1

    def shield(self, seconds: float) -> _Shield:
        """Protect a final write (a status update) from the run's cancellation, for ``seconds``.

        Inside the block, a supersede, shutdown or deadline cancellation waits; after
        ``seconds`` the block is cancelled itself (check ``scope.cancelled_caught``) and the
        pending cancellation resumes at the next checkpoint after it. A forced shutdown (a
        second signal) cancels shielded blocks at once.
        """
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        return _Shield(self._run, seconds)

    def __repr__(self) -> str:
        return f"<RunContext {self._run.id} {self._run.key} attempt={self._run.attempt}>"

