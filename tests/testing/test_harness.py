"""open_plugin_test and its handle, on the kube_* fixtures: the whole stack under virtual time on
the embedded server, or in real time on a real one (``--kube-target=real``), each test in the
target's namespace, which the plugin alone watches (a real server keeps earlier tests' objects)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import trio

from engine import Controller, OutcomeKind, Result, RunContext
from engine.apiserver import ApiServer
from engine.kube import Cluster, Plugin, PluginContext, generation_changed, patch_status
from engine.testing import HarnessError, KubeTarget, WaitTimeout, open_plugin_test
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


@pytest.mark.kube_embedded(reason="thirty minutes of requeues in virtual time")
async def test_a_plugin_reconciles_requeues_every_ten_minutes_and_emits_events(kube_target: KubeTarget) -> None:
    wall = time.monotonic()
    async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace) as h:
        t0 = trio.current_time()
        await h.apply(WIDGET)
        widget = await h.wait_for("Widget", "w1", condition="Ready", timeout=30)
        assert widget is not None and widget["metadata"]["namespace"] == kube_target.namespace
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
    informer = await kube_cluster.informer("v1", "ConfigMap", namespace=kube_target.namespace)
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
    """Exactly 120 s of virtual time; on a real server 10 s of real time, give or take a request."""
    timeout, slack = (120, None) if kube_target.virtual_time else (10, 1.0)
    async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace) as h:
        await h.apply({**parse_manifests(WIDGET)[0], "spec": {"size": -1}})
        t0 = trio.current_time()
        with pytest.raises(WaitTimeout, match=rf"^Widget {re.escape(h.namespace)}/w1 did not meet 'Ready' within "
                                              rf"{timeout}s; last seen:\n"):
            await h.wait_for("widgets", "w1", condition="Ready", timeout=timeout)
        assert trio.current_time() - t0 == pytest.approx(timeout, abs=slack)
        failures = h.outcomes(name="w1")
        assert failures and set(failures) == {OutcomeKind.FAILED}
        assert len(failures) >= 5, "rate-limited retries went on during the wait"


async def test_a_failing_assert_in_the_body_leaves_the_harness_as_itself(kube_target: KubeTarget) -> None:
    with pytest.raises(AssertionError, match=r"^the widget was not ready$") as caught:
        async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace):
            raise AssertionError("the widget was not ready")
    assert caught.type is AssertionError
    with pytest.raises(ExceptionGroup) as group:
        async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace):
            raise ExceptionGroup("two failures", [AssertionError("one"), ValueError("two")])
    assert group.group_contains(AssertionError, match="^one$") and group.group_contains(ValueError, match="^two$")


async def test_wait_for_without_a_condition_waits_until_the_object_exists(kube_target: KubeTarget) -> None:
    """A ConfigMap has no Ready condition: without ``condition`` the wait is for the object alone."""
    timeout = 120 if kube_target.virtual_time else 10
    async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace) as h:
        with pytest.raises(WaitTimeout, match=rf"^ConfigMap {re.escape(h.namespace)}/plain did not exist within "
                                              rf"{timeout}s$"):
            await h.wait_for("ConfigMap", "plain", timeout=timeout)
        await h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"k": "v"}})
        found = await h.wait_for("ConfigMap", "plain", timeout=timeout)
        assert found is not None and found["data"] == {"k": "v"}


@pytest.mark.kube_embedded(reason="a quarter of an hour of lease timings and resyncs in virtual time")
async def test_lease_expiry_handover_after_a_crash_and_graceful_handover_take_virtual_time_only(
    kube_target: KubeTarget,
) -> None:
    """client-go's lease timings (15 s lease, 10 s renew deadline, 2 s retry) and a 5 minute
    resync: about a quarter of an hour of virtual time, a few seconds of wall time (the cost
    is the HTTP exchanges of lease renewals, not the time waited)."""
    wall = time.monotonic()
    le: dict[str, Any] = {"leader_election": True, "config": {"resync": 300}, "watch_namespace": kube_target.namespace}
    async with open_plugin_test(WIDGETS, kube_target, manifests=WIDGET, **le) as first, \
            open_plugin_test(WIDGETS, kube_target, **le) as second:
        await first.wait_leading(timeout=30)
        await first.wait_runs(3, name="w1", timeout=700)
        assert second.runs == [] and not second.manager.started
        first.crash()
        crashed = trio.current_time()
        lease = await second.get("Lease", "engine-widgets")
        assert lease is not None and lease["spec"]["holderIdentity"] == first.identity, "a crash releases nothing"
        await second.wait_leading(timeout=60)
        took_over = trio.current_time() - crashed
        assert 15 - 2 <= took_over <= 15 + 2 + 2, took_over
        await second.wait_runs(2, name="w1", timeout=400)
        assert max(r.finished_at for r in first.runs) < min(r.started_at for r in second.runs), "two leaders at once"

        async with open_plugin_test(WIDGETS, kube_target, **le) as third:
            report = await second.stop()
            assert report is not None and report.events_flushed
            stopped = trio.current_time()
            await third.wait_leading(timeout=30)
            assert trio.current_time() - stopped <= 2, "a released lease is taken at the next retry"
            await third.wait_runs(1, name="w1")
        lease = await second.get("Lease", "engine-widgets")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 2
    assert trio.current_time() > 900
    assert time.monotonic() - wall < 30


async def test_faults_starve_one_replica_and_it_recovers(kube_target: KubeTarget, kube_api: ApiServer) -> None:
    async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace) as h:
        assert h.faults is kube_api.faults and h.api is kube_api
        h.faults.fail(503, count=6, client=h.user_agent, resource="widgets", verbs=("patch",))
        await h.apply(WIDGET)
        ready = await h.wait_for("Widget", "w1", condition="Ready", timeout=600)
        assert ready is not None
        assert OutcomeKind.FAILED in h.outcomes(name="w1")
        assert h.outcomes(name="w1")[-1] is OutcomeKind.REQUEUE_AFTER


async def test_resources_resolve_by_kind_plural_group_and_manifest(kube_target: KubeTarget) -> None:
    async with open_plugin_test(WIDGETS, kube_target, watch_namespace=kube_target.namespace) as h:
        assert (await h.resource("Widget")).plural == "widgets"
        assert (await h.resource("widgets.test.dev")).kind == "Widget"
        assert (await h.resource(("test.dev/v1", "Widget"))).group == "test.dev"
        assert (await h.resource("test.dev/v1/Widget")).namespaced
        with pytest.raises(HarnessError, match=r"^the API server serves no type named 'doohickey'$"):
            await h.resource("doohickey")
        await h.apply(WIDGET_CRD | {"metadata": {"name": "events.test.dev"}, "spec": {
            **WIDGET_CRD["spec"], "names": {"kind": "Event", "plural": "events", "listKind": "EventList"}}})
        with pytest.raises(HarnessError, match=r"^'events' names several types \(events\.core, events\.events\.k8s\.io, "
                                               r"events\.test\.dev\); say which with 'plural\.group'$"):
            await h.resource("events")
        [applied] = await h.apply(parse_manifests(WIDGET))
        by_manifest, by_name = await h.get(applied), await h.get("Widget", "w1", namespace=h.namespace)
        assert by_manifest is not None and by_name is not None
        assert by_manifest["metadata"]["uid"] == by_name["metadata"]["uid"] == applied["metadata"]["uid"]
        assert [o["metadata"]["name"] for o in await h.list("widgets")] == ["w1"]


def test_manifests_parse_from_yaml_objects_and_lists() -> None:
    docs = parse_manifests("---\n" + WIDGET + "---\nkind: List\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n")
    assert [d["kind"] for d in docs] == ["Widget", "ConfigMap"]
    with pytest.raises(ValueError, match=r"^a manifest needs apiVersion, kind and metadata.name$"):
        parse_manifests({"kind": "ConfigMap"})
    with pytest.raises(ValueError, match=r"^a manifest must be a mapping, got list$"):
        parse_manifests("- a\n")


async def test_a_harness_on_a_listening_server_and_misuse(tmp_path: Any) -> None:
    async with ApiServer() as api:
        async with open_plugin_test(WIDGETS, api, cluster_events=False) as h:
            assert h.target.describe() == f"embedded at {api.url}" and not h.target.virtual_time
            await h.apply(WIDGET.replace("w1", "w2"))
            await h.wait_for("Widget", "w2", condition="Ready", timeout=30)
        with pytest.raises(HarnessError, match=r"^open_plugin_test runs a Plugin or a Manager, got str$"):
            async with open_plugin_test("widgets", api):  # type: ignore[arg-type]
                pass
    real = KubeTarget.real(h.target.config, namespace="x", kind="envtest")
    with pytest.raises(HarnessError, match=r"^fault injection needs the embedded API server \(engine.apiserver.ApiServer\); "
                                           r"this test runs against envtest at http://127\.0\.0\.1:\d+$"):
        real.faults  # noqa: B018
