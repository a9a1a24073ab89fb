"""Watches for controllers (engine.kube.Cluster) against the embedded API server."""

from __future__ import annotations

from pathlib import Path

import trio

from engine import Controller, Manager, ObjectRef, RunContext, RunLog
from engine.kube import (
    REQUESTED_AT_ANNOTATION,
    Client,
    Cluster,
    Config,
    any_of,
    generation_changed,
    requested_at_changed,
)
from engine.testing import ApiServer
from plugins.bundles import plugin as bundles_plugin

from .._e2e import API, bundle, configmap


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
