"""Warm standbys (``Manager(enable_warmup=True)``, the default): two replicas of a controller
on one Lease of the embedded ApiServer, through its memory transport, in virtual time. Every
request is recorded (:class:`RequestLog` with reads), so the tests count the standby's lists
and writes."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from engine import Controller, Manager, Priority, RunContext, RunLog
from engine.apiserver import ApiServer, RequestLog
from engine.kube import Client, Cluster, Config, Informer, KubernetesEventSink, LeaderElector, RetryPolicy

LEASE = "engine-warm"
DURATION, DEADLINE, RETRY = 15.0, 10.0, 2.0
OBJECTS = 40


def client(api: ApiServer, agent: str) -> Client:
    return Client(
        Config.from_dict(api.kubeconfig), transport=api.memory_transport(), user_agent=f"{agent}/1.0",
        retry=RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1),
    )


@attrs.define(eq=False)
class Replica:
    name: str
    manager: Manager
    elector: LeaderElector
    cluster: Cluster
    informer: Informer
    controller: Controller
    log: RunLog
    scope: trio.CancelScope
    seen: list[tuple[float, str, Any]]
    """Each run's start: its time, its object, and the object's ``data`` in the cache then."""

    def crash(self) -> None:
        """As kill -9: nothing is drained or released."""
        self.scope.cancel()

    def first_run(self) -> float:
        return min(started for _, _, _, started in self.log.started)


@asynccontextmanager
async def replica(api: ApiServer, nursery: trio.Nursery, name: str, *, warm: bool) -> AsyncIterator[Replica]:
    """A replica whose reconciler writes (an annotation, an Event) on each run."""
    async with client(api, name) as c:
        resource = await c.resource("v1", "ConfigMap")
        elector = LeaderElector(c, name=LEASE, namespace="default", identity=name, lease_duration=DURATION,
                                renew_deadline=DEADLINE, retry_period=RETRY, rng=random.Random(name))
        manager = Manager(handle_signals=False, leader_election=elector, enable_warmup=warm, name=name)
        manager.add_sink(KubernetesEventSink(c, reporting_controller="engine", reporting_instance=name))
        log = RunLog()
        manager.add_observer(log)

        seen: list[tuple[float, str, Any]] = []

        async def reconcile(ctx: RunContext) -> None:
            seen.append((trio.current_time(), ctx.ref.name, (informer.store.get("default", ctx.ref.name) or {}).get("data")))
            await c.patch(resource, ctx.ref.name, {"metadata": {"annotations": {"seen-by": name}}},
                          namespace="default")
            ctx.events.normal("Seen", f"seen by {name}")

        controller = manager.add_controller(Controller("cm", reconcile, max_concurrent=4))
        cluster = Cluster(c, manager, namespace="default")
        informer = await cluster.informer("v1", "ConfigMap")
        cluster.watches(controller, informer)
        scope = trio.CancelScope()

        async def run() -> None:
            with scope:
                await manager.run()

        nursery.start_soon(run)
        yield Replica(name, manager, elector, cluster, informer, controller, log, scope, seen)
        scope.cancel()


async def wait_for(condition: Any, *, timeout: float = 600.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


def lists(log: RequestLog, actor: str, *, since: float = -1.0) -> list[float]:
    """When ``actor`` listed ConfigMaps (every page, or a watch-list stream of the initial
    state), answered at or after ``since``."""
    return [r.received_at for r in log.records
            if r.actor == actor and (r.served.verb == "list" or r.served.initial_events)
            and r.served.kind == "ConfigMap" and r.answered_at >= since]


def writes(log: RequestLog, actor: str) -> list[tuple[str, str]]:
    return [(r.served.verb, r.served.kind) for r in log.writes(actor=actor)]


@asynccontextmanager
async def two_replicas(*, warm: bool) -> AsyncIterator[tuple[ApiServer, RequestLog, Replica, Replica]]:
    """``a`` leading and done with every object, ``b`` standing by (warm or not)."""
    async with ApiServer(listen=False) as api, client(api, "driver") as driver:
        log = RequestLog(api.store, reads=True)
        api.add_request_observer(log)
        configmaps = await driver.resource("v1", "ConfigMap")
        for i in range(OBJECTS):
            await driver.create(configmaps, {"metadata": {"name": f"cm-{i}", "namespace": "default"}, "data": {"v": "1"}})
        async with trio.open_nursery() as nursery:
            async with replica(api, nursery, "a", warm=warm) as a:
                await a.manager.wait_started()
                await wait_for(lambda: len(a.log.records) >= OBJECTS)
                async with replica(api, nursery, "b", warm=warm) as b:
                    yield api, log, a, b
            nursery.cancel_scope.cancel()


async def test_a_warm_standby_fills_its_cache_runs_and_writes_nothing_then_runs_at_once_without_a_list(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with two_replicas(warm=True) as (api, log, a, b):
        await wait_for(lambda: b.cluster.synced)
        assert b.manager.standby and b.manager.warming and not b.manager.started
        assert len(b.informer.store.list()) == OBJECTS
        configmaps = await a.cluster.resource("v1", "ConfigMap")
        async with client(api, "driver") as driver:
            await driver.patch(configmaps, "cm-7", {"data": {"v": "2"}}, namespace="default")
        await wait_for(lambda: (b.informer.store.get("default", "cm-7") or {}).get("data") == {"v": "2"})
        await trio.sleep(5 * DURATION)
        assert b.cluster.synced, "the standby's cache is kept current"
        assert b.log.started == [] and b.log.records == [], "a standby runs nothing"
        assert b.controller.queue.statistics().depth == 0, "a standby queues nothing"
        assert writes(log, "b") == [], "a standby writes nothing (its acquire attempts only read the Lease)"
        listed_while_standby = lists(log, "b")
        assert listed_while_standby, "the standby listed before it leads"

        a.crash()
        crashed = trio.current_time()
        await b.manager.wait_started()
        leading_since = b.elector.statistics().leading_since
        assert leading_since is not None
        await wait_for(lambda: len(b.log.records) >= OBJECTS)
        assert lists(log, "b", since=leading_since) == [], "the new leader runs from its warm cache, no new list"
        assert leading_since - crashed <= DURATION + RETRY
        assert b.first_run() - leading_since < 0.1, "the first run comes as soon as it leads"
        assert b.first_run() - crashed <= DURATION + 1 + RETRY
        first: dict[str, Priority] = {}
        for _, ref, trigger, _ in b.log.started:
            first.setdefault(ref.name, trigger.priority)
        assert len(first) == OBJECTS and set(first.values()) == {Priority.LOW}, \
            "every cached key is enqueued once, at low priority, as after a start-up list"
        assert {kind for _, kind in writes(log, "b")} >= {"ConfigMap", "Event", "Lease"}


async def test_without_warmup_a_standby_lists_only_once_it_leads(autojump_clock: trio.testing.MockClock) -> None:
    async with two_replicas(warm=False) as (_, log, a, b):
        await trio.sleep(5 * DURATION)
        assert b.manager.standby and not b.manager.warming
        assert lists(log, "b") == [] and not b.cluster.synced and b.informer.store.list() == []
        a.crash()
        await b.manager.wait_started()
        leading_since = b.elector.statistics().leading_since
        assert leading_since is not None
        await wait_for(lambda: len(b.log.records) >= OBJECTS)
        listed = lists(log, "b")
        assert listed and min(listed) >= leading_since
        assert b.first_run() >= min(listed)


async def test_a_warm_standby_that_loses_its_watch_relists_and_still_runs_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with two_replicas(warm=True) as (api, log, a, b):
        await wait_for(lambda: b.cluster.synced and b.informer.statistics().watches >= 1)
        before = b.informer.statistics()
        blocked = api.faults.fail(503, count=None, verbs={"watch"}, client="b", resource="configmaps")
        assert api.faults.drop_watches(client="b", resource="configmaps", abrupt=True) == 1
        await wait_for(lambda: blocked.hits >= 2)
        configmaps = await a.cluster.resource("v1", "ConfigMap")
        async with client(api, "driver") as driver:
            await driver.create(configmaps, {"metadata": {"name": "late", "namespace": "default"}})
            await driver.delete(configmaps, "cm-0", namespace="default")
        api.faults.expire_next_watch(client="b", resource="configmaps")
        api.faults.remove(blocked)
        await wait_for(lambda: b.informer.store.get("default", "late") is not None
                       and b.informer.store.get("default", "cm-0") is None)
        assert b.informer.statistics().lists > before.lists, "the standby relisted after 410 Gone"
        await wait_for(lambda: b.cluster.synced)
        assert b.log.started == [] and writes(log, "b") == []
        a.crash()
        await b.manager.wait_started()
        await wait_for(lambda: len(b.log.records) >= OBJECTS)
        assert {ref.name for _, ref, _, _ in b.log.started} >= {"late"}
        assert "cm-0" not in {ref.name for _, ref, _, _ in b.log.started}


async def test_a_warm_standby_cut_off_from_the_server_lists_again_before_it_leads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A standby whose requests fail (its lease attempts among them) and whose running watches
    hang, as behind a partition, misses a change of every object. Once the server is back and it
    takes over, none of its runs may see the objects as they were before: it lists every cache
    again before its controllers start. Its watches still hang (they would deliver the old
    events later)."""
    async with two_replicas(warm=True) as (api, log, a, b):
        await wait_for(lambda: b.cluster.synced and b.informer.statistics().watches >= 1)
        cut = api.faults.fail(503, count=None, client="b/")
        api.faults.delay_watch(3600, client="b/")
        await wait_for(lambda: b.elector._keeper.failed >= 2)
        configmaps = await a.cluster.resource("v1", "ConfigMap")
        async with client(api, "driver") as driver:
            for i in range(OBJECTS):
                await driver.patch(configmaps, f"cm-{i}", {"data": {"v": "2"}}, namespace="default")
        api.faults.remove(cut)
        await trio.sleep(2 * RETRY)
        assert (b.informer.store.get("default", "cm-3") or {}).get("data") == {"v": "1"}, "the standby's watch hangs"
        a.crash()
        await b.manager.wait_started()
        await wait_for(lambda: len({name for _, name, _ in b.seen}) >= OBJECTS)
        stale = sorted(name for _, name, data in b.seen if data != {"v": "2"})
        assert stale == [], "a run of the new leader saw its object as it was before the partition"
        assert lists(log, "b", since=b.elector.statistics().leading_since or 0.0), "the new leader listed again"


async def test_a_warm_leader_that_loses_the_lease_stops_its_runs_and_its_informers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with two_replicas(warm=True) as (api, log, a, b):
        await wait_for(lambda: b.cluster.synced)
        blocked = api.faults.fail(503, count=None, client="a", resource="leases")
        lost_at: list[float] = []
        a.elector.on_lost(lambda reason: lost_at.append(trio.current_time()))
        await wait_for(lambda: bool(lost_at))
        assert a.manager.stopping and a.manager.leadership_lost is not None
        assert not a.informer.synced, "a replica that lost the Lease stops its informers"
        api.faults.remove(blocked)
        await b.manager.wait_started()
