"""Tests of engine.kube.LeaderElector: two replicas (two Clients) on one Lease of the embedded
ApiServer, through its memory transport, in virtual time."""

from __future__ import annotations

import logging
import random
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from engine import Controller, Manager, ManagerStateError, ObjectRef, Result, RunContext
from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Config,
    LeaderElector,
    Lease,
    RetryPolicy,
)
from engine.kube.lowlevel import (
    LEASE_RESOURCE,
    get_lease,
    update_lease,
)

LEASE = "engine-leader"
DURATION, DEADLINE, RETRY = 15.0, 10.0, 2.0
EPSILON = 0.5


def client(api: ApiServer, agent: str) -> Client:
    return Client(
        Config.from_dict(api.kubeconfig),
        transport=api.memory_transport(),
        user_agent=f"{agent}/1.0",
        retry=RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1),
    )


def elector(c: Client, identity: str, seed: int) -> LeaderElector:
    return LeaderElector(
        c,
        name=LEASE,
        namespace="default",
        identity=identity,
        lease_duration=DURATION,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
        rng=random.Random(seed),
    )


class LeadershipLog(trio.abc.Instrument):
    """Checks after every task step that at most one elector leads, and records when each
    started and stopped leading (trio time)."""

    def __init__(self, *electors: LeaderElector) -> None:
        self.electors = electors
        self.leading = {e.identity: False for e in electors}
        self.changes: list[tuple[float, str, bool]] = []
        self.violations: list[tuple[float, list[str]]] = []
        self.steps = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        now = trio.current_time()
        for e in self.electors:
            if e.is_leader != self.leading[e.identity]:
                self.leading[e.identity] = e.is_leader
                self.changes.append((now, e.identity, e.is_leader))
        leaders = [e.identity for e in self.electors if e.is_leader]
        if len(leaders) > 1:
            self.violations.append((now, leaders))

    def started(self, identity: str) -> list[float]:
        return [t for t, who, leading in self.changes if who == identity and leading]

    def stopped(self, identity: str) -> list[float]:
        return [t for t, who, leading in self.changes if who == identity and not leading]


@asynccontextmanager
async def replicas() -> AsyncIterator[tuple[ApiServer, LeaderElector, LeaderElector, LeadershipLog, trio.Nursery]]:
    """Server, replica ``a`` (leading) and ``b`` (standby), and the leadership log."""
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, client(api, "elector-b") as cb:
        a, b = elector(ca, "a", 1), elector(cb, "b", 2)
        log = LeadershipLog(a, b)
        trio.lowlevel.add_instrument(log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(a.run)
                await a.wait_leading()
                await nursery.start(b.run)
                yield api, a, b, log, nursery
                nursery.cancel_scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(log)
        assert log.violations == [], "two replicas led at once"
        assert log.steps > 0


async def lease_of(e: LeaderElector) -> Lease:
    return await get_lease(e._client, LEASE, namespace="default")


async def test_exactly_one_leads_and_release_hands_over_within_a_retry_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with replicas() as (api, a, b, log, _):
        await trio.sleep(10 * DURATION)
        assert a.is_leader and not b.is_leader
        stats = b.statistics()
        assert (stats.state_known, stats.holder, stats.transitions, stats.state) == (True, "a", 0, "running")
        assert a.statistics().acquisitions == 1 and a.statistics().failed_attempts == 0
        lease = await lease_of(a)
        assert (lease.holder_identity, lease.lease_duration_seconds, lease.lease_transitions) == ("a", 15, 0)
        raw = await a._client.get(LEASE_RESOURCE, LEASE, namespace="default")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", raw["spec"]["renewTime"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", raw["spec"]["acquireTime"])
        assert raw["spec"]["renewTime"] > raw["spec"]["acquireTime"], "the leader renews"

        released_at = trio.current_time()
        await a.release()
        assert not a.is_leader and a.statistics().state == "released"
        with trio.fail_after(RETRY + EPSILON):
            await b.wait_leading()
        assert b.statistics().leading_since is not None
        assert b.statistics().leading_since - released_at <= RETRY + EPSILON
        lease = await lease_of(b)
        assert (lease.holder_identity, lease.lease_transitions) == ("b", 1)
        await trio.sleep(3 * DURATION)
        assert b.is_leader and not a.is_leader
        assert log.started("b") == [b.statistics().leading_since]


async def test_release_writes_an_empty_holder_and_a_one_second_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, trio.open_nursery() as nursery:
        a = elector(ca, "a", 1)
        await nursery.start(a.run)
        await a.wait_leading()
        before = await lease_of(a)
        await a.release()
        await a.release()
        raw = await ca.get(LEASE_RESOURCE, LEASE, namespace="default")
        assert raw["spec"]["holderIdentity"] == ""
        assert raw["spec"]["leaseDurationSeconds"] == 1
        assert raw["spec"]["leaseTransitions"] == before.lease_transitions == 0
        await trio.sleep(5 * DURATION)
        assert not a.is_leader, "a released elector does not take the lease back"
        assert (await lease_of(a)).holder_identity is None


async def test_a_killed_leader_is_replaced_after_the_lease_duration_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, client(api, "elector-b") as cb:
        a, b = elector(ca, "a", 3), elector(cb, "b", 4)
        log = LeadershipLog(a, b)
        trio.lowlevel.add_instrument(log)
        try:
            async with trio.open_nursery() as nursery:
                async with trio.open_nursery() as a_nursery:
                    await a_nursery.start(a.run)
                    await a.wait_leading()
                    await nursery.start(b.run)
                    await trio.sleep(4 * DURATION + 0.37)
                    a_nursery.cancel_scope.cancel()  # kill -9: no release
                killed_at = trio.current_time()
                last_renewal = a.statistics().last_renewal
                assert last_renewal is not None and not a.is_leader
                assert (await lease_of(b)).holder_identity == "a", "the lease was not released"
                with trio.fail_after(DURATION + 2 * RETRY + EPSILON):
                    await b.wait_leading()
                acquired = b.statistics().leading_since
                assert acquired is not None
                assert acquired >= last_renewal + DURATION, "taken over before the lease expired"
                assert acquired <= killed_at + DURATION + 2 * RETRY
                assert (await lease_of(b)).lease_transitions == 1
                nursery.cancel_scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(log)
        assert log.violations == []


@pytest.mark.parametrize("fault", ["refuse", "black_hole"])
async def test_a_leader_cut_off_from_the_api_loses_within_the_renew_deadline_before_takeover(
    fault: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with replicas() as (api, a, b, log, _):
        lost: list[tuple[float, str, bool]] = []
        a.on_lost(lambda reason: lost.append((trio.current_time(), reason, a.is_leader)))
        await trio.sleep(2 * DURATION + 0.61)
        cut_at = trio.current_time()
        if fault == "refuse":
            injected = api.faults.fail(500, count=None, client="elector-a")
        else:
            injected = api.faults.add_latency(3600, client="elector-a")
        with trio.fail_after(DEADLINE + EPSILON):
            while not lost:
                await trio.sleep(0.01)
        (lost_at, reason, still_leading), = lost
        last_renewal = a.statistics().last_renewal
        assert last_renewal is not None and last_renewal <= cut_at
        assert lost_at == pytest.approx(last_renewal + DEADLINE)
        assert lost_at - cut_at <= DEADLINE
        assert reason == "the lease could not be renewed within renew_deadline (10s)"
        assert not still_leading, "is_leader is false when the callbacks run"
        assert a.statistics().state == "lost" and a.statistics().failed_attempts >= 1
        assert not b.is_leader, "the standby cannot have acquired yet"
        with trio.fail_after(DURATION + 2 * RETRY + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None and acquired > lost_at
        assert acquired >= last_renewal + DURATION
        assert injected.hits >= 1
        api.faults.remove(injected)
        await trio.sleep(3 * DURATION)
        assert b.is_leader and not a.is_leader, "a lost elector does not come back"
        assert log.stopped("a") == [lost_at]


async def test_transient_errors_within_the_deadline_do_not_lose_leadership(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with replicas() as (api, a, b, log, _):
        lost: list[str] = []
        a.on_lost(lost.append)
        api.faults.fail(500, count=3, client="elector-a", verbs={"update"})
        api.faults.fail(503, count=2, client="elector-a", verbs={"get"})
        await trio.sleep(5 * DURATION)
        assert lost == [] and a.is_leader and not b.is_leader
        assert a.statistics().failed_attempts >= 1
        assert "renewing lease default/engine-leader failed: ServerError" in caplog.text
        assert "Bearer" not in caplog.text and "Authorization" not in caplog.text


async def test_a_leader_that_sees_another_holder_stops_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with replicas() as (api, a, b, log, _):
        lost: list[tuple[float, str]] = []
        a.on_lost(lambda reason: lost.append((trio.current_time(), reason)))
        current = await lease_of(a)
        await update_lease(a._client, attrs.evolve(current, holder_identity="intruder"))
        stolen_at = trio.current_time()
        with trio.fail_after(RETRY + EPSILON):
            while not lost:
                await trio.sleep(0.01)
        assert lost[0][1] == "the lease is now held by 'intruder'"
        assert lost[0][0] - stolen_at <= RETRY
        assert not a.is_leader and not b.is_leader


async def test_the_first_of_two_concurrent_candidates_wins_and_the_other_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, client(api, "elector-b") as cb:
        a, b = elector(ca, "a", 5), elector(cb, "b", 6)
        log = LeadershipLog(a, b)
        trio.lowlevel.add_instrument(log)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(a.run)
                nursery.start_soon(b.run)
                await trio.sleep(5 * DURATION)
                assert [a.is_leader, b.is_leader].count(True) == 1
                assert (await lease_of(a)).lease_transitions == 0
                nursery.cancel_scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(log)
        assert log.violations == []


async def test_arguments_and_lifecycle(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca:
        def make(**kwargs: Any) -> LeaderElector:
            return LeaderElector(ca, name=LEASE, namespace="default", **kwargs)

        with pytest.raises(ValueError, match=r"^lease_duration must be greater than renew_deadline$"):
            make(lease_duration=10, renew_deadline=10)
        with pytest.raises(ValueError, match=r"^renew_deadline must be greater than retry_period$"):
            make(renew_deadline=2, retry_period=2)
        with pytest.raises(ValueError, match=r"^retry_period must be > 0$"):
            make(retry_period=0)
        with pytest.raises(ValueError, match=r"^identity must not be empty$"):
            make(identity="")
        with pytest.raises(ValueError, match=r"^a LeaderElector needs a lease name$"):
            LeaderElector(ca, name="", namespace="default")
        default = make()
        host, _, suffix = default.identity.rpartition("_")
        assert host == socket.gethostname()
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", suffix)
        assert make(rng=random.Random(7)).identity == make(rng=random.Random(7)).identity
        assert not default.statistics().state_known and default.holder is None

        e = make(identity="solo")
        async with trio.open_nursery() as nursery:
            await nursery.start(e.run)
            await e.wait_leading()
            await e.wait_leading()
            with pytest.raises(ManagerStateError, match=r"^a LeaderElector can be run only once$"):
                await e.run()
            nursery.cancel_scope.cancel()
        assert not e.is_leader and e.statistics().state == "stopped"


# --- two managers ------------------------------------------------------------------------------


async def test_two_managers_hand_over_gracefully_without_overlapping_reconciles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    history: list[tuple[str, float, float]] = []
    key = ObjectRef("ConfigMap", "state", "default")

    def replica(c: Client, identity: str, seed: int) -> tuple[Manager, LeaderElector, Controller]:
        election = elector(c, identity, seed)
        manager = Manager(handle_signals=False, leader_election=election, grace_period=5, name=identity)

        async def reconcile(ctx: RunContext) -> Result:
            start = trio.current_time()
            try:
                await trio.sleep(0.3)
            finally:
                history.append((identity, start, trio.current_time()))
            return Result(requeue_after=0.2)

        controller = manager.add_controller(Controller("writer", reconcile))
        return manager, election, controller

    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, client(api, "elector-b") as cb:
        ma, ea, ca_ctrl = replica(ca, "a", 11)
        mb, eb, cb_ctrl = replica(cb, "b", 12)
        log = LeadershipLog(ea, eb)
        trio.lowlevel.add_instrument(log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(ma.run)
                ca_ctrl.trigger(key)
                nursery.start_soon(mb.run)
                cb_ctrl.trigger(key)
                await trio.sleep(3 * DURATION)
                assert ma.started and not mb.started
                assert {who for who, _, _ in history} == {"a"}

                stop_at = trio.current_time()
                ma.stop("rolling update")
                with trio.fail_after(5 + RETRY + EPSILON):
                    await mb.wait_started()
                await trio.sleep(2 * DURATION)
                assert mb.started and eb.is_leader and not ea.is_leader
                mb.stop("test finished")
        finally:
            trio.lowlevel.remove_instrument(log)
    assert log.violations == []
    a_runs = [(s, e) for who, s, e in history if who == "a"]
    b_runs = [(s, e) for who, s, e in history if who == "b"]
    assert a_runs and b_runs
    assert max(e for _, e in a_runs) <= min(s for s, _ in b_runs), "reconciles overlapped"
    assert min(s for s, _ in b_runs) - stop_at <= 5 + RETRY + EPSILON
    ordered = sorted(history, key=lambda r: r[1])
    for (_, _, end), (_, start, _) in zip(ordered, ordered[1:]):
        assert end <= start, "two reconciles of the key overlapped"
    assert ma.leadership_lost is None and mb.leadership_lost is None
    assert log.stopped("a")[0] <= log.started("b")[0]


# -- the standby's watch -------------------------------------------------------------------------

TAKEOVER_EPSILON = 0.1


@asynccontextmanager
async def killable_leader(
    seeds: tuple[int, int] = (1, 2),
) -> AsyncIterator[tuple[ApiServer, LeaderElector, LeaderElector, LeadershipLog, Callable[[], Awaitable[None]]]]:
    """Server, replica ``a`` (leading), standby ``b``, and ``kill()``: cancels ``a`` (kill -9:
    no release) and returns once it stopped."""
    async with ApiServer(listen=False) as api, client(api, "elector-a") as ca, client(api, "elector-b") as cb:
        a, b = elector(ca, "a", seeds[0]), elector(cb, "b", seeds[1])
        log = LeadershipLog(a, b)
        trio.lowlevel.add_instrument(log)
        try:
            async with trio.open_nursery() as nursery:
                a_scope, a_done = trio.CancelScope(), trio.Event()

                async def run_a(task_status: trio.TaskStatus[None]) -> None:
                    with a_scope:
                        await a.run(task_status=task_status)
                    a_done.set()

                async def kill() -> None:
                    a_scope.cancel()
                    await a_done.wait()

                await nursery.start(run_a)
                await a.wait_leading()
                await nursery.start(b.run)
                yield api, a, b, log, kill
                nursery.cancel_scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(log)
        assert log.violations == [], "two replicas led at once"


@pytest.mark.parametrize(("seed", "offset"), [(5, 0.37), (6, 1.13), (7, 0.05), (8, 1.71)])
async def test_a_standby_takes_over_at_the_expiry_it_observed_not_a_retry_period_later(
    seed: int, offset: float, autojump_clock: trio.testing.MockClock
) -> None:
    async with killable_leader((seed, seed + 100)) as (api, a, b, log, kill):
        await trio.sleep(4 * DURATION + offset)
        await kill()
        last_renewal = a.statistics().last_renewal
        observed_at = b.statistics().observed_at
        assert last_renewal is not None and observed_at is not None and not a.is_leader
        assert 0 <= observed_at - last_renewal <= TAKEOVER_EPSILON, "the watch shows a renewal at once"
        with trio.fail_after(DURATION + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None
        assert acquired >= observed_at + DURATION, "taken over before the observed expiry"
        assert acquired - (observed_at + DURATION) <= TAKEOVER_EPSILON
        assert acquired - (last_renewal + DURATION) <= TAKEOVER_EPSILON
        assert (await lease_of(b)).lease_transitions == 1


async def test_a_released_lease_is_taken_over_at_once_through_the_watch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with killable_leader() as (api, a, b, log, _):
        await trio.sleep(2 * DURATION + 0.5)
        released_at = trio.current_time()
        await a.release()
        with trio.fail_after(RETRY + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None and acquired - released_at <= TAKEOVER_EPSILON


async def test_a_deleted_lease_is_taken_over_at_once_through_the_watch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with killable_leader() as (api, a, b, log, kill):
        await trio.sleep(2 * DURATION + 0.5)
        await kill()
        await a._client.delete(LEASE_RESOURCE, LEASE, namespace="default")
        deleted_at = trio.current_time()
        with trio.fail_after(RETRY + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None and acquired - deleted_at <= TAKEOVER_EPSILON
        assert (await lease_of(b)).holder_identity == "b"


@pytest.mark.parametrize("fault", ["late", "dropped", "expired"])
async def test_a_leader_renewing_on_time_is_never_displaced_whatever_the_watch_does(
    fault: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with killable_leader((11, 12)) as (api, a, b, log, kill):
        if fault == "late":
            api.faults.delay_watch(DURATION - 1, client="elector-b")
        for _ in range(int(8 * DURATION / 1.7)):
            await trio.sleep(1.7)
            if fault == "dropped":
                api.faults.drop_watches(client="elector-b", abrupt=True)
            elif fault == "expired":
                api.faults.expire_next_watch(client="elector-b")
                api.faults.drop_watches(client="elector-b")
        assert a.is_leader and not b.is_leader
        assert log.started("b") == [] and log.stopped("a") == []
        await kill()
        last_renewal = a.statistics().last_renewal
        assert last_renewal is not None
        with trio.fail_after(DURATION + 2 * RETRY + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None and acquired >= last_renewal + DURATION


async def test_a_forbidden_watch_falls_back_to_polling_and_says_so_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="engine.kube.leader")
    async with killable_leader() as (api, a, b, log, kill):
        forbidden = api.faults.fail(403, count=None, client="elector-b", resource="leases", verbs={"watch"})
        api.faults.drop_watches(client="elector-b")
        await trio.sleep(4 * DURATION + 0.37)
        assert a.is_leader and not b.is_leader
        await kill()
        last_renewal = a.statistics().last_renewal
        assert last_renewal is not None
        with trio.fail_after(DURATION + 2 * RETRY + EPSILON):
            await b.wait_leading()
        acquired = b.statistics().leading_since
        assert acquired is not None and acquired >= last_renewal + DURATION
        assert forbidden.hits >= 3, "the watch is retried"
        assert b.statistics().failed_attempts == 0, "a refused watch is not a failed election attempt"
    said = [r for r in caplog.records if r.getMessage().startswith("watching lease default/engine-leader failed")]
    assert [r.levelno for r in said][:1] == [logging.INFO]
    assert all(r.levelno == logging.DEBUG for r in said[1:]) and len(said) >= 2
    assert "polling it every 2s instead" in said[0].getMessage()
    assert "Bearer" not in caplog.text and "Authorization" not in caplog.text
