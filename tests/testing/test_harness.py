"""open_plugin_test and its handle, on the kube_* fixtures: the whole stack under virtual time."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from engine import Controller, OutcomeKind, Result, RunContext
from engine.kube import Client, Cluster, LeaderElector, Plugin, PluginContext, generation_changed, patch_status
from engine.testing import ApiServer, HarnessError, KubeTarget, WaitTimeout, open_plugin_test
from engine.testing._harness import parse_manifests

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.dev"},
    "spec": {
        "group": "test.dev",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}

WIDGET = """
apiVersion: test.dev/v1
kind: Widget
metadata:
  name: w1
spec:
  size: 3
"""


async def _setup(ctx: PluginContext) -> None:
    widgets = await ctx.cluster.informer("test.dev/v1", "Widget")

    async def reconcile(run: RunContext) -> Result | None:
        obj = widgets.store.get(run.ref.namespace, run.ref.name)
        if obj is None:
            return None
        if obj["spec"].get("size", 0) < 0:
            raise ValueError("size must be >= 0")
        generation = obj["metadata"]["generation"]
        with run.shield(5):
            await patch_status(ctx.client, widgets.resource, obj, {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Sized", "message": "", "observedGeneration": generation,
                 "lastTransitionTime": "2024-01-01T00:00:00Z"}]})
        run.events.normal("Sized", f"size {obj['spec']['size']}")
        return Result(requeue_after=float(ctx.config["resync"]))

    controller = ctx.manager.add_controller(Controller("widgets", reconcile))
    ctx.cluster.watches(controller, widgets, predicates=[generation_changed])


WIDGETS = Plugin(name="widgets", setup=_setup, crds=(WIDGET_CRD,), config={"resync": 600})


async def test_a_plugin_reconciles_requeues_every_ten_minutes_and_emits_events(kube_target: KubeTarget) -> None:
    wall = time.monotonic()
    async with open_plugin_test(WIDGETS, kube_target) as h:
        t0 = trio.current_time()
        await h.apply(WIDGET)
        widget = await h.wait_for("Widget", "w1", condition="Ready", timeout=30)
        assert widget is not None and widget["metadata"]["namespace"] == "test"
        runs = await h.wait_runs(4, name="w1", timeout=3600)
        assert [r.started_at - t0 for r in runs[1:]] == pytest.approx(
            [runs[0].started_at - t0 + 600 * i for i in (1, 2, 3)], abs=1e-6)
        assert h.outcomes(name="w1") == [OutcomeKind.REQUEUE_AFTER] * 4
        assert [e.reason for e in await h.wait_events(4, reason="Sized", name="w1")] == ["Sized"] * 4
        recorded = await h.cluster_events(name="w1")
        assert {e["reason"] for e in recorded} == {"Sized"}
        assert trio.current_time() - t0 >= 1800
    assert h.report is not None and not h.report.forced
    assert time.monotonic() - wall < 20, "thirty virtual minutes must not take real time"


async def test_a_manager_built_by_hand_runs_against_the_target(kube_target: KubeTarget, kube_cluster: Cluster) -> None:
    informer = await kube_cluster.informer("v1", "ConfigMap", namespace="test")
    seen: list[str] = []

    async def reconcile(run: RunContext) -> None:
        obj = informer.store.get(run.ref.namespace, run.ref.name)
        seen.append((obj or {}).get("data", {}).get("k", "<gone>"))

    controller = kube_cluster.manager.add_controller(Controller("configmaps", reconcile))
    kube_cluster.watches(controller, informer)
    async with open_plugin_test(kube_cluster.manager, kube_target) as h:
        await h.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: one}\n")
        await h.wait_runs(1, name="c")
        await h.patch("configmaps", "c", {"data": {"k": "two"}})
        await h.wait_runs(2, name="c")
        await h.delete("ConfigMap", "c")
        await h.wait_deleted("ConfigMap", "c")
        await h.wait_runs(3, name="c")
        assert seen == ["one", "two", "<gone>"]
        assert await h.get("v1/ConfigMap", "c") is None
    with pytest.raises(HarnessError, match=r"^open_plugin_test needs a Manager that has not run$"):
        async with open_plugin_test(kube_cluster.manager, kube_target):
            pass


async def test_wait_for_times_out_in_virtual_time_with_the_last_state(kube_target: KubeTarget) -> None:
    async with open_plugin_test(WIDGETS, kube_target) as h:
        await h.apply({**parse_manifests(WIDGET)[0], "spec": {"size": -1}})
        t0 = trio.current_time()
        with pytest.raises(WaitTimeout, match=r"^Widget test/w1 did not meet 'Ready' within 120s; last seen:\n"):
            await h.wait_for("widgets", "w1", timeout=120)
        assert trio.current_time() - t0 == pytest.approx(120)
        failures = h.outcomes(name="w1")
        assert failures and set(failures) == {OutcomeKind.FAILED}
        assert len(failures) >= 5, "rate-limited retries went on during the wait"
