from __future__ import annotations

import trio
import trio.testing

from engine import (
    Controller,
    DependencyIndex,
    DependencyNotReady,
    Manager,
    ObjectRef,
    Outcome,
    OutcomeKind,
    Run,
    RunContext,
    RunLog,
    RunObserver,
    Trigger,
    WebhookSink,
)

from ._support import running
from ._webhook import WebhookReceiver

A = ObjectRef("Bundle", "a", "ns")
B = ObjectRef("Bundle", "b", "ns")


async def test_seed3_dependent_starts_at_once_when_dependency_ready_despite_black_holed_webhook(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Seed 3: B depends on A; the notification endpoint accepts connections and never
    answers; when A becomes ready, B starts within a small bound, and other keys' latency is
    unaffected. Flux's synchronous recorder made B wait about 220 s here."""
    receiver = WebhookReceiver()
    receiver.mode = "blackhole"
    ready: set[ObjectRef] = set()
    started: dict[ObjectRef, list[float]] = {}

    async with trio.open_nursery() as outer:
        await outer.start(receiver.serve)
        manager = Manager(handle_signals=False, event_flush_timeout=1)
        manager.add_sink(WebhookSink(receiver.url, timeout=5, max_attempts=4))
        log = RunLog()
        manager.add_observer(log)

        async def reconcile(ctx: RunContext) -> None:
            started.setdefault(ctx.ref, []).append(trio.current_time())
            ctx.events.normal("Progressing", f"reconciling {ctx.ref.name}")
            if ctx.ref == B and A not in ready:
                raise DependencyNotReady([A], retry_after=600)
            if ctx.ref == A:
                await trio.sleep(30)  # A's health check
                ready.add(A)
                ctx.events.normal("ReconciliationSucceeded", "A is ready")
                ctx.events.warning("Noise", "a warning for the black hole")
            else:
                ctx.events.normal("ReconciliationSucceeded", f"{ctx.ref.name} is ready")

        class WatchPath(RunObserver):
            """A's status turns Ready when its run ends; the watch path reports it ready."""

            def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
                if run.key == A and outcome.kind is OutcomeKind.SUCCEEDED:
                    ready_at.append(trio.current_time())
                    manager.mark_ready(A)

        ready_at: list[float] = []
        manager.add_observer(WatchPath())
        controller = manager.add_controller(Controller("bundles", reconcile, max_concurrent=4))
        async with running(manager):
            controller.trigger(A)
            controller.trigger(B)
            await trio.sleep(1)
            assert manager.dependencies.waiting_on(A) == {B}
            others = [ObjectRef("Bundle", f"o{i}", "ns") for i in range(10)]
            t_others = trio.current_time()
            for o in others:
                controller.trigger(o)
            await trio.sleep(60)
            for o in others:
                assert started[o][0] - t_others < 0.001, "other keys' latency is unaffected"
        outer.cancel_scope.cancel()

    a_ready_at = started[A][0] + 30
    assert ready_at == [a_ready_at], "A's run ended right after its health check"
    b_second_start = started[B][1]
    assert b_second_start - a_ready_at < 0.001, f"B started {b_second_start - a_ready_at:.3f}s after A was ready"
    assert log.kinds(B) == [OutcomeKind.DEPENDENCY_NOT_READY, OutcomeKind.SUCCEEDED]
    assert receiver.connections >= 1, "the webhook really was being called (and black-holed)"
    assert manager.dependencies.wakeups == 1


async def test_dependency_fallback_retry(autojump_clock: trio.testing.MockClock) -> None:
    times = []

    async def reconcile(ctx: RunContext) -> None:
        times.append(trio.current_time())
        if len(times) < 3:
            raise DependencyNotReady([A], retry_after=20)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        controller.trigger(B)
        await trio.sleep(100)
    assert [round(t - times[0]) for t in times] == [0, 20, 40]


async def test_mark_ready_triggers_only_waiters_and_forgets_them(autojump_clock: trio.testing.MockClock) -> None:
    C = ObjectRef("Bundle", "c", "ns")
    runs = []

    async def reconcile(ctx: RunContext) -> None:
        runs.append(ctx.ref)
        if len(runs) <= 2:
            raise DependencyNotReady([A, C], retry_after=10_000)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        controller.trigger(B)
        await trio.sleep(1)
        assert manager.mark_ready(ObjectRef("Bundle", "unrelated", "ns")) == 0
        assert manager.mark_ready(C) == 1
        await trio.sleep(1)
        assert manager.mark_ready(A) == 1, "B registered again on its second run"
        await trio.sleep(1)
        assert manager.mark_ready(A) == 0
        assert manager.dependencies.waiting_on(C) == set()
    assert runs == [B, B, B]


async def test_dependency_ready_during_the_dependents_run_wakes_it_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """A reports ready after B checked it but before B's run ended: B must not wait for the
    fallback retry."""
    ready: set[ObjectRef] = set()
    starts: list[float] = []

    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref == B:
            starts.append(trio.current_time())
            if A not in ready:
                await trio.sleep(1)  # the "DependencyNotReady" status write
                raise DependencyNotReady([A], retry_after=600)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        controller.trigger(B)
        await trio.sleep(0.5)
        ready.add(A)
        assert manager.mark_ready(A) == 0, "B is still running: nobody waits yet"
        await trio.sleep(5)
    assert len(starts) == 2
    assert starts[1] - starts[0] < 1.001


class Target:
    """A trigger target that is not a controller: the index needs only ``name`` and ``trigger``."""

    def __init__(self, name: str, woken: list[tuple[str, ObjectRef, str]]) -> None:
        self.name = name
        self._woken = woken

    def next_sequence(self) -> int:
        return 0

    def trigger(
        self, ref: ObjectRef, *, reason: str = "", revision: str | None = None, sequence: int | None = None
    ) -> Trigger | None:
        self._woken.append((self.name, ref, reason))
        return None


def test_the_index_wakes_any_triggerable_in_name_order() -> None:
    woken: list[tuple[str, ObjectRef, str]] = []
    later, first = Target("later", woken), Target("first", woken)
    index = DependencyIndex()
    assert index.wait(later, A, [B]) is False
    assert index.wait(first, A, [B]) is False
    assert index.waiting_on(B) == {A}
    assert index.mark_ready(B) == 2
    assert woken == [("first", A, f"dependency {B} ready"), ("later", A, f"dependency {B} ready")]
    assert index.mark_ready(B) == 0


async def test_a_run_that_begins_no_longer_waits_on_what_its_key_waited_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """B's first run waits on A; B's second run (triggered by something else) begins, and from
    then on A's readiness no longer wakes B: the new run decides afresh what it waits on."""
    runs: list[str] = []

    async def reconcile(ctx: RunContext) -> None:
        runs.append(ctx.trigger.reason)
        if len(runs) == 1:
            raise DependencyNotReady([A], retry_after=600)

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("deps", reconcile))
    async with running(manager):
        controller.trigger(B, reason="first")
        await trio.testing.wait_all_tasks_blocked()
        assert manager.dependencies.waiting_on(A) == {B}
        controller.trigger(B, reason="second")
        await trio.testing.wait_all_tasks_blocked()
        assert runs == ["first", "second"]
        assert manager.dependencies.waiting_on(A) == set()
        assert manager.mark_ready(A) == 0
        await trio.testing.wait_all_tasks_blocked()
        assert runs == ["first", "second"]


def test_begin_forgets_the_keys_waits_and_returns_the_epoch() -> None:
    index = DependencyIndex()
    controller = Controller("deps", _noop)
    index.wait(controller, B, [A])
    index.mark_ready(ObjectRef("Bundle", "other", "ns"))
    assert index.begin(controller, B) == index.epoch == 1
    assert index.waiting_on(A) == set()
    assert index.begin(controller, B) == 1


async def _noop(ctx: RunContext) -> None:
    return None


def test_one_ref_alone_is_one_dependency_not_its_fields() -> None:
    assert DependencyNotReady(B).refs == (B,)
    assert DependencyNotReady([A, B]).refs == (A, B)


def test_waiters_on_a_cluster_scoped_and_a_namespaced_key_of_one_name_are_woken() -> None:
    woken: list[tuple[str, ObjectRef, str]] = []
    target = Target("t", woken)
    cluster_scoped, namespaced = ObjectRef("Thing", "x"), ObjectRef("Thing", "x", "ns")
    index = DependencyIndex()
    index.wait(target, namespaced, [B])
    index.wait(target, cluster_scoped, [B])
    assert index.mark_ready(B) == 2
    assert [key for _, key, _ in woken] == [cluster_scoped, namespaced]
