"""The mirror plugin, in-process on the embedded API server under virtual time."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from engine import EventType
from engine.apiserver import ApiServer
from engine.plugins.mirror import plugin as mirror_plugin
from engine.plugins.mirror._controller import FINALIZER, SOURCE_LABEL
from engine.testing import KubeTarget, open_plugin_test

SOURCE = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: src
  labels: {mirror.engine.dev/enabled: "true"}
  annotations: {mirror.engine.dev/namespace-selector: team=a}
data: {color: blue}
"""


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


async def copy_namespaces(h: Any) -> set[str]:
    return {o["metadata"]["namespace"] for o in await h.list("ConfigMap", all_namespaces=True, label_selector=SOURCE_LABEL)}


@attrs.frozen
class Names:
    """The namespaces and ``team`` labels of one test. On a real server namespaces outlive their
    test (no namespace controller removes them, and other tests' copies stay in them), so there
    each test's names start with its own namespace; on the embedded server they are as written."""

    prefix: str = ""

    @classmethod
    def of(cls, target: KubeTarget) -> Names:
        return cls("" if target.kind == "embedded" else f"{target.namespace}-")

    def __call__(self, name: str) -> str:
        return self.prefix + name

    def namespace(self, name: str, team: str | None = None) -> dict[str, Any]:
        return namespace(self(name), **({"team": self(team)} if team else {}))

    def source(self) -> str:
        return SOURCE.replace("namespace: src", f"namespace: {self('src')}").replace(
            "namespace-selector: team=a", f"namespace-selector: team={self('a')}")

    async def copies(self, h: Any) -> set[str]:
        """The namespaces of this test's copies, as written (without the prefix)."""
        return {ns.removeprefix(self.prefix) for ns in await copy_namespaces(h) if ns.startswith(self.prefix)}


async def test_mirror_copies_follows_namespaces_and_cleans_up_with_its_finalizer(kube_target: KubeTarget) -> None:
    n = Names.of(kube_target)
    namespaces = [n.namespace("src"), n.namespace("a1", team="a"), n.namespace("a2", team="a"),
                  n.namespace("b1", team="b")]
    async with open_plugin_test(mirror_plugin, kube_target, namespace=n("src"), rbac=True, manifests=namespaces) as h:
        await h.apply(n.source())
        for ns in ("a1", "a2"):
            await h.wait_for("ConfigMap", "settings", namespace=n(ns), condition=lambda o: o is not None)
        assert await n.copies(h) == {"a1", "a2"}
        source = await h.get("ConfigMap", "settings")
        assert source is not None and FINALIZER in source["metadata"]["finalizers"]

        await h.apply(n.namespace("a3", team="a"))
        await h.patch("Namespace", n("a1"), {"metadata": {"labels": {"team": n("c")}}})
        await h.patch("ConfigMap", "settings", {"data": {"color": "red"}})
        for ns in ("a2", "a3"):
            await h.wait_for("ConfigMap", "settings", namespace=n(ns),
                             condition=lambda o: (o or {}).get("data") == {"color": "red"})
        await h.wait_deleted("ConfigMap", "settings", namespace=n("a1"))
        assert await n.copies(h) == {"a2", "a3"}

        await h.delete("ConfigMap", "settings", namespace=n("a2"))
        await h.wait_for("ConfigMap", "settings", namespace=n("a2"),
                         condition=lambda o: (o or {}).get("data") == {"color": "red"})

        await h.delete("ConfigMap", "settings")
        await h.wait_deleted("ConfigMap", "settings")
        assert await n.copies(h) == set(), "every copy was deleted before the source went away"
        assert await h.list("ConfigMap") == []
        assert [e for e in h.events if e.type is EventType.WARNING] == []


async def test_unlabelled_source_releases_its_finalizer_and_user_configmaps_are_left_alone(kube_target: KubeTarget) -> None:
    n = Names.of(kube_target)
    user_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": n("a2")},
               "data": {"mine": "yes"}}
    async with open_plugin_test(mirror_plugin, kube_target, namespace=n("src"), rbac=True, manifests=[
            n.namespace("src"), n.namespace("a1", team="a"), n.namespace("a2", team="a"), user_cm]) as h:
        await h.apply(n.source())
        await h.wait_for("ConfigMap", "settings", namespace=n("a1"), condition=lambda o: o is not None)
        mine = await h.get("ConfigMap", "settings", namespace=n("a2"))
        assert mine is not None and mine["data"] == {"mine": "yes"}, "a ConfigMap that is not our copy is not overwritten"

        await h.patch("ConfigMap", "settings", {"metadata": {"labels": {"mirror.engine.dev/enabled": None}}})
        await h.wait_for("ConfigMap", "settings", condition=lambda o: FINALIZER not in (
            (o or {}).get("metadata", {}).get("finalizers") or []))
        assert await n.copies(h) == set(), "copies were cleaned up"
        await h.delete("ConfigMap", "settings")
        assert await h.get("ConfigMap", "settings", namespace=n("a2"))


async def test_a_source_seen_late_after_it_was_deleted_is_never_copied(kube_target: KubeTarget, kube_api: ApiServer) -> None:
    """A stale cache shows a source that is already gone: adding the finalizer finds nothing,
    and no copy is made (a copy without a source, until the deletion reached the cache, was
    found by the simulation, mirror seed 204)."""
    async with open_plugin_test(mirror_plugin, kube_target, namespace="src", rbac=True,
                                manifests=[namespace("src"), namespace("a1", team="a")]) as h:
        kube_api.faults.delay_watch(5, resource="configmaps")
        await h.apply(SOURCE)
        await trio.sleep(2)
        await h.delete("ConfigMap", "settings")
        assert await h.get("ConfigMap", "settings") is None
        for _ in range(8):  # the ADDED event arrives at 5 s, the DELETED one at 7 s
            await trio.sleep(1)
            assert await copy_namespaces(h) == set()


async def test_a_copy_written_by_a_superseded_run_lands_before_the_next_run(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """A copy write the server answers slowly, its run superseded by the source's deletion
    meanwhile: the write is shielded, so it lands before the cleanup run, never after it (an
    orphaned copy, found by the simulation, mirror seed 585)."""
    async with open_plugin_test(mirror_plugin, kube_target, namespace="src", rbac=True,
                                manifests=[namespace("src"), namespace("a1", team="a")]) as h:
        await h.apply(SOURCE.replace("  labels:", f"  finalizers: [{FINALIZER}]\n  labels:"))
        kube_api.faults.add_latency(3, count=1, resource="configmaps", verbs={"patch"})
        await trio.sleep(1)
        await h.delete("ConfigMap", "settings")
        orphaned = []
        for _ in range(40):
            await trio.sleep(0.25)
            if await copy_namespaces(h) and await h.get("ConfigMap", "settings") is None:
                orphaned.append(trio.current_time())
        assert orphaned == []
        assert await h.get("ConfigMap", "settings") is None and await copy_namespaces(h) == set()


async def test_a_cached_finalizer_on_a_source_since_deleted_is_not_trusted(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """The cache shows a source holding the finalizer; on the server the finalizer was removed
    and the source deleted. No copy is made: the finalizer is checked on the server (a copy
    without a source, found by the simulation, mirror seed 721)."""
    async with open_plugin_test(mirror_plugin, kube_target, namespace="src", rbac=True,
                                manifests=[namespace("src"), namespace("a1", team="a")]) as h:
        kube_api.faults.delay_watch(5, resource="configmaps")
        await h.apply(SOURCE.replace("  labels:", f"  finalizers: [{FINALIZER}]\n  labels:"))
        await trio.sleep(2)
        await h.patch("ConfigMap", "settings", {"metadata": {"finalizers": None}})
        await h.delete("ConfigMap", "settings")
        assert await h.get("ConfigMap", "settings") is None
        for _ in range(8):
            await trio.sleep(1)
            assert await copy_namespaces(h) == set()


async def test_a_copy_write_that_outlasts_its_shield_fails_the_run_and_is_retried(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """The server holds a copy's write past the shield's time (10 s), with no cancellation of
    the run: the run fails and is retried at once, never taken for a success without its copy
    (the simulation's requeue check, mirror seeds 39 and 74)."""
    async with open_plugin_test(mirror_plugin, kube_target, namespace="src", rbac=True,
                                manifests=[namespace("src"), namespace("a1", team="a")]) as h:
        kube_api.faults.add_latency(30, count=1, resource="configmaps", verbs={"patch"}, client=h.user_agent)
        await h.apply(SOURCE.replace("  labels:", f"  finalizers: [{FINALIZER}]\n  labels:"))
        await trio.sleep(12)
        assert await copy_namespaces(h) == {"a1"}, "the held write lands at 30 s; a retry wrote it by now"
