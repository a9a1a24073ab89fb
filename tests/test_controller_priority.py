"""Priorities on a controller's trigger path: changes run before listed and resync work, and a
requeue keeps the priority its run had unless the reconciler asks for another."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from engine import Controller, Manager, ObjectRef, Priority, Result, RunContext, TimerSource
from engine.apiserver import ApiServer
from engine.kube import Client, Cluster, Config

from ._support import running

LOW, NORMAL, HIGH = Priority.LOW, Priority.NORMAL, Priority.HIGH


def ref(name: str) -> ObjectRef:
    return ObjectRef("K", name, "ns")


async def test_a_change_runs_before_listed_work_and_after_the_run_in_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[tuple[str, Priority]] = []

    async def reconcile(ctx: RunContext) -> None:
        ran.append((ctx.ref.name, ctx.trigger.priority))
        await trio.sleep(1)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        for i in range(5):
            controller.trigger(ref(f"listed-{i}"), reason="K added", priority=LOW)
        await trio.testing.wait_all_tasks_blocked()
        controller.trigger(ref("changed"), reason="K modified")
        controller.trigger(ref("listed-3"), reason="K modified")
        await trio.sleep(10)
    assert ran == [
        ("listed-0", LOW), ("changed", NORMAL), ("listed-3", NORMAL),
        ("listed-1", LOW), ("listed-2", LOW), ("listed-4", LOW),
    ]


async def test_a_requeue_keeps_the_run_priority_unless_the_result_asks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[tuple[str, str, Priority]] = []
    answers = {
        "high": [Result(requeue_after=5), None],
        "asks-low": [Result(requeue_after=5, priority=LOW), None],
        "fails": [ValueError("not yet"), None],
    }

    async def reconcile(ctx: RunContext) -> Result | None:
        ran.append((ctx.ref.name, ctx.trigger.reason, ctx.trigger.priority))
        answer = answers[ctx.ref.name].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        controller.trigger(ref("high"), reason="asked", priority=HIGH)
        controller.trigger(ref("asks-low"), reason="asked", priority=HIGH)
        controller.trigger(ref("fails"), reason="asked", priority=HIGH)
        await trio.sleep(30)
    assert sorted(ran) == sorted([
        ("high", "asked", HIGH), ("high", "requeue", HIGH),
        ("asks-low", "asked", HIGH), ("asks-low", "requeue", LOW),
        ("fails", "asked", HIGH), ("fails", "requeue", HIGH),
    ])


def test_a_result_priority_needs_a_requeue() -> None:
    with pytest.raises(ValueError, match="requeue_after"):
        Result(priority=HIGH)
    assert Result(requeue_after=0, priority=HIGH).priority is HIGH


async def test_a_resync_triggers_at_low_priority(autojump_clock: trio.testing.MockClock) -> None:
    ran: list[Priority] = []

    async def reconcile(ctx: RunContext) -> None:
        ran.append(ctx.trigger.priority)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    manager.add_source(TimerSource(controller, lambda: ref("a"), interval=10, jitter=0))
    async with running(manager):
        await trio.sleep(15)
    assert ran == [LOW]


async def test_listed_objects_trigger_at_low_priority_and_watch_events_at_normal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[tuple[str, str, Priority]] = []
    async with ApiServer(listen=False) as api:
        config = Config.from_dict(api.kubeconfig)
        async with Client(config, transport=api.memory_transport()) as client:
            cms = await client.resource("v1", "ConfigMap")
            for name in ("a", "b"):
                await client.create(cms, {"metadata": {"name": name, "namespace": "default"}})

            async def reconcile(ctx: RunContext) -> None:
                ran.append((ctx.ref.name, ctx.trigger.reason, ctx.trigger.priority))

            manager = Manager(handle_signals=False)
            controller = manager.add_controller(Controller("c", reconcile))
            cluster = Cluster(client, manager)
            informer = await cluster.informer("v1", "ConfigMap")
            cluster.watches(controller, informer)
            async with running(manager):
                await cluster.wait_synced()
                await trio.sleep(1)
                await client.patch(cms, "a", {"data": {"k": "v"}}, namespace="default")
                await trio.sleep(1)
    assert sorted(ran[:2]) == [("a", "ConfigMap added", LOW), ("b", "ConfigMap added", LOW)]
    assert ran[2:] == [("a", "ConfigMap modified", NORMAL)]
