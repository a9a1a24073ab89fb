from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from engine import ExponentialBackoffLimiter, QueueShutDown, TokenBucketLimiter, WorkQueue, default_rate_limiter


def drain_nowait(q: WorkQueue[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except trio.WouldBlock:
            return out


async def test_key_is_in_ready_channel_at_most_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert drain_nowait(q) == ["a", "b"]


async def test_ready_keys_are_fifo() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in "dcba":
        q.add(key)
    assert drain_nowait(q) == ["d", "c", "b", "a"]


async def test_key_is_processed_by_one_worker_at_a_time() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    q.add("a")
    with pytest.raises(trio.WouldBlock):
        q.get_nowait()
    assert q.statistics().processing == 1


async def test_add_while_processing_is_redelivered_right_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    assert q.get_nowait() == "a"
    q.add("a")
    q.done("a")
    assert drain_nowait(q) == ["b", "a"]


async def test_done_without_add_does_not_redeliver() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.done(q.get_nowait())
    assert drain_nowait(q) == []


async def test_done_for_unknown_key_is_an_error() -> None:
    q: WorkQueue[str] = WorkQueue()
    with pytest.raises(ValueError, match=r"^done\(\) called for 'x', which is not being processed$"):
        q.done("x")


async def test_done_for_a_ready_key_is_an_error_and_leaves_it_ready() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    with pytest.raises(ValueError, match=r"^done\(\) called for 'a', which is not being processed$"):
        q.done("a")
    assert not q.is_processing("a")
    with pytest.raises(KeyError):
        q.started_at("a")
    q.add("a")
    assert len(q) == 2
    assert drain_nowait(q) == ["a", "b"]
    assert q.statistics().processing == 2


async def test_a_note_travels_with_its_key_to_the_worker_and_none_never_replaces_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q: WorkQueue[str] = WorkQueue()
    assert q.add_noted("a", "first") is None
    assert q.add("a")
    assert q.add_noted("a", "second") == "first", "a dirty key keeps its note and tells it"
    q.replace_note("a", "second")
    assert q.add_noted("b", None) is None
    await trio.sleep(1)
    assert await q.get() == "a"
    assert (q.handed_out_note, q.handed_out_at) == ("second", q.started_at("a"))
    assert q.add_noted("a", "while processing") is None
    q.done("a")
    assert q.get_nowait() == "b" and q.handed_out_note is None
    assert q.get_nowait() == "a" and q.handed_out_note == "while processing"
    q.shutdown()
    assert q.add_noted("c", "late") is False


async def test_failing_keys_is_a_live_view_of_the_keys_not_forgotten() -> None:
    q: WorkQueue[str] = WorkQueue()
    failing = q.failing_keys
    assert not failing
    q.add_rate_limited("a")
    assert set(failing) == {"a"} and q.num_requeues("a") == 1
    q.forget("a")
    assert not failing


async def test_get_waits_for_a_key(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str] = []

    async def worker() -> None:
        got.append(await q.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        q.add("a")
    assert got == ["a"]


async def test_add_after_delivers_after_the_delay(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(q.run)
        start = trio.current_time()
        q.add_after("a", 10)
        assert len(q) == 0
        assert await q.get() == "a"
        assert trio.current_time() - start == pytest.approx(10)
        nursery.cancel_scope.cancel()


async def test_add_after_earlier_deadline_wins(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(q.run)
        start = trio.current_time()
        q.add_after("a", 10)
        q.add_after("a", 30)
        q.add_after("a", 3)
        assert await q.get() == "a"
        assert trio.current_time() - start == pytest.approx(3)
        q.done("a")
        await trio.sleep(100)
        assert len(q) == 0, "the superseded later deadlines must not fire again"
        nursery.cancel_scope.cancel()


async def test_immediate_add_preempts_a_pending_delay_and_the_run_consumes_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q: WorkQueue[str] = WorkQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(q.run)
        q.add_after("a", 60)
        q.add("a")
        assert q.get_nowait() == "a"
        q.done("a")
        await trio.sleep(120)
        assert len(q) == 0
        assert q.statistics().waiting == 0
        nursery.cancel_scope.cancel()


async def test_rate_limited_retry_backs_off_exponentially_and_forget_resets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoffLimiter(base=1.0, cap=8.0))
    delays = []
    async with trio.open_nursery() as nursery:
        await nursery.start(q.run)
        for _ in range(5):
            start = trio.current_time()
            q.add_rate_limited("a")
            assert await q.get() == "a"
            delays.append(trio.current_time() - start)
            q.done("a")
        assert delays == pytest.approx([1, 2, 4, 8, 8])
        assert q.num_requeues("a") == 5
        q.forget("a")
        assert q.num_requeues("a") == 0
        nursery.cancel_scope.cancel()


def test_default_limiter_is_client_go_default() -> None:
    async def main() -> None:
        limiter = default_rate_limiter()
        assert [limiter.when("k") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
        for _ in range(30):
            limiter.when("k")
        assert limiter.when("k") == 1000.0

    trio.run(main, clock=trio.testing.MockClock())


def test_token_bucket_burst_then_rate() -> None:
    async def main() -> None:
        bucket = TokenBucketLimiter(rate=10, burst=100)
        assert all(bucket.when(i) == 0 for i in range(100))
        assert bucket.when("x") == pytest.approx(0.1)
        assert bucket.when("y") == pytest.approx(0.2)

    trio.run(main, clock=trio.testing.MockClock())


async def test_shutdown_drops_ready_keys_and_stops_get() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    taken = q.get_nowait()
    q.shutdown()
    assert q.add("c") is False
    with pytest.raises(QueueShutDown, match=r"^work queue '' is shut down$"):
        await q.get()
    assert not q.statistics().waiting
    q.done(taken)
    await q.drain()


async def test_shutdown_wakes_waiting_getters(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue(name="w")
    errors: list[BaseException] = []

    async def worker() -> None:
        try:
            await q.get()
        except QueueShutDown as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        q.shutdown()
    assert len(errors) == 3


async def test_drain_waits_for_processing_keys(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = q.get_nowait()
    q.shutdown()
    drained = trio.Event()

    async def wait_drained() -> None:
        await q.drain()
        drained.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_drained)
        await trio.sleep(5)
        assert not drained.is_set()
        q.done(key)
    assert drained.is_set()


async def test_cancelled_get_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    with trio.move_on_after(1):
        await q.get()
    q.add("a")
    assert q.get_nowait() == "a"


# -- a model-based stateful test ---------------------------------------------------------------

KEYS = st.sampled_from("abcd")


class QueueModel(RuleBasedStateMachine):
    """The queue against a plain model of client-go's semantics plus our delay rules."""

    def __init__(self) -> None:
        super().__init__()
        self.clock: trio.testing.MockClock = CLOCK
        self.q: WorkQueue[str] = WorkQueue()
        self.ready: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, int]] = {}
        self.seq = 0

    def _add(self, key: str) -> None:
        if key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.ready.append(key)

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.q.add(key)
        self._add(key)

    @rule(key=KEYS, delay=st.sampled_from([0, 1, 2, 5]))
    def add_after(self, key: str, delay: float) -> None:
        self.q.add_after(key, delay)
        if delay <= 0:
            self._add(key)
            return
        deadline = trio.current_time() + delay
        current = self.waiting.get(key)
        if current is None or deadline < current[0]:
            self.seq += 1
            self.waiting[key] = (deadline, self.seq)

    @rule()
    def get(self) -> None:
        try:
            key = self.q.get_nowait()
        except trio.WouldBlock:
            assert not self.ready
            return
        expected = self.ready.pop(0)
        assert key == expected
        self.dirty.discard(key)
        self.processing.add(key)
        self.waiting.pop(key, None)

    @precondition(lambda self: self.processing)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.remove(key)
        if key in self.dirty:
            self.ready.append(key)

    @rule(dt=st.sampled_from([0.5, 1, 3]))
    def advance(self, dt: float) -> None:
        self.clock.jump(dt)
        self.q._fire_due()
        now = trio.current_time()
        due = sorted((v, k) for k, v in self.waiting.items() if v[0] <= now)
        for _, key in due:
            del self.waiting[key]
            self._add(key)

    @invariant()
    def matches_model(self) -> None:
        assert len(self.q) == len(self.ready)
        assert len(set(self.ready)) == len(self.ready), "a key is in the ready channel at most once"
        assert not (set(self.ready) & self.processing), "a ready key is never also processing"
        stats = self.q.statistics()
        assert stats.processing == len(self.processing)
        assert stats.waiting == len(self.waiting)


CLOCK = trio.testing.MockClock()


def test_queue_against_model() -> None:
    async def main() -> None:
        run_state_machine_as_test(QueueModel, settings=settings(max_examples=200, stateful_step_count=60, deadline=None, derandomize=True))

    trio.run(main, clock=CLOCK)


def test_statistics_are_a_snapshot() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        q.add("a")
        s = q.statistics()
        q.add("b")
        assert s.depth == 1 and s.adds_total == 1
        assert q.statistics().depth == 2
        assert math.isclose(q.statistics().longest_processing, 0.0)

    trio.run(main, clock=trio.testing.MockClock())


def test_statistics_tell_when_the_last_pending_delay_ends() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoffLimiter(base=1, cap=1000))
        assert q.statistics().last_delay_ends_in == 0
        q.add_rate_limited("b")
        q.add_after("a", 5)
        assert q.statistics().last_delay_ends_in == 5
        clock.jump(2)
        stats = q.statistics()
        assert stats.waiting == 2 and math.isclose(stats.last_delay_ends_in, 3)

    clock = trio.testing.MockClock()
    trio.run(main, clock=clock)
