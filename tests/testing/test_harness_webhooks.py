"""open_plugin_test runs a plugin's webhooks: on the embedded server in-process (registered with
it, called through its ``webhook_transport``, no sockets, under virtual time); on a real
kube-apiserver (``--kube-target=real``) served over HTTPS on loopback and called by that server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import trio

from engine.apiserver import ApiServer
from engine.kube import (
    AdmissionDenied,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionRule,
    AdmissionWebhook,
    ApiError,
    ConversionWebhook,
    Plugin,
    PluginContext,
    WebhookCertificates,
    WebhookContext,
)
from engine.testing import KubeTarget, open_plugin_test

_SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.dev"},
    "spec": {"group": "test.dev", "scope": "Namespaced",
             "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": _SCHEMA},
                          {"name": "v2", "served": True, "storage": False, "schema": _SCHEMA}]},
}
RULES = [AdmissionRule("test.dev/*", "widgets", ("CREATE", "UPDATE"))]


async def slow_check(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    assert request.object is not None
    spec = request.object.get("spec") or {}
    if spec.get("slow"):
        await trio.sleep(3600)
    size = spec.get("size", (spec.get("dimensions") or {}).get("size", 0))
    if size > 3:
        raise AdmissionDenied(f"size {size} is over 3")
    return None


async def convert(obj: Mapping[str, Any], api_version: str, ctx: WebhookContext) -> Mapping[str, Any]:
    spec = dict(obj.get("spec") or {})
    if api_version.endswith("/v2") and "size" in spec:
        spec = {"dimensions": {"size": spec.pop("size")}, **spec}
    elif api_version.endswith("/v1") and "dimensions" in spec:
        spec = {"size": spec.pop("dimensions")["size"], **spec}
    return {**obj, "apiVersion": api_version, "spec": spec}


async def _setup(ctx: PluginContext) -> None:
    await ctx.cluster.informer("test.dev/v1", "Widget")


WIDGETS = Plugin("widgets", _setup, crds=[CRD], webhooks=[
    AdmissionWebhook("size.widgets.test.dev", slow_check, RULES, timeout_seconds=2),
    ConversionWebhook("widgets.test.dev", convert),
])


def widget(name: str, api_version: str = "test.dev/v1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "Widget", "metadata": {"name": name}, "spec": spec}


async def test_a_denial_is_raised_by_apply_and_nothing_is_stored(
    kube_target: KubeTarget, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if kube_target.api is not None:
        def no_certificates(*args: Any) -> None:
            raise AssertionError("in-process webhooks need no certificate")

        monkeypatch.setattr(WebhookCertificates, "generate", no_certificates)
    async with open_plugin_test(WIDGETS, kube_target) as h:
        with pytest.raises(ApiError, match=r'admission webhook "size.widgets.test.dev" denied the request: '
                                           r'size 5 is over 3$'):
            await h.apply(widget("big", size=5))
        assert await h.get("test.dev/v1/Widget", "big") is None
        assert h.client.forbidden.counts() == {}, "a denial is not a missing permission"
        assert h.webhook_server is not None
        assert h.webhook_server.statistics()["/validate/size.widgets.test.dev"]["denied"] == 1


async def test_a_slow_handler_is_denied_before_the_servers_timeout(kube_target: KubeTarget) -> None:
    """At 80 % of ``timeoutSeconds``: exactly 1.6 s in virtual time, before the server's own
    2 s on a real one."""
    async with open_plugin_test(WIDGETS, kube_target) as h:
        started = trio.current_time()
        with pytest.raises(ApiError, match=r"denied the request: webhook handler did not answer within 1.6s "
                                           r"\(timeoutSeconds 2s\)$"):
            await h.apply(widget("slow", slow=True))
        elapsed = trio.current_time() - started
        if kube_target.virtual_time:
            assert elapsed == pytest.approx(1.6)
        else:
            assert 1.6 <= elapsed < 2.0


async def test_objects_are_converted_between_versions_through_the_plugins_webhook(kube_target: KubeTarget) -> None:
    async with open_plugin_test(WIDGETS, kube_target) as h:
        await h.apply(widget("w", size=2))
        as_v2 = await h.get("test.dev/v2/Widget", "w")
        assert as_v2 is not None and as_v2["spec"] == {"dimensions": {"size": 2}}
        await h.apply(widget("w2", "test.dev/v2", dimensions={"size": 1}))
        as_v1 = await h.get("test.dev/v1/Widget", "w2")
        assert as_v1 is not None and as_v1["spec"] == {"size": 1}
        with pytest.raises(ApiError, match="size 7 is over 3$"):
            await h.apply(widget("w3", "test.dev/v2", dimensions={"size": 7}))


async def test_without_webhooks_nothing_is_registered(kube_target: KubeTarget) -> None:
    async with open_plugin_test(WIDGETS, kube_target, webhooks=False) as h:
        await h.apply(widget("big", size=5))
        assert h.webhook_server is None


async def test_against_a_server_reached_over_the_network_the_webhooks_listen_on_loopback_and_are_removed_after(
) -> None:
    """The path a real cluster (envtest) takes: HTTPS on loopback with a generated CA, called by
    the server as a remote one would (the embedded server listening, treated as not embedded)."""
    from engine.kube import Config

    async with ApiServer() as api:
        target = KubeTarget.real(Config.from_dict(api.kubeconfig), namespace="default")
        async with open_plugin_test(WIDGETS, target) as h:
            assert h.webhook_server is not None and h.webhook_server.url.startswith("https://127.0.0.1:")
            with pytest.raises(ApiError, match="denied the request: size 5 is over 3$"):
                await h.apply(widget("big", size=5))
            await h.apply(widget("small", size=1))
            converted = await h.get("test.dev/v2/Widget", "small")
            assert converted is not None and converted["spec"] == {"dimensions": {"size": 1}}
            configs = await h.resource("admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration")
            [config] = (await h.client.list(configs)).items
            assert config["webhooks"][0]["clientConfig"]["url"] == (
                f"{h.webhook_server.url}/validate/size.widgets.test.dev")
        async with open_plugin_test(WIDGETS, target, webhooks=False) as h:
            assert (await h.client.list(configs)).items == []
            await h.apply(widget("big", size=5))
            unconverted = await h.get("test.dev/v2/Widget", "small")
            assert unconverted is not None and unconverted["spec"] == {"size": 1}
