"""The ownership gate: a scale-out replica runs only owned keys and hands ranges over safely."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from engine import (
    CancelCause,
    Controller,
    EventType,
    Manager,
    MemorySink,
    ObjectRef,
    OutcomeKind,
    OwnershipGate,
    RunContext,
    RunLog,
)
from engine._keyspace import KEY_SPACE, KeyRange, KeyRanges

from ._support import running

LOW = KeyRanges((KeyRange(0, KEY_SPACE // 2),))
HIGH = KeyRanges((KeyRange(KEY_SPACE // 2, KEY_SPACE),))
ALL = KeyRanges.everything()


def ref(i: int) -> ObjectRef:
    return ObjectRef("K", f"o{i}")


def key_of(r: ObjectRef) -> int | None:
    """Even objects are in LOW, odd in HIGH; ``nouid`` has no key yet."""
    if r.name == "nouid":
        return None
    i = int(r.name[1:])
    return (i % 2) * (KEY_SPACE // 2) + i


class Replica:
    """One manager with a gate; its reconciler records who runs what into a shared ``cluster``."""

    def __init__(self, name: str, cluster: Cluster, *, owned: KeyRanges, seconds: float) -> None:
        self.name = name
        self.gate = OwnershipGate(key_of, owned=owned)
        self.manager = Manager(handle_signals=False, ownership=self.gate, grace_period=1)
        self.sink = MemorySink()
        self.manager.add_sink(self.sink)
        self.log = RunLog()
        self.manager.add_observer(self.log)
        self.seconds = seconds

        async def reconcile(ctx: RunContext) -> None:
            cluster.enter(self.name, ctx.ref)
            try:
                await trio.sleep(self.seconds)
            finally:
                cluster.leave(self.name, ctx.ref)

        self.controller = self.manager.add_controller(Controller("c", reconcile, max_concurrent=8))


class Cluster:
    def __init__(self) -> None:
        self.active: dict[ObjectRef, set[str]] = {}
        self.overlaps: list[tuple[ObjectRef, frozenset[str]]] = []
        self.ran: dict[ObjectRef, list[str]] = {}

    def enter(self, replica: str, r: ObjectRef) -> None:
        holders = self.active.setdefault(r, set())
        holders.add(replica)
        self.ran.setdefault(r, []).append(replica)
        if len(holders) > 1:
            self.overlaps.append((r, frozenset(holders)))

    def leave(self, replica: str, r: ObjectRef) -> None:
        self.active[r].discard(replica)


async def both(a: Replica, b: Replica, body: Callable[[], Awaitable[None]]) -> None:
    async with running(a.manager), running(b.manager):
        await body()


async def test_a_replica_runs_only_the_keys_it_owns_and_a_gain_runs_the_parked_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = Cluster()
    a = Replica("a", cluster, owned=LOW, seconds=1)

    async with running(a.manager):
        for i in range(10):
            a.controller.trigger(ref(i))
        await trio.sleep(5)
        assert sorted(cluster.ran) == [ref(i) for i in range(0, 10, 2)], "odd keys are not owned"
        assert a.gate.statistics().parked == 5
        assert a.gate.gain(HIGH) == 5
        await trio.sleep(5)
        assert sorted(cluster.ran) == [ref(i) for i in range(10)]
        assert all(len(v) == 1 for v in cluster.ran.values())
        assert a.gate.statistics().parked == 0


async def test_an_object_without_a_key_waits_for_a_trigger_that_has_one(autojump_clock: trio.testing.MockClock) -> None:
    cluster = Cluster()
    a = Replica("a", cluster, owned=ALL, seconds=1)
    async with running(a.manager):
        a.controller.trigger(ObjectRef("K", "nouid"))
        await trio.sleep(5)
        assert cluster.ran == {}
        assert a.gate.statistics().parked == 1


async def test_a_key_started_before_a_release_finishes_there_before_the_other_replica_starts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = Cluster()
    a = Replica("a", cluster, owned=ALL, seconds=3)
    b = Replica("b", cluster, owned=KeyRanges.nothing(), seconds=3)

    async def body() -> None:
        for i in range(6):
            a.controller.trigger(ref(i))
            b.controller.trigger(ref(i))
        await trio.sleep(1)
        assert len(a.controller.running) == 6
        start = trio.current_time()
        cancelled = await a.gate.release(HIGH, grace=10)
        assert cancelled == 0
        assert trio.current_time() - start == pytest.approx(2), "release waited for the runs in HIGH"
        assert a.gate.running_in(HIGH) == 0
        b.gate.gain(HIGH)
        await trio.sleep(10)

    await both(a, b, body)
    assert cluster.overlaps == []
    for i in range(1, 6, 2):
        assert cluster.ran[ref(i)] == ["a", "b"]
    for i in range(0, 6, 2):
        assert cluster.ran[ref(i)] == ["a"]
    assert OutcomeKind.HANDOVER not in a.log.kinds()
    assert a.log.kinds().count(OutcomeKind.SUCCEEDED) == 6


async def test_runs_past_the_handover_grace_are_cancelled_as_handover_before_release_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = Cluster()
    a = Replica("a", cluster, owned=ALL, seconds=100)
    b = Replica("b", cluster, owned=KeyRanges.nothing(), seconds=1)

    async def body() -> None:
        for i in range(4):
            a.controller.trigger(ref(i))
            b.controller.trigger(ref(i))
        await trio.sleep(1)
        start = trio.current_time()
        cancelled = await a.gate.release(ALL, grace=5)
        assert trio.current_time() - start == pytest.approx(5)
        assert cancelled == 4
        assert all(not holders for holders in cluster.active.values()), "release returned with a run still going"
        b.gate.gain(ALL)
        await trio.sleep(5)

    await both(a, b, body)
    assert cluster.overlaps == []
    assert a.log.kinds() == [OutcomeKind.HANDOVER] * 4
    assert all(r.outcome.reason and "handover grace" in r.outcome.reason for r in a.log.records)
    assert not any(k.is_failure for k in a.log.kinds())
    assert [e for e in a.sink.events if e.type is EventType.WARNING] == [], "a handover is not a failure"
    assert sorted(r.key for r in b.log.records) == [ref(i) for i in range(4)]
    assert a.controller.queue.statistics().waiting == 0, "a handed-over key is not retried here"


async def test_a_key_triggered_during_a_release_does_not_start_on_the_releasing_replica(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = Cluster()
    a = Replica("a", cluster, owned=ALL, seconds=3)

    async with running(a.manager):
        a.controller.trigger(ref(1))
        await trio.sleep(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: a.gate.release(HIGH, grace=10))
            await trio.testing.wait_all_tasks_blocked()
            a.controller.trigger(ref(3))
            a.controller.trigger(ref(1), reason="change")
        await trio.sleep(5)
    assert cluster.ran == {ref(1): ["a"]}
    assert a.log.kinds() == [OutcomeKind.SUPERSEDED]


async def test_revoke_cancels_every_run_at_once_shields_included(autojump_clock: trio.testing.MockClock) -> None:
    shielded_finished = []
    causes: list[CancelCause | None] = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            with ctx.shield(30):
                await trio.sleep(20)
                shielded_finished.append(ctx.ref)
        finally:
            causes.append(ctx.cancel_cause)

    gate = OwnershipGate(key_of, owned=ALL)
    manager = Manager(handle_signals=False, ownership=gate)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=4))
    async with running(manager):
        for i in range(3):
            controller.trigger(ref(i))
        await trio.sleep(1)
        assert gate.revoke("membership lapsed") == 3
        assert not gate.owned
        with trio.fail_after(0.001):
            await gate.wait_idle()
        controller.trigger(ref(0))
        await trio.sleep(1)
    assert shielded_finished == []
    assert causes == [CancelCause.HANDOVER] * 3
    assert [r.finished_at for r in log.records] == [1.0] * 3


async def test_release_rejects_a_negative_grace() -> None:
    gate = OwnershipGate(key_of)
    with pytest.raises(ValueError, match=r"^grace must be >= 0$"):
        await gate.release(ALL, grace=-1)


async def test_a_regained_range_runs_again_the_keys_that_ran_here_before_it_was_given_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The replica that took the range over may have cut their runs short (``HANDOVER``)."""
    cluster = Cluster()
    a = Replica("a", cluster, owned=ALL, seconds=1)
    async with running(a.manager):
        for i in range(4):
            a.controller.trigger(ref(i))
        await trio.sleep(5)
        await a.gate.release(HIGH, grace=1)
        assert a.gate.statistics().parked == 2
        assert a.gate.gain(HIGH) == 2
        await trio.sleep(5)
    assert cluster.ran == {ref(0): ["a"], ref(1): ["a", "a"], ref(2): ["a"], ref(3): ["a", "a"]}


async def test_two_releases_at_once_both_return_when_their_runs_end(autojump_clock: trio.testing.MockClock) -> None:
    """Two hand-overs in flight (two membership changes within the grace): each returns as soon as
    its own runs ended, not at the end of its grace, and neither waits forever. (A waiter that
    replaced the gate's wake-up event left the other one waiting on an event nobody set.)"""
    gate = OwnershipGate(key_of, owned=ALL)
    async def reconcile(ctx: RunContext) -> None:
        pass

    controller = Controller("c", reconcile)
    low, high = ref(0), ref(1)
    assert gate.admit(controller, low) and gate.admit(controller, high)
    returned: list[tuple[str, float]] = []

    async def release(ranges: KeyRanges, name: str) -> None:
        await gate.release(ranges, grace=100)
        returned.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release, LOW, "low")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(release, HIGH, "high")
        await trio.testing.wait_all_tasks_blocked()
        gate.ended(controller, high)
        await trio.testing.wait_all_tasks_blocked()
        gate.ended(controller, low)
    assert sorted(returned) == [("high", 0.0), ("low", 0.0)]
