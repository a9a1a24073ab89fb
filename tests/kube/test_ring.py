"""Tests of engine.kube.HashRing: members on the embedded ApiServer, in virtual time.

An instrument checks after every task step that no two live members hold overlapping ranges
(what their gates own plus what they are still handing over): the no-overlap guarantee.
The last tests host the mirror plugin as scale-out replicas: a member that rejoins after it
was cut off runs nothing from its caches of before (the one on ``kube_target`` also runs on a
real kube-apiserver with ``--kube-target=real``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from engine import Controller, OwnershipGate, Run, RunObserver
from engine._keyspace import KeyRanges
from engine.apiserver import ApiServer
from engine.kube import Client, Cluster, Config, ConflictError, HashRing, RetryPolicy, RingConflictError, ring_ranges
from engine.kube.lowlevel import LEASE_RESOURCE
from engine.plugins.mirror import plugin as mirror
from engine.plugins.mirror._controller import ENABLED_LABEL, SELECTOR_ANNOTATION, SOURCE_LABEL
from engine.testing import KubeTarget, open_plugin_test

DURATION, DEADLINE, RETRY = 15.0, 10.0, 2.0


def client(api: ApiServer, agent: str) -> Client:
    return Client(
        Config.from_dict(api.kubeconfig),
        transport=api.memory_transport(),
        user_agent=f"{agent}/1.0",
        retry=RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1),
    )


# --- the assignment -------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(3, 11))
def test_shares_stay_within_20_percent_of_even(n: int) -> None:
    names = [f"engine-demo-{i}" for i in range(n)]
    shares = ring_ranges(names)
    assert sum(r.size for r in shares.values()) == KeyRanges.everything().size
    union = KeyRanges.nothing()
    for ranges in shares.values():
        assert not (union & ranges), "two members were assigned one key"
        union = union | ranges
    assert union == KeyRanges.everything()
    for name, ranges in shares.items():
        assert abs(ranges.share * n - 1) <= 0.2, f"{name} got {ranges.share:.3f} of the key space"


@pytest.mark.parametrize("n", [3, 5, 9])
def test_a_join_or_a_leave_moves_about_one_nth(n: int) -> None:
    names = [f"engine-demo-{i}" for i in range(n)]
    before = ring_ranges(names)
    after = ring_ranges([*names, "engine-demo-new"])
    moved = sum((before[m] - after[m]).share for m in names)
    assert moved == pytest.approx(after["engine-demo-new"].share)
    assert moved <= 1.2 / (n + 1)
    for m in names:
        assert not (after[m] - before[m]), "a join only moves keys to the new member"
    assert ring_ranges(names) == before, "the assignment is a function of the member names"


def test_no_members_no_ranges_and_points_must_be_positive() -> None:
    assert ring_ranges([]) == {}
    with pytest.raises(ValueError, match=r"^points must be >= 1$"):
        ring_ranges(["a"], points=0)


# --- members on a server ----------------------------------------------------------------------


class Member:
    def __init__(self, api: ApiServer, name: str, seed: int, plugins: tuple[str, ...] = ("demo",)) -> None:
        self.name = name
        self.client = client(api, name)
        self.gate = OwnershipGate(lambda ref: None)
        self.ring = HashRing(
            self.client, self.gate, name="engine-demo", namespace="default", plugins=plugins, identity=name,
            lease_duration=DURATION, renew_deadline=DEADLINE, retry_period=RETRY, rng=random.Random(seed),
        )
        self.scope = trio.CancelScope()
        self.alive = True

    def held(self) -> KeyRanges:
        return self.gate.owned | self.ring._releasing


class NoOverlap(trio.abc.Instrument):
    def __init__(self) -> None:
        self.members: list[Member] = []
        self.violations: list[tuple[float, str, str]] = []
        self.steps = 0
        self.last: list[tuple[int, int]] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        live = [m for m in self.members if m.alive]
        state = [(id(m.gate.owned), id(m.ring._releasing)) for m in live]
        if state == self.last:
            return
        self.last = state
        for i, a in enumerate(live):
            ha = a.held()
            if not ha:
                continue
            for b in live[i + 1:]:
                if ha & b.held():
                    self.violations.append((trio.current_time(), a.name, b.name))


class Harness:
    def __init__(self, api: ApiServer, nursery: trio.Nursery, check: NoOverlap) -> None:
        self.api = api
        self.nursery = nursery
        self.check = check
        self.seed = 0

    async def add(self, name: str, plugins: tuple[str, ...] = ("demo",)) -> Member:
        self.seed += 1
        m = Member(self.api, name, self.seed, plugins)
        await m.client.__aenter__()
        self.check.members.append(m)

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with m.scope:
                await m.ring.run(task_status=task_status)

        await self.nursery.start(run)
        return m

    def crash(self, m: Member) -> None:
        m.alive = False
        m.scope.cancel()

    def live(self) -> list[Member]:
        return [m for m in self.check.members if m.alive]

    def covered(self) -> bool:
        union = KeyRanges.nothing()
        for m in self.live():
            union = union | m.gate.owned
        return union == KeyRanges.everything()


@asynccontextmanager
async def ring_harness() -> AsyncIterator[Harness]:
    async with ApiServer(listen=False) as api:
        check = NoOverlap()
        trio.lowlevel.add_instrument(check)
        try:
            async with trio.open_nursery() as nursery:
                yield Harness(api, nursery, check)
                nursery.cancel_scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(check)
            for m in check.members:
                await m.client.aclose()
        assert check.violations == [], "two members held one key at once"
        assert check.steps > 0


async def wait_for(condition: Callable[[], bool], *, within: float) -> float:
    start = trio.current_time()
    with trio.fail_after(within):
        while not condition():
            await trio.sleep(0.1)
    return trio.current_time() - start


def fair(h: Harness) -> bool:
    live = h.live()
    return h.covered() and all(abs(m.gate.owned.share * len(live) - 1) <= 0.3 for m in live)


async def test_three_members_divide_the_key_space_and_a_fourth_takes_its_share(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ring_harness() as h:
        for name in ("a", "b", "c"):
            await h.add(name)
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        assert sorted(h.live()[0].ring.statistics().members) == sorted(m.ring.member for m in h.live())
        before = {m.name: m.gate.owned for m in h.live()}
        d = await h.add("d")
        took = await wait_for(lambda: fair(h) and bool(d.gate.owned), within=4 * RETRY + 1)
        assert took <= RETRY, "watching the member Leases, a handover takes less than a retry period"
        for m in h.live()[:3]:
            assert not (m.gate.owned - before[m.name]), "a join moves keys only to the new member"
        await trio.sleep(5 * DURATION)
        assert fair(h)


async def test_a_member_logs_its_join_and_each_change_of_its_share(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engine.kube.ring")
    async with ring_harness() as h:
        a = await h.add("a")
        await wait_for(lambda: a.gate.owned == KeyRanges.everything(), within=3 * RETRY + 1)
        await h.add("b")
        await wait_for(lambda: fair(h), within=4 * RETRY + 1)
        await trio.sleep(5 * DURATION)
        shares = [
            (r.members, r.owned) for r in caplog.records
            if r.getMessage().startswith("ring engine-demo: this replica") and r.member == a.ring.member
        ]
        assert shares[0] == (1, 0.0) and (1, 1.0) in shares, shares
        assert shares[-1][0] == 2 and abs(shares[-1][1] - a.gate.owned.share) < 1e-3
        assert len(shares) == len(set(shares)) <= 6, "a line per change, not per renewal"
        assert any(r.getMessage().startswith(f"joined ring engine-demo as {a.ring.member}") for r in caplog.records)


async def test_a_crashed_members_ranges_are_taken_over_after_the_lease_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ring_harness() as h:
        a, b, c = [await h.add(n) for n in ("a", "b", "c")]
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        orphaned = c.gate.owned
        h.crash(c)
        taken = await wait_for(lambda: fair(h), within=DURATION + 3 * RETRY)
        assert taken >= DURATION - RETRY, "nobody takes a crashed member's range before its Lease expired"
        assert (a.gate.owned | b.gate.owned) & orphaned == orphaned
        await trio.sleep(DURATION + 2 * RETRY)
        leases = await a.client.list(LEASE_RESOURCE, namespace="default")
        assert sorted(i["metadata"]["name"] for i in leases.items) == sorted([a.ring.member, b.ring.member]), (
            "the crashed member's Lease is deleted once expired for a lease duration more")


async def test_a_partitioned_member_stops_before_anybody_takes_its_ranges(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ring_harness() as h:
        a, b, c = [await h.add(n) for n in ("a", "b", "c")]
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)

        async def hang(*args: Any, **kwargs: Any) -> Any:
            await trio.sleep_forever()

        c.client.update = hang  # type: ignore[method-assign]
        c.client.list = hang  # type: ignore[method-assign]
        c.client.create = hang  # type: ignore[method-assign]
        lost = await wait_for(lambda: not c.gate.owned, within=DEADLINE + RETRY)
        assert lost <= DEADLINE + RETRY
        assert c.ring.statistics().fenced == 1
        await wait_for(lambda: (a.gate.owned | b.gate.owned) == KeyRanges.everything(), within=DURATION + 3 * RETRY)


async def test_a_graceful_leave_hands_over_within_a_few_retry_periods(autojump_clock: trio.testing.MockClock) -> None:
    async with ring_harness() as h:
        a, b, c = [await h.add(n) for n in ("a", "b", "c")]
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        await c.ring.leave()
        assert not c.held()
        h.crash(c)
        taken = await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        assert taken < DURATION


async def test_a_member_lease_deleted_by_hand_is_that_member_leaving(autojump_clock: trio.testing.MockClock) -> None:
    async with ring_harness() as h:
        a, b, c = [await h.add(n) for n in ("a", "b", "c")]
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        old = c.ring.member
        await a.client.delete(LEASE_RESOURCE, old, namespace="default")
        await wait_for(lambda: c.ring.statistics().fenced == 1, within=RETRY + 1)
        assert not c.gate.owned
        await wait_for(lambda: c.ring.member != old, within=2 * RETRY + 1)
        await wait_for(lambda: fair(h), within=DURATION + 4 * RETRY)


async def test_a_member_lease_edited_by_hand_is_that_member_leaving(autojump_clock: trio.testing.MockClock) -> None:
    async with ring_harness() as h:
        a, b, c = [await h.add(n) for n in ("a", "b", "c")]
        await wait_for(lambda: fair(h), within=3 * RETRY + 1)
        raw = await a.client.get(LEASE_RESOURCE, c.ring.member, namespace="default")
        raw["spec"]["holderIdentity"] = "someone-else"
        raw["metadata"]["annotations"]["ring.engine.dev/held"] = ""
        await a.client.update(LEASE_RESOURCE, raw)
        await wait_for(lambda: c.ring.statistics().fenced == 1, within=RETRY + 1)
        await wait_for(lambda: fair(h), within=DURATION + 4 * RETRY)


async def test_a_ring_with_other_plugins_refuses_to_start(autojump_clock: trio.testing.MockClock) -> None:
    async with ring_harness() as h:
        await h.add("a")
        with pytest.raises(RingConflictError, match=r"^ring 'engine-demo' has members running plugins 'demo', not 'other'$"):
            await h.add("b", plugins=("other",))
        leases = await h.live()[0].client.list(LEASE_RESOURCE, namespace="default")
        assert len(leases.items) == 1, "the refused replica wrote nothing"


async def test_ring_metrics_report_members_share_ranges_and_handovers(autojump_clock: trio.testing.MockClock) -> None:
    from prometheus_client import CollectorRegistry

    from engine.kube import RingCollector

    async with ring_harness() as h:
        a = await h.add("a")
        registry = CollectorRegistry()
        registry.register(RingCollector(a.ring))
        await wait_for(lambda: a.gate.owned == KeyRanges.everything(), within=3 * RETRY)

        def value(name: str) -> float | None:
            return registry.get_sample_value(name, {"ring": "engine-demo"})

        assert (value("engine_ring_members"), value("engine_ring_owned_share")) == (1, 1.0)
        assert value("engine_ring_owned_ranges") == 1
        assert value("engine_ring_handovers_total") == 0
        await h.add("b")
        await wait_for(lambda: fair(h), within=4 * RETRY)
        assert value("engine_ring_members") == 2
        assert 0.3 < (value("engine_ring_owned_share") or 0) < 0.7
        assert (value("engine_ring_owned_ranges") or 0) > 100
        assert value("engine_ring_handovers_total") == 1
        assert value("engine_ring_handover_duration_seconds_count") == 1
        assert value("engine_ring_fenced_total") == 0
        assert value("engine_ring_owned_keys") == 0


async def test_members_whose_views_disagree_never_both_gain_a_range(autojump_clock: trio.testing.MockClock) -> None:
    """Each member believes it alone is assigned the whole key space (as views can disagree
    for a moment around a join); claim-then-check lets at most one of them gain it."""
    async with ring_harness() as h:
        members = [Member(h.api, name, seed) for seed, name in enumerate(("a", "b", "c"))]
        for m in members:
            await m.client.__aenter__()
            h.check.members.append(m)
            ring = m.ring

            def alone(ring: HashRing = ring) -> dict[str, KeyRanges]:
                return {ring.member: KeyRanges.everything()}

            ring._assignment = alone  # type: ignore[method-assign]
            h.nursery.start_soon(m.ring.run)
        await wait_for(lambda: any(m.gate.owned for m in members), within=10 * RETRY)
        await trio.sleep(5 * DURATION)
        assert sum(1 for m in members if m.gate.owned) == 1


async def test_a_range_runs_only_once_the_caches_hold_it(autojump_clock: trio.testing.MockClock) -> None:
    """``cache_ready`` (run_plugins waits for the sharded informers there): while it has not
    returned, the claimed range is not gained; it is gained on the renewal after it returns."""
    async with ring_harness() as h:
        listed = trio.Event()
        m = Member(h.api, "a", 1)
        waits = 0

        async def cache_ready() -> None:
            nonlocal waits
            waits += 1
            await listed.wait()

        m.ring.cache_ready = cache_ready
        await m.client.__aenter__()
        h.check.members.append(m)

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with m.scope:
                await m.ring.run(task_status=task_status)

        await h.nursery.start(run)
        await trio.sleep(5 * RETRY)
        assert waits >= 2, "every renewal tried again"
        assert not m.gate.owned, "nothing runs before the caches listed the range"
        listed.set()
        await wait_for(lambda: m.gate.owned == KeyRanges.everything(), within=2 * RETRY + 1)


async def test_a_member_that_starts_leaving_while_it_claims_gains_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """``leave`` writes the Lease without claims while a renewal's claim waits for the caches:
    the claim must not be gained afterwards, or the member would own ranges its Lease does
    not show (others take them)."""
    async with ring_harness() as h:
        claiming, listed = trio.Event(), trio.Event()
        m = Member(h.api, "a", 1)

        async def cache_ready() -> None:
            claiming.set()
            await listed.wait()

        m.ring.cache_ready = cache_ready
        await m.client.__aenter__()
        h.check.members.append(m)

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with m.scope:
                await m.ring.run(task_status=task_status)

        await h.nursery.start(run)
        await claiming.wait()
        h.nursery.start_soon(m.ring.leave)
        await trio.sleep(RETRY / 4)
        assert m.ring._leaving and m.ring._lease is None, "leave wrote the Lease without claims"
        listed.set()
        await trio.sleep(RETRY / 4)
        assert not m.gate.owned, "a range gained after the Lease said the member holds nothing"
        h.crash(m)


# --- rejoining after a partition ----------------------------------------------------------------


class CachedSource(RunObserver):
    """Notes, as each mirror run of one replica starts, its source as that replica has it cached."""

    def __init__(self, identity: str, seen: list[tuple[float, str, str, str | None]]) -> None:
        self.identity = identity
        self.seen = seen
        self.cluster: Cluster | None = None

    def on_run_started(self, controller: Controller, run: Run) -> None:
        if self.cluster is None:
            return
        sources = next(i for i in self.cluster.informers if ENABLED_LABEL in str(i.options.label_selector))
        cached = sources.store.get(run.key.namespace, run.key.name)
        value = (cached.get("data") or {}).get("v") if cached is not None else None
        self.seen.append((trio.current_time(), self.identity, run.key.name, value))


async def test_a_member_that_rejoins_after_a_partition_runs_nothing_from_its_stale_cache(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The fault campaign's regression on kube-apiserver 1.36.2: a replica cut off from the
    server (its requests fail, its running watches hang and would deliver old events later)
    is fenced; the other replica takes every range and writes newer copies; after the
    partition heals, the first one rejoins and regains keys it ran before. None of its runs may
    see the source as it was before the partition, and no copy may go back to older data."""
    sources = 24
    timings = {"lease_duration": 8.0, "renew_deadline": 5.0, "retry_period": 1.0, "handover_grace": 3.0}
    seen: list[tuple[float, str, str, str | None]] = []
    observers = {name: CachedSource(name, seen) for name in ("replica-a", "replica-b")}
    rings: dict[str, HashRing] = {}

    def member(identity: str) -> Callable[[Client, OwnershipGate, str], HashRing]:
        def make(c: Client, gate: OwnershipGate, name: str) -> HashRing:
            ring = rings[identity] = HashRing(
                c, gate, name="engine-mirror", namespace="default", plugins=["mirror"], identity=name,
                rng=random.Random(name), **timings,
            )
            return ring

        return make

    async with ApiServer(listen=False, seed=7) as api:
        target = KubeTarget.embedded(api)
        driver = client(api, "driver")
        copies: dict[str, list[str]] = {}

        async def record_copies(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            configmaps = await driver.resource("v1", "ConfigMap")
            async with driver.watch(configmaps, namespace="dst", label_selector=SOURCE_LABEL) as events:
                task_status.started()
                async for event in events:
                    if event.type.value in ("ADDED", "MODIFIED"):
                        copies.setdefault(event.object["metadata"]["name"], []).append(event.object["data"]["v"])

        async def write_sources(value: str) -> None:
            configmaps = await driver.resource("v1", "ConfigMap")
            for i in range(sources):
                await driver.apply(configmaps, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"s{i:02d}", "namespace": "default",
                                 "labels": {ENABLED_LABEL: "true"},
                                 "annotations": {SELECTOR_ANNOTATION: "team=x"}},
                    "data": {"v": value},
                }, field_manager="test", force=True)

        def copies_are(value: str) -> bool:
            return len(copies) == sources and all(history[-1] == value for history in copies.values())

        async with driver, trio.open_nursery() as nursery:
            namespaces = await driver.resource("v1", "Namespace")
            await driver.create(namespaces, {"metadata": {"name": "dst", "labels": {"team": "x"}}})
            await nursery.start(record_copies)
            await write_sources("1")
            async with (
                open_plugin_test(mirror, target, identity="replica-a", scale_out=member("a"),
                                 observers=[observers["replica-a"]]) as a,
                open_plugin_test(mirror, target, identity="replica-b", scale_out=member("b"),
                                 observers=[observers["replica-b"]]) as b,
            ):
                observers["replica-a"].cluster, observers["replica-b"].cluster = a.cluster, b.cluster
                ga, gb = rings["a"].gate, rings["b"].gate
                await wait_for(lambda: (ga.owned | gb.owned) == KeyRanges.everything() and bool(ga.owned)
                               and copies_are("1"), within=60)

                cut = api.faults.fail(503, count=None, client="replica-a/")
                hung = api.faults.delay_watch(3600, client="replica-a/")
                await wait_for(lambda: rings["a"].statistics().fenced == 1 and gb.owned == KeyRanges.everything(),
                               within=30)
                await write_sources("2")
                await wait_for(lambda: copies_are("2"), within=30)
                healed = trio.current_time()
                api.faults.remove(cut)
                api.faults.remove(hung)

                await wait_for(lambda: bool(ga.owned) and (ga.owned | gb.owned) == KeyRanges.everything(), within=30)
                await trio.sleep(10)
                regained = [name for t, who, name, _ in seen if who == "replica-a" and t > healed]
                assert regained, "the rejoined replica ran keys it ran before the partition"
                stale = [(who, name) for t, who, name, value in seen if t > healed and value != "2"]
                assert stale == [], "a run saw its source as it was before the partition"
                assert copies_are("2")
                went_back = sorted(name for name, history in copies.items() if "1" in history[history.index("2"):])
                assert went_back == [], "a copy went back to older data"
            nursery.cancel_scope.cancel()


async def test_a_member_fenced_by_an_edited_lease_lists_every_cache_again_before_it_gains(
    kube_target: KubeTarget, caplog: pytest.LogCaptureFixture,
) -> None:
    """On any server: a member whose Lease was taken by hand fences itself and rejoins; every
    informer of its cluster has listed again (from a read begun after the rejoin) by the time
    it owns a range again. The members' watch of the ring's Leases is served all along (it
    asks for no bookmarks, which 1.32 on etcd 3.4 refuses from no resourceVersion)."""
    caplog.set_level(logging.DEBUG, logger="engine.kube.ring")
    rings: dict[str, HashRing] = {}
    suffix = kube_target.namespace

    def member(c: Client, gate: OwnershipGate, identity: str) -> HashRing:
        ring = rings[identity] = HashRing(
            c, gate, name=f"mirror-{suffix}"[:40], namespace=kube_target.namespace, plugins=["mirror"],
            identity=identity, lease_duration=4.0, renew_deadline=3.0, retry_period=0.5, handover_grace=1.0,
            rng=random.Random(identity),
        )
        return ring

    async with (
        open_plugin_test(mirror, kube_target, identity="replica-a", scale_out=member) as a,
        open_plugin_test(mirror, kube_target, identity="replica-b", scale_out=member),
    ):
        ra, rb = rings["replica-a"], rings["replica-b"]
        with trio.fail_after(30):
            while not (ra.gate.owned and rb.gate.owned and (ra.gate.owned | rb.gate.owned) == KeyRanges.everything()):
                await trio.sleep(0.1)
        assert a.cluster is not None
        informers = a.cluster.informers
        listed = {id(i): i.statistics().lists for i in informers}
        at_regain: list[dict[int, int]] = []

        def regained() -> None:
            if ra.statistics().fenced and ra.gate.owned and not at_regain:
                at_regain.append({id(i): i.statistics().lists for i in informers})

        ra.on_change.append(regained)
        while True:
            # The member renews its Lease every retry period: an update can meet one (409).
            raw = await a.client.get(LEASE_RESOURCE, ra.member, namespace=kube_target.namespace)
            raw["spec"]["holderIdentity"] = "someone-else"
            try:
                await a.client.update(LEASE_RESOURCE, raw)
                break
            except ConflictError:
                continue
        with trio.fail_after(30):
            while not at_regain:
                await trio.sleep(0.1)
        assert ra.statistics().fenced == 1
        assert all(at_regain[0][key] > count for key, count in listed.items()), (
            "a cache had not listed again when the rejoined member gained a range")
        assert "watching member leases failed" not in caplog.text
