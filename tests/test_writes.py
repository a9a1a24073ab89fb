"""Own writes: the record a controller keeps of its runs' writes (engine._writes), on its own."""

from __future__ import annotations

import trio
import trio.testing

from engine import ECHO_HORIZON, ECHO_WAIT, ObjectRef, Trigger
from engine._writes import OwnWrites, own_write, writing_for

A = ObjectRef("Widget", "a", "ns")
B = ObjectRef("Widget", "b", "ns")


def trigger(ref: ObjectRef, revision: str, sequence: int = 1) -> Trigger:
    return Trigger(ref, sequence, "changed", revision, trio.current_time())


async def test_an_echo_is_dropped_once_and_only_for_the_key_whose_run_wrote_it() -> None:
    applied: list[Trigger] = []
    writes = OwnWrites(applied.append)
    assert not writes
    writes.began(A)
    writes.ended(A, "7")
    assert writes and len(writes) == 1
    assert writes.screen(trigger(B, "7")), "another key's trigger is news"
    assert not writes.screen(trigger(A, "7")), "the echo"
    assert writes.screen(trigger(A, "7")), "a revision is an echo once"
    assert writes.screen(trigger(A, "8"))
    assert not writes and applied == []


async def test_an_earlier_runs_write_is_news_once_the_key_ran_again() -> None:
    """A later run may have read a cache without the earlier run's write (a delayed watch):
    the echo of it must run the key again (mirror seed 47 left stale copies otherwise)."""
    writes = OwnWrites(lambda t: None)
    writes.began(A)
    writes.ended(A, "20")
    writes.began(B)
    writes.ended(B, "21")
    writes.started(A)
    assert writes.screen(trigger(A, "20")), "news to the run that started after the write"
    assert not writes.screen(trigger(B, "21")), "B did not run again: still its echo"
    assert not writes
    writes.began(A)
    writes.ended(A, "22")
    writes.started(B)
    assert not writes.screen(trigger(A, "22")), "another key's run forgets nothing of A"


async def test_a_trigger_waits_for_the_write_in_flight_then_is_dropped_or_applied() -> None:
    applied: list[Trigger] = []
    writes = OwnWrites(applied.append)
    writes.began(A)
    echo, news = trigger(A, "9"), trigger(A, "10", 2)
    assert not writes.screen(echo) and not writes.screen(news)
    assert writes.screen(trigger(B, "11")), "only the writing key's triggers wait"
    assert applied == []
    writes.ended(A, "9")
    assert applied == [news]
    assert not writes


async def test_a_held_trigger_waits_echo_wait_at_most(autojump_clock: trio.testing.MockClock) -> None:
    applied: list[tuple[float, Trigger]] = []
    writes = OwnWrites(lambda t: applied.append((trio.current_time(), t)))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writes.run)
        writes.began(A)
        start = trio.current_time()
        held = trigger(A, "12")
        assert not writes.screen(held)
        await trio.sleep(10)
        assert applied == [(start + ECHO_WAIT, held)]
        writes.ended(A, "13")
        assert applied == [(start + ECHO_WAIT, held)]
        nursery.cancel_scope.cancel()


async def test_revisions_are_forgotten_after_the_horizon(autojump_clock: trio.testing.MockClock) -> None:
    writes = OwnWrites(lambda t: None)
    for i in range(1000):
        writes.began(A)
        writes.ended(A, str(i))
        await trio.sleep(1)
    assert len(writes) <= ECHO_HORIZON + 1


async def test_no_note_outside_a_run() -> None:
    assert own_write() is None
    assert writing_for() is None
    writes = OwnWrites(lambda t: None)
    writer = writes.writer()
    assert own_write() is None, "a worker between runs"
    assert writing_for() is None
    writer.key = A
    assert writing_for() == A
    note = own_write()
    assert note is not None
    with note:
        assert writes.screen(trigger(B, "1"))
        note.revision = "14"
    assert not writes.screen(trigger(A, "14"))
