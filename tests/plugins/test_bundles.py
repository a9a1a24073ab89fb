"""The bundles reconciler in-process against the embedded API server: prune and inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from engine import Manager
from engine.kube import Client, Cluster, Config, PluginContext, install_crds
from engine.testing import ApiServer
from plugins.bundles import plugin
from plugins.bundles._controller import OWNER_LABEL, _identity, parse_duration

from .._e2e import API, Watcher, bundle, configmap, ready_at, source

GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.test.dev"},
    "spec": {
        "group": "test.dev",
        "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


def gadget(name: str, ready: bool) -> dict[str, Any]:
    return {"apiVersion": "test.dev/v1", "kind": "Gadget", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Test"}]}}


def test_parse_duration() -> None:
    assert parse_duration("1m30s", 0) == 90
    assert parse_duration("500ms", 0) == 0.5
    assert parse_duration(None, 7) == 7
    with pytest.raises(ValueError, match=r"^invalid duration '5 minutes' \(use e.g. 30s, 5m, 1h30m, 500ms\)$"):
        parse_duration("5 minutes", 0)


def test_inventory_identity_ignores_the_version() -> None:
    a = {"apiVersion": "test.dev/v1beta1", "kind": "Widget", "namespace": "n", "name": "w"}
    b = {**a, "apiVersion": "test.dev/v1"}
    assert _identity(a) == _identity(b)


async def test_superseded_health_check_still_prunes_what_the_revision_applied(tmp_path: Path) -> None:
    """r2 adds b and an unhealthy gadget; r3 (pushed during r2's health check) drops them:
    both are pruned, though r2 never finished."""
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kc")
        async with Client(Config.from_kubeconfig(tmp_path / "kc")) as client, trio.open_nursery() as nursery:
            await install_crds(client, [*plugin.crds, GADGET_CRD])
            ns = await client.resource("v1", "Namespace")
            await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e"}})
            sources = await client.resource(API, "Source")
            cms = await client.resource("v1", "ConfigMap")
            gadgets = await client.resource("test.dev/v1", "Gadget")
            await client.create(sources, source("repo", "r1", [configmap("a")]))
            await client.create(await client.resource(API, "Bundle"), bundle("app", "repo", timeout="1h"))

            manager = Manager(handle_signals=False, grace_period=1)
            cluster = Cluster(client, manager)
            await plugin.setup(PluginContext(name="bundles", manager=manager, cluster=cluster, client=client,
                                             config={**plugin.config, "healthPollInterval": 0.05}))
            bundles = Watcher(await cluster.informer(API, "Bundle"))
            await nursery.start(manager.run)
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "app"), "r1"))

            await client.patch(sources, "repo", {"spec": {"revision": "r2", "artifact": [
                configmap("a"), configmap("b"), gadget("x", ready=False)]}}, namespace="e2e")
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: "checking health" in str((w.get("e2e", "app") or {}).get("status")))
            await client.patch(sources, "repo", {"spec": {"revision": "r3", "artifact": [configmap("a")]}},
                               namespace="e2e")
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "app"), "r3"))
            names = {o["metadata"]["name"] for o in (await client.list(cms, namespace="e2e")).items}
            assert "b" not in names and "a" in names
            assert (await client.list(gadgets, namespace="e2e")).items == []

            # An object another bundle took over is not pruned.
            await client.patch(sources, "repo", {"spec": {"revision": "r4", "artifact": [configmap("a"), configmap("c")]}},
                               namespace="e2e")
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "app"), "r4"))
            await client.patch(cms, "c", {"metadata": {"labels": {OWNER_LABEL: "someone-else"}}}, namespace="e2e")
            await client.patch(sources, "repo", {"spec": {"revision": "r5", "artifact": [configmap("a")]}}, namespace="e2e")
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "app"), "r5"))
            assert await client.get(cms, "c", namespace="e2e")
            manager.stop()


async def test_deleting_a_bundle_garbage_collects_what_it_applied(tmp_path: Path) -> None:
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kc")
        async with Client(Config.from_kubeconfig(tmp_path / "kc")) as client, trio.open_nursery() as nursery:
            await install_crds(client, plugin.crds)
            ns = await client.resource("v1", "Namespace")
            await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e"}})
            cms = await client.resource("v1", "ConfigMap")
            bundles_res = await client.resource(API, "Bundle")
            await client.create(await client.resource(API, "Source"), source("repo", "r1", [configmap("a"), configmap("b")]))
            await client.create(bundles_res, bundle("app", "repo"))
            manager = Manager(handle_signals=False, grace_period=1)
            cluster = Cluster(client, manager)
            await plugin.setup(PluginContext(name="bundles", manager=manager, cluster=cluster, client=client,
                                             config=dict(plugin.config)))
            bundles = Watcher(await cluster.informer(API, "Bundle"))
            await nursery.start(manager.run)
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "app"), "r1"))
            assert "bundles.engine.dev/finalizer" in (await client.get(bundles_res, "app", namespace="e2e"))["metadata"]["finalizers"]
            await client.delete(bundles_res, "app", namespace="e2e")
            with trio.fail_after(20):
                await bundles.wait_until(lambda w: w.get("e2e", "app") is None)
            assert {o["metadata"]["name"] for o in (await client.list(cms, namespace="e2e")).items} & {"a", "b"} == set()
            manager.stop()
