from __future__ import annotations

import re
from collections.abc import Hashable

import pytest
import trio
import trio.testing

from engine import (
    Controller,
    DependencyNotReady,
    Event,
    Manager,
    MemorySink,
    ObjectRef,
    OutcomeKind,
    Priority,
    Result,
    RunContext,
    TerminalError,
)
from engine.observability import EngineMetrics, Observability
from engine.observability._metrics import RECONCILE_TIME_BUCKETS

from .._support import running
from ._support import Recorder, Samples, get, parse, value

OK = ObjectRef("Widget", "ok", "ns")
BAD = ObjectRef("Widget", "bad", "ns")
SUP = ObjectRef("Widget", "sup", "ns")
TERM = ObjectRef("Widget", "term", "ns")
LATER = ObjectRef("Widget", "later", "ns")
STUCK = ObjectRef("Widget", "stuck", "ns")
SLOW = ObjectRef("Widget", "slow", "ns")


async def test_scrape_over_http_after_scripted_runs() -> None:
    """success, error, superseded, terminal, requeue_after, deadline and shutdown, scraped live."""
    release = trio.Event()

    async def reconcile(ctx: RunContext) -> Result | None:
        if ctx.ref == BAD and ctx.attempt == 1:
            raise ValueError("boom")
        if ctx.ref == SUP and ctx.attempt == 1 and not release.is_set():
            await trio.sleep_forever()
        if ctx.ref == TERM:
            raise TerminalError("cannot ever work")
        if ctx.ref == LATER:
            return Result(requeue_after=3600)
        if ctx.ref == STUCK:
            await trio.sleep_forever()
        return None

    async def timed(ctx: RunContext) -> None:
        if ctx.attempt == 1:
            await trio.sleep_forever()

    manager = Manager(handle_signals=False, grace_period=0)
    recorder = Recorder()
    manager.add_observer(recorder)
    c = manager.add_controller(Controller("widgets", reconcile, max_concurrent=4))
    d = manager.add_controller(Controller("timed", timed, timeout=0.05))
    obs = Observability(manager, metrics_bind_address="127.0.0.1:0")
    scraped: list[Samples] = []
    openmetrics: list[tuple[str, str]] = []

    async def scrape_during_shutdown() -> None:
        response = await get(obs.metrics_address, "/metrics")
        scraped.append(parse(response.text))
        om = await get(obs.metrics_address, "/metrics", headers={"accept": "application/openmetrics-text"})
        openmetrics.append((om.headers["content-type"], om.text))

    manager.add_shutdown_hook(scrape_during_shutdown)
    with trio.fail_after(10):
        async with running(manager):
            assert obs.metrics_address is not None and obs.metrics_address[1] != 0
            for ref in (OK, BAD, TERM, LATER):
                c.trigger(ref)
            d.trigger(SLOW)
            c.trigger(SUP, reason="first")
            await recorder.wait_until(lambda: ("widgets", str(SUP), 1) in recorder.started)
            c.trigger(SUP, reason="second")
            release.set()
            await recorder.wait_until(lambda: len(recorder.kinds(str(SUP))) == 2)
            await recorder.wait_until(lambda: len(recorder.kinds(str(BAD))) == 2)
            await recorder.wait_until(lambda: len(recorder.kinds(str(SLOW))) == 2)
            await recorder.wait_until(lambda: len(recorder.finished) == 9)
            live = parse((await get(obs.metrics_address, "/metrics")).text)
            c.trigger(STUCK)
            await recorder.wait_until(lambda: ("widgets", str(STUCK), 1) in recorder.started)
            during = parse((await get(obs.metrics_address, "/metrics")).text)
    assert recorder.kinds(str(SUP)) == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED]
    assert value(live, "controller_runtime_active_workers", controller="widgets") == 0
    assert value(during, "controller_runtime_active_workers", controller="widgets") == 1
    assert value(during, "workqueue_longest_running_processor_seconds", name="widgets") >= 0
    assert value(during, "workqueue_unfinished_work_seconds", name="widgets") >= 0

    (samples,) = scraped
    expected = {
        "success": 3, "error": 1, "terminal_error": 1, "requeue_after": 1, "superseded": 1,
        "shutdown": 1, "deadline": 0, "dependency_not_ready": 0, "leadership_lost": 0, "requeue": 0,
    }
    for result, count in expected.items():
        assert value(samples, "controller_runtime_reconcile_total", controller="widgets", result=result) == count, result
    assert value(samples, "controller_runtime_reconcile_total", controller="timed", result="deadline") == 1
    assert value(samples, "controller_runtime_reconcile_total", controller="timed", result="success") == 1
    assert value(samples, "controller_runtime_reconcile_errors_total", controller="widgets") == 2
    assert value(samples, "controller_runtime_reconcile_errors_total", controller="timed") == 1
    assert value(samples, "controller_runtime_terminal_reconcile_errors_total", controller="widgets") == 1
    assert value(samples, "controller_runtime_reconcile_time_seconds_count", controller="widgets") == 8
    assert value(samples, "controller_runtime_reconcile_time_seconds_bucket", controller="timed", le="+Inf") == 2
    assert value(samples, "controller_runtime_reconcile_time_seconds_bucket", controller="timed", le="0.005") <= 1
    assert value(samples, "controller_runtime_max_concurrent_reconciles", controller="widgets") == 4
    assert value(samples, "controller_runtime_max_concurrent_reconciles", controller="timed") == 1
    assert value(samples, "controller_runtime_active_workers", controller="widgets") == 0
    assert value(samples, "engine_supersedes_total", controller="widgets") == 1
    assert value(samples, "workqueue_retries_total", name="widgets") == 1
    assert value(samples, "workqueue_retries_total", name="timed") == 1
    # ok, bad (twice), term, later, sup (twice: the supersede re-delivers it), stuck
    assert value(samples, "workqueue_adds_total", name="widgets") == 8
    assert value(samples, "workqueue_queue_duration_seconds_count", name="widgets") == 8
    assert value(samples, "workqueue_work_duration_seconds_count", name="widgets") == 8
    assert value(samples, "workqueue_depth", name="widgets") == 0
    assert value(samples, "engine_events_emitted_total") == 3  # error, terminal error, deadline warnings
    buckets = [
        float(le) for (name, labels), _ in samples.items()
        if name == "controller_runtime_reconcile_time_seconds_bucket" and ("controller", "widgets") in labels
        for key, le in labels if key == "le" and le != "+Inf"
    ]
    assert sorted(buckets) == list(RECONCILE_TIME_BUCKETS)
    assert any(name.startswith("process_") for name, _ in samples)
    content_type, text = openmetrics[0]
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")


async def test_histograms_and_gauges_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    started = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        started.set()
        await trio.sleep(3)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    metrics = EngineMetrics(manager, process_metrics=False)
    reg = metrics.registry
    async with running(manager):
        controller.trigger(ObjectRef("K", "a"))
        controller.trigger(ObjectRef("K", "b"))
        await started.wait()
        await trio.sleep(1.5)
        assert reg.get_sample_value("workqueue_unfinished_work_seconds", {"name": "c"}) == pytest.approx(1.5)
        assert reg.get_sample_value("workqueue_longest_running_processor_seconds", {"name": "c"}) == pytest.approx(1.5)
        assert reg.get_sample_value("workqueue_depth", {"name": "c"}) == 1
        assert reg.get_sample_value("controller_runtime_active_workers", {"controller": "c"}) == 1
        await trio.sleep(10)
    h = "controller_runtime_reconcile_time_seconds"
    assert reg.get_sample_value(f"{h}_count", {"controller": "c"}) == 2
    assert reg.get_sample_value(f"{h}_sum", {"controller": "c"}) == pytest.approx(6)
    assert reg.get_sample_value(f"{h}_bucket", {"controller": "c", "le": "2.5"}) == 0
    assert reg.get_sample_value(f"{h}_bucket", {"controller": "c", "le": "3.0"}) == 2
    q = "workqueue_queue_duration_seconds"
    assert reg.get_sample_value(f"{q}_sum", {"name": "c"}) == pytest.approx(3)
    assert reg.get_sample_value(f"{q}_bucket", {"name": "c", "le": "1.0"}) == 1
    assert reg.get_sample_value(f"{q}_bucket", {"name": "c", "le": "10.0"}) == 2
    assert reg.get_sample_value("workqueue_work_duration_seconds_sum", {"name": "c"}) == pytest.approx(6)
    assert reg.get_sample_value("engine_workers_alive", {"controller": "c"}) == 0


async def test_each_manager_has_its_own_registry(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    managers = [Manager(handle_signals=False) for _ in range(2)]
    metrics = []
    for m in managers:
        m.add_controller(Controller("same-name", reconcile))
        metrics.append(EngineMetrics(m, process_metrics=False))
    async with running(managers[0]):
        managers[0].controller("same-name").trigger(ObjectRef("K", "a"))
        await trio.sleep(1)
    labels = {"controller": "same-name", "result": "success"}
    assert metrics[0].registry.get_sample_value("controller_runtime_reconcile_total", labels) == 1
    assert metrics[1].registry.get_sample_value("controller_runtime_reconcile_total", labels) == 0


class _Blocked:
    name = "blocked"

    async def deliver(self, event: Event) -> None:
        await trio.sleep_forever()


class _Failing:
    name = "failing"

    async def deliver(self, event: Event) -> None:
        raise ConnectionError("endpoint down")


async def test_event_dependency_and_shutdown_metrics(autojump_clock: trio.testing.MockClock) -> None:
    dep = ObjectRef("Source", "repo", "ns")

    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref.name == "dependent" and not ctx.trigger.reason.startswith("dependency"):
            raise DependencyNotReady([dep])
        for i in range(5):
            ctx.events.normal("Step", f"step {i}")

    manager = Manager(handle_signals=False, event_flush_timeout=1)
    manager.add_sink(MemorySink("memory"))
    manager.add_sink(_Blocked(), buffer_size=1)
    manager.add_sink(_Failing())
    controller = manager.add_controller(Controller("c", reconcile))
    metrics = EngineMetrics(manager, process_metrics=False)
    async with running(manager) as reports:
        controller.trigger(ObjectRef("K", "dependent"))
        await trio.sleep(1)
        assert manager.mark_ready(dep) == 1
        await trio.sleep(1)
    metrics.record_shutdown(reports[0].drain_seconds)
    reg = metrics.registry
    assert reg.get_sample_value("engine_events_emitted_total") == 5
    assert reg.get_sample_value("engine_events_delivered_total", {"sink": "memory"}) == 5
    assert reg.get_sample_value("engine_events_failed_total", {"sink": "failing"}) == 5
    assert reg.get_sample_value("engine_events_dropped_total", {"sink": "blocked", "reason": "queue_full"}) == 3
    assert reg.get_sample_value("engine_dependency_wakeups_total") == 1
    assert reg.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": "c", "result": "dependency_not_ready"}
    ) == 1
    assert reg.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "c"}) == 0
    assert reg.get_sample_value("engine_shutdown_drain_seconds") == reports[0].drain_seconds


async def test_an_existing_queue_observer_keeps_receiving_calls(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[str] = []

    class Mine:
        def on_add(self, key: Hashable) -> None:
            calls.append("add")

        def on_get(self, key: Hashable, queued_for: float) -> None:
            calls.append("get")

        def on_done(self, key: Hashable, worked_for: float) -> None:
            calls.append("done")

        def on_retry(self, key: Hashable) -> None:
            calls.append("retry")

    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile, queue_observer=Mine()))
    metrics = EngineMetrics(manager, process_metrics=False)
    async with running(manager):
        controller.trigger(ObjectRef("K", "a"))
        await trio.sleep(1)
    assert calls == ["add", "get", "done"]
    assert metrics.registry.get_sample_value("workqueue_adds_total", {"name": "c"}) == 1


def test_collect_outside_trio_and_metric_names() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    manager.add_controller(Controller("c", reconcile))
    body, content_type = EngineMetrics(manager, process_metrics=False).generate()
    assert content_type.startswith("text/plain; version=0.0.4")
    names = set(re.findall(r"^# TYPE (\S+) ", body.decode(), flags=re.M))
    assert {
        "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
        "controller_runtime_terminal_reconcile_errors_total", "controller_runtime_reconcile_time_seconds",
        "controller_runtime_active_workers", "controller_runtime_max_concurrent_reconciles",
        "workqueue_depth", "workqueue_adds_total", "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds", "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds", "workqueue_retries_total", "engine_supersedes_total",
        "engine_events_emitted_total", "engine_events_delivered_total", "engine_events_failed_total",
        "engine_events_dropped_total", "engine_dependency_wakeups_total", "engine_shutdown_drain_seconds",
        "engine_workers_alive", "engine_worker_failures_total",
    } <= names


async def test_queue_depth_and_longest_wait_by_priority(autojump_clock: trio.testing.MockClock) -> None:
    started = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        started.set()
        await trio.sleep(10)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    reg = EngineMetrics(manager, process_metrics=False).registry
    async with running(manager):
        controller.trigger(ObjectRef("K", "busy"))
        await started.wait()
        controller.trigger(ObjectRef("K", "listed-1"), priority=Priority.LOW)
        await trio.sleep(2)
        controller.trigger(ObjectRef("K", "listed-2"), priority=Priority.LOW)
        controller.trigger(ObjectRef("K", "changed"))
        await trio.sleep(1)

        def sample(family: str, priority: str) -> float | None:
            return reg.get_sample_value(family, {"name": "c", "priority": priority})

        assert reg.get_sample_value("workqueue_depth", {"name": "c"}) == 3
        assert [sample("engine_workqueue_depth", p) for p in ("-100", "0", "100")] == [2, 1, 0]
        waits = [sample("engine_workqueue_longest_wait_seconds", p) for p in ("-100", "0", "100")]
        assert waits == [pytest.approx(3), pytest.approx(1), 0]
