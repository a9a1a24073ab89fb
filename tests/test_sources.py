from __future__ import annotations

import logging
import random
from typing import Any

import pytest
import trio
import trio.testing

from engine import (
    Change,
    ChannelSource,
    Controller,
    Manager,
    MappedSource,
    ObjectRef,
    OutcomeKind,
    Priority,
    Run,
    RunContext,
    RunLog,
    RunObserver,
    SupersedePolicy,
    TimerSource,
    Trigger,
    Triggerable,
)
from engine.observability import EngineMetrics

from ._support import running

SRC = ObjectRef("Source", "repo", "ns")
BUNDLES = [ObjectRef("Bundle", f"b{i}", "ns") for i in range(3)]


async def test_channel_source_triggers_with_reason_and_revision(autojump_clock: trio.testing.MockClock) -> None:
    seen = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append((ctx.ref, ctx.trigger.reason, ctx.trigger.revision))

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    send, receive = trio.open_memory_channel[ObjectRef | Change](10)
    manager.add_source(ChannelSource(controller, receive))
    async with running(manager):
        await send.send(Change(BUNDLES[0], reason="created", revision="r1"))
        await send.send(BUNDLES[1])
        await trio.sleep(1)
    assert seen == [(BUNDLES[0], "created", "r1"), (BUNDLES[1], "changed", None)]


async def test_sources_are_stopped_first_at_shutdown(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(5)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    send, receive = trio.open_memory_channel[ObjectRef | Change](10)
    manager.add_source(ChannelSource(controller, receive))
    async with running(manager):
        await send.send(BUNDLES[0])
        await trio.sleep(1)
        manager.stop()
        send.send_nowait(BUNDLES[1])
    assert receive.statistics().current_buffer_used == 1, "the stopped source received nothing more"


async def test_timer_source_resyncs_with_jitter(autojump_clock: trio.testing.MockClock) -> None:
    times = []

    async def reconcile(ctx: RunContext) -> None:
        times.append(trio.current_time())

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    manager.add_source(TimerSource(controller, lambda: [BUNDLES[0]], interval=60, jitter=0.1, rng=random.Random(1)))
    async with running(manager):
        await trio.sleep(60 * 10 + 1)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert 9 <= len(times) <= 11
    assert all(54 <= g <= 66 for g in gaps)
    assert len(set(round(g, 3) for g in gaps)) > 1, "resyncs are jittered"


async def test_mapped_source_triggers_every_mapped_key_with_one_sequence(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        with ctx.interruptible():
            await trio.sleep(10)

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(
        Controller("bundles", reconcile, max_concurrent=3, supersede=SupersedePolicy.INTERRUPTIBLE)
    )
    index = {SRC: BUNDLES}
    mapped: MappedSource[ObjectRef] = MappedSource(controller, lambda ref: index.get(ref, []), reason="source changed")
    async with running(manager):
        assert mapped.handle_many([SRC, SRC]) == 3
        await trio.testing.wait_all_tasks_blocked()
        assert set(controller.running) == set(BUNDLES)
        mapped.handle(SRC, revision="r2")  # a new observation supersedes all three
        await trio.sleep(30)
    for b in BUNDLES:
        assert log.kinds(b) == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED]
        assert log.for_key(b)[-1].trigger.revision == "r2"


async def test_read_your_trigger(autojump_clock: trio.testing.MockClock) -> None:
    """A run never observes state older than the trigger that caused it: sources raise the
    trigger only after the state is readable, and the run reads the state after it starts."""
    cache: dict[ObjectRef, int] = {}
    violations = []

    async def reconcile(ctx: RunContext) -> None:
        assert ctx.trigger.revision is not None
        if cache[ctx.ref] < int(ctx.trigger.revision):
            violations.append((ctx.ref, cache[ctx.ref], ctx.trigger.revision))
        await trio.sleep(0.01)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=2))
    send, receive = trio.open_memory_channel[ObjectRef | Change](100)
    manager.add_source(ChannelSource(controller, receive))
    rng = random.Random(7)
    async with running(manager):
        for version in range(1, 200):
            ref = rng.choice(BUNDLES)
            cache[ref] = version
            await send.send(Change(ref, revision=str(version)))
            await trio.sleep(rng.choice([0, 0.001, 0.02]))
        await trio.sleep(5)
    assert violations == []


class Target:
    """A trigger target that is not a controller."""

    name = "target"

    def __init__(self) -> None:
        self.sequence = 0
        self.triggers: list[Trigger] = []

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def trigger(
        self, ref: ObjectRef, *, reason: str = "", revision: str | None = None, sequence: int | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> Trigger | None:
        trig = Trigger(ref=ref, sequence=self.next_sequence() if sequence is None else sequence, reason=reason,
                       revision=revision, priority=priority)
        self.triggers.append(trig)
        return trig


async def test_sources_trigger_any_triggerable(autojump_clock: trio.testing.MockClock) -> None:
    target = Target()
    checked: Triggerable = target
    mapped = MappedSource(checked, lambda ref: BUNDLES if ref == SRC else [], reason="source changed")
    assert mapped.handle_many([SRC, SRC], revision="r2") == 3
    assert target.triggers == [Trigger(ref=b, sequence=1, reason="source changed", revision="r2") for b in BUNDLES]
    send, receive = trio.open_memory_channel[ObjectRef | Change](1)
    async with trio.open_nursery() as nursery:
        await nursery.start(ChannelSource(target, receive).run)
        async with send:
            await send.send(Change(SRC, reason="created"))
    assert target.triggers[-1] == Trigger(ref=SRC, sequence=2, reason="created")


ITEMS = [{"kind": "Source", "metadata": {"namespace": "ns", "name": f"s{i}"}} for i in range(100)]


def _dependent(item: dict[str, Any]) -> list[ObjectRef]:
    name = item["metadata"]["name"]
    if name == "s42":
        raise AttributeError("'str' object has no attribute 'get'")
    return [ObjectRef("Bundle", f"for-{name}", "ns")]


async def test_a_mapper_raising_for_one_item_skips_only_that_item(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(1)

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("bundles", reconcile, max_concurrent=4))
    send, receive = trio.open_memory_channel[dict[str, Any]](len(ITEMS))
    mapped: MappedSource[dict[str, Any]] = MappedSource(controller, _dependent, receive, reason="source changed")
    manager.add_source(mapped)
    metrics = EngineMetrics(manager, process_metrics=False)
    with caplog.at_level(logging.ERROR, logger="engine.sources"):
        async with running(manager) as reports:
            for item in ITEMS:
                send.send_nowait(item)
            await trio.sleep(60)
            assert not manager.stopping  # the source never took the manager down
            send.send_nowait(ITEMS[0])  # and it still handles what comes after
            await trio.sleep(60)
    assert reports[0].reason == "test finished"
    reconciled = {r.key.name for r in log.records if r.kind is OutcomeKind.SUCCEEDED}
    assert reconciled == {f"for-s{i}" for i in range(100) if i != 42}
    assert len(log.records) == 100
    assert mapped.errors == 1
    assert controller.trigger_errors == 1
    assert metrics.registry.get_sample_value("engine_trigger_errors_total", {"controller": "bundles"}) == 1
    errors = [r for r in caplog.records if r.name == "engine.sources"]
    assert [r.getMessage() for r in errors] == [
        "mapper of source 'source changed' raised for Source/ns/s42; item skipped: "
        "AttributeError: 'str' object has no attribute 'get'"
    ]
    assert errors[0].object == "Source/ns/s42"  # type: ignore[attr-defined]


async def test_a_timer_sources_key_function_raising_skips_that_round_only(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    target = Target()
    rounds = 0

    def keys() -> list[ObjectRef]:
        nonlocal rounds
        rounds += 1
        if rounds == 2:
            raise KeyError("cache not ready")
        return BUNDLES

    timer = TimerSource(target, keys, interval=10, jitter=0)
    with caplog.at_level(logging.ERROR, logger="engine.sources"):
        async with trio.open_nursery() as nursery:
            await nursery.start(timer.run)
            await trio.sleep(35)
            nursery.cancel_scope.cancel()
    assert rounds == 3
    assert [t.ref for t in target.triggers] == BUNDLES + BUNDLES
    assert timer.errors == 1
    assert [r.getMessage() for r in caplog.records if r.name == "engine.sources"] == [
        "key function of timer source raised; resync round skipped: KeyError: 'cache not ready'"
    ]


async def test_an_observer_raising_on_trigger_does_not_stop_the_trigger(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(RunObserver):
        def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
            if trigger.ref == BUNDLES[1]:
                raise RuntimeError("observer bug")

    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(Broken())
    manager.add_observer(log)
    controller = manager.add_controller(Controller("c", reconcile))
    with caplog.at_level(logging.ERROR, logger="engine.controller"):
        async with running(manager):
            for ref in BUNDLES:
                assert controller.trigger(ref) is not None
            await trio.sleep(1)
    assert log.kinds() == [OutcomeKind.SUCCEEDED] * 3
    assert controller.trigger_errors == 1
    assert [r.getMessage() for r in caplog.records if r.name == "engine.controller"] == [
        "run observer Broken raised on a trigger of Bundle/ns/b1: RuntimeError: observer bug"
    ]


async def test_a_mapper_that_returns_one_ref_triggers_that_key(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("bundles", reconcile))
    mapped: MappedSource[ObjectRef] = MappedSource(controller, lambda ref: BUNDLES[0])
    async with running(manager):
        assert mapped.handle(SRC) == 1
        await trio.testing.wait_all_tasks_blocked()
    assert mapped.errors == 0
    assert log.kinds(BUNDLES[0]) == [OutcomeKind.SUCCEEDED]
