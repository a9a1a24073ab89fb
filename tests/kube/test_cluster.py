"""Watches for controllers (engine.kube.Cluster) against the embedded API server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from engine import Controller, KeyRange, KeyRanges, Manager, ObjectRef, RunContext, RunLog, fnv1a64
from engine.apiserver import ApiServer
from engine.kube import (
    REQUESTED_AT_ANNOTATION,
    Client,
    Cluster,
    Config,
    InformerCollector,
    InformerEvent,
    RetryPolicy,
    WatchEventType,
    WatchOptions,
    any_of,
    generation_changed,
    requested_at_changed,
)
from engine.plugins.bundles import plugin as bundles_plugin
from engine.testing import KubeTarget

from .._e2e import API, bundle, configmap
from .._support import running


async def test_primary_owned_and_predicates(tmp_path: Path) -> None:
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kc")
        async with Client(Config.from_kubeconfig(tmp_path / "kc")) as client, trio.open_nursery() as nursery:
            from engine.kube import install_crds

            await install_crds(client, bundles_plugin.crds)
            bundles = await client.resource(API, "Bundle")
            cms = await client.resource("v1", "ConfigMap")
            ns = await client.resource("v1", "Namespace")
            await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e"}})
            created = await client.create(bundles, bundle("owner", "src"))

            seen: list[tuple[ObjectRef, str]] = []
            revisions: list[str | None] = []
            changed = trio.Event()

            async def reconcile(ctx: RunContext) -> None:
                nonlocal changed
                seen.append((ctx.ref, ctx.trigger.reason))
                revisions.append(ctx.trigger.revision)
                changed.set()
                changed = trio.Event()

            manager = Manager(handle_signals=False)
            log = RunLog()
            manager.add_observer(log)
            controller = manager.add_controller(Controller("owners", reconcile))
            cluster = Cluster(client, manager)
            bundle_informer = await cluster.informer(API, "Bundle")
            cluster.watches(controller, bundle_informer, predicates=[any_of(generation_changed, requested_at_changed)])
            cluster.owns(controller, await cluster.informer("v1", "ConfigMap"), owner_kind="Bundle", owner_api_version=API)
            await nursery.start(manager.run)
            owner = ObjectRef("Bundle", "owner", "e2e", "bundles.engine.dev")

            async def wait_runs(n: int) -> None:
                with trio.fail_after(10):
                    while len(seen) < n:
                        await changed.wait()

            await wait_runs(1)
            assert seen[0] == (owner, "Bundle added")

            await client.patch_status(bundles, "owner", {"status": {"note": "status only"}}, namespace="e2e")
            child = configmap("child")
            child["metadata"]["ownerReferences"] = [{"apiVersion": API, "kind": "Bundle", "name": "owner",
                                                     "uid": created["metadata"]["uid"]}]
            await client.create(cms, child, namespace="e2e")
            await wait_runs(2)
            assert seen[1] == (owner, "owned ConfigMap changed"), "a status-only change triggered nothing"

            patched = await client.patch(
                bundles, "owner", {"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: "now"}}}, namespace="e2e"
            )
            await wait_runs(3)
            assert seen[2] == (owner, "Bundle modified")
            assert revisions[2] == patched["metadata"]["resourceVersion"], "triggered by the annotation, not the status"
            assert len(seen) == 3
            manager.stop()


def source_of(obj: Mapping[str, Any]) -> str:
    """Reads ``data.sourceRef`` as the bundles plugin reads ``spec.sourceRef``: a mapping with a
    name. A string ``sourceRef`` makes it raise, as the plugin's index function once did."""
    name: str = json.loads(obj["data"]["sourceRef"])["name"]
    return name


def numbered(i: int, bad: int) -> dict[str, Any]:
    ref = '"platform"' if i == bad else '{"name": "platform"}'
    return {"metadata": {"name": f"cm-{i:03d}", "namespace": "default"}, "data": {"sourceRef": ref}}


@pytest.mark.parametrize("bad", [42, 77], ids=["bad-one-listed", "bad-one-watched"])
@pytest.mark.parametrize("where", ["index", "predicate", "mapper"])
async def test_one_object_raising_in_user_code_stops_nothing_else(
    where: str, bad: int, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    async with ApiServer(listen=False, bookmark_interval=30) as api:
        retry = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1)
        config = Config.from_dict(api.kubeconfig)
        async with Client(config, transport=api.memory_transport(), retry=retry) as client:
            cms = await client.resource("v1", "ConfigMap")
            for i in range(50):
                await client.create(cms, numbered(i, bad), namespace="default")
            reconciled: set[str] = set()

            async def reconcile(ctx: RunContext) -> None:
                reconciled.add(ctx.ref.name)

            manager = Manager(handle_signals=False)
            controller = manager.add_controller(Controller("things", reconcile))
            cluster = Cluster(client, manager, options=WatchOptions(max_backoff=5))
            informer = await cluster.informer("v1", "ConfigMap", namespace="default")
            if where == "index":
                informer.store.add_index("source", lambda o: [source_of(o)])
                cluster.watches(controller, informer)
            elif where == "predicate":
                cluster.watches(controller, informer, predicates=[lambda e: bool(source_of(e.obj))])
            else:
                cluster.watches_mapped(
                    controller, informer, lambda o: [ObjectRef("ConfigMap", o["metadata"]["name"], "default")]
                    if source_of(o) else []
                )
            readiness: list[bool] = []
            async with running(manager):
                with trio.fail_after(60):
                    await cluster.wait_synced()
                for i in range(50, 100):
                    await client.create(cms, numbered(i, bad), namespace="default")
                    readiness.append(cluster.synced)
                others = {f"cm-{i:03d}" for i in range(100) if i != bad}
                with trio.fail_after(60):
                    while not others <= reconciled:
                        await trio.sleep(0.1)
                await trio.sleep(10)
                readiness.append(cluster.synced)
                stats = informer.statistics()
            bad_name = f"cm-{bad:03d}"
            assert reconciled - others == ({bad_name} if where == "index" else set())
            if where == "index":
                assert len(informer.store.by_index("source", "platform")) == 99
                assert informer.store.get("default", bad_name) is not None
            assert all(readiness)
            # a mapper runs in the controller's MappedSource, which counts it as a trigger error
            contained_by_informer = 0 if where == "mapper" else 1
            assert (stats.lists, stats.restarts, stats.stream_failures) == (1, 0, 0)
            assert (stats.object_errors, controller.trigger_errors) == (contained_by_informer, 1 - contained_by_informer)
            registry = CollectorRegistry()
            registry.register(InformerCollector(cluster))
            assert registry.get_sample_value(
                "engine_informer_object_errors_total", {"resource": "configmaps/v1"}
            ) == contained_by_informer
            lines = [r.getMessage() for r in caplog.records if "raised for" in r.getMessage()]
            assert len(lines) == 1 and f"default/{bad_name}" in lines[0] and "TypeError" in lines[0], lines


def test_generation_changed_accepts_an_object_older_than_the_cached_one() -> None:
    def event(old_rv: str, new_rv: str) -> InformerEvent:
        old = {"metadata": {"name": "b", "generation": 3, "resourceVersion": old_rv}, "status": {"phase": "done"}}
        new = {"metadata": {"name": "b", "generation": 3, "resourceVersion": new_rv}, "status": {"phase": "half"}}
        return InformerEvent(WatchEventType.MODIFIED, new, old)

    assert not generation_changed(event("10", "12")), "a status-only change"
    assert generation_changed(event("12", "10")), "history went back: the status written since is undone"
    assert not generation_changed(event("x", "y"))


async def test_the_clusters_watch_options_reach_every_informer_with_its_selector_added() -> None:
    async with ApiServer(listen=False, controllers=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            options = WatchOptions(label_selector="team=a", page_size=7, idle_timeout=None)
            cluster = Cluster(client, Manager(handle_signals=False), options=options)
            plain = await cluster.informer("v1", "ConfigMap")
            selected = await cluster.informer("v1", "ConfigMap", label_selector={"app": "web"})
            assert plain.options == options and plain.watcher.options == options
            assert selected.options == WatchOptions(label_selector="team=a,app=web", page_size=7, idle_timeout=None)
            assert Cluster(client, Manager(handle_signals=False)).options == WatchOptions()


WIDGETS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.example.com"},
    "spec": {
        "group": "test.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


@pytest.mark.parametrize("shielded", [True, False], ids=["in-ctx-shield", "unshielded"])
async def test_a_superseded_runs_status_write_in_ctx_shield_lands_before_its_key_runs_again(
    shielded: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The burst of bench/vs_kopf.py's workload C, made deterministic: the status patch of the
    run for ``n = 1`` is held 1 s by the server; ``n = 2`` supersedes that run meanwhile. In
    ``ctx.shield`` the run ends once its patch landed, and the run for ``n = 2`` writes last.
    Unshielded, the cancelled patch stays in flight: the run for ``n = 2`` writes
    ``observedN = 2`` first, the late patch puts 1 back, and that status-only change (no new
    generation) wakes nobody: ``spec.n`` 2, ``observedN`` 1, for good (the benchmark's stall)."""
    async with ApiServer(listen=False, bookmark_interval=30) as api:
        config = Config.from_dict(api.kubeconfig)
        async with (
            Client(config, transport=api.memory_transport(), user_agent="driver") as driver,
            Client(config, transport=api.memory_transport(), user_agent="operator") as client,
        ):
            from engine.kube import install_crds

            await install_crds(driver, [WIDGETS_CRD])
            widgets = await driver.resource("test.example.com/v1", "Widget")
            await driver.create(widgets, {"metadata": {"name": "burst"}, "spec": {"n": 0}}, namespace="default")
            written: list[int] = []

            manager = Manager(handle_signals=False)
            log = RunLog()
            manager.add_observer(log)
            cluster = Cluster(client, manager, namespace="default")
            informer = await cluster.informer("test.example.com/v1", "Widget")

            async def reconcile(ctx: RunContext) -> None:
                obj = informer.store.get(ctx.ref.namespace, ctx.ref.name)
                assert obj is not None
                n = obj["spec"]["n"]
                if (obj.get("status") or {}).get("observedN") != n:
                    written.append(n)
                    with ctx.shield(10) if shielded else contextlib.nullcontext():
                        await client.patch_status(
                            informer.resource, ctx.ref.name, {"status": {"observedN": n}},
                            namespace=ctx.ref.namespace, decode=False,
                        )

            controller = manager.add_controller(Controller("widgets", reconcile, max_concurrent=4))
            cluster.watches(controller, informer, predicates=[generation_changed])

            async def observed() -> tuple[int, int | None]:
                obj = await driver.get(widgets, "burst", namespace="default")
                return obj["spec"]["n"], (obj.get("status") or {}).get("observedN")

            async with running(manager):
                await trio.sleep(1)
                assert await observed() == (0, 0)
                api.faults.add_latency(1, client="operator", verbs={"patch"}, count=1)
                await driver.patch(widgets, "burst", {"spec": {"n": 1}}, namespace="default")
                await trio.sleep(0.1)
                await driver.patch(widgets, "burst", {"spec": {"n": 2}}, namespace="default")
                await trio.sleep(60)
                outcomes = [r.outcome.kind.value for r in log.records]
                assert written == [0, 1, 2]
                # A shielded run that returns right after its write ends as a success: the
                # supersede waited for a checkpoint that never came. Its key runs again all the same.
                assert outcomes == ["success", "success" if shielded else "superseded", "success"]
                assert await observed() == ((2, 2) if shielded else (2, 1))


async def test_refresh_lists_every_informer_again_sharded_or_not(kube_target: KubeTarget) -> None:
    """On any server, filtering by ``shardSelector`` or not: after :meth:`Cluster.refresh`
    every informer, sharded or whole, has listed again (begun after the call) by the time
    :meth:`Cluster.wait_refreshed` returns, and holds what the server holds."""
    upper = KeyRanges((KeyRange(1 << 63, 1 << 64),))
    ns = kube_target.namespace
    async with kube_target.client(user_agent="refresh-test") as client, trio.open_nursery() as nursery:
        configmaps = await client.resource("v1", "ConfigMap")
        for i in range(12):
            await client.create(configmaps, {"metadata": {"name": f"cm{i:02}", "labels": {"refresh": "t"}}}, namespace=ns)
        manager = Manager(handle_signals=False)
        cluster = Cluster(client, manager, namespace=ns, label_selector="refresh=t",
                          options=WatchOptions(label_selector="refresh=t"))
        cluster.set_key_ranges(upper)
        sharded = await cluster.informer("v1", "ConfigMap", sharded=True)
        whole = await cluster.informer("v1", "ConfigMap")
        nursery.start_soon(sharded.run)
        nursery.start_soon(whole.run)
        with trio.fail_after(30):
            await cluster.wait_synced()
            await cluster.wait_refreshed()
        lists = [i.statistics().lists for i in (sharded, whole)]
        for i in range(12):
            await client.patch(configmaps, f"cm{i:02}", {"data": {"v": "2"}}, namespace=ns)
        cluster.refresh()
        with trio.fail_after(30):
            await cluster.wait_refreshed()
        assert all(after > before for after, before in zip([i.statistics().lists for i in (sharded, whole)], lists))
        listed = (await client.list(configmaps, namespace=ns, label_selector="refresh=t")).items
        assert all(o["data"] == {"v": "2"} for o in listed)
        by_name = {o["metadata"]["name"]: o for o in listed}
        assert {o["metadata"]["name"] for o in whole.store.list()} == set(by_name)
        assert {o["metadata"]["name"] for o in sharded.store.list()} == {
            name for name, o in by_name.items() if fnv1a64(o["metadata"]["uid"]) in upper}
        assert all(o["data"] == {"v": "2"} for o in whole.store.list() + sharded.store.list())
        nursery.cancel_scope.cancel()
