"""Informers restricted to key ranges, against the embedded server with ``ShardedListAndWatch``
on (the server filters by ``shardSelector``) and off (it ignores it; the client filters)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from engine import KeyRange, KeyRanges, Manager, fnv1a64
from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Cluster,
    Informer,
    InformerCollector,
    InformerEvent,
    Resource,
    WatchEventType,
    WatchOptions,
    filters_shards,
    server_filters_shards,
)

from .test_informer import CONFIGMAPS, memory_client, wait_for

ADDED, MODIFIED, DELETED = WatchEventType.ADDED, WatchEventType.MODIFIED, WatchEventType.DELETED
HALF = 1 << 63
LOWER = KeyRanges((KeyRange(0, HALF),))
UPPER = KeyRanges((KeyRange(HALF, 1 << 64),))
Q1 = KeyRanges((KeyRange(1 << 62, HALF),))
Q0_Q3 = KeyRanges((KeyRange(0, 1 << 62), KeyRange(3 << 62, 1 << 64)))

WIDGETS = Resource("example.com", "v1", "Widget", "widgets", True)
CRD = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}
CRDS = Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


@pytest.fixture(params=[True, False], ids=["server-filters", "server-ignores"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    async with ApiServer(
        listen=False, bookmark_interval=30, seed=5, feature_gates={"ShardedListAndWatch": request.param}
    ) as server:
        yield server


def gate(api: ApiServer) -> bool:
    return api.feature_gates["ShardedListAndWatch"]


def key(obj: dict[str, Any]) -> int:
    return fnv1a64(obj["metadata"]["uid"])


def names_in(objects: list[dict[str, Any]], ranges: KeyRanges) -> set[str]:
    return {o["metadata"]["name"] for o in objects if key(o) in ranges}


def cached(informer: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.store.list()}


class Mirror:
    """A handler that rebuilds the cache from the events alone and checks that no event is
    outside the informer's ranges at the moment it is delivered."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.view: dict[str, str] = {}
        self.events: list[tuple[WatchEventType, str]] = []
        self.outside: list[str] = []

    def __call__(self, event: InformerEvent) -> None:
        meta = event.obj["metadata"]
        ranges = self.informer.key_ranges
        if ranges is not None and fnv1a64(meta["uid"]) not in ranges:
            self.outside.append(f"{event.type.value} {meta['name']}")
        self.events.append((event.type, meta["name"]))
        if event.type is DELETED:
            self.view.pop(meta["name"], None)
        else:
            self.view[meta["name"]] = meta["resourceVersion"]

    def set_ranges(self, ranges: KeyRanges | None) -> None:
        """Change the informer's ranges, and drop from the view what it drops silently."""
        self.informer.set_key_ranges(ranges)
        if ranges is not None:
            for obj in list(self.view):
                if self.informer.store.get("default", obj) is None:
                    del self.view[obj]


async def everything(client: Client, resource: Resource = CONFIGMAPS) -> list[dict[str, Any]]:
    return (await client.list_all(resource, namespace="default")).items


async def test_an_informer_holds_and_hands_on_only_its_ranges(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(40):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i:02}"}}, namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default", key_ranges=LOWER, options=WatchOptions(page_size=7))
        mirror = Mirror(informer)
        informer.add_handler(mirror)
        await nursery.start(informer.run)
        await informer.wait_synced()
        objects = await everything(client)
        lower = names_in(objects, LOWER)
        assert 10 < len(lower) < 30
        assert set(cached(informer)) == lower
        assert informer.server_filters_shards is gate(api)
        assert server_filters_shards(client) is gate(api)
        # With the server filter the other half never reaches the client (that is the saving).
        assert informer.statistics().out_of_range == (0 if gate(api) else 40 - len(lower))

        for i in range(40, 60):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i:02}"}}, namespace="default")
        for i in range(0, 60, 3):
            await client.patch(CONFIGMAPS, f"cm{i:02}", {"data": {"x": "1"}}, namespace="default")
        await client.delete(CONFIGMAPS, "cm01", namespace="default")
        await client.delete(CONFIGMAPS, "cm02", namespace="default")
        objects = await everything(client)
        await wait_for(lambda: cached(informer) == {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects if key(o) in LOWER})
        assert mirror.outside == []
        assert mirror.view == cached(informer)
        if gate(api):
            assert informer.statistics().out_of_range == 0
        nursery.cancel_scope.cancel()


async def test_ranges_change_while_objects_are_written(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    """No event outside the ranges, none missed, no DELETED for an object that exists."""
    rng = random.Random(11)
    schedule: list[KeyRanges | None] = [UPPER, None, Q1, KeyRanges.nothing(), Q0_Q3, LOWER, UPPER, Q1]
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(30):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"o{i}"}}, namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default", key_ranges=LOWER, options=WatchOptions(page_size=5))
        mirror = Mirror(informer)
        informer.add_handler(mirror)
        await nursery.start(informer.run)
        await informer.wait_synced()
        alive = {f"o{i}" for i in range(30)}
        deleted: set[str] = set()
        counter = 30
        for step in range(240):
            action = rng.random()
            if action < 0.35 or not alive:
                name = f"o{counter}"
                counter += 1
                await client.create(CONFIGMAPS, {"metadata": {"name": name}}, namespace="default")
                alive.add(name)
            elif action < 0.8:
                name = rng.choice(sorted(alive))
                await client.patch(CONFIGMAPS, name, {"data": {"step": str(step)}}, namespace="default")
            else:
                name = rng.choice(sorted(alive))
                await client.delete(CONFIGMAPS, name, namespace="default")
                alive.discard(name)
                deleted.add(name)
            if step % 30 == 29:
                mirror.set_ranges(schedule[step // 30])
            if step % 7 == 0:
                await trio.sleep(0.01)
        final = informer.key_ranges
        assert final == Q1
        with trio.fail_after(600):
            await informer.wait_key_ranges_synced()
        objects = await everything(client)
        want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects if key(o) in final}
        await wait_for(lambda: cached(informer) == want)
        assert mirror.outside == []
        assert mirror.view == cached(informer)
        spurious = {name for kind, name in mirror.events if kind is DELETED} - deleted
        assert spurious == set()
        nursery.cancel_scope.cancel()


async def test_objects_entering_the_ranges_are_added_and_leaving_ones_dropped_silently(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(24):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i:02}"}}, namespace="default")
        objects = await everything(client)
        informer = Informer(client, CONFIGMAPS, namespace="default", key_ranges=LOWER)
        mirror = Mirror(informer)
        informer.add_handler(mirror)
        await nursery.start(informer.run)
        await informer.wait_synced()
        n = len(mirror.events)
        informer.set_key_ranges(UPPER)
        assert cached(informer) == {}
        assert not informer.key_ranges_synced
        with trio.fail_after(600):
            await informer.wait_key_ranges_synced()
        assert sorted(mirror.events[n:]) == sorted((ADDED, name) for name in names_in(objects, UPPER))
        lists = informer.statistics().lists
        watches = informer.statistics().watches
        informer.set_key_ranges(KeyRanges((KeyRange(HALF, 3 << 62),)))
        assert informer.key_ranges_synced
        assert set(cached(informer)) == names_in(objects, KeyRanges((KeyRange(HALF, 3 << 62),)))
        await wait_for(lambda: informer.statistics().watches > watches or not gate(api))
        # Shrinking lists nothing again; a filtering server gets the narrower watch.
        assert informer.statistics().lists == lists
        assert all(kind is ADDED for kind, _ in mirror.events)
        nursery.cancel_scope.cancel()


async def test_empty_ranges_watch_nothing_and_count_as_synced(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(10):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i}"}}, namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default", key_ranges=KeyRanges.nothing())
        mirror = Mirror(informer)
        informer.add_handler(mirror)
        await nursery.start(informer.run)
        await informer.wait_synced()
        assert informer.key_ranges_synced
        await client.create(CONFIGMAPS, {"metadata": {"name": "late"}}, namespace="default")
        await trio.sleep(5)
        assert cached(informer) == {} and mirror.events == []
        assert informer.statistics().watches == 0
        informer.set_key_ranges(KeyRanges.everything())
        with trio.fail_after(600):
            await informer.wait_key_ranges_synced()
        assert len(cached(informer)) == 11
        assert sorted(kind.value for kind, _ in mirror.events) == ["ADDED"] * 11
        nursery.cancel_scope.cancel()


async def test_custom_resources_are_filtered_by_the_server_too(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A custom resource list echoes no ``shardInfo``: support is asked with a built-in list."""
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CRDS, CRD)
        for i in range(20):
            await client.create(WIDGETS, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": f"w{i}"}}, namespace="default")
        page = await client.list(WIDGETS, namespace="default", shard_selector=LOWER.selector())
        assert page.shard_selector is None
        informer = Informer(client, WIDGETS, namespace="default", key_ranges=LOWER)
        await nursery.start(informer.run)
        await informer.wait_synced()
        objects = await everything(client, WIDGETS)
        assert set(cached(informer)) == names_in(objects, LOWER)
        assert informer.server_filters_shards is gate(api)
        assert informer.statistics().out_of_range == (0 if gate(api) else 20 - len(names_in(objects, LOWER)))
        nursery.cancel_scope.cancel()


async def test_a_list_echoes_the_selector_only_where_the_server_filters(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client:
        for i in range(6):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i}"}}, namespace="default")
        selector = (LOWER | Q1).selector() + " || " + UPPER.selector()
        page = await client.list(CONFIGMAPS, namespace="default", shard_selector=selector)
        if gate(api):
            assert page.shard_selector == selector
        else:
            assert page.shard_selector is None and len(page.items) == 6
        assert await filters_shards(client) is gate(api)


async def test_a_cluster_restricts_its_sharded_informers_and_reports_the_filter(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(16):
            await client.create(CONFIGMAPS, {"metadata": {"name": f"cm{i}"}}, namespace="default")
        objects = await everything(client)
        manager = Manager(handle_signals=False)
        cluster = Cluster(client, manager, namespace="default")
        cluster.set_key_ranges(UPPER)
        sharded = await cluster.informer("v1", "ConfigMap", sharded=True)
        whole = await cluster.informer("v1", "ConfigMap")
        assert sharded is not whole and sharded.key_ranges == UPPER and whole.key_ranges is None
        nursery.start_soon(sharded.run)
        nursery.start_soon(whole.run)
        await sharded.wait_synced()
        await whole.wait_synced()
        assert set(cached(sharded)) == names_in(objects, UPPER) and len(cached(whole)) == 16
        registry = CollectorRegistry()
        registry.register(InformerCollector(cluster))
        value = registry.get_sample_value("engine_informer_server_shard_filter", {"resource": str(sharded.resource)})
        assert value == (1.0 if gate(api) else 0.0)
        dropped = registry.get_sample_value("engine_informer_out_of_range_total", {"resource": str(sharded.resource)})
        assert dropped == (0.0 if gate(api) else 16 - len(names_in(objects, UPPER)))
        cluster.set_key_ranges(LOWER)
        assert sharded.key_ranges == LOWER and whole.key_ranges is None
        with trio.fail_after(600):
            await sharded.wait_key_ranges_synced()
        assert set(cached(sharded)) == names_in(objects, LOWER)
        nursery.cancel_scope.cancel()


def test_only_kube_apiserver_groups_answer_the_probe() -> None:
    from engine.kube._runtime._shard_filter import _builtin_group

    assert _builtin_group("") and _builtin_group("apps") and _builtin_group("coordination.k8s.io")
    assert not _builtin_group("example.com") and not _builtin_group("metrics.k8s.io")


async def test_support_is_asked_once_per_client(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    probes: list[str] = []

    def observe(served: Any) -> None:
        if served.verb == "list" and served.kind == "Namespace":
            probes.append(served.path)

    api.add_request_observer(observe)
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CRDS, CRD)
        informers = [Informer(client, WIDGETS, namespace="default", key_ranges=r) for r in (LOWER, UPPER, Q1)]
        for informer in informers:
            await nursery.start(informer.run)
            await informer.wait_synced()
        informers[0].set_key_ranges(UPPER)
        with trio.fail_after(600):
            await informers[0].wait_key_ranges_synced()
        assert len(probes) == 1
        assert all(i.server_filters_shards is gate(api) for i in informers)
        nursery.cancel_scope.cancel()


async def test_a_cluster_refresh_lists_every_informer_again_and_a_hung_watch_delivers_nothing_after(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A replica cut off from the server has watches that hang and could still deliver old
    events: after :meth:`Cluster.refresh` every informer, sharded or whole, holds what a list
    begun then says, and nothing of the abandoned watches reaches a store or handler."""
    async with memory_client(api) as driver, memory_client(api, user_agent="cut-off/1.0") as client:
        for i in range(16):
            await driver.create(CONFIGMAPS, {"metadata": {"name": f"cm{i:02}"}, "data": {"v": "1"}}, namespace="default")
        async with trio.open_nursery() as nursery:
            manager = Manager(handle_signals=False)
            cluster = Cluster(client, manager, namespace="default")
            cluster.set_key_ranges(UPPER)
            sharded = await cluster.informer("v1", "ConfigMap", sharded=True)
            whole = await cluster.informer("v1", "ConfigMap")
            mirrors = [Mirror(sharded), Mirror(whole)]
            sharded.add_handler(mirrors[0])
            whole.add_handler(mirrors[1])
            nursery.start_soon(sharded.run)
            nursery.start_soon(whole.run)
            await cluster.wait_synced()
            await cluster.wait_refreshed()

            hung = api.faults.delay_watch(3600, client="cut-off/")
            for i in range(16):
                await driver.patch(CONFIGMAPS, f"cm{i:02}", {"data": {"v": "2"}}, namespace="default")
            await trio.sleep(30)
            objects = await everything(driver)
            fresh = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects}
            assert cached(whole) != fresh, "the hung watch delivered nothing yet"
            api.faults.remove(hung)

            cluster.refresh()
            with trio.fail_after(60):
                await cluster.wait_refreshed()
            assert cached(whole) == fresh
            assert cached(sharded) == {k: v for k, v in fresh.items() if k in names_in(objects, UPPER)}
            assert all(o["data"]["v"] == "2" for o in whole.store.list())
            lists = [i.statistics().lists for i in (sharded, whole)]
            await trio.sleep(4000)
            assert cached(whole) == fresh, "an abandoned watch delivered an old event"
            for mirror in mirrors:
                assert mirror.view == cached(mirror.informer) and mirror.outside == []
            assert [i.statistics().lists for i in (sharded, whole)] == lists, "no list after the fresh one"
            nursery.cancel_scope.cancel()
