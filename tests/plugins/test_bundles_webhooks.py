"""The bundles plugin's webhooks through the API server's admission chain (open_plugin_test
registers them: in-process on the embedded server, over HTTPS on loopback for a real
kube-apiserver under ``--kube-target=real``): a ``dependsOn`` cycle is refused with the cycle
named, through other Bundles too; ``spec.interval`` is defaulted."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from engine.apiserver import ApiServer
from engine.kube import (
    AdmissionDenied,
    AdmissionRequest,
    ApiError,
    Client,
    Config,
    WebhookContext,
    WebhookServer,
)
from engine.plugins.bundles import plugin
from engine.plugins.bundles._webhooks import default_bundle, validate_bundle
from engine.testing import KubeTarget

from .._e2e import API, configmap
from .test_bundles import bundle, open_bundles, raw_bundle, source

DENIED = 'admission webhook "validate.bundles.engine.dev" denied the request: '


async def test_a_bundle_that_depends_on_itself_is_refused(kube_target: KubeTarget) -> None:
    async with open_bundles(plugin, kube_target) as h:
        with pytest.raises(ApiError) as caught:
            await h.apply(bundle("app", "repo", depends_on=("app",)))
        assert str(caught.value).endswith(
            DENIED + "dependency cycle: app -> app (a Bundle cannot depend on itself)")
        assert await h.get(API + "/Bundle", "app") is None


async def test_a_cycle_through_other_bundles_is_refused_naming_it(kube_target: KubeTarget) -> None:
    async with open_bundles(plugin, kube_target, manifests=[source("repo", "r1", [configmap("a")])]) as h:
        await h.apply([bundle("a", "repo", depends_on=("b",)), bundle("b", "repo", depends_on=("c",))])
        with pytest.raises(ApiError) as caught:
            await h.apply(bundle("c", "repo", depends_on=("a",)))
        assert str(caught.value).endswith(DENIED + "dependency cycle: c -> a -> b -> c")
        assert await h.get(API + "/Bundle", "c") is None
        await h.apply(bundle("c", "repo"))
        with pytest.raises(ApiError, match="dependency cycle: c -> a -> b -> c$"):
            await h.patch(API + "/Bundle", "c", {"spec": {"dependsOn": [{"name": "a"}]}})
        for name in "cba":
            await h.wait_for(API + "/Bundle", name, condition="Ready", timeout=60)


async def test_a_bundle_without_an_interval_is_stored_with_the_default(kube_target: KubeTarget) -> None:
    async with open_bundles(plugin, kube_target) as h:
        await h.apply([raw_bundle("plain", {"sourceRef": {"name": "repo"}}),
                       raw_bundle("hourly", {"sourceRef": {"name": "repo"}, "interval": "1h"})])
        plain, hourly = await h.get(API + "/Bundle", "plain"), await h.get(API + "/Bundle", "hourly")
        assert plain is not None and plain["spec"]["interval"] == "10m"
        assert hourly is not None and hourly["spec"]["interval"] == "1h"


async def test_without_the_webhooks_the_schema_leaves_the_interval_out(kube_target: KubeTarget) -> None:
    """The default comes from one place, the webhook (the CRD schema has none)."""
    async with open_bundles(plugin, kube_target, webhooks=False) as h:
        await h.apply(raw_bundle("plain", {"sourceRef": {"name": "repo"}}))
        plain = await h.get(API + "/Bundle", "plain")
        assert plain is not None and "interval" not in plain["spec"]


def _request(obj: dict[str, Any], old: dict[str, Any] | None = None) -> AdmissionRequest:
    return AdmissionRequest.from_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "bundles.engine.dev", "version": "v1alpha1", "kind": "Bundle"},
        "resource": {"group": "bundles.engine.dev", "version": "v1alpha1", "resource": "bundles"},
        "name": obj["metadata"]["name"], "namespace": "ns", "operation": "CREATE" if old is None else "UPDATE",
        "object": obj, "oldObject": old}})


async def test_a_bundle_stored_in_a_cycle_can_still_get_and_lose_its_finalizer() -> None:
    a = raw_bundle("a", {"sourceRef": {"name": "r"}, "dependsOn": [{"name": "a"}]})
    finalized = {**a, "metadata": {**a["metadata"], "finalizers": ["bundles.engine.dev/finalizer"]}}
    deleting = {**a, "metadata": {**a["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    async with trio.open_nursery() as nursery:
        ctx = WebhookContext(None, None, nursery, float("inf"))
        assert await validate_bundle(_request(finalized, a), ctx) is None
        assert await validate_bundle(_request(deleting, finalized), ctx) is None
        with pytest.raises(AdmissionDenied, match=r"^dependency cycle: a -> a \(a Bundle cannot depend on itself\)$"):
            await validate_bundle(_request(a, raw_bundle("a", {"sourceRef": {"name": "r"}})), ctx)


async def test_other_bundles_are_read_from_the_api_without_a_cache_and_a_failure_or_delay_only_warns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            for crd in plugin.crds:
                await client.apply(crds, crd, field_manager="test", force=True)
            await trio.sleep(1)
            namespaces = await client.resource("v1", "Namespace")
            await client.apply(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}},
                               field_manager="test", force=True)
            bundles = await client.resource(API, "Bundle")
            await client.apply(bundles, {**raw_bundle("a", {"sourceRef": {"name": "r"}, "dependsOn": [{"name": "b"}]}),
                                         }, namespace="ns", field_manager="test", force=True)
            b = raw_bundle("b", {"sourceRef": {"name": "r"}, "dependsOn": [{"name": "a"}]})
            async with trio.open_nursery() as nursery:
                ctx = WebhookContext(None, client, nursery, float("inf"))
                with pytest.raises(Exception, match=r"^dependency cycle: b -> a -> b$"):
                    await validate_bundle(_request(b), ctx)
                slow = api.faults.add_latency(60, resource="bundles")
                started = trio.current_time()
                late = await validate_bundle(_request(b), WebhookContext(None, client, nursery, started + 4))
                assert trio.current_time() - started == pytest.approx(3.0)
                api.faults.remove(slow)
                api.faults.fail(503, count=None, resource="bundles")
                answer = await validate_bundle(_request(b), ctx)
            assert late is not None and late.allowed
            assert late.warnings == (
                "dependency cycles through other Bundles were not checked: they could not be read in time",)
            assert answer is not None and answer.allowed
            assert answer.warnings[0].startswith("dependency cycles through other Bundles were not checked: ")


async def test_the_defaulting_patch_adds_only_the_interval(autojump_clock: trio.testing.MockClock) -> None:
    server = WebhookServer(plugin.webhooks)
    async with trio.open_nursery() as nursery:
        ctx = WebhookContext(None, None, nursery, float("inf"))
        answer = await default_bundle(_request(raw_bundle("x", {"sourceRef": {"name": "r"}})), ctx)
        unchanged = await default_bundle(_request(raw_bundle("x", {"sourceRef": {"name": "r"}, "interval": "1m"})),
                                         ctx)
    assert answer is not None and list(answer.patch) == [{"op": "add", "path": "/spec/interval", "value": "10m"}]
    assert unchanged is None
    assert [w.path for w in server.webhooks] == ["/mutate/default.bundles.engine.dev",
                                                 "/validate/validate.bundles.engine.dev"]
