"""The mirror plugin, in-process against the embedded API server."""

from __future__ import annotations

import trio

from engine import Manager
from engine.kube import Client, Cluster, Config, PluginContext
from engine.testing import ApiServer
from plugins.mirror import plugin as mirror_plugin
from plugins.mirror._controller import FINALIZER, SOURCE_LABEL

from .._e2e import Watcher


def namespace(name: str, **labels: str) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


async def test_mirror_copies_follows_namespaces_and_cleans_up_with_its_finalizer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kubeconfig")
        config = Config.from_kubeconfig(tmp_path / "kubeconfig")
        async with Client(config) as client, trio.open_nursery() as nursery:
            ns_res = await client.resource("v1", "Namespace")
            cms = await client.resource("v1", "ConfigMap")
            for ns in (namespace("src"), namespace("a1", team="a"), namespace("a2", team="a"), namespace("b1", team="b")):
                await client.create(ns_res, ns)
            manager = Manager(handle_signals=False, grace_period=5)
            cluster = Cluster(client, manager)
            await mirror_plugin.setup(PluginContext(name="mirror", manager=manager, cluster=cluster, client=client, config={}))
            copies = Watcher(await cluster.informer("v1", "ConfigMap", namespace=None, label_selector=SOURCE_LABEL))
            sources = Watcher(await cluster.informer("v1", "ConfigMap", label_selector="mirror.engine.dev/enabled=true"))
            await nursery.start(manager.run)

            def copy_namespaces(w: Watcher) -> set[str]:
                return {o["metadata"]["namespace"] for o in w.informer.store.list()}

            await client.create(cms, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "src", "labels": {"mirror.engine.dev/enabled": "true"},
                             "annotations": {"mirror.engine.dev/namespace-selector": "team=a"}},
                "data": {"color": "blue"},
            })
            with trio.fail_after(20):
                await copies.wait_until(lambda w: copy_namespaces(w) == {"a1", "a2"})
            source = await client.get(cms, "settings", namespace="src")
            assert FINALIZER in source["metadata"]["finalizers"]

            await client.create(ns_res, namespace("a3", team="a"))
            await client.patch(ns_res, "a1", {"metadata": {"labels": {"team": "c"}}})
            await client.patch(cms, "settings", {"data": {"color": "red"}}, namespace="src")
            with trio.fail_after(20):
                await copies.wait_until(
                    lambda w: copy_namespaces(w) == {"a2", "a3"}
                    and all(o["data"]["color"] == "red" for o in w.informer.store.list())
                )
            await client.delete(cms, "settings", namespace="a2")
            with trio.fail_after(20):
                await copies.wait_until(lambda w: (w.get("a2", "settings") or {}).get("data") == {"color": "red"})

            await client.delete(cms, "settings", namespace="src")
            with trio.fail_after(20):
                await sources.wait_until(lambda w: w.get("src", "settings") is None)
            left = await client.list(cms, label_selector=SOURCE_LABEL)
            assert left.items == [], "every copy was deleted before the source went away"
            remaining = await client.list(cms, namespace="src")
            assert [o["metadata"]["name"] for o in remaining.items] == []
            manager.stop()


async def test_unlabelled_source_releases_its_finalizer_and_user_configmaps_are_left_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kubeconfig")
        async with Client(Config.from_kubeconfig(tmp_path / "kubeconfig")) as client, trio.open_nursery() as nursery:
            ns_res = await client.resource("v1", "Namespace")
            cms = await client.resource("v1", "ConfigMap")
            for ns in (namespace("src"), namespace("a1", team="a"), namespace("a2", team="a")):
                await client.create(ns_res, ns)
            await client.create(cms, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": "settings", "namespace": "a2"}, "data": {"mine": "yes"}})
            manager = Manager(handle_signals=False, grace_period=5)
            cluster = Cluster(client, manager)
            await mirror_plugin.setup(PluginContext(name="mirror", manager=manager, cluster=cluster, client=client, config={}))
            copies = Watcher(await cluster.informer("v1", "ConfigMap", namespace=None, label_selector=SOURCE_LABEL))
            in_src = Watcher(await cluster.informer("v1", "ConfigMap", namespace="src"))
            await nursery.start(manager.run)
            await client.create(cms, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "src", "labels": {"mirror.engine.dev/enabled": "true"},
                             "annotations": {"mirror.engine.dev/namespace-selector": "team=a"}},
                "data": {"color": "blue"},
            })
            with trio.fail_after(20):
                await copies.wait_until(lambda w: w.get("a1", "settings") is not None)
            user_cm = await client.get(cms, "settings", namespace="a2")
            assert user_cm["data"] == {"mine": "yes"}, "a ConfigMap that is not our copy is not overwritten"

            await client.patch(cms, "settings", {"metadata": {"labels": {"mirror.engine.dev/enabled": None}}}, namespace="src")
            with trio.fail_after(20):
                await in_src.wait_until(
                    lambda w: FINALIZER not in ((w.get("src", "settings") or {}).get("metadata", {}).get("finalizers") or [])
                )
            assert (await client.list(cms, label_selector=SOURCE_LABEL)).items == [], "copies were cleaned up"
            await client.delete(cms, "settings", namespace="src")
            assert await client.get(cms, "settings", namespace="a2")
            manager.stop()
