"""The fencing keeper that leader election and the ring share, proven once, under virtual time."""

from __future__ import annotations

import logging
import random

import pytest
import trio
import trio.testing

from engine.kube import ServerError
from engine.kube._coordination._keeper import FencingKeeper, LeaseClock

RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0


def keeper() -> FencingKeeper:
    return FencingKeeper(renew_deadline=RENEW_DEADLINE, retry_period=RETRY_PERIOD, rng=random.Random(7),
                         subject="lease default/x", logger=logging.getLogger("test.keeper"))


async def test_a_holder_expires_at_its_renew_deadline_and_not_before(autojump_clock: trio.testing.MockClock) -> None:
    k = keeper()
    assert not k.expired(trio.current_time() + 1e9) and k.deadline is None, "nothing held, nothing expires"
    k.renewed(trio.current_time())
    renewed = trio.current_time()
    assert k.deadline == renewed + RENEW_DEADLINE
    assert not k.expired(renewed + RENEW_DEADLINE - 1e-6)
    assert k.expired(renewed + RENEW_DEADLINE)
    k.dropped()
    assert not k.expired(renewed + RENEW_DEADLINE) and k.renewed_at == renewed


async def test_an_attempt_never_outlives_the_right_to_act(autojump_clock: trio.testing.MockClock) -> None:
    k = keeper()
    k.renewed(trio.current_time())
    deadline = trio.current_time() + RENEW_DEADLINE
    await trio.sleep(3)
    ended_at: list[float] = []

    async def hangs() -> bool:
        try:
            await trio.sleep_forever()
        finally:
            ended_at.append(trio.current_time())

    assert await k.attempt(trio.current_time(), hangs, "renewing") is None
    assert ended_at == [deadline] and trio.current_time() == deadline, "cut at the renew deadline, not later"
    assert k.failed == 1 and k.expired(trio.current_time())


async def test_an_attempt_without_a_lease_is_cut_a_renew_deadline_after_it_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    k = keeper()
    started = trio.current_time()
    assert await k.attempt(started, trio.sleep_forever, "acquiring") is None
    assert trio.current_time() == started + RENEW_DEADLINE and k.failed == 1


async def test_a_late_attempt_is_cut_at_once_and_api_errors_are_counted_not_raised(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
) -> None:
    k = keeper()
    k.renewed(trio.current_time())
    await trio.sleep(RENEW_DEADLINE + 1)
    calls: list[float] = []

    async def renew() -> bool:
        calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        return True

    started = trio.current_time()
    assert await k.attempt(started, renew, "renewing") is None and trio.current_time() == started
    k.renewed(trio.current_time())

    async def refused() -> bool:
        await trio.lowlevel.checkpoint()
        raise ServerError("etcd is gone", code=500, reason="InternalError")

    with caplog.at_level(logging.WARNING, "test.keeper"):
        assert await k.attempt(trio.current_time(), refused, "renewing") is None
    assert k.failed == 2
    assert "renewing lease default/x failed: ServerError" in caplog.text
    assert "did not finish within 10s" in caplog.text
    assert await k.attempt(trio.current_time(), renew, "renewing") is True and k.failed == 2


async def test_the_next_attempt_comes_before_the_deadline_while_holding(autojump_clock: trio.testing.MockClock) -> None:
    k = keeper()
    waits = [k.next_wake() - trio.current_time() for _ in range(200)]
    assert all(RETRY_PERIOD / 2 <= w <= RETRY_PERIOD for w in waits)
    k.renewed(trio.current_time())
    deadline = k.deadline
    assert deadline is not None
    await trio.sleep(1)
    assert all(k.next_wake() - trio.current_time() >= RETRY_PERIOD / 2 for _ in range(200)), "not capped early on"
    await trio.sleep(RENEW_DEADLINE - 1.5)
    assert {k.next_wake() for _ in range(200)} == {deadline}, "capped at the deadline, so the expiry is seen on time"


async def test_a_holder_that_cannot_renew_stops_acting_within_its_deadline(autojump_clock: trio.testing.MockClock) -> None:
    """The loop shape leader election and the ring run: renew every retry period; the server
    answers for a while, then hangs. The holder notices the expiry at the renew deadline of its
    last successful renewal, not a retry period later."""
    k = keeper()
    answering = 3
    acting_until: list[float] = []

    async def renew() -> bool:
        nonlocal answering
        if answering == 0:
            await trio.sleep_forever()
        answering -= 1
        await trio.sleep(0.1)
        return True

    while True:
        started = trio.current_time()
        if k.expired(started):
            acting_until.append(started)
            break
        if await k.attempt(started, renew, "renewing"):
            k.renewed(started)
        await trio.sleep_until(k.next_wake())
    assert k.renewed_at is not None and acting_until == [k.renewed_at + RENEW_DEADLINE]


async def test_the_lease_clock_moves_strictly_forward_even_when_time_does_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = LeaseClock()
    stamps = [clock.now() for _ in range(5)]
    assert stamps == sorted(set(stamps)) and all(s.tzinfo is not None for s in stamps)
    await trio.sleep(1.5)
    later = clock.now()
    assert 1.4 < (later - stamps[0]).total_seconds() < 1.6
