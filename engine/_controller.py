"""A controller: a reconciler, its work queue, its workers and its supersede policy.

A controller is bound to what it reports to (an event recorder, a dependency index, run
observers) by a :class:`ControllerWiring`, which :meth:`Manager.add_controller
<engine.Manager.add_controller>` gives it.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs
import trio

from ._deps import DependencyIndex
from ._errors import ManagerStateError, QueueShutDown
from ._events import EventRecorder
from ._outcome import (
    CAUSE_OUTCOME,
    SUCCEEDED,
    CancelCause,
    DependencyNotReady,
    Outcome,
    OutcomeKind,
    Result,
    TerminalError,
)
from ._ownership import OwnershipGate
from ._ratelimit import RateLimiter
from ._refs import ObjectRef, Priority, Trigger
from ._run import Run, RunContext
from ._text import summarize
from ._workqueue import QueueObserver, WorkQueue
from ._writes import OwnWrites

__all__ = [
    "Controller",
    "ControllerWiring",
    "SupersedePolicy",
    "Reconciler",
    "ReconcileFunction",
    "RunObserver",
]

logger = logging.getLogger("engine.controller")

_new_tuple = tuple.__new__


class SupersedePolicy(enum.Enum):
    """What a newer trigger does to a run of the same key that is in progress.

    In every policy the key is marked dirty and runs again after the current run.
    """

    CANCEL_RUN = "cancel_run"
    """Cancel the whole run at once (the default)."""
    INTERRUPTIBLE = "interruptible"
    """Cancel only while the run is inside ``ctx.interruptible()`` (as Flux cancels health checks)."""
    NEVER = "never"
    """Never cancel; only mark the key dirty."""


class Reconciler(Protocol):
    """An object whose ``reconcile`` the controller calls for each run of a key."""

    async def reconcile(self, ctx: RunContext) -> Result | None:
        """Converge the object ``ctx.ref`` names; return ``None``, a :class:`Result`, or raise.

        Write it to be idempotent: a key runs again whenever it was triggered meanwhile.

        Cancellation: the engine cancels a run (and records why in ``ctx.cancel_cause``) when
        a newer trigger supersedes it, at shutdown, at the controller's ``timeout``, when
        leadership is lost, or when the key's range moves to another scale-out replica
        (``HANDOVER``). Let ``Cancelled`` propagate; protect a final status write with
        ``ctx.shield(seconds)``. Superseded, shutdown-cancelled and handed-over runs are not
        failures.
        """
        ...


class RunObserver:
    """Base class of run observers; override what you need.

    Every hook is called synchronously on the engine's hot path: it must be cheap, must not
    block and must not raise.
    """

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        """A trigger was accepted; ``superseded`` is the run it cancelled, if any."""

    def on_run_started(self, controller: Controller, run: Run) -> None:
        """A run started."""

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        """A run ended with ``outcome``."""

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        """``ref`` was reported ready (``Manager.mark_ready``), before its dependents are triggered."""


@attrs.frozen
class ControllerWiring:
    """What a controller reports to, given to it once by :meth:`Controller.bind`."""

    recorder: EventRecorder
    """Where failure events and ``ctx.events`` go."""
    dependencies: DependencyIndex
    """Where a run that reported ``DependencyNotReady`` waits to be woken."""
    observers: Sequence[RunObserver]
    """Hooks called on every trigger and run; a live view (observers added later are seen)."""
    ownership: OwnershipGate | None = None
    """Which keys may run here (a scale-out replica); ``None`` runs every key."""


ReconcileFunction = Callable[[RunContext], Awaitable[Result | None]]


class Controller:
    """Runs a reconciler for keys, at most one run per key at a time.

    ``reconciler`` is an object with ``async def reconcile(self, ctx)`` or such a function. It
    returns ``None`` or a :class:`Result`, or raises: :class:`DependencyNotReady` (woken when a
    dependency is ready), :class:`TerminalError` (no retry), any other exception (a failure,
    retried through ``rate_limiter``). ``timeout`` bounds each run; a run past it ends as
    ``DEADLINE``, a failure.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler | ReconcileFunction,
        *,
        max_concurrent: int = 1,
        timeout: float | None = None,
        rate_limiter: RateLimiter | None = None,
        supersede: SupersedePolicy = SupersedePolicy.CANCEL_RUN,
        queue_observer: QueueObserver | None = None,
    ) -> None:
        if not name:
            raise ValueError("a controller needs a name")
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0")
        reconcile = getattr(reconciler, "reconcile", reconciler)
        if not callable(reconcile):
            raise TypeError("reconciler must be an async function or have an async reconcile(ctx) method")
        if not (
            inspect.iscoroutinefunction(reconcile)
            or inspect.iscoroutinefunction(getattr(type(reconcile), "__call__", None))  # noqa: B004
        ):
            raise TypeError("reconciler must be async: define it with 'async def'")
        self.name = name
        self.reconciler = reconciler
        self._reconcile: ReconcileFunction = reconcile
        self.max_concurrent = max_concurrent
        self.timeout = timeout
        self.supersede = supersede
        self.queue: WorkQueue[ObjectRef] = WorkQueue(
            rate_limiter=rate_limiter, observer=queue_observer, name=name
        )
        self._sequence = 0
        self._runs_started = 0
        self._running: dict[ObjectRef, Run] = {}
        self._own_writes = OwnWrites(self._retrigger)
        self._wiring: ControllerWiring | None = None
        self._observers: Sequence[RunObserver] = ()
        self._deps = DependencyIndex()
        self._gate: OwnershipGate | None = None
        self._stopping = False
        self._live_workers = 0
        self.worker_failures = 0
        """Workers that died on an unexpected (engine or observer) error."""
        self.trigger_errors = 0
        """Times user code on the way to this controller raised for one item (a source's
        mapper or key function, an observer's ``on_trigger``); that item was skipped."""
        self._outcomes: dict[OutcomeKind, int] = dict.fromkeys(OutcomeKind, 0)
        self._succeeded = 0
        self._now: Callable[[], float] = trio.current_time
        """``trio.current_time``, or while serving, the run's clock read directly (cheaper)."""

    def __repr__(self) -> str:
        return f"<Controller {self.name!r} workers={self.max_concurrent} supersede={self.supersede.value}>"

    # -- triggering --------------------------------------------------------------------------

    def next_sequence(self) -> int:
        """Allocate the sequence number of one observed change.

        Sources that deliver one observation as several triggers (an update mapped from both
        the old and the new object) allocate it once and pass it as ``sequence=`` to each.
        """
        self._sequence += 1
        return self._sequence

    def trigger(
        self,
        ref: ObjectRef,
        *,
        reason: str = "",
        revision: str | None = None,
        sequence: int | None = None,
        priority: Priority = Priority.NORMAL,
        news: bool = False,
    ) -> Trigger | None:
        """Enqueue ``ref`` at ``priority`` and, per the supersede policy, supersede its run in
        progress.

        One synchronous step, no checkpoint: the key is marked dirty (or queued) first, and a
        run is cancelled only if that succeeded, so a cancel without a matching enqueue cannot
        happen. A run is superseded only by a trigger observed after the run's own trigger
        (``sequence`` greater than the run's), so one change delivered twice never cancels
        the run it started. A key queued already keeps the better of its priority and
        ``priority`` (see :class:`WorkQueue`). Returns the trigger, or ``None`` once the
        controller is stopping.

        Own writes are not news: a ``revision`` that a run of ``ref`` wrote (through a client
        that notes its writes, as ``engine.kube.Client`` does) is the echo of that write: it is
        dropped and ``None`` is returned. While a run of ``ref`` has a write in flight, a
        trigger with a revision is held (``None`` is returned) until the write's answer, then
        dropped if it was the echo and applied at once otherwise (see :mod:`engine._writes`).
        ``news=True`` says the change cannot be a run's own write alone (a source that sees more
        than one write in it): it is never taken for an echo.
        """
        if sequence is None:
            self._sequence += 1
            seq = self._sequence
        else:
            seq = sequence
        # tuple.__new__ is what Trigger(...) calls, without the named tuple's Python-level frame.
        trig = _new_tuple(Trigger, (ref, seq, reason, revision, self._now(), priority))
        if revision is not None and not news and self._own_writes and not self._own_writes.screen(trig):
            return None
        # The newest trigger of a key waits for its run as the note of the key in the queue.
        kept = self.queue.add_noted(ref, trig, priority)
        if kept is not None:
            if kept is False:
                return None
            if seq >= kept.sequence:
                self.queue.replace_note(ref, trig)
        superseded = None
        if self._running and (run := self._running.get(ref)) is not None and run.trigger.sequence < seq:
            policy = self.supersede
            why = f"superseded by trigger #{seq}" + (f" ({reason})" if reason else "")
            if policy is SupersedePolicy.CANCEL_RUN:
                run.cancel(CancelCause.SUPERSEDED, why)
                superseded = run
            elif policy is SupersedePolicy.INTERRUPTIBLE:
                run.supersede_pending = why
                if run.interruptible_depth:
                    run.cancel(CancelCause.SUPERSEDED, why)
                    superseded = run
        if self._observers:
            self._notify_trigger(trig, superseded)
        return trig

    def _retrigger(self, held: Trigger) -> None:
        self.trigger(held.ref, reason=held.reason, revision=held.revision, sequence=held.sequence,
                     priority=held.priority)

    def _notify_trigger(self, trig: Trigger, superseded: Run | None) -> None:
        for observer in self._observers:
            try:
                observer.on_trigger(self, trig, superseded)
            except Exception as exc:
                self.trigger_errors += 1
                logger.error(
                    "run observer %s raised on a trigger of %s: %s", type(observer).__name__, trig.ref, _summary(exc),
                    exc_info=exc, extra={"controller": self.name, "object": str(trig.ref)},
                )

    def count_trigger_error(self) -> None:
        """Count one item a source skipped because user code raised for it (in
        :attr:`trigger_errors`). Synchronous; sources call it, after logging the item."""
        self.trigger_errors += 1

    # -- introspection -----------------------------------------------------------------------

    @property
    def outcomes(self) -> dict[OutcomeKind, int]:
        """How many runs ended in each way (a snapshot)."""
        counts = dict(self._outcomes)
        counts[OutcomeKind.SUCCEEDED] += self._succeeded
        return counts

    @property
    def running(self) -> dict[ObjectRef, Run]:
        """Runs in progress, by key (a copy)."""
        return dict(self._running)

    @property
    def active_workers(self) -> int:
        """Workers running a reconcile right now."""
        return len(self._running)

    @property
    def live_workers(self) -> int:
        """Worker tasks alive. Fewer than ``max_concurrent`` while serving means one died."""
        return self._live_workers

    @property
    def healthy(self) -> bool:
        """False once a worker died on an engine error (reconciler errors never kill workers)."""
        return self.worker_failures == 0

    # -- lifecycle (driven by Manager) -------------------------------------------------------

    def bind(self, wiring: ControllerWiring) -> None:
        """Connect the controller to what it reports to. Synchronous.

        :meth:`Manager.add_controller <engine.Manager.add_controller>` calls it; binding again
        with the same wiring is a no-op, with another raises :class:`ManagerStateError`.
        """
        if self._wiring is not None and self._wiring is not wiring:
            raise ManagerStateError(f"controller {self.name!r} already belongs to another manager")
        self._wiring = wiring
        self._observers = wiring.observers
        self._deps = wiring.dependencies
        self._gate = wiring.ownership
        if self._gate is not None:
            self._gate.attach(self)

    def shutdown(self) -> None:
        """Refuse new triggers and stop handing out keys; runs in progress go on.

        Idempotent, synchronous, not a checkpoint. Keys queued or delayed are dropped;
        ``queue.drain()`` waits for the runs in progress, and :meth:`serve` returns after them.
        """
        self._stopping = True
        self.queue.shutdown()

    def cancel_runs(self, cause: CancelCause, reason: str, *, force: bool = False) -> int:
        """Cancel every run in progress with ``cause``; returns how many. Not a checkpoint.

        With ``force`` their ``ctx.shield`` sections are cancelled too.
        """
        runs = list(self._running.values())
        for run in runs:
            if force:
                run.force_cancel(cause, reason)
            else:
                run.cancel(cause, reason)
        return len(runs)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the queue's timer and ``max_concurrent`` workers until :meth:`shutdown`.

        ``task_status.started()`` once the workers are started. Returns once the queue is shut
        down and every run in progress ended. Raises :class:`ManagerStateError` unless bound.

        Cancellation: runs in progress end as ``SHUTDOWN`` (their observers see it, no failure
        is recorded) and the keys they held are released; keys still queued stay queued.
        """
        if self._wiring is None:
            raise ManagerStateError(f"controller {self.name!r} must be added to a manager to run")
        self._now = trio.lowlevel.current_clock().current_time
        try:
            async with trio.open_nursery() as held_triggers:
                held_triggers.start_soon(self._own_writes.run, name=f"{self.name}-held-triggers")
                try:
                    async with trio.open_nursery() as nursery:
                        await nursery.start(self.queue.run)
                        for i in range(self.max_concurrent):
                            nursery.start_soon(self._worker, name=f"{self.name}-worker-{i}")
                        task_status.started()
                finally:
                    held_triggers.cancel_scope.cancel()
        finally:
            self._now = trio.current_time

    # -- running -----------------------------------------------------------------------------

    async def _worker(self) -> None:
        self._live_workers += 1
        try:
            await self._work()
        except Exception:
            self.worker_failures += 1
            logger.critical(
                "controller worker died on an engine error; the process reports itself unhealthy",
                exc_info=True, extra={"controller": self.name},
            )
        finally:
            self._live_workers -= 1

    async def _work(self) -> None:
        """Take keys and run them until the queue shuts down.

        Each run is cancelled through a cancel scope no other run can see: a worker keeps one
        scope for consecutive runs (entering a trio cancel scope costs more than the rest of a
        no-op run) and replaces it as soon as it was cancelled or given a deadline. The engine
        only cancels a run that is in progress (``Run.cancel`` is a no-op once it ended), so a
        cancellation never reaches the next run of the same worker.
        """
        queue = self.queue
        timeout = self.timeout
        assert self._wiring is not None
        recorder = self._wiring.recorder
        gate = self._gate
        running = self._running
        name = self.name
        deps = self._deps
        observers = self._observers
        read_clock = self._now
        # Writes are noted for the run this worker runs now (none while it waits for a key).
        own_writes = self._own_writes
        writer = own_writes.writer()
        # num_requeues and forget are called only while some key is failing.
        failing = queue.failing_keys
        key: ObjectRef | None = None
        while True:
            scope = trio.CancelScope()
            run: Run | None = None
            try:
                with scope:
                    while True:
                        key = writer.key = None
                        key = await queue.get()
                        if self._stopping:
                            queue.done(key)
                            continue
                        if gate is not None and not gate.admit(self, key):
                            queue.forget(key)
                            queue.done(key)
                            continue
                        # The run begins (inlined: this is every run's path).
                        trig = queue.handed_out_note
                        now = queue.handed_out_at
                        priority = queue.handed_out_priority
                        if trig is None:
                            trig = Trigger(key, self._sequence, "requeue", None, now, priority)
                        elif trig.priority is not priority:
                            trig = Trigger(key, trig.sequence, trig.reason, trig.revision, trig.observed_at, priority)
                        self._runs_started += 1
                        # Positional arguments: a keyword call costs more.
                        run = Run(
                            self._runs_started, name, key, trig,
                            queue.num_requeues(key) + 1 if failing else 1, now, scope,
                        )
                        running[key] = run
                        run.dependency_epoch = deps.begin(self, key)
                        if observers:
                            for observer in observers:
                                observer.on_run_started(self, run)
                        if timeout is not None:
                            scope.deadline = run.started_at + timeout
                        writer.key = key
                        if own_writes:
                            own_writes.started(key)
                        try:
                            result = await self._reconcile(RunContext(run, recorder))
                        except Exception as exc:
                            outcome = self._error_outcome(run, scope, exc)
                        except BaseExceptionGroup as group:
                            # The reconciler's own nursery ended with Cancelled *and* errors:
                            # settle the run from the errors, then let Cancelled reach its scope.
                            cancelled, rest = group.split(trio.Cancelled)
                            if rest is None or not isinstance(rest, Exception):
                                raise
                            self._end(run, self._error_outcome(run, scope, rest))
                            run = None
                            if cancelled is not None:
                                raise cancelled from None
                            break
                        else:
                            outcome = SUCCEEDED if result is None else self._result_outcome(result)
                        if outcome is SUCCEEDED:
                            # _end(run, SUCCEEDED), inlined: this is every successful run's path.
                            del running[key]
                            run.outcome = outcome
                            run.finished_at = read_clock()
                            self._succeeded += 1
                            try:
                                if failing:
                                    queue.forget(key)
                                if observers:
                                    for observer in observers:
                                        observer.on_run_finished(self, run, outcome)
                            finally:
                                if gate is not None:
                                    gate.ended(self, key)
                                queue.done(key)
                        else:
                            self._end(run, outcome)
                        spent = run.cause is not None
                        run = None
                        if spent or timeout is not None:
                            break
            except QueueShutDown:
                return
            except Exception:
                # An engine or observer error: this worker dies (the controller reports itself
                # unhealthy), but the key it held is released so shutdown does not wait on it.
                if key is not None and queue.is_processing(key):
                    self._running.pop(key, None)
                    if gate is not None:
                        gate.ended(self, key)
                    queue.done(key)
                raise
            except BaseException:
                # Cancelled, bare or as a group of only Cancelled from the reconciler's own
                # nurseries: the controllers nursery itself is cancelled (a forced shutdown, or
                # the caller of Manager.run was cancelled). Record the run, then unwind.
                if run is not None and run.finished_at is None:
                    self._end(run, Outcome(OutcomeKind.SHUTDOWN, reason=run.cancel_reason or "cancelled"))
                raise
            if run is not None:
                self._end(run, self._cancelled_outcome(run))

    def _end(self, run: Run, outcome: Outcome) -> None:
        key = run.key
        del self._running[key]
        run.outcome = outcome
        run.finished_at = self._now()
        try:
            if outcome is SUCCEEDED:
                self._succeeded += 1
                self.queue.forget(key)
            else:
                self._settle(run, outcome)
            if self._observers:
                for observer in self._observers:
                    observer.on_run_finished(self, run, outcome)
        finally:
            if self._gate is not None:
                self._gate.ended(self, key)
            self.queue.done(key)

    @property
    def _recorder(self) -> EventRecorder:
        assert self._wiring is not None
        return self._wiring.recorder

    def _cancelled_outcome(self, run: Run) -> Outcome:
        cause = run.cause
        if cause is not None:
            return Outcome(CAUSE_OUTCOME[cause], reason=run.cancel_reason)
        run.cause = CancelCause.DEADLINE
        run.cancel_reason = f"run exceeded the controller timeout of {self.timeout}s"
        return Outcome(OutcomeKind.DEADLINE, error=TimeoutError(run.cancel_reason), reason=run.cancel_reason)

    def _error_outcome(self, run: Run, scope: trio.CancelScope, error: Exception) -> Outcome:
        if scope.cancel_called:
            logger.debug("run %s raised after it was cancelled: %r", run.id, error)
            return self._cancelled_outcome(run)
        leaf = _single_leaf(error)
        if isinstance(leaf, DependencyNotReady):
            return Outcome(
                OutcomeKind.DEPENDENCY_NOT_READY,
                requeue_after=leaf.retry_after,
                error=leaf,
                dependencies=leaf.refs,
            )
        if isinstance(leaf, TerminalError):
            return Outcome(OutcomeKind.TERMINAL, error=leaf)
        return Outcome(OutcomeKind.FAILED, error=error)

    @staticmethod
    def _result_outcome(result: object) -> Outcome:
        if result is None:
            return SUCCEEDED
        if not isinstance(result, Result):
            return Outcome(
                OutcomeKind.FAILED,
                error=TypeError(f"reconciler returned {type(result).__name__}, expected Result or None"),
            )
        if result.requeue_after is None:
            return SUCCEEDED
        return Outcome(OutcomeKind.REQUEUE_AFTER, requeue_after=result.requeue_after, priority=result.priority)

    def _settle(self, run: Run, outcome: Outcome) -> None:
        """Count and act on an outcome other than the shared ``SUCCEEDED`` (which ``_end`` settles).

        A requeue keeps the priority the run was handed out at, unless the result asks for one.
        """
        key = run.key
        queue = self.queue
        kind = outcome.kind
        priority = run.trigger.priority
        self._outcomes[kind] += 1
        if kind is OutcomeKind.SUCCEEDED:
            queue.forget(key)
        elif kind is OutcomeKind.REQUEUE_AFTER:
            queue.forget(key)
            queue.add_after(
                key, outcome.requeue_after or 0.0,
                priority if outcome.priority is None else outcome.priority,
            )
        elif kind is OutcomeKind.FAILED or kind is OutcomeKind.DEADLINE:
            queue.add_rate_limited(key, priority)
            summary = _summary(outcome.error)
            retry_in = queue.ready_in(key)
            context: dict[str, object] = {"controller": self.name, "object": str(key), "reconcileID": run.id}
            if retry_in is not None:
                context["retryIn"] = round(retry_in, 3)
            if kind is OutcomeKind.FAILED:
                logger.error("reconciler error", extra={**context, "error": summary})
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("reconciler error traceback", exc_info=outcome.error, extra=context)
                self._recorder.warning(key, "ReconcileFailed", summary, controller=self.name, run_id=run.id)
            else:
                logger.error("reconcile deadline exceeded: %s", summary, extra=context)
                self._recorder.warning(
                    key, "ReconcileDeadlineExceeded", summary, controller=self.name, run_id=run.id
                )
        elif kind is OutcomeKind.TERMINAL:
            queue.forget(key)
            logger.error(
                "terminal reconciler error: %s", _summary(outcome.error),
                extra={"controller": self.name, "object": str(key), "reconcileID": run.id},
            )
            self._recorder.warning(
                key, "ReconcileTerminalError", _summary(outcome.error), controller=self.name, run_id=run.id
            )
        elif kind is OutcomeKind.DEPENDENCY_NOT_READY:
            queue.forget(key)
            assert self._wiring is not None
            if not self._wiring.dependencies.wait(self, key, outcome.dependencies, since=run.dependency_epoch):
                queue.add_after(key, outcome.requeue_after or 0.0, priority)
        else:
            logger.debug(
                "run %s ended: %s (%s)", run.id, kind.value, outcome.reason,
                extra={"controller": self.name, "object": str(key), "reconcileID": run.id},
            )


def _single_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _summary(error: BaseException | None) -> str:
    return "unknown error" if error is None else summarize(error)


