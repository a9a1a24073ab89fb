"""The bundles plugin in-process on the embedded API server, under virtual time (the kube_*
fixtures and open_plugin_test): prune and inventory, finalizers, and the three failures of
DESIGN.md that do not need a separate process."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from engine import Event, EventType, OutcomeKind
from engine.testing import KubeTarget, open_plugin_test
from plugins.bundles import plugin
from plugins.bundles._controller import OWNER_LABEL, _identity, parse_duration

from .._e2e import API, bundle, configmap, ready_at, source

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


async def test_superseded_health_check_still_prunes_what_the_revision_applied(kube_target: KubeTarget) -> None:
    """r2 adds b and an unhealthy gadget; r3 (pushed during r2's health check) drops them:
    both are pruned, though r2 never finished."""
    async with open_plugin_test(plugin, kube_target, namespace="e2e", config={"healthPollInterval": 0.05},
                                manifests=[GADGET_CRD, source("repo", "r1", [configmap("a")]),
                                           bundle("app", "repo", timeout="1h")]) as h:
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": [
            configmap("a"), configmap("b"), gadget("x", ready=False)]}})
        await h.wait_for(API + "/Bundle", "app", timeout=20,
                         condition=lambda o: "checking health" in str((o or {}).get("status")))
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r3", "artifact": [configmap("a")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r3"), timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("configmaps")} >= {"a"}
        assert await h.get("ConfigMap", "b") is None
        assert await h.list("gadgets") == []
        assert OutcomeKind.SUPERSEDED in h.outcomes(name="app")

        # An object another bundle took over is not pruned.
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r4", "artifact": [configmap("a"), configmap("c")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r4"), timeout=20)
        await h.patch("ConfigMap", "c", {"metadata": {"labels": {OWNER_LABEL: "someone-else"}}})
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r5", "artifact": [configmap("a")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r5"), timeout=20)
        assert await h.get("ConfigMap", "c")
        assert [e for e in h.events if e.type is EventType.WARNING] == [], "a superseded run emits no failure"


async def test_deleting_a_bundle_garbage_collects_what_it_applied(kube_target: KubeTarget) -> None:
    async with open_plugin_test(plugin, kube_target, namespace="e2e", manifests=[
            source("repo", "r1", [configmap("a"), configmap("b")]), bundle("app", "repo")]) as h:
        app = await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        assert app is not None and "bundles.engine.dev/finalizer" in app["metadata"]["finalizers"]
        await h.delete(API + "/Bundle", "app")
        await h.wait_deleted(API + "/Bundle", "app", timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("ConfigMap")} & {"a", "b"} == set()


async def test_seed1_rapid_revisions_with_a_stale_cache_end_ready_at_the_final_revision(kube_target: KubeTarget) -> None:
    """50 Source revisions 10 ms apart while health checks run and watch delivery to the
    replica is delayed (a stale cache): every Bundle ends Ready at the final revision."""
    async with open_plugin_test(plugin, kube_target, namespace="e2e", cluster_events=False, manifests=[
            source("repo", "r0", [configmap("app", revision="r0")]),
            *(bundle(name, "repo", wait="300ms") for name in "abc")]) as h:
        for name in "abc":
            await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r0"), timeout=30)
        h.faults.delay_watch(0.3, client=h.user_agent)
        for i in range(1, 51):
            await h.patch(API + "/Source", "repo", {"spec": {"revision": f"r{i}", "artifact": [
                configmap("app", revision=f"r{i}")]}})
            await trio.sleep(0.010)
        for name in "abc":
            await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r50"), timeout=30)
        cm = await h.get("ConfigMap", "app")
        assert cm is not None and cm["data"]["revision"] == "r50"
        assert h.outcomes(name="a").count(OutcomeKind.SUPERSEDED) >= 1, "the revisions did supersede health checks"
        assert OutcomeKind.FAILED not in h.outcomes()


class BlackHole:
    """An event sink whose deliveries never return (an unreachable webhook)."""

    name = "black-hole"

    def __init__(self) -> None:
        self.attempts = 0

    async def deliver(self, event: Event) -> None:
        self.attempts += 1
        await trio.sleep_forever()


async def test_seed3_a_blackholed_event_sink_does_not_delay_a_dependent(kube_target: KubeTarget) -> None:
    hole = BlackHole()
    async with open_plugin_test(plugin, kube_target, namespace="e2e", sinks=[hole], manifests=[
            source("infra", "i1", [configmap("infra-settings")]), source("apps", "a1", [configmap("frontend")])]) as h:
        await h.apply(bundle("apps", "apps", depends_on=("infra",)))
        await h.wait_for(API + "/Bundle", "apps", timeout=30,
                         condition=lambda o: "DependencyNotReady" in str((o or {}).get("status")))
        await h.apply(bundle("infra", "infra", wait="500ms"))
        await h.wait_for(API + "/Bundle", "infra", condition=lambda o: ready_at(o, "i1"), timeout=30)
        ready_seen = trio.current_time()
        await h.wait_for("ConfigMap", "frontend", condition=lambda o: o is not None, timeout=30)
        assert trio.current_time() - ready_seen < 0.1, "the dependent started at once, from the watch path"
        assert hole.attempts >= 1, "events were being delivered into the black hole"
        await h.wait_for(API + "/Bundle", "apps", condition=lambda o: ready_at(o, "a1"), timeout=30)
