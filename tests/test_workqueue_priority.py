"""The work queue's priorities: the highest priority ready first, FIFO within a priority, a
key's best priority kept until it runs, and no starvation (the bound the docstring states)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from engine import Priority, WorkQueue

from .test_workqueue import drain_nowait

LOW, NORMAL, HIGH = Priority.LOW, Priority.NORMAL, Priority.HIGH


async def test_highest_priority_first_and_fifo_within_a_priority() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key, priority in [("l1", LOW), ("n1", NORMAL), ("l2", LOW), ("h1", HIGH), ("n2", NORMAL), ("h2", HIGH)]:
        q.add(key, priority)
    assert drain_nowait(q) == ["h1", "h2", "n1", "n2", "l1", "l2"]
    stats = q.statistics()
    assert stats.adds_total == 6 and stats.depth == 0


async def test_a_key_keeps_its_best_priority_and_moves_up_to_the_back_of_it() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a", LOW)
    q.add("b", NORMAL)
    q.add("c", LOW)
    q.add("a", NORMAL)
    q.add("b", LOW)
    assert q.statistics().depth_by_priority == {HIGH: 0, NORMAL: 2, LOW: 1}
    assert len(q) == 3 and q.statistics().adds_total == 3
    assert q.get_nowait() == "b" and q.handed_out_priority is NORMAL
    assert q.get_nowait() == "a" and q.handed_out_priority is NORMAL
    assert q.get_nowait() == "c" and q.handed_out_priority is LOW
    with pytest.raises(trio.WouldBlock):
        q.get_nowait()


async def test_a_key_added_while_processing_comes_back_at_its_best_priority() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a", HIGH)
    q.add("a", LOW)
    q.add("n", NORMAL)
    q.done("a")
    assert q.get_nowait() == "a" and q.handed_out_priority is HIGH
    assert q.get_nowait() == "n"


async def test_a_raise_while_handed_over_reaches_that_run(autojump_clock: trio.testing.MockClock) -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[tuple[str, Priority]] = []

    async def worker() -> None:
        got.append((await q.get(), q.handed_out_priority))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        q.add("a", LOW)
        q.add("a", HIGH)
    assert got == [("a", HIGH)]
    assert len(q) == 0 and q.statistics().depth_by_priority[HIGH] == 0


async def test_a_key_raised_while_its_getter_resumes_loses_no_other_key() -> None:
    """``get`` takes a ready key, then yields once before the key counts as processing. A
    better-priority add of that key in that moment once moved it to a better lane as if it were
    still ready: a ghost entry the next ``get`` handed out in place of a real key, which was
    then never handed out (a change lost until the process restarted). The scheduler runs the
    adder inside that moment in about half of the rounds."""
    for _ in range(64):
        q: WorkQueue[str] = WorkQueue()
        q.add("a", LOW)
        got: list[tuple[str, Priority]] = []

        async def worker(q: WorkQueue[str], got: list[tuple[str, Priority]]) -> None:
            got.append((await q.get(), q.handed_out_priority))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker, q, got)
            await trio.lowlevel.checkpoint()
            q.add("a", NORMAL)
        assert got == [("a", NORMAL)]
        q.done("a")
        q.add("b")
        assert drain_nowait(q) == ["b"]
        assert len(q) == 0
        assert q.statistics().depth_by_priority == {HIGH: 0, NORMAL: 0, LOW: 0}


async def test_a_delayed_key_becomes_ready_at_its_priority_before_ready_lower_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q: WorkQueue[str] = WorkQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(q.run)
        q.add_after("d", 5, HIGH)
        q.add_after("d", 8, LOW)
        q.add("n", NORMAL)
        q.add("l", LOW)
        await trio.sleep(6)
        assert drain_nowait(q) == ["d", "n", "l"]
        q.add("r", LOW)
        q.add_after("r", 1, HIGH)
        q.add("n2", NORMAL)
        await trio.sleep(2)
        assert q.get_nowait() == "r" and q.handed_out_priority is HIGH
        q.add_rate_limited("f", HIGH)
        q.add("n3", NORMAL)
        await trio.sleep(1)
        assert drain_nowait(q) == ["f", "n2", "n3"]
        q.shutdown()


async def test_max_overtakes_zero_hands_out_by_age() -> None:
    q: WorkQueue[str] = WorkQueue(max_overtakes=0)
    q.add("l", LOW)
    q.add("h", HIGH)
    q.add("n", NORMAL)
    assert drain_nowait(q) == ["l", "h", "n"]
    with pytest.raises(ValueError, match="max_overtakes"):
        WorkQueue(max_overtakes=-1)


def test_the_longest_wait_is_told_by_priority() -> None:
    class Observer:
        def on_add(self, key: object) -> None: ...
        def on_get(self, key: object, queued_for: float) -> None: ...
        def on_done(self, key: object, worked_for: float) -> None: ...
        def on_retry(self, key: object) -> None: ...

    async def main() -> None:
        q: WorkQueue[str] = WorkQueue(observer=Observer())
        q.add("l", LOW)
        clock.jump(3)
        q.add("n", NORMAL)
        q.add("m", LOW)
        q.add("m", NORMAL)
        clock.jump(1)
        stats = q.statistics()
        assert stats.longest_wait_by_priority == {HIGH: 0, NORMAL: 1, LOW: 4}
        assert stats.depth_by_priority == {HIGH: 0, NORMAL: 2, LOW: 1}
        assert q.get_nowait() == "n"
        assert q.statistics().longest_wait_by_priority == {HIGH: 0, NORMAL: 1, LOW: 4}

    clock = trio.testing.MockClock()
    trio.run(main, clock=clock)


# -- no starvation: a flood of changes --------------------------------------------------------


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    max_overtakes=st.integers(0, 8),
    ahead=st.lists(st.sampled_from(list(Priority)), max_size=30),
    target=st.sampled_from([LOW, NORMAL]),
    flood=st.lists(st.integers(1, 6), min_size=1, max_size=20),
    flood_priority=st.sampled_from([NORMAL, HIGH]),
)
def test_a_ready_key_waits_at_most_the_stated_bound_however_many_changes_arrive(
    max_overtakes: int, ahead: list[Priority], target: Priority, flood: list[int], flood_priority: Priority
) -> None:
    """Keys of ``flood_priority`` (at least ``target``'s) keep arriving, some with every hand-out:
    the target is still handed out within ``(n + 1) * (max_overtakes + 1)`` hand-outs, ``n``
    the keys ready when it became ready."""
    if flood_priority < target:
        flood_priority = target
    bound = (len(ahead) + 1) * (max_overtakes + 1)

    async def main() -> int | None:
        q: WorkQueue[str] = WorkQueue(max_overtakes=max_overtakes)
        for i, priority in enumerate(ahead):
            q.add(f"ahead-{i}", priority)
        q.add("target", target)
        fresh = 0
        for handed in range(1, bound + 1):
            for _ in range(flood[handed % len(flood)]):
                fresh += 1
                q.add(f"change-{fresh}", flood_priority)
            key = q.get_nowait()
            q.done(key)
            if key == "target":
                return handed
        return None

    handed = trio.run(main, clock=trio.testing.MockClock())
    assert handed is not None, f"the target waited more than {bound} hand-outs"


async def test_without_a_flood_a_key_waits_only_for_the_keys_before_it() -> None:
    q: WorkQueue[str] = WorkQueue(max_overtakes=2)
    for i in range(10):
        q.add(f"l{i}", LOW)
    q.add("n", NORMAL)
    assert q.get_nowait() == "n"
    assert drain_nowait(q) == [f"l{i}" for i in range(10)]


# -- the model check, with priorities -----------------------------------------------------------

KEYS = st.sampled_from("abcde")
PRIORITIES = st.sampled_from(list(Priority))
MAX_OVERTAKES = 2
LANES = (HIGH, NORMAL, LOW)


class PriorityQueueModel(RuleBasedStateMachine):
    """The queue against a plain model: client-go's semantics, the delay rules, the priority
    rules and the aging rule, plus the stated bound checked on every ready key."""

    def __init__(self) -> None:
        super().__init__()
        self.clock: trio.testing.MockClock = CLOCK
        self.q: WorkQueue[str] = WorkQueue(max_overtakes=MAX_OVERTAKES)
        self.lanes: dict[Priority, list[str]] = {p: [] for p in LANES}
        self.ticket: dict[str, int] = {}
        self.tickets = 0
        self.priority: dict[str, Priority] = {}
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, int]] = {}
        self.delay_priority: dict[str, Priority] = {}
        self.seq = 0
        self.overtakes = 0
        self.waited: dict[str, int] = {}
        """Hand-outs each ready key has seen since it became ready (or moved up)."""
        self.allowed: dict[str, int] = {}
        """The bound for each ready key: ``(n + 1) * (MAX_OVERTAKES + 1)``."""

    def _ready(self) -> list[str]:
        return [key for lane in self.lanes.values() for key in lane]

    def _enter(self, key: str) -> None:
        others = len(self._ready())
        self.tickets += 1
        self.ticket[key] = self.tickets
        self.lanes[self.priority[key]].append(key)
        self.waited[key] = 0
        self.allowed[key] = (others + 1) * (MAX_OVERTAKES + 1)

    def _add(self, key: str, priority: Priority) -> None:
        if key in self.dirty:
            if priority > self.priority[key]:
                if key not in self.processing:
                    self.lanes[self.priority[key]].remove(key)
                    self.priority[key] = priority
                    self._enter(key)
                else:
                    self.priority[key] = priority
            return
        self.dirty.add(key)
        self.priority[key] = priority
        if key not in self.processing:
            self._enter(key)

    @rule(key=KEYS, priority=PRIORITIES)
    def add(self, key: str, priority: Priority) -> None:
        self.q.add(key, priority)
        self._add(key, priority)

    @rule(key=KEYS, delay=st.sampled_from([0, 1, 2, 5]), priority=PRIORITIES)
    def add_after(self, key: str, delay: float, priority: Priority) -> None:
        self.q.add_after(key, delay, priority)
        if delay <= 0:
            self._add(key, priority)
            return
        deadline = trio.current_time() + delay
        current = self.waiting.get(key)
        self.delay_priority[key] = priority if current is None else max(priority, self.delay_priority[key])
        if current is None or deadline < current[0]:
            self.seq += 1
            self.waiting[key] = (deadline, self.seq)

    @rule()
    def get(self) -> None:
        try:
            key = self.q.get_nowait()
        except trio.WouldBlock:
            assert not self._ready()
            return
        live = [p for p in LANES if self.lanes[p]]
        best = live[0]
        oldest = min(live, key=lambda p: self.ticket[self.lanes[p][0]])
        if best == oldest:
            self.overtakes = 0
        elif self.overtakes >= MAX_OVERTAKES:
            self.overtakes = 0
            best = oldest
        else:
            self.overtakes += 1
        expected = self.lanes[best].pop(0)
        assert key == expected
        assert self.q.handed_out_priority is self.priority.pop(key)
        del self.waited[key], self.allowed[key]
        for other in self.waited:
            self.waited[other] += 1
        self.dirty.discard(key)
        self.processing.add(key)
        self.waiting.pop(key, None)
        self.delay_priority.pop(key, None)

    @precondition(lambda self: self.processing)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.remove(key)
        if key in self.dirty:
            self._enter(key)

    @rule(dt=st.sampled_from([0.5, 1, 3]))
    def advance(self, dt: float) -> None:
        self.clock.jump(dt)
        self.q._fire_due()
        now = trio.current_time()
        due = sorted((v, k) for k, v in self.waiting.items() if v[0] <= now)
        for _, key in due:
            del self.waiting[key]
            self._add(key, self.delay_priority.pop(key))

    @invariant()
    def matches_model(self) -> None:
        ready = self._ready()
        assert len(self.q) == len(ready)
        assert len(set(ready)) == len(ready), "a key is in the ready channel at most once"
        assert not (set(ready) & self.processing), "a ready key is never also processing"
        stats = self.q.statistics()
        assert stats.processing == len(self.processing)
        assert stats.waiting == len(self.waiting)
        assert dict(stats.depth_by_priority) == {p: len(lane) for p, lane in self.lanes.items()}
        assert self.overtakes <= MAX_OVERTAKES
        for key, waited in self.waited.items():
            assert waited < self.allowed[key], f"{key} waited {waited} hand-outs, beyond the bound"


CLOCK = trio.testing.MockClock()


def test_priority_queue_against_model() -> None:
    async def main() -> None:
        run_state_machine_as_test(
            PriorityQueueModel,
            settings=settings(max_examples=200, stateful_step_count=60, deadline=None, derandomize=True),
        )

    trio.run(main, clock=CLOCK)
