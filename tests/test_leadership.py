"""The manager's side of leader election, with an in-memory election."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from engine import CancelCause, Controller, EventType, Manager, MemorySink, ObjectRef, OutcomeKind, RunContext, RunLog

from ._support import running

A = ObjectRef("K", "a")


class FakeElection:
    def __init__(self) -> None:
        self.is_leader = False
        self._leading = trio.Event()
        self._callbacks: list[Callable[[str], None]] = []
        self.released = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    def grant(self) -> None:
        self.is_leader = True
        self._leading.set()

    def lose(self) -> None:
        self.is_leader = False
        for cb in self._callbacks:
            cb("renewal failed past the renew deadline")

    async def wait_leading(self) -> None:
        await self._leading.wait()

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._callbacks.append(callback)

    async def release(self) -> None:
        self.released += 1
        self.is_leader = False


def setup(reconcile):  # type: ignore[no-untyped-def]
    election = FakeElection()
    manager = Manager(handle_signals=False, leader_election=election)
    sink = MemorySink()
    manager.add_sink(sink)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("c", reconcile))
    return election, manager, controller, log, sink


async def test_no_reconcile_before_leadership(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    election, manager, controller, log, _ = setup(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(5)
        assert not manager.started
        controller.trigger(A)
        await trio.sleep(5)
        assert log.records == []
        election.grant()
        await manager.wait_started()
        await trio.sleep(1)
        assert log.kinds() == [OutcomeKind.SUCCEEDED]
        manager.stop()
    assert election.released == 1, "leadership is released on graceful shutdown"


async def test_lost_leadership_cancels_runs_with_their_own_cause_and_stops(autojump_clock: trio.testing.MockClock) -> None:
    causes = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3600)
        finally:
            causes.append(ctx.cancel_cause)
            with ctx.shield(60):
                await trio.sleep(60)  # fencing cancels shields too

    election, manager, controller, log, sink = setup(reconcile)
    election.grant()
    async with running(manager) as reports:
        controller.trigger(A)
        await trio.sleep(1)
        t0 = trio.current_time()
        election.lose()
        await trio.testing.wait_all_tasks_blocked()
        assert controller.running == {}, "every run ended before anything else could happen"
        assert trio.current_time() == t0
    assert causes == [CancelCause.LEADERSHIP_LOST]
    assert log.kinds() == [OutcomeKind.LEADERSHIP_LOST]
    assert not log.records[0].outcome.is_failure
    assert [e for e in sink.events if e.type is EventType.WARNING] == []
    assert manager.leadership_lost is not None
    assert election.released == 0, "a lost lease is not released"
    assert reports[0].reason.startswith("leadership lost")


async def test_stop_while_waiting_for_leadership(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    election, manager, controller, log, _ = setup(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(5)
        manager.stop("bye")
    assert log.records == []


class FakeWarmSource:
    """A warm source that records what the manager did with it, and triggers ``A`` when it runs
    (held: it must not reach the controller)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.calls: list[tuple[str, bool]] = []
        self.held = False
        self.running = False
        self.released_after_start = False

    def hold_triggers(self) -> None:
        self.held = True
        self.calls.append(("hold", False))

    async def release_triggers(self) -> None:
        self.held = False
        self.calls.append(("release", False))
        self.released_after_start = self.controller.live_workers > 0
        self.controller.trigger(A, reason="cached")
        await trio.lowlevel.checkpoint()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.calls.append(("run", self.held))
        self.running = True
        task_status.started()
        try:
            if not self.held:
                self.controller.trigger(A, reason="listed")
            await trio.sleep_forever()
        finally:
            self.running = False


class FakeSource:
    def __init__(self) -> None:
        self.started_at: float | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.started_at = trio.current_time()
        task_status.started()
        await trio.sleep_forever()


async def test_a_standby_runs_its_warm_sources_holding_triggers_and_releases_them_once_it_leads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    election, manager, controller, log, _ = setup(reconcile)
    warm, other = FakeWarmSource(controller), FakeSource()
    manager.add_source(warm)
    manager.add_source(other)
    assert manager.enable_warmup, "on by default"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(5)
        assert warm.calls == [("hold", False), ("run", True)] and warm.running
        assert other.started_at is None, "sources that are not warm wait for leadership"
        assert manager.standby and manager.warming and not manager.started
        assert controller.queue.statistics().depth == 0 and log.started == []
        election.grant()
        granted = trio.current_time()
        await manager.wait_started()
        await trio.testing.wait_all_tasks_blocked()
        assert warm.calls[-1] == ("release", False) and other.started_at == granted
        assert warm.released_after_start, "the replay runs once the controllers serve"
        assert not manager.standby and not manager.warming
        await trio.sleep(1)
        assert [trigger.reason for _, _, trigger, _ in log.started] == ["cached"]
        election.lose()
        await trio.testing.wait_all_tasks_blocked()
        assert not warm.running, "losing leadership stops the warm sources too"


async def test_without_warmup_every_source_starts_once_leading(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    election = FakeElection()
    manager = Manager(handle_signals=False, leader_election=election, enable_warmup=False)
    controller = manager.add_controller(Controller("c", reconcile))
    warm = FakeWarmSource(controller)
    manager.add_source(warm)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(5)
        assert warm.calls == [] and manager.standby and not manager.warming
        election.grant()
        await manager.wait_started()
        assert warm.calls == [("run", False)]
        manager.stop()


async def test_a_warm_standby_stopped_before_leading_stops_its_sources_and_releases_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    election, manager, controller, log, _ = setup(reconcile)
    warm = FakeWarmSource(controller)
    manager.add_source(warm)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(5)
        assert warm.running
        manager.stop("bye")
    assert not warm.running and warm.calls == [("hold", False), ("run", True)]
    assert log.started == [] and election.released == 0
