"""Prometheus metrics for a manager, named and labelled as controller-runtime and client-go do.

Hot-path hooks only add to plain ints, dicts and bucket arrays; a custom collector turns them
into metric families when ``/metrics`` is scraped. Each :class:`EngineMetrics` has its own
``CollectorRegistry``, so several managers in one process (tests) never share a series.

controller-runtime's series:

* ``controller_runtime_reconcile_total{controller,result}``: ``result`` is the engine's
  :class:`OutcomeKind` value (``success``, ``error``, ``requeue_after``, ``terminal_error``,
  ``dependency_not_ready``, ``superseded``, ``shutdown``, ``deadline``, ``leadership_lost``, ``handover``),
  plus ``requeue`` (always 0: the engine has no bare requeue) so dashboards keep their series.
* ``controller_runtime_reconcile_errors_total{controller}``: failed runs (``error``,
  ``terminal_error``, ``deadline``). Superseded and shutdown-cancelled runs are not errors.
* ``controller_runtime_terminal_reconcile_errors_total{controller}``
* ``controller_runtime_reconcile_time_seconds{controller}`` (controller-runtime's buckets)
* ``controller_runtime_active_workers{controller}``,
  ``controller_runtime_max_concurrent_reconciles{controller}``

client-go's workqueue series, ``name`` being the controller's name: ``workqueue_depth``,
``workqueue_adds_total``, ``workqueue_queue_duration_seconds``,
``workqueue_work_duration_seconds``, ``workqueue_unfinished_work_seconds``,
``workqueue_longest_running_processor_seconds``, ``workqueue_retries_total``.

By priority (see :class:`~engine.Priority`): ``engine_workqueue_depth{name,priority}`` and
``engine_workqueue_longest_wait_seconds{name,priority}`` (how long the longest-ready key of
that priority has been waiting), ``priority`` being the value as controller-runtime labels it
(``-100``, ``0``, ``100``). controller-runtime's priority queue puts that label on
``workqueue_depth`` itself; here ``workqueue_depth{name}`` keeps client-go's labels (the total),
so dashboards built on it keep working.

The engine's own (prefix ``engine_``): supersedes, live and failed workers, items skipped
because user code on the trigger path raised (``engine_trigger_errors_total``), events emitted,
delivered, failed and dropped per sink and reason, dependency wake-ups, the last shutdown's
drain duration.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .._observer import RunObserver
from .._outcome import Outcome, OutcomeKind
from .._run import Run
from .._workqueue import QueueObserver

if TYPE_CHECKING:
    from .._controller import Controller
    from .._manager import Manager

__all__ = ["EngineMetrics", "RECONCILE_TIME_BUCKETS", "WORKQUEUE_DURATION_BUCKETS"]

logger = logging.getLogger("engine.metrics")

RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0,
    20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)
"""controller-runtime's ``controller_runtime_reconcile_time_seconds`` buckets."""

WORKQUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(1e-8 * 10**i for i in range(12))
"""client-go's ``prometheus.ExponentialBuckets(10e-9, 10, 12)``: 10 ns to 1000 s."""

_ERRORS = frozenset({OutcomeKind.FAILED, OutcomeKind.TERMINAL, OutcomeKind.DEADLINE})
_RESULTS = [kind.value for kind in OutcomeKind] + ["requeue"]


class _Histogram:
    """Bucket counts kept as a list of ints; ``observe`` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts):
            running += count
            out.append((_float_str(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


def _float_str(value: float) -> str:
    return repr(float(value))


class _ControllerMetrics:
    """Counters of one controller; also its work queue's observer."""

    __slots__ = (
        "name", "results", "reconcile_time", "adds", "retries",
        "queue_duration", "work_duration", "chained",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.results: dict[OutcomeKind, int] = dict.fromkeys(OutcomeKind, 0)
        self.reconcile_time = _Histogram(RECONCILE_TIME_BUCKETS)
        self.adds = 0
        self.retries = 0
        self.queue_duration = _Histogram(WORKQUEUE_DURATION_BUCKETS)
        self.work_duration = _Histogram(WORKQUEUE_DURATION_BUCKETS)
        self.chained: QueueObserver | None = None

    def on_add(self, key: Hashable) -> None:
        self.adds += 1
        if self.chained is not None:
            self.chained.on_add(key)

    def on_get(self, key: Hashable, queued_for: float) -> None:
        h = self.queue_duration
        h.counts[bisect.bisect_left(h.bounds, queued_for)] += 1
        h.total += queued_for
        if self.chained is not None:
            self.chained.on_get(key, queued_for)

    def on_done(self, key: Hashable, worked_for: float) -> None:
        h = self.work_duration
        h.counts[bisect.bisect_left(h.bounds, worked_for)] += 1
        h.total += worked_for
        if self.chained is not None:
            self.chained.on_done(key, worked_for)

    def on_retry(self, key: Hashable) -> None:
        self.retries += 1
        if self.chained is not None:
            self.chained.on_retry(key)


class _RunMetrics(RunObserver):
    """Counts outcomes and run durations. A supersede always ends its run as ``SUPERSEDED``,
    so ``on_trigger`` is not needed: ``engine_supersedes_total`` is that outcome's count."""

    def __init__(self, owner: EngineMetrics) -> None:
        self._by_name = owner._controllers

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        m = self._by_name.get(controller.name)
        if m is None:
            m = self._by_name[controller.name] = _ControllerMetrics(controller.name)
        m.results[outcome.kind] += 1
        finished = run.finished_at
        if finished is not None:
            h = m.reconcile_time
            elapsed = finished - run.started_at
            h.counts[bisect.bisect_left(h.bounds, elapsed)] += 1
            h.total += elapsed


class EngineMetrics:
    """Collects a manager's metrics into :attr:`registry` (one registry per manager).

    Construct it before :meth:`Manager.run`: it adds a run observer at once and a service that,
    when the manager starts, becomes each controller's work-queue observer (chaining an
    observer that was already set). ``process_metrics`` adds prometheus-client's process,
    platform and GC collectors (``process_*``, ``python_*``) to the registry.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = True,
    ) -> None:
        self.manager = manager
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._controllers: dict[str, _ControllerMetrics] = {}
        self.drain_seconds: float | None = None
        """Drain duration of the last shutdown, once known (see :meth:`record_shutdown`)."""
        manager.add_observer(_RunMetrics(self))
        manager.add_service(self._attach)
        self.registry.register(_Collector(self))
        if process_metrics:
            from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    def _for(self, controller: Controller) -> _ControllerMetrics:
        m = self._controllers.get(controller.name)
        if m is None:
            m = self._controllers[controller.name] = _ControllerMetrics(controller.name)
        return m

    def attach(self, controller: Controller) -> None:
        """Become ``controller``'s queue observer (idempotent). Not a checkpoint."""
        m = self._for(controller)
        current = controller.queue.observer
        if current is m:
            return
        m.chained = current
        controller.queue.observer = m

    async def _attach(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        for controller in self.manager.controllers:
            self.attach(controller)
        task_status.started()

    def record_shutdown(self, drain_seconds: float) -> None:
        """Set ``engine_shutdown_drain_seconds`` (from :attr:`ShutdownReport.drain_seconds`)."""
        self.drain_seconds = drain_seconds

    def generate(self, accept: str | None = None) -> tuple[bytes, str]:
        """Render the registry for a scrape: ``(body, content type)``, negotiated on ``accept``."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _Collector:
    def __init__(self, owner: EngineMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        return self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        owner = self._owner
        manager = owner.manager
        try:
            now: float | None = trio.current_time()
        except RuntimeError:
            now = None
        c = "controller"
        total = CounterMetricFamily(
            "controller_runtime_reconcile_total", "Total number of reconciliations per controller",
            labels=[c, "result"],
        )
        errors = CounterMetricFamily(
            "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller",
            labels=[c],
        )
        terminal = CounterMetricFamily(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller", labels=[c],
        )
        rtime = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            labels=[c],
        )
        active = GaugeMetricFamily(
            "controller_runtime_active_workers", "Number of currently used workers per controller", labels=[c],
        )
        maxc = GaugeMetricFamily(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller",
            labels=[c],
        )
        n = "name"
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=[n])
        adds = CounterMetricFamily("workqueue_adds_total", "Total number of adds handled by workqueue", labels=[n])
        qdur = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested", labels=[n],
        )
        wdur = HistogramMetricFamily(
            "workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes.",
            labels=[n],
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads.", labels=[n],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.", labels=[n],
        )
        retries = CounterMetricFamily(
            "workqueue_retries_total", "Total number of retries handled by workqueue", labels=[n],
        )
        p = "priority"
        depth_by = GaugeMetricFamily(
            "engine_workqueue_depth", "Current depth of workqueue by priority", labels=[n, p],
        )
        wait_by = GaugeMetricFamily(
            "engine_workqueue_longest_wait_seconds",
            "How many seconds the longest-ready item of each priority has been waiting in workqueue",
            labels=[n, p],
        )
        supersedes = CounterMetricFamily(
            "engine_supersedes_total", "Runs cancelled because a newer trigger arrived for their key", labels=[c],
        )
        live = GaugeMetricFamily("engine_workers_alive", "Worker tasks alive per controller", labels=[c])
        dead = CounterMetricFamily(
            "engine_worker_failures_total", "Workers that died on an engine error per controller", labels=[c],
        )
        trigger_errors = CounterMetricFamily(
            "engine_trigger_errors_total",
            "Items skipped because user code on the trigger path raised (a mapper, a key function)",
            labels=[c],
        )
        emitted = CounterMetricFamily("engine_events_emitted_total", "Events emitted by reconcilers and the engine")
        delivered = CounterMetricFamily(
            "engine_events_delivered_total", "Events delivered per sink", labels=["sink"],
        )
        failed = CounterMetricFamily(
            "engine_events_failed_total", "Event deliveries that raised, per sink", labels=["sink"],
        )
        dropped = CounterMetricFamily(
            "engine_events_dropped_total",
            "Events dropped, per sink ('*' is the recorder) and reason", labels=["sink", "reason"],
        )
        wakeups = CounterMetricFamily(
            "engine_dependency_wakeups_total", "Dependents woken because a dependency became ready",
        )
        drain = GaugeMetricFamily(
            "engine_shutdown_drain_seconds", "Seconds from the stop to the last run ending, for the last shutdown",
        )
        families: list[Metric] = [
            total, errors, terminal, rtime, active, maxc, depth, adds, qdur, wdur, unfinished, longest,
            retries, depth_by, wait_by, supersedes, live, dead, trigger_errors, emitted, delivered, failed, dropped, wakeups, drain,
        ]
        if with_samples:
            for controller in manager.controllers:
                name = controller.name
                m = owner._for(controller)
                labels = [name]
                for kind, count in m.results.items():
                    total.add_metric([name, kind.value], count)
                total.add_metric([name, "requeue"], 0)
                errors.add_metric(labels, sum(m.results[k] for k in _ERRORS))
                terminal.add_metric(labels, m.results[OutcomeKind.TERMINAL])
                h = m.reconcile_time
                rtime.add_metric(labels, h.cumulative(), h.total)
                active.add_metric(labels, controller.active_workers)
                maxc.add_metric(labels, controller.max_concurrent)
                stats = controller.queue.statistics() if now is not None else None
                depth.add_metric(labels, stats.depth if stats is not None else len(controller.queue))
                adds.add_metric(labels, m.adds)
                qdur.add_metric(labels, m.queue_duration.cumulative(), m.queue_duration.total)
                wdur.add_metric(labels, m.work_duration.cumulative(), m.work_duration.total)
                if now is not None and stats is not None:
                    runs = controller.running.values()
                    unfinished.add_metric(labels, sum(now - r.started_at for r in runs))
                    longest.add_metric(labels, stats.longest_processing)
                    for priority, count in stats.depth_by_priority.items():
                        depth_by.add_metric([name, str(priority.value)], count)
                    for priority, waited in stats.longest_wait_by_priority.items():
                        wait_by.add_metric([name, str(priority.value)], waited)
                retries.add_metric(labels, m.retries)
                supersedes.add_metric(labels, m.results[OutcomeKind.SUPERSEDED])
                live.add_metric(labels, controller.live_workers)
                dead.add_metric(labels, controller.worker_failures)
                trigger_errors.add_metric(labels, controller.trigger_errors)
            stats_ev = manager.events.statistics()
            emitted.add_metric([], stats_ev.emitted)
            for sink, counts in stats_ev.sinks.items():
                delivered.add_metric([sink], counts.delivered)
                failed.add_metric([sink], counts.failed)
            for (sink, reason), count in sorted(stats_ev.drops.items()):
                dropped.add_metric([sink, reason], count)
            wakeups.add_metric([], manager.dependencies.wakeups)
            if owner.drain_seconds is not None:
                drain.add_metric([], owner.drain_seconds)
        return iter(families)
