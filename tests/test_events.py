from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from engine import (
    Controller,
    Event,
    EventCorrelator,
    EventRecorder,
    EventRecorderStatistics,
    EventSinkStatistics,
    EventType,
    Manager,
    MemorySink,
    ObjectRef,
    RunContext,
)

from ._support import running

A = ObjectRef("Bundle", "a", "ns")


class StuckSink:
    name = "stuck"

    def __init__(self) -> None:
        self.attempts = 0

    async def deliver(self, event: Event) -> None:
        self.attempts += 1
        await trio.sleep_forever()


class BrokenSink:
    name = "broken"

    async def deliver(self, event: Event) -> None:
        raise ConnectionError("endpoint down")


async def test_emit_never_awaits_and_counts_drops_when_the_buffer_is_full() -> None:
    recorder = EventRecorder(buffer_size=3)
    with trio.testing.assert_no_checkpoints():
        for i in range(10):
            recorder.normal(A, "Progressing", f"step {i}")
    assert recorder.drops() == {("*", "buffer_full"): 7}
    assert recorder.statistics().emitted == 10


async def test_statistics_is_a_frozen_snapshot() -> None:
    recorder = EventRecorder(buffer_size=1)
    recorder.add_sink(MemorySink())
    recorder.normal(A, "Progressing", "one")
    recorder.normal(A, "Progressing", "two")
    stats = recorder.statistics()
    assert stats == EventRecorderStatistics(
        emitted=2,
        sinks={"memory": EventSinkStatistics(delivered=0, failed=0)},
        drops={("*", "buffer_full"): 1},
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.emitted = 0  # type: ignore[misc]
    recorder.normal(A, "Progressing", "three")
    assert stats.emitted == 2 and stats.drops == {("*", "buffer_full"): 1}


async def test_emit_never_raises_even_with_bad_input() -> None:
    recorder = EventRecorder()
    recorder.emit(A, EventType.NORMAL, "R", "m", metadata=42)  # type: ignore[arg-type]
    assert recorder.drops() == {("*", "error"): 1}


async def test_a_stuck_sink_delays_neither_other_sinks_nor_reconciles(autojump_clock: trio.testing.MockClock) -> None:
    manager = Manager(handle_signals=False, event_flush_timeout=2)
    stuck, memory = StuckSink(), MemorySink()
    manager.add_sink(stuck, buffer_size=4)
    manager.add_sink(memory)
    manager.add_sink(BrokenSink())
    finished = []

    async def reconcile(ctx: RunContext) -> None:
        for i in range(5):
            ctx.events.normal("Progressing", f"{ctx.ref.name} step {i}")
        finished.append(trio.current_time())

    controller = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        start = trio.current_time()
        for i in range(20):
            controller.trigger(ObjectRef("K", f"o{i}"))
        await trio.sleep(1)
        assert len(finished) == 20 and max(finished) == start, "reconciles never waited on a sink"
        assert len(memory.events) == 100
    drops = manager.events.drops()
    assert drops[("stuck", "queue_full")] == 100 - 1 - 4
    assert drops[("stuck", "not_flushed")] == 4
    assert manager.events.statistics().sinks["broken"] == EventSinkStatistics(delivered=0, failed=100)


async def test_identical_events_are_counted(autojump_clock: trio.testing.MockClock) -> None:
    correlator = EventCorrelator()
    e = Event(involved=A, type=EventType.WARNING, reason="Failed", message="same")
    out = [correlator.correlate(e) for _ in range(3)]
    assert [o.count for o in out if o] == [1, 2, 3]


async def test_similar_events_beyond_ten_are_combined(autojump_clock: trio.testing.MockClock) -> None:
    correlator = EventCorrelator()
    out = [correlator.correlate(Event(involved=A, type=EventType.NORMAL, reason="Progressing", message=f"m{i}"))
           for i in range(12)]
    messages = [o.message for o in out if o]
    assert messages[:10] == [f"m{i}" for i in range(10)]
    assert messages[10:] == ["(combined from similar events): m10", "(combined from similar events): m11"]


async def test_spam_filter_burst_25_then_one_per_300s(autojump_clock: trio.testing.MockClock) -> None:
    correlator = EventCorrelator()
    e = Event(involved=A, type=EventType.NORMAL, reason="R", message="m")
    assert sum(correlator.correlate(e) is not None for _ in range(40)) == 25
    await trio.sleep(299)
    assert correlator.correlate(e) is None
    await trio.sleep(2)
    assert correlator.correlate(e) is not None
    other = Event(involved=ObjectRef("Bundle", "b", "ns"), type=EventType.NORMAL, reason="R", message="m")
    assert correlator.correlate(other) is not None, "the limit is per object"


async def test_spam_dropped_events_are_counted(autojump_clock: trio.testing.MockClock) -> None:
    manager = Manager(handle_signals=False)
    memory = MemorySink()
    manager.add_sink(memory)
    async with running(manager):
        for i in range(30):
            manager.events.warning(A, "Failed", f"attempt {i}")
        await trio.sleep(1)
    assert len(memory.events) == 25
    assert manager.events.drops() == {("*", "spam"): 5}


async def test_events_are_flushed_at_shutdown(autojump_clock: trio.testing.MockClock) -> None:
    class SlowSink:
        name = "slow"

        def __init__(self) -> None:
            self.got: list[Event] = []

        async def deliver(self, event: Event) -> None:
            await trio.sleep(0.1)
            self.got.append(event)

    manager = Manager(handle_signals=False, event_flush_timeout=5)
    slow = SlowSink()
    manager.add_sink(slow)
    async with running(manager) as reports:
        for i in range(10):
            manager.events.normal(ObjectRef("K", f"o{i}"), "R", "m")
    assert len(slow.got) == 10
    assert reports[0].events_flushed


async def test_odd_event_arguments_are_stringified_not_fatal(autojump_clock: trio.testing.MockClock) -> None:
    manager = Manager(handle_signals=False)
    memory = MemorySink()
    manager.add_sink(memory)
    async with running(manager):
        manager.events.normal(A, "Progressing", ["not", "a", "string"])  # type: ignore[arg-type]
        await trio.sleep(1)
    assert [e.message for e in memory.events] == ["['not', 'a', 'string']"]


async def test_events_still_in_the_recorders_buffer_when_it_is_cancelled_count_as_not_flushed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = EventRecorder()
    first, second = StuckSink(), StuckSink()
    second.name = "stuck-2"  # type: ignore[misc]
    recorder.add_sink(first)
    recorder.add_sink(second)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.normal(A, "Progressing", "0")
        await trio.testing.wait_all_tasks_blocked()
        assert (first.attempts, second.attempts) == (1, 1)  # both stuck delivering event 0
        for i in range(1, 5):
            recorder.normal(A, "Progressing", str(i))
        nursery.cancel_scope.cancel()  # the dispatcher takes event 1 at most; 2..4 stay buffered
    # Event 0 was in flight (neither delivered nor failed); events 1..4 were never delivered.
    assert recorder.drops() == {("stuck", "not_flushed"): 4, ("stuck-2", "not_flushed"): 4}


async def test_emits_after_a_forced_stop_count_as_closed_without_an_error_log(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    manager = Manager(handle_signals=False)
    sink = StuckSink()
    manager.add_sink(sink)
    async with running(manager) as reports:
        manager.events.normal(A, "Progressing", "0")
        await trio.testing.wait_all_tasks_blocked()
        for i in range(1, 4):
            manager.events.normal(A, "Progressing", str(i))
        manager.force_stop("second signal")
    assert reports[0].forced and not reports[0].events_flushed
    assert manager.events.drops() == {("stuck", "not_flushed"): 3}
    with caplog.at_level("DEBUG", logger="engine.events"):
        manager.events.normal(A, "Progressing", "late")
    assert manager.events.drops() == {("stuck", "not_flushed"): 3, ("*", "closed"): 1}
    assert [r for r in caplog.records if r.name == "engine.events" and r.levelno >= 30] == []


async def test_every_event_is_accounted_for_with_a_flush_timeout_of_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class SlowSink:
        name = "slow"

        def __init__(self) -> None:
            self.started = 0
            self.delivered = 0

        async def deliver(self, event: Event) -> None:
            self.started += 1
            await trio.sleep(1)
            self.delivered += 1

    manager = Manager(handle_signals=False, event_flush_timeout=0)
    slow = SlowSink()
    manager.add_sink(slow)

    async def emit_on_the_way_out() -> None:  # the last events before the flush
        for i in range(5):
            manager.events.normal(ObjectRef("K", f"o{i}"), "R", "m")

    manager.add_shutdown_hook(emit_on_the_way_out)
    async with running(manager) as reports:
        pass
    assert not reports[0].events_flushed
    in_flight = slow.started - slow.delivered
    stats = manager.events.statistics()
    not_flushed = stats.drops.get(("slow", "not_flushed"), 0)
    assert stats.sinks["slow"].delivered + in_flight + not_flushed == 5
    assert not_flushed == 5 - in_flight
