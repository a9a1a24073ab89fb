from __future__ import annotations

import pytest
import trio
import trio.testing

from engine import (
    CancelCause,
    Controller,
    EventType,
    Manager,
    ManagerStateError,
    MemorySink,
    ObjectRef,
    OutcomeKind,
    RunContext,
    RunLog,
)

from ._support import running

FAST = ObjectRef("K", "fast")
SLOW = ObjectRef("K", "slow")


def setup(reconcile, *, grace: float = 10, **kwargs):  # type: ignore[no-untyped-def]
    manager = Manager(handle_signals=False, grace_period=grace, **kwargs)
    sink = MemorySink()
    manager.add_sink(sink)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=4))
    return manager, controller, log, sink


async def test_graceful_shutdown_lets_runs_finish_within_grace_then_cancels_with_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    causes = {}

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3 if ctx.ref == FAST else 3600)
        finally:
            causes[ctx.ref] = ctx.cancel_cause

    manager, controller, log, sink = setup(reconcile, grace=10)
    async with running(manager) as reports:
        controller.trigger(FAST)
        controller.trigger(SLOW)
        await trio.sleep(1)
        stopped_at = trio.current_time()
        manager.stop("test")
    assert trio.current_time() - stopped_at == pytest.approx(10)
    assert causes == {FAST: None, SLOW: CancelCause.SHUTDOWN}
    assert dict(zip([r.key for r in log.records], log.kinds())) == {
        FAST: OutcomeKind.SUCCEEDED, SLOW: OutcomeKind.SHUTDOWN,
    }
    assert [e for e in sink.events if e.type is EventType.WARNING] == []
    assert reports[0].cancelled_runs == 1
    assert not reports[0].forced


async def test_shutdown_returns_as_soon_as_runs_are_done(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(2)

    manager, controller, log, _ = setup(reconcile, grace=30)
    async with running(manager) as reports:
        controller.trigger(FAST)
        await trio.sleep(1)
        t0 = trio.current_time()
        manager.stop()
    assert trio.current_time() - t0 == pytest.approx(1)
    assert reports[0].cancelled_runs == 0


async def test_no_run_starts_after_stop_began(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(1)

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=1))
    async with running(manager):
        for i in range(5):
            controller.trigger(ObjectRef("K", f"k{i}"))
        controller.queue.add_after(ObjectRef("K", "later"), 0.5)
        await trio.sleep(0.5)
        manager.stop()
        stop_time = trio.current_time()
    assert len(log.started) == 1
    assert all(started <= stop_time for *_, started in log.started)


async def test_shutdown_cancelled_run_status_write_in_shield_completes(autojump_clock: trio.testing.MockClock) -> None:
    writes = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3600)
        finally:
            with ctx.shield(5):
                await trio.sleep(2)
                writes.append(ctx.cancel_cause)

    manager, controller, log, _ = setup(reconcile, grace=1)
    async with running(manager):
        controller.trigger(SLOW)
        await trio.sleep(1)
        manager.stop()
    assert writes == [CancelCause.SHUTDOWN]


async def test_force_stop_cancels_at_once_including_shields(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3600)
        finally:
            with ctx.shield(600):
                await trio.sleep(600)

    manager, controller, log, _ = setup(reconcile, grace=30)
    async with running(manager) as reports:
        controller.trigger(SLOW)
        await trio.sleep(1)
        manager.stop()
        await trio.sleep(1)
        t0 = trio.current_time()
        manager.force_stop("second signal")
    assert trio.current_time() - t0 < 0.001
    assert reports[0].forced
    assert log.kinds() == [OutcomeKind.SHUTDOWN]


async def test_flush_timeout_bounds_a_black_holed_sink(autojump_clock: trio.testing.MockClock) -> None:
    class Hole:
        name = "hole"

        async def deliver(self, event: object) -> None:
            await trio.sleep_forever()

    manager = Manager(handle_signals=False, event_flush_timeout=3)
    manager.add_sink(Hole())
    async with running(manager) as reports:
        manager.events.normal(FAST, "R", "m")
        await trio.sleep(1)
        t0 = trio.current_time()
    assert trio.current_time() - t0 == pytest.approx(3)
    assert not reports[0].events_flushed


async def test_manager_runs_once_and_refuses_late_additions(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    async with running(manager):
        with pytest.raises(ManagerStateError, match=r"^cannot add a controller to a manager that is running$"):
            manager.add_controller(Controller("late", reconcile))
    with pytest.raises(ManagerStateError, match=r"^Manager.run\(\) can only be called once$"):
        await manager.run()


async def test_duplicate_controller_name_is_refused() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    manager.add_controller(Controller("c", reconcile))
    with pytest.raises(ValueError, match=r"^a controller named 'c' is already registered$"):
        manager.add_controller(Controller("c", reconcile))


async def test_a_controller_belongs_to_one_manager() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    controller = Controller("c", reconcile)
    Manager(handle_signals=False).add_controller(controller)
    with pytest.raises(ManagerStateError, match=r"^controller 'c' already belongs to another manager$"):
        Manager(handle_signals=False).add_controller(controller)


async def test_an_unbound_controller_cannot_serve() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    with pytest.raises(ManagerStateError, match=r"^controller 'c' must be added to a manager to run$"):
        await Controller("c", reconcile).serve()


async def test_observers_added_after_the_controller_see_its_runs(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    log = RunLog()
    manager.add_observer(log)
    async with running(manager):
        controller.trigger(FAST)
        await trio.testing.wait_all_tasks_blocked()
    assert log.kinds(FAST) == [OutcomeKind.SUCCEEDED]


async def test_stop_before_run_returns_promptly(autojump_clock: trio.testing.MockClock) -> None:
    manager = Manager(handle_signals=False)
    manager.stop("early")
    report = await manager.run()
    assert report.reason == "early"


async def test_services_start_before_and_stop_after_controllers(autojump_clock: trio.testing.MockClock) -> None:
    order = []

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        order.append("service up")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            order.append("service down")

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3600)
        finally:
            order.append(f"run ended: {ctx.cancel_cause}")

    async def hook() -> None:
        order.append("shutdown hook")

    manager, controller, _, _ = setup(reconcile, grace=1)
    manager.add_service(service)
    manager.add_shutdown_hook(hook)
    async with running(manager):
        controller.trigger(SLOW)
        await trio.sleep(1)
    assert order == ["service up", "run ended: CancelCause.SHUTDOWN", "shutdown hook", "service down"]


async def _nested_nursery_reconcile(ctx: RunContext) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        await trio.sleep_forever()


def _assert_every_started_run_ended_once(controller: Controller, log: RunLog) -> None:
    assert controller.active_workers == 0
    assert controller.running == {}
    assert sorted(r.run_id for r in log.records) == sorted({r.run_id for r in log.records})
    assert len(log.records) == len(log.started)


async def test_a_run_force_cancelled_inside_a_nested_nursery_is_ended_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelling a reconciler's own nursery from outside gives a group of only ``Cancelled``;
    the run is still ended (observers see it finish, no worker stays active)."""
    manager, controller, log, sink = setup(_nested_nursery_reconcile, grace=30)
    async with running(manager) as reports:
        controller.trigger(SLOW)
        controller.trigger(FAST)
        await trio.sleep(1)
        manager.stop("test")
        await trio.sleep(1)
        manager.force_stop("second signal")
    assert reports[0].forced
    assert log.kinds() == [OutcomeKind.SHUTDOWN, OutcomeKind.SHUTDOWN]
    _assert_every_started_run_ended_once(controller, log)
    assert [e for e in sink.events if e.type is EventType.WARNING] == []


async def test_runs_inside_nested_nurseries_end_when_the_caller_of_run_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager, controller, log, _ = setup(_nested_nursery_reconcile, grace=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        controller.trigger(SLOW)
        controller.trigger(FAST)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert log.kinds() == [OutcomeKind.SHUTDOWN, OutcomeKind.SHUTDOWN]
    _assert_every_started_run_ended_once(controller, log)


async def test_drain_seconds_after_stop_then_force_stop_is_the_time_to_the_last_run_ending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(3600)

    manager, controller, log, _ = setup(reconcile, grace=30)
    async with running(manager) as reports:
        controller.trigger(SLOW)
        await trio.sleep(1)
        manager.stop("test")
        await trio.sleep(2.5)
        manager.force_stop("second signal")
    assert reports[0].forced
    assert reports[0].drain_seconds == pytest.approx(2.5)
    assert log.records[-1].finished_at - log.records[-1].started_at == pytest.approx(3.5)
