from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from engine import (
    CancelCause,
    Controller,
    DependencyNotReady,
    EventType,
    Manager,
    MemorySink,
    ObjectRef,
    OutcomeKind,
    Result,
    Run,
    RunContext,
    RunLog,
    RunObserver,
    SupersedePolicy,
    TerminalError,
)

from ._secrets import SECRET_CASES
from ._support import running

A = ObjectRef("Bundle", "a", "ns")
B = ObjectRef("Bundle", "b", "ns")


def make(reconcile, **kwargs) -> tuple[Manager, Controller, RunLog, MemorySink]:  # type: ignore[no-untyped-def]
    manager = Manager(handle_signals=False, grace_period=5)
    sink = MemorySink()
    manager.add_sink(sink)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(Controller("test", reconcile, **kwargs))
    return manager, controller, log, sink


async def test_reconciler_must_be_async() -> None:
    def sync_reconcile(ctx: RunContext) -> None:
        pass

    with pytest.raises(TypeError, match=r"^reconciler must be async: define it with 'async def'$"):
        Controller("c", sync_reconcile)  # type: ignore[arg-type]


async def test_reconciler_object_with_reconcile_method(autojump_clock: trio.testing.MockClock) -> None:
    class R:
        def __init__(self) -> None:
            self.seen: list[ObjectRef] = []

        async def reconcile(self, ctx: RunContext) -> None:
            self.seen.append(ctx.ref)

    r = R()
    manager, controller, log, _ = make(r)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
    assert r.seen == [A]
    assert log.kinds() == [OutcomeKind.SUCCEEDED]


async def test_many_triggers_during_a_run_collapse_into_one_rerun_with_the_newest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append(ctx.trigger.revision)
        await trio.sleep(10)

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.NEVER)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        for rev in range(2, 12):
            controller.trigger(A, revision=str(rev))
        await trio.sleep(30)
    assert seen == ["1", "11"]
    assert log.kinds() == [OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]


async def test_a_queued_key_runs_with_its_newest_trigger_by_sequence_whatever_came_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While a key waits for a worker, an older observation delivered late and a plain re-add
    (a delay that ended) keep the newest trigger; a rate-limited retry runs as a requeue."""
    seen = []
    release = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        seen.append((ctx.ref, ctx.trigger.sequence, ctx.trigger.reason))
        if ctx.ref == B:
            await release.wait()

    manager, controller, log, _ = make(reconcile, max_concurrent=1)
    async with running(manager):
        controller.trigger(B, reason="b")
        await trio.testing.wait_all_tasks_blocked()
        controller.trigger(A, reason="first", sequence=5)
        controller.trigger(A, reason="newest", sequence=10)
        controller.trigger(A, reason="same", sequence=10)
        controller.trigger(A, reason="late", sequence=7)
        controller.queue.add(A)
        release.set()
        await trio.sleep(1)
        controller.queue.add(A)
        await trio.sleep(1)
    assert [(ref, reason) for ref, _, reason in seen] == [(B, "b"), (A, "same"), (A, "requeue")]
    assert seen[1][1] == 10


async def test_supersede_cancel_run_cancels_and_reruns_with_newest(autojump_clock: trio.testing.MockClock) -> None:
    seen = []
    causes = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append(ctx.trigger.revision)
        try:
            await trio.sleep(10)
        finally:
            causes.append(ctx.cancel_cause)

    manager, controller, log, sink = make(reconcile)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")
        controller.trigger(A, revision="3")
        await trio.sleep(30)
    assert seen == ["1", "3"]
    assert causes == [CancelCause.SUPERSEDED, None]
    assert log.kinds() == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED]
    assert not [e for e in sink.events if e.type is EventType.WARNING], "a superseded run is not a failure"


async def test_supersede_cancels_the_reconcilers_own_nurseries(autojump_clock: trio.testing.MockClock) -> None:
    child_cancelled = trio.Event()

    async def child() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            child_cancelled.set()
            raise

    async def reconcile(ctx: RunContext) -> None:
        if ctx.trigger.revision == "1":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
                nursery.start_soon(child)

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")
        await trio.sleep(1)
    assert child_cancelled.is_set()
    assert log.kinds() == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED]


async def test_supersede_interruptible_only_cancels_inside_interruptible(
    autojump_clock: trio.testing.MockClock,
) -> None:
    steps = []

    async def reconcile(ctx: RunContext) -> None:
        steps.append(("apply", ctx.trigger.revision))
        await trio.sleep(5)
        steps.append(("applied", ctx.trigger.revision))
        with ctx.interruptible():
            await trio.sleep(100)
        steps.append(("healthy", ctx.trigger.revision))

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.INTERRUPTIBLE)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")  # during apply: not cancelled there
        await trio.sleep(10)  # now inside the health check of revision 1?  no: pending supersede cancels at entry
        await trio.sleep(200)
        controller.trigger(A, revision="3")
        await trio.sleep(50)  # revision 3 is in its health check
        controller.trigger(A, revision="4")
        await trio.sleep(200)
    assert steps == [
        ("apply", "1"), ("applied", "1"),
        ("apply", "2"), ("applied", "2"), ("healthy", "2"),
        ("apply", "3"), ("applied", "3"),
        ("apply", "4"), ("applied", "4"), ("healthy", "4"),
    ]
    assert log.kinds() == [
        OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED, OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED,
    ]


async def test_supersede_never_only_marks_dirty(autojump_clock: trio.testing.MockClock) -> None:
    seen = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append(ctx.trigger.revision)
        with ctx.interruptible():
            await trio.sleep(10)

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.NEVER)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")
        await trio.sleep(30)
    assert seen == ["1", "2"]
    assert log.kinds() == [OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]


async def test_one_observation_delivered_twice_does_not_cancel_the_run_it_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Seed 1, structurally: an update handler maps the old and the new object (one
    observation, two triggers) and a worker picks the key up between the two calls."""
    seen = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append((ctx.trigger.sequence, ctx.trigger.revision))
        with ctx.interruptible():
            await trio.sleep(10)

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.INTERRUPTIBLE)
    async with running(manager):
        seq = controller.next_sequence()
        controller.trigger(A, revision="new", sequence=seq)  # mapped from the old object
        await trio.testing.wait_all_tasks_blocked()  # a worker picks the key up in between
        assert A in controller.running
        controller.trigger(A, revision="new", sequence=seq)  # mapped from the new object
        await trio.sleep(60)
    assert log.kinds()[0] is OutcomeKind.SUCCEEDED, "the duplicate must not cancel the run it started"
    assert len(seen) >= 1 and seen[0] == (seq, "new")


async def test_seed1_double_mapped_update_always_runs_again(autojump_clock: trio.testing.MockClock) -> None:
    """Seed 1 reproduction: rapid revisions, each update mapped twice (old and new object),
    with the worker picking the key up between the two calls, health checks interruptible.
    After the last revision, the key must have run (to success) with the final revision."""
    state = {"revision": "0"}
    healthy_at: list[str] = []

    async def reconcile(ctx: RunContext) -> None:
        revision = state["revision"]
        await trio.sleep(0.002)  # apply
        with ctx.interruptible():
            await trio.sleep(1.0)  # health check
        healthy_at.append(revision)

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.INTERRUPTIBLE)
    async with running(manager):
        for rev in range(1, 51):
            state["revision"] = str(rev)  # the cache is updated first (read-your-trigger)
            seq = controller.next_sequence()
            controller.trigger(A, reason="old object", revision=str(rev), sequence=seq)
            await trio.testing.wait_all_tasks_blocked()
            controller.trigger(A, reason="new object", revision=str(rev), sequence=seq)
            await trio.sleep(0.010)
        await trio.sleep(30)
    assert healthy_at and healthy_at[-1] == "50"
    assert log.records[-1].kind is OutcomeKind.SUCCEEDED
    assert log.records[-1].trigger.revision == "50"


async def test_randomized_every_late_trigger_gets_a_run(autojump_clock: trio.testing.MockClock) -> None:
    """Over many keys, triggers (some duplicated with one sequence) and completions: after
    quiescence, every key whose newest trigger arrived after its last run started has run
    again with that trigger."""
    rng = random.Random(20261202)
    keys = [ObjectRef("K", f"k{i}") for i in range(12)]
    for policy in SupersedePolicy:
        starts: dict[ObjectRef, list[tuple[float, int]]] = {k: [] for k in keys}

        async def reconcile(ctx: RunContext) -> None:
            starts[ctx.ref].append((trio.current_time(), ctx.trigger.sequence))  # noqa: B023 (used within this iteration)
            await trio.sleep(rng.choice([0, 0.001, 0.01, 0.05]))
            with ctx.interruptible():
                await trio.sleep(rng.choice([0, 0.01, 0.1]))
            if rng.random() < 0.1:
                raise RuntimeError("flaky")

        manager, controller, log, _ = make(reconcile, supersede=policy, max_concurrent=3)
        newest: dict[ObjectRef, tuple[float, int]] = {}
        async with running(manager):
            for _ in range(600):
                key = rng.choice(keys)
                seq = controller.next_sequence()
                controller.trigger(key, sequence=seq)
                newest[key] = (trio.current_time(), seq)
                if rng.random() < 0.3:
                    await trio.testing.wait_all_tasks_blocked()
                    controller.trigger(key, sequence=seq)
                await trio.sleep(rng.choice([0, 0, 0.001, 0.005, 0.02]))
            await trio.sleep(2000)
        for key, (at, seq) in newest.items():
            assert starts[key], f"{key} never ran"
            last_start, last_seq = starts[key][-1]
            assert last_start >= at, f"{policy}: {key} newest trigger at {at} had no run after it"
            assert last_seq >= seq


async def test_failure_is_retried_with_backoff_and_emits_a_warning(autojump_clock: trio.testing.MockClock) -> None:
    attempts = []

    async def reconcile(ctx: RunContext) -> None:
        attempts.append((ctx.attempt, trio.current_time()))
        if ctx.attempt < 4:
            raise RuntimeError("not yet")

    manager, controller, log, sink = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(10)
    assert [a for a, _ in attempts] == [1, 2, 3, 4]
    gaps = [round(t2 - t1, 3) for (_, t1), (_, t2) in zip(attempts, attempts[1:])]
    assert gaps == [0.005, 0.01, 0.02]
    assert log.kinds() == [OutcomeKind.FAILED] * 3 + [OutcomeKind.SUCCEEDED]
    assert controller.queue.num_requeues(A) == 0, "success resets the failure count"
    await trio.sleep(0)
    warnings = [e for e in sink.events if e.type is EventType.WARNING]
    assert [e.reason for e in warnings] == ["ReconcileFailed"] * 3
    assert warnings[0].message == "RuntimeError: not yet"


async def test_a_raising_reconciler_does_not_take_down_others(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref == A:
            raise KeyError("boom")

    manager, controller, log, _ = make(reconcile, max_concurrent=2)
    async with running(manager):
        controller.trigger(A)
        controller.trigger(B)
        await trio.sleep(1)
        controller.trigger(B)
        await trio.sleep(1)
    assert log.kinds(B) == [OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]
    assert OutcomeKind.FAILED in log.kinds(A)


async def test_deadline_is_a_failure(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        if ctx.attempt == 1:
            await trio.sleep(100)

    manager, controller, log, sink = make(reconcile, timeout=5)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(20)
    assert log.kinds() == [OutcomeKind.DEADLINE, OutcomeKind.SUCCEEDED]
    deadline = log.records[0]
    assert deadline.outcome.is_failure
    assert deadline.finished_at - deadline.started_at == pytest.approx(5)
    assert log.records[1].attempt == 2, "a deadline is retried through the rate limiter"
    assert [e.reason for e in sink.events] == ["ReconcileDeadlineExceeded"]


async def test_superseded_is_not_a_failure_but_deadline_is(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(10)

    manager, controller, log, sink = make(reconcile, timeout=30)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        controller.trigger(A)
        await trio.sleep(30)
    assert [r.outcome.is_failure for r in log.records] == [False, False]
    assert controller.outcomes[OutcomeKind.SUPERSEDED] == 1
    assert sink.events == []


async def test_terminal_error_is_not_retried(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        raise TerminalError("spec.replicas must be positive")

    manager, controller, log, sink = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(100)
    assert log.kinds() == [OutcomeKind.TERMINAL]
    assert [(e.reason, e.message) for e in sink.events] == [
        ("ReconcileTerminalError", "TerminalError: spec.replicas must be positive")
    ]


async def test_requeue_after(autojump_clock: trio.testing.MockClock) -> None:
    times = []

    async def reconcile(ctx: RunContext) -> Result:
        times.append(trio.current_time())
        return Result(requeue_after=60)

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(200)
    assert [round(t - times[0]) for t in times] == [0, 60, 120, 180]
    assert set(log.kinds()) == {OutcomeKind.REQUEUE_AFTER}


async def test_error_inside_reconciler_nursery_is_a_failure(autojump_clock: trio.testing.MockClock) -> None:
    async def boom() -> None:
        raise ValueError("child failed")

    async def reconcile(ctx: RunContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom)

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(0.001)
    assert log.kinds()[0] is OutcomeKind.FAILED


@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)
async def test_a_failure_event_is_one_line_with_type_and_message_and_no_secret(
    autojump_clock: trio.testing.MockClock, text: str, secret: str
) -> None:
    async def boom() -> None:
        raise PermissionError(text)

    async def reconcile(ctx: RunContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom)

    manager, controller, _, sink = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(0.001)
    warning = next(e for e in sink.events if e.reason == "ReconcileFailed")
    assert warning.message.startswith(f"PermissionError: {text.split()[0]} ")
    assert "\n" not in warning.message and "Traceback" not in warning.message
    assert secret not in warning.message


async def test_dependency_not_ready_inside_nursery_is_unwrapped(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        async with trio.open_nursery():
            raise DependencyNotReady([B], retry_after=1000)

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
    assert log.kinds() == [OutcomeKind.DEPENDENCY_NOT_READY]
    assert log.records[0].outcome.dependencies == (B,)


async def test_shield_lets_a_superseded_run_finish_its_status_write(autojump_clock: trio.testing.MockClock) -> None:
    writes = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(10)
        finally:
            with ctx.shield(2) as scope:
                await trio.sleep(1)  # the status write
                writes.append(ctx.cancel_cause)
            assert not scope.cancelled_caught

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        controller.trigger(A)
        await trio.sleep(30)
    assert writes == [CancelCause.SUPERSEDED, None]


async def test_shield_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    out = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(10)
        finally:
            with ctx.shield(2) as scope:
                await trio.sleep(100)  # a write that hangs
            out.append((scope.cancelled_caught, trio.current_time()))

    manager, controller, log, _ = make(reconcile, supersede=SupersedePolicy.CANCEL_RUN)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        controller.trigger(A)
        await trio.sleep(5)
        assert out == [(True, pytest.approx(3))]
        manager.stop()
    assert log.kinds()[0] is OutcomeKind.SUPERSEDED


async def test_trigger_after_stop_is_refused_and_cancels_nothing(autojump_clock: trio.testing.MockClock) -> None:
    cancelled = []

    async def reconcile(ctx: RunContext) -> None:
        try:
            await trio.sleep(3)
        except trio.Cancelled:
            cancelled.append(ctx.cancel_cause)
            raise

    manager, controller, log, _ = make(reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        manager.stop()
        assert controller.trigger(A) is None
    assert cancelled == []
    assert log.kinds() == [OutcomeKind.SUCCEEDED]


async def test_cancelling_an_ended_run_never_reaches_the_next_run(autojump_clock: trio.testing.MockClock) -> None:
    """Workers reuse a cancel scope across uncancelled runs; a late cancel of an ended run
    must not leak into the next run of the same worker."""
    from engine import RunObserver

    runs: list[Run] = []

    class Keep(RunObserver):
        def on_run_started(self, controller: Controller, run: Run) -> None:
            runs.append(run)

    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(10)

    manager, controller, log, _ = make(reconcile, max_concurrent=1)
    manager.add_observer(Keep())
    async with running(manager):
        controller.trigger(A)
        controller.trigger(B)
        await trio.sleep(11)  # A ended, B is running on the same worker and scope
        assert runs[1].key == B and runs[1].scope is runs[0].scope
        runs[0].cancel(CancelCause.SUPERSEDED, "late")
        await trio.sleep(20)
    assert log.kinds() == [OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]


async def test_cancel_of_a_run_that_returns_without_checkpoint_spares_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = []

    async def reconcile(ctx: RunContext) -> None:
        seen.append(ctx.ref)
        if ctx.ref == A and len(seen) == 1:
            controller.trigger(A)  # supersedes this very run, which returns without a checkpoint
            return
        await trio.sleep(1)

    manager, controller, log, _ = make(reconcile, max_concurrent=1)
    async with running(manager):
        controller.trigger(A)
        controller.trigger(B)
        await trio.sleep(10)
    assert log.kinds() == [OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]
    assert seen == [A, B, A]


async def test_a_worker_dying_on_an_engine_error_releases_its_key_and_reports_unhealthy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from engine import RunObserver

    class Broken(RunObserver):
        def on_run_started(self, controller: Controller, run: object) -> None:
            raise RuntimeError("observer bug")

    async def reconcile(ctx: RunContext) -> None:
        pass

    manager, controller, log, _ = make(reconcile, max_concurrent=2)
    manager.add_observer(Broken())
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        assert not controller.healthy
        assert controller.live_workers == 1
        assert not controller.queue.is_processing(A)
        t0 = trio.current_time()
        manager.stop()
    assert trio.current_time() - t0 < 1, "shutdown does not wait on the dead worker's key"


async def test_ctx_log_merges_call_extras_with_the_run_keys(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        ctx.log.info("applied", extra={"revision": "r7"})

    manager, controller, log, _ = make(reconcile)
    with caplog.at_level("INFO", logger="engine.reconciler.test"):
        async with running(manager):
            controller.trigger(A)
            await trio.sleep(1)
    record = next(r for r in caplog.records if r.getMessage() == "applied")
    assert record.revision == "r7"  # type: ignore[attr-defined]
    assert record.reconcileID == "test-1"  # type: ignore[attr-defined]
    assert record.object_name == "a"  # type: ignore[attr-defined]


async def test_error_and_cancelled_from_a_reconciler_nursery_keep_the_worker_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A child raising in ``finally`` while the run is superseded gives a group of Cancelled
    and an error: the run is settled (as superseded), the worker lives on."""

    async def child() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("cleanup failed")

    async def reconcile(ctx: RunContext) -> None:
        if ctx.trigger.revision == "1":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
                await trio.sleep_forever()

    manager, controller, log, _ = make(reconcile, max_concurrent=1)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")
        await trio.sleep(1)
        controller.trigger(B)
        await trio.sleep(1)
    assert controller.healthy and controller.worker_failures == 0
    assert log.kinds() == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED, OutcomeKind.SUCCEEDED]


async def test_deadline_that_passed_in_a_shield_is_not_reported_as_superseded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        if ctx.attempt == 1 and ctx.trigger.revision == "1":
            with ctx.shield(20):
                await trio.sleep(10)  # the 5 s deadline passes in here
            await trio.sleep(1)

    manager, controller, log, sink = make(reconcile, timeout=5)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(7)
        controller.trigger(A, revision="2")  # arrives after the deadline, inside the shield
        await trio.sleep(30)
    assert log.kinds()[0] is OutcomeKind.DEADLINE
    assert [e.reason for e in sink.events][:1] == ["ReconcileDeadlineExceeded"]



async def test_a_cancellation_records_the_shields_open_at_that_moment(autojump_clock: trio.testing.MockClock) -> None:
    """A final write begun in a shield before the cancellation was decided before it (the
    simulator excuses a failure status written from one); a shield entered after it is not
    among them."""
    runs: list[Run] = []
    seen: list[tuple[bool, bool]] = []

    class Capture(RunObserver):
        def on_run_started(self, controller: Controller, run: Run) -> None:
            runs.append(run)

    async def reconcile(ctx: RunContext) -> None:
        if len(runs) > 1:
            return
        try:
            with ctx.shield(5) as before:
                await trio.sleep(2)  # superseded during this write
        finally:
            with ctx.shield(5) as after:
                await trio.sleep(1)
            seen.append((before in runs[0].shields_at_cancel, after in runs[0].shields_at_cancel))

    manager, controller, log, _ = make(reconcile)
    manager.add_observer(Capture())
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(1)
        controller.trigger(A)
        await trio.sleep(10)
    assert runs[0].cause is CancelCause.SUPERSEDED
    assert seen == [(True, False)]
    assert not runs[0].shields
