"""The manager: owns the nursery tree, runs controllers and services, shuts down gracefully.

::

    Manager.run()
     ├─ services nursery     closed last: event recorder and sinks, user services
     └─ controllers nursery  closed first
         ├─ sources          cancelled first: no new triggers
         └─ per controller   queue timer + workers; each run in its own cancel scope

Start-up: services, then (with leader election) the warm sources (informers, holding their
triggers) while this replica stands by, then leadership, then the other sources, then the
start gates (cache sync), then controllers, then the warm sources' triggers (every cached key,
at low priority, replayed in batches while the controllers already run). A warm standby thus
has its caches filled and kept current before it leads, and starts its controllers on them at
once; it runs nothing and writes nothing meanwhile. With ``enable_warmup=False`` every source
starts only once leadership was acquired.

Shutdown: stop sources and stop handing out keys (synchronously, in :meth:`Manager.stop`),
wait up to ``grace_period`` for running runs, cancel the rest with cause ``SHUTDOWN``, run the
shutdown hooks (a leader lease is released here), flush event sinks within
``event_flush_timeout``, return. Keys still queued or delayed are dropped: the next start
re-lists everything. A second signal (or :meth:`Manager.force_stop`) cancels at once.
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from ._controller import Controller, ControllerWiring, RunObserver
from ._deps import DependencyIndex
from ._errors import ManagerStateError
from ._events import EventRecorder, EventSink
from ._outcome import CancelCause
from ._ownership import OwnershipGate
from ._refs import ObjectRef
from ._sources import Source, WarmSource
from ._tracing import RunTracer

__all__ = ["Manager", "ShutdownReport", "LeaderElection"]

logger = logging.getLogger("engine.manager")

DEFAULT_GRACE_PERIOD = 15.0
"""Seconds running runs get after a stop. Kubernetes kills a pod ``terminationGracePeriodSeconds``
(default 30) after SIGTERM; the whole shutdown must fit in it: this drain, then the
``SHUTDOWN`` cancellation with the runs' shielded status writes (``ctx.shield(seconds)``, a
few seconds), the lease release, then the event flush (:data:`DEFAULT_EVENT_FLUSH_TIMEOUT`).
15 + 5 leaves 10 s for the rest; raise ``terminationGracePeriodSeconds`` with the grace period."""
DEFAULT_EVENT_FLUSH_TIMEOUT = 5.0
"""Seconds event sinks get to deliver what is queued at the end of a shutdown."""

Service = Callable[..., Awaitable[Any]]
ShutdownHook = Callable[[], Awaitable[None]]


class LeaderElection(Protocol):
    """What the manager needs from a leader election (``engine.kube.LeaderElector`` is one).

    The manager starts :meth:`run` in its services nursery, waits for :meth:`wait_leading`
    before it starts controllers and sources, calls :meth:`release` after every run ended on a
    graceful shutdown, and registers a callback with :meth:`on_lost`.
    """

    @property
    def is_leader(self) -> bool: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None:
        """Acquire and renew leadership until cancelled; ``started()`` once running.

        Cancellation: the manager cancels it last, with its services; it must stop at once
        (a lease still held then expires on its own).
        """
        ...

    async def wait_leading(self) -> None:
        """Return once this process holds leadership.

        Cancellation: a checkpoint; nothing changes. The manager cancels the wait when it
        is stopped before leadership was acquired.
        """
        ...

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` synchronously when leadership is lost (renewal failed
        past the renew deadline), before another replica can acquire it."""
        ...

    async def release(self) -> None:
        """Give leadership up at once so a standby takes over (graceful shutdown).

        Errors are logged by the manager, not raised further.

        Cancellation: a forced shutdown (or cancelling :meth:`Manager.run`) cancels it; the
        lease may then stay held until it expires.
        """
        ...


class _State(enum.Enum):
    UNSTARTED = "unstarted"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


@attrs.frozen
class ShutdownReport:
    """How a :meth:`Manager.run` ended."""

    reason: str
    """Why the stop began (``"SIGTERM"``, the ``stop()`` reason...)."""
    forced: bool
    """True if a second signal or ``force_stop()`` cut the graceful shutdown short."""
    drain_seconds: float
    """Time from the stop to the last run ending."""
    cancelled_runs: int
    """Runs still running after the grace period, cancelled with cause ``SHUTDOWN``."""
    events_flushed: bool
    """Whether every sink delivered its queue within ``event_flush_timeout``."""


class Manager:
    """Runs controllers, sources and services under one nursery tree until stopped.

    ``grace_period`` (controller-runtime's ``GracefulShutdownTimeout``; default 15 s, so that
    the drain, the cancellation with its shielded status writes and the event flush all fit in
    a pod's default 30 s ``terminationGracePeriodSeconds``, see :data:`DEFAULT_GRACE_PERIOD`) is
    how long running runs get after a stop; ``event_flush_timeout`` (default 5 s) how long
    sinks get to deliver what is queued. With ``handle_signals`` (and when run in the main thread) the first
    SIGTERM/SIGINT starts a graceful shutdown and the second cancels everything at once.
    With ``ownership`` (an :class:`OwnershipGate`, a scale-out replica) workers run only the
    keys the gate says this replica owns.

    With ``leader_election`` and ``enable_warmup`` (the default; controller-runtime's
    ``EnableWarmup``, the runner's ``--warm-standby``), a standby replica runs its
    :class:`WarmSource` sources (the informers of a :class:`engine.kube.Cluster`) while it waits
    for leadership: their caches are listed, watched and kept current (a broken watch resumes
    or relists as usual), but they raise no trigger, so no run starts and nothing is written
    (the only writes are the election's own). Once it leads, each warm source raises a trigger
    for every cached key at ``Priority.LOW`` (what a start-up list would), in batches once the
    controllers started on the synced caches, so the first run does not wait for the last key:
    a failover costs the Lease acquisition, not a full list. With
    ``enable_warmup=False`` a standby starts its sources only once it leads (less memory on
    standbys, a full list on failover). Losing leadership stops everything, warm sources
    included, as without warm-up.
    """

    def __init__(
        self,
        *,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        event_flush_timeout: float = DEFAULT_EVENT_FLUSH_TIMEOUT,
        handle_signals: bool = True,
        event_buffer_size: int = 1024,
        leader_election: LeaderElection | None = None,
        ownership: OwnershipGate | None = None,
        enable_warmup: bool = True,
        name: str = "manager",
    ) -> None:
        if grace_period < 0:
            raise ValueError("grace_period must be >= 0")
        if event_flush_timeout < 0:
            raise ValueError("event_flush_timeout must be >= 0")
        self.name = name
        self.grace_period = grace_period
        self.event_flush_timeout = event_flush_timeout
        self.handle_signals = handle_signals
        self.events = EventRecorder(buffer_size=event_buffer_size)
        self.dependencies = DependencyIndex()
        self._controllers: list[Controller] = []
        self._sources: list[Source] = []
        self._services: list[Service] = []
        self._shutdown_hooks: list[ShutdownHook] = []
        self._observers: list[RunObserver] = []
        self._wiring = ControllerWiring(
            recorder=self.events, dependencies=self.dependencies, observers=self._observers,
            ownership=ownership,
        )
        self.ownership = ownership
        """The gate deciding which keys run here (a scale-out replica), or ``None``."""
        self.enable_warmup = enable_warmup
        """Whether a standby runs its warm sources before it leads (see the class documentation)."""
        self._state = _State.UNSTARTED
        self._stop_event = trio.Event()
        self._stop_reason = ""
        self._stopped_at: float | None = None
        self._forced = False
        self._sources_scope = trio.CancelScope()
        self._controllers_scope: trio.CancelScope | None = None
        self._services_scope: trio.CancelScope | None = None
        self._started = trio.Event()
        self.leader_election = leader_election
        self._leadership_lost: str | None = None
        self._start_wait_scope: trio.CancelScope | None = None
        self._start_gates: list[Callable[[], Awaitable[None]]] = []
        self._leading = trio.Event()
        self._sources_started = trio.Event()
        self._serving = trio.Event()
        self._warm: list[WarmSource] = []

    def __repr__(self) -> str:
        return f"<Manager {self.name!r} {self._state.value} controllers={[c.name for c in self._controllers]}>"

    # -- assembling --------------------------------------------------------------------------

    def _check_unstarted(self, what: str) -> None:
        if self._state is not _State.UNSTARTED:
            raise ManagerStateError(f"cannot add {what} to a manager that is {self._state.value}")

    def add_controller(self, controller: Controller) -> Controller:
        """Add a controller; returns it. Only before :meth:`run`."""
        self._check_unstarted("a controller")
        if any(c.name == controller.name for c in self._controllers):
            raise ValueError(f"a controller named {controller.name!r} is already registered")
        controller.bind(self._wiring)
        self._controllers.append(controller)
        return controller

    def add_source(self, source: Source) -> None:
        """Add a source, run in the sources nursery (stopped first at shutdown)."""
        self._check_unstarted("a source")
        self._sources.append(source)

    def add_service(self, service: Service) -> None:
        """Add a service ``async def service(*, task_status)`` run in the services nursery.

        It is started with ``nursery.start`` (so it must call ``task_status.started()``) and
        is cancelled after the event sinks were flushed.
        """
        self._check_unstarted("a service")
        self._services.append(service)

    def add_sink(self, sink: EventSink, *, buffer_size: int | None = None) -> None:
        """Attach an event sink, drained by its own task in the services nursery."""
        self._check_unstarted("an event sink")
        self.events.add_sink(sink, buffer_size=buffer_size)

    def add_observer(self, observer: RunObserver) -> None:
        """Add a run observer (metrics, live stream, tests)."""
        self._observers.append(observer)

    def _trace_runs(self) -> None:
        """Add a :class:`RunTracer` for OpenTelemetry's global tracer provider, when one was set
        and no tracer was added; put tracers first, so other observers see a run's trace id."""
        if not any(isinstance(o, RunTracer) for o in self._observers):
            tracer = RunTracer.from_global_provider()
            if tracer is not None:
                self._observers.append(tracer)
        self._observers.sort(key=lambda o: not isinstance(o, RunTracer))

    def add_start_gate(self, gate: Callable[[], Awaitable[None]]) -> None:
        """Await ``gate()`` after sources started and before controllers start (for example,
        until informer caches are synced, as controller-runtime waits for cache sync).

        Triggers raised meanwhile are queued, not lost. A stop cancels the wait.
        """
        self._check_unstarted("a start gate")
        self._start_gates.append(gate)

    def add_shutdown_hook(self, hook: ShutdownHook) -> None:
        """Run ``await hook()`` after every run ended and before sinks are flushed."""
        self._shutdown_hooks.append(hook)

    @property
    def controllers(self) -> list[Controller]:
        return list(self._controllers)

    def controller(self, name: str) -> Controller:
        for c in self._controllers:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def started(self) -> bool:
        """True once every controller and source started (after leadership was acquired, with
        leader election), until the stop began."""
        return self._started.is_set() and self._state is _State.RUNNING

    @property
    def standby(self) -> bool:
        """True while this replica runs and waits for leadership (before it leads, and before a
        stop began)."""
        return (
            self.leader_election is not None and self._state is _State.RUNNING and not self._leading.is_set()
            and not self._stop_event.is_set()
        )

    @property
    def warming(self) -> bool:
        """True while this replica is a :attr:`standby` whose warm sources run (see
        ``enable_warmup``): its caches fill before it leads."""
        return self.standby and bool(self._warm)

    @property
    def stopping(self) -> bool:
        return self._state in (_State.STOPPING, _State.STOPPED)

    async def wait_started(self) -> None:
        """Return once every controller and source started (see :attr:`started`).

        It never returns for a manager that was stopped before it started.

        Cancellation: a checkpoint; nothing changes.
        """
        await self._started.wait()

    # -- readiness ---------------------------------------------------------------------------

    def mark_ready(self, ref: ObjectRef, *, revision: str | None = None) -> int:
        """``ref`` became ready: trigger its dependents now. Synchronous; returns how many."""
        for observer in self._observers:
            observer.on_ready(ref, revision)
        return self.dependencies.mark_ready(ref, revision=revision)

    # -- stopping ----------------------------------------------------------------------------

    def stop(self, reason: str = "stop requested") -> None:
        """Begin a graceful shutdown. Idempotent, synchronous, not a checkpoint.

        Before it returns, sources are cancelled and no controller hands out another key, so
        no run starts after the stop began.
        """
        if self._stop_event.is_set():
            return
        self._stop_reason = reason
        self._stopped_at = trio.current_time()
        logger.info("graceful shutdown started: %s", reason)
        self._sources_scope.cancel(reason=f"manager stopping: {reason}")
        for controller in self._controllers:
            controller.shutdown()
        if self._state is _State.RUNNING:
            self._state = _State.STOPPING
        if self._start_wait_scope is not None:
            self._start_wait_scope.cancel(reason=f"manager stopping: {reason}")
        self._stop_event.set()

    def force_stop(self, reason: str = "forced stop") -> None:
        """Cancel everything at once: runs (with cause ``SHUTDOWN``, shields included), sinks,
        services. Synchronous; :meth:`run` returns promptly afterwards."""
        self.stop(reason)
        self._forced = True
        logger.warning("forced shutdown: %s", reason)
        for controller in self._controllers:
            controller.cancel_runs(CancelCause.SHUTDOWN, f"forced shutdown: {reason}", force=True)
        if self._controllers_scope is not None:
            self._controllers_scope.cancel(reason=f"forced shutdown: {reason}")
        if self._services_scope is not None:
            self._services_scope.cancel(reason=f"forced shutdown: {reason}")

    def _lose_leadership(self, reason: str) -> None:
        """Fencing: cancel every run at once (cause ``LEADERSHIP_LOST``, not a failure) and stop."""
        if self._leadership_lost is not None:
            return
        self._leadership_lost = reason
        logger.error("leadership lost: %s; cancelling every run and stopping", reason)
        self.stop(f"leadership lost: {reason}")
        for controller in self._controllers:
            controller.cancel_runs(CancelCause.LEADERSHIP_LOST, f"leadership lost: {reason}", force=True)

    @property
    def leadership_lost(self) -> str | None:
        """Why leadership was lost, if it was (the process should then exit non-zero)."""
        return self._leadership_lost

    async def _watch_signals(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if not self._stop_event.is_set():
                    self.stop(name)
                else:
                    self.force_stop(f"second signal ({name})")

    # -- running -----------------------------------------------------------------------------

    async def _run_sources(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the warm sources (triggers held), report started, then, once leading, start
        the other sources and, once the controllers serve, release the warm sources' triggers
        (replayed while the controllers run). All of them live in the sources scope."""
        started = False
        try:
            with self._sources_scope:
                async with trio.open_nursery() as nursery:
                    for source in self._warm:
                        source.hold_triggers()
                        await nursery.start(source.run)
                    task_status.started()
                    started = True
                    await self._leading.wait()
                    for other in self._sources:
                        if not any(other is warm for warm in self._warm):
                            await nursery.start(other.run)
                    self._sources_started.set()
                    await self._serving.wait()
                    if not self._stop_event.is_set():
                        for warm in self._warm:
                            nursery.start_soon(warm.release_triggers)
                    await trio.sleep_forever()
        finally:
            self._sources_started.set()
        if not started:
            task_status.started()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> ShutdownReport:
        """Run until :meth:`stop`, a signal, or :meth:`force_stop`; then shut down gracefully.

        ``task_status.started()`` is called once every controller and source is running.
        Returns a :class:`ShutdownReport`. A manager runs once; a second call raises
        :class:`ManagerStateError`.

        Cancellation: (the surrounding scope is cancelled) everything is cancelled at once,
        with no grace period: runs end as ``SHUTDOWN`` (no failure recorded), event sinks are
        not flushed (what they had queued counts as ``not_flushed``), shutdown hooks do not
        run and leadership is not released; then ``Cancelled`` propagates and no report is
        returned. Use :meth:`stop` for a graceful shutdown.
        """
        if self._state is not _State.UNSTARTED:
            raise ManagerStateError("Manager.run() can only be called once")
        self._state = _State.RUNNING
        self._trace_runs()
        cancelled_runs = 0
        drain_seconds = 0.0
        flushed = False
        async with trio.open_nursery() as services:
            self._services_scope = services.cancel_scope
            await services.start(self.events.run)
            for service in self._services:
                await services.start(service)
            if self.handle_signals and threading.current_thread() is threading.main_thread():
                await services.start(self._watch_signals)
            leader = self.leader_election
            if leader is not None:
                leader.on_lost(self._lose_leadership)
                if self.enable_warmup:
                    self._warm = [s for s in self._sources if isinstance(s, WarmSource)]
                await services.start(leader.run)
            try:
                async with trio.open_nursery() as controllers:
                    self._controllers_scope = controllers.cancel_scope
                    await controllers.start(self._run_sources)
                    if leader is not None:
                        with trio.CancelScope() as waiting:
                            self._start_wait_scope = waiting
                            if self._stop_event.is_set():
                                waiting.cancel()
                            logger.info(
                                "waiting for leadership%s",
                                f" ({len(self._warm)} warm source(s) filling their caches)" if self._warm else "",
                            )
                            await leader.wait_leading()
                        self._start_wait_scope = None
                    self._leading.set()
                    await self._sources_started.wait()
                    for gate in self._start_gates:
                        with trio.CancelScope() as gate_scope:
                            self._start_wait_scope = gate_scope
                            if self._stop_event.is_set():
                                gate_scope.cancel()
                            await gate()
                        self._start_wait_scope = None
                    for controller in self._controllers:
                        await controllers.start(controller.serve)
                    self._serving.set()
                    if not self._stop_event.is_set():
                        self._started.set()
                        task_status.started()
                    await self._stop_event.wait()
                    with trio.move_on_after(self.grace_period):
                        for controller in self._controllers:
                            await controller.queue.drain()
                    for controller in self._controllers:
                        cancelled_runs += controller.cancel_runs(
                            CancelCause.SHUTDOWN,
                            f"graceful shutdown ({self._stop_reason}): grace period of {self.grace_period}s elapsed",
                        )
                    if cancelled_runs:
                        logger.warning("cancelled %d run(s) still running after the grace period", cancelled_runs)
            finally:
                # Every run has ended once the controllers nursery is closed, however it closed
                # (a forced stop cancels past the code below).
                if self._stopped_at is not None:
                    drain_seconds = trio.current_time() - self._stopped_at
            if leader is not None and leader.is_leader and self._leadership_lost is None:
                try:
                    await leader.release()
                except Exception:
                    logger.exception("releasing leadership failed")
            for hook in self._shutdown_hooks:
                try:
                    await hook()
                except Exception:
                    logger.exception("shutdown hook failed")
            self.events.close()
            with trio.move_on_after(self.event_flush_timeout):
                await self.events.wait_flushed()
                flushed = True
            if not flushed:
                logger.warning("event sinks not flushed within %ss; dropping the rest", self.event_flush_timeout)
            services.cancel_scope.cancel(reason="manager stopped")
        self._state = _State.STOPPED
        if not self._started.is_set():
            task_status.started()
        report = ShutdownReport(
            reason=self._stop_reason,
            forced=self._forced,
            drain_seconds=drain_seconds,
            cancelled_runs=cancelled_runs,
            events_flushed=flushed and not self._forced,
        )
        logger.info(
            "manager stopped", extra={"drain_seconds": round(drain_seconds, 3), "forced": self._forced}
        )
        return report
