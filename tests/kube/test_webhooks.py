"""Admission and conversion webhooks: the typed reviews, the handlers' deadline and failures,
the HTTPS server and its certificates, the in-process transport, the configurations, metrics."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from prometheus_client import CollectorRegistry, generate_latest

from engine.kube import (
    INJECT_CA_ANNOTATION,
    MAX_REVIEW_BYTES,
    AdmissionDenied,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionRule,
    AdmissionWebhook,
    ConversionWebhook,
    Plugin,
    PluginError,
    WebhookCertificates,
    WebhookCollector,
    WebhookContext,
    WebhookError,
    WebhookServer,
    json_patch_between,
    service_client_config,
    url_client_config,
    webhook_configurations,
    with_conversion,
)

RULES = [AdmissionRule("widgets.test.dev/v1", "widgets", ("CREATE", "UPDATE"))]


def review(obj: Mapping[str, Any] | None = None, *, uid: str = "u-1", operation: str = "CREATE") -> dict[str, Any]:
    obj = obj if obj is not None else {"apiVersion": "widgets.test.dev/v1", "kind": "Widget",
                                       "metadata": {"name": "w", "namespace": "ns"}, "spec": {"size": 1}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "widgets.test.dev", "version": "v1", "kind": "Widget"},
        "resource": {"group": "widgets.test.dev", "version": "v1", "resource": "widgets"},
        "name": "w", "namespace": "ns", "operation": operation, "userInfo": {"username": "alice"},
        "object": obj, "oldObject": None, "dryRun": False}}


async def deny_big(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    assert request.object is not None
    if request.object["spec"]["size"] > 3:
        raise AdmissionDenied(f"size {request.object['spec']['size']} is over 3")
    return AdmissionResponse.allow(warnings=["size is small"])


async def crash(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    raise RuntimeError("the cache said no\nsecond line")


async def slow(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


background_cancelled: list[bool] = []


async def with_background(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    async def forever() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            background_cancelled.append(True)
            raise

    ctx.nursery.start_soon(forever)
    await trio.sleep(0.1)
    return None


async def add_label(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    assert request.object is not None
    changed = json.loads(json.dumps(request.object))
    changed["metadata"].setdefault("labels", {})["size/class"] = "small"
    changed["spec"]["size"] = 2
    del changed["metadata"]["namespace"]
    return AdmissionResponse.patched(request, changed)


async def to_v2(obj: Mapping[str, Any], api_version: str, ctx: WebhookContext) -> Mapping[str, Any]:
    if obj["spec"].get("size") is None:
        raise ValueError("spec.size is missing")
    return {**obj, "apiVersion": api_version, "spec": {"dimensions": {"size": obj["spec"]["size"]}}}


WEBHOOKS: list[AdmissionWebhook | ConversionWebhook] = [
    AdmissionWebhook("deny-big.widgets.test.dev", deny_big, RULES),
    AdmissionWebhook("crash.widgets.test.dev", crash, RULES),
    AdmissionWebhook("crash-ignored.widgets.test.dev", crash, RULES, failure_policy="Ignore"),
    AdmissionWebhook("slow.widgets.test.dev", slow, RULES, timeout_seconds=10),
    AdmissionWebhook("background.widgets.test.dev", with_background, RULES),
    AdmissionWebhook("label.widgets.test.dev", add_label, RULES, mutating=True, timeout_seconds=3,
                     object_selector={"matchLabels": {"managed": "yes"}}),
    ConversionWebhook("widgets.test.dev", to_v2),
]


def server() -> WebhookServer:
    return WebhookServer(WEBHOOKS)


async def post(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(f"https://webhooks.invalid{path}", content=content,
                             headers={"content-type": "application/json"})


def in_process(s: WebhookServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=s.transport())


# --- admission answers ---------------------------------------------------------------------------


async def test_a_denial_names_its_reason_and_echoes_the_uid(autojump_clock: trio.testing.MockClock) -> None:
    big = review()
    big["request"]["object"]["spec"]["size"] = 5
    async with in_process(server()) as client:
        answer = await post(client, "/validate/deny-big.widgets.test.dev", big)
        allowed = await post(client, "/validate/deny-big.widgets.test.dev", review(uid="u-2"))
    assert answer.status_code == 200
    assert answer.json() == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
        "uid": "u-1", "allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": "size 5 is over 3"}}}
    assert allowed.json()["response"] == {"uid": "u-2", "allowed": True, "warnings": ["size is small"]}


async def test_a_handler_that_raises_denies_in_one_line_never_a_500(autojump_clock: trio.testing.MockClock) -> None:
    async with in_process(server()) as client:
        answer = await post(client, "/validate/crash.widgets.test.dev", review())
    assert answer.status_code == 200
    assert answer.json()["response"] == {"uid": "u-1", "allowed": False, "status": {
        "code": 500, "reason": "InternalError",
        "message": "webhook handler failed: RuntimeError: the cache said no second line"}}


async def test_under_failure_policy_ignore_a_failing_handler_allows_with_a_warning(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with in_process(server()) as client:
        answer = await post(client, "/validate/crash-ignored.widgets.test.dev", review())
    assert answer.json()["response"] == {"uid": "u-1", "allowed": True, "warnings": [
        "webhook handler failed: RuntimeError: the cache said no second line; allowed by failurePolicy Ignore"]}


async def test_a_slow_handler_is_cancelled_before_the_api_servers_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    s = server()
    async with in_process(s) as client:
        started = trio.current_time()
        answer = await post(client, "/validate/slow.widgets.test.dev", review())
        took = trio.current_time() - started
    assert took == pytest.approx(8.0)
    assert answer.json()["response"] == {"uid": "u-1", "allowed": False, "status": {
        "code": 504, "reason": "Timeout", "message": "webhook handler did not answer within 8s (timeoutSeconds 10s)"}}
    assert s.statistics()["/validate/slow.widgets.test.dev"]["timeouts"] == 1
    assert s.problems() == ["webhook /validate/slow.widgets.test.dev failed 1 of 1 request: 0 errors, 1 timeout"]


async def test_denials_are_routine_counts_not_problems(autojump_clock: trio.testing.MockClock) -> None:
    s = server()
    async with in_process(s) as client:
        await post(client, "/validate/deny-big.widgets.test.dev", review())
    assert s.problems() == []
    assert "webhook /validate/deny-big.widgets.test.dev: 1 request, " in "\n".join(s.summary())


async def test_tasks_a_handler_starts_end_with_its_request(autojump_clock: trio.testing.MockClock) -> None:
    background_cancelled.clear()
    async with in_process(server()) as client:
        answer = await post(client, "/validate/background.widgets.test.dev", review())
    assert answer.json()["response"] == {"uid": "u-1", "allowed": True}
    assert background_cancelled == [True]


async def test_a_mutating_handler_answers_the_json_patch_of_its_changes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with in_process(server()) as client:
        answer = await post(client, "/mutate/label.widgets.test.dev", review())
    response = answer.json()["response"]
    assert (response["allowed"], response["patchType"]) == (True, "JSONPatch")
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "remove", "path": "/metadata/namespace"},
        {"op": "add", "path": "/metadata/labels", "value": {"size/class": "small"}},
        {"op": "replace", "path": "/spec/size", "value": 2},
    ]


def test_json_patch_escapes_keys_and_replaces_lists_and_changed_types() -> None:
    assert json_patch_between({"a/b": 1, "t~": [1, 2], "n": 1}, {"a/b": 2, "t~": [1], "n": 1.5}) == [
        {"op": "replace", "path": "/a~1b", "value": 2},
        {"op": "replace", "path": "/t~0", "value": [1]},
        {"op": "replace", "path": "/n", "value": 1.5},
    ]
    assert json_patch_between({"a": {"b": True}}, {"a": {"b": True}}) == []
    assert json_patch_between({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "request body is not JSON: "),
    (b"[" * 100_000, "request body is not JSON: RecursionError: "),
    (b"\xff\xfe{}", "request body is not JSON: "),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
     "malformed review: expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got "
     "'admission.k8s.io/v1beta1' 'AdmissionReview'"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "malformed review: AdmissionReview has no request"),
    ({**review(), "request": {**review()["request"], "uid": ""}},
     "malformed review: request.uid must be a non-empty string"),
    ({**review(), "request": {**review()["request"], "operation": "PATCH"}},
     "malformed review: request.operation must be CREATE, UPDATE, DELETE or CONNECT, got 'PATCH'"),
    ({**review(), "request": {**review()["request"], "object": None}},
     "malformed review: request.object is required for CREATE"),
    ({**review(), "request": {**review()["request"], "object": [1]}},
     "malformed review: request.object must be an object or null"),
    ([1, 2], "malformed review: an AdmissionReview must be a JSON object"),
])
async def test_a_malformed_review_is_a_400_with_the_reason(
    autojump_clock: trio.testing.MockClock, body: Any, reason: str,
) -> None:
    s = server()
    async with in_process(s) as client:
        answer = await post(client, "/validate/deny-big.widgets.test.dev", body)
    assert answer.status_code == 400
    assert answer.text.startswith(reason) and answer.text.count("\n") == 1
    assert s.statistics()["/validate/deny-big.widgets.test.dev"]["requests"] == {400: 1}


async def test_unknown_paths_other_methods_and_oversized_bodies(autojump_clock: trio.testing.MockClock) -> None:
    async with in_process(server()) as client:
        assert (await post(client, "/validate/nope.test.dev", review())).status_code == 404
        assert (await client.get("https://webhooks.invalid/validate/deny-big.widgets.test.dev")).status_code == 405
        huge = await post(client, "/validate/deny-big.widgets.test.dev", b" " * (MAX_REVIEW_BYTES + 1))
    assert huge.status_code == 413


# --- conversion ------------------------------------------------------------------------------------


def conversion(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-1", "desiredAPIVersion": "widgets.test.dev/v2", "objects": objects}}


async def test_conversion_converts_every_object_or_fails_with_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    widget = {"apiVersion": "widgets.test.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}
    async with in_process(server()) as client:
        ok = await post(client, "/convert/widgets.test.dev", conversion([widget]))
        bad = await post(client, "/convert/widgets.test.dev", conversion([widget, {**widget, "spec": {}}]))
        malformed = await post(client, "/convert/widgets.test.dev", {**conversion([]), "request": {"uid": "c"}})
    assert ok.json() == {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {
        "uid": "c-1", "result": {"status": "Success"}, "convertedObjects": [
            {**widget, "apiVersion": "widgets.test.dev/v2", "spec": {"dimensions": {"size": 2}}}]}}
    assert bad.json()["response"] == {"uid": "c-1", "convertedObjects": [], "result": {
        "status": "Failure", "message": "conversion failed: ValueError: spec.size is missing"}}
    assert (malformed.status_code, malformed.text) == (
        400, "malformed review: request.desiredAPIVersion must be 'group/version'\n")


# --- declarations and configurations ---------------------------------------------------------------


async def _setup(ctx: Any) -> None:
    pass


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match=r"^webhook name must be a fully qualified DNS name with at least three "
                                         r"labels, got 'deny'$"):
        AdmissionWebhook("deny", deny_big, RULES)
    with pytest.raises(ValueError, match=r"^webhook timeout_seconds must be between 1 and 30, got 31$"):
        AdmissionWebhook("deny.test.dev", deny_big, RULES, timeout_seconds=31)
    with pytest.raises(PluginError, match=r"^plugin 'p': conversion webhook for 'widgets.test.dev', which is not "
                                          r"one of its CRDs$"):
        Plugin("p", _setup, webhooks=[ConversionWebhook("widgets.test.dev", to_v2)])
    with pytest.raises(PluginError, match=r"^plugin 'p': two webhooks answer on /validate/deny.test.dev$"):
        Plugin("p", _setup, webhooks=[AdmissionWebhook("deny.test.dev", deny_big, RULES)] * 2)


def test_configurations_list_rules_selectors_and_the_service() -> None:
    configs = webhook_configurations(WEBHOOKS, name="engine-widgets",
                                     client_config=service_client_config("engine-widgets-webhook", "engine-system",
                                                                         443),
                                     annotations={INJECT_CA_ANNOTATION: "engine-system/engine-widgets-webhook"})
    assert [c["kind"] for c in configs] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert configs[0] == {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "engine-widgets",
                     "annotations": {"cert-manager.io/inject-ca-from": "engine-system/engine-widgets-webhook"}},
        "webhooks": [{
            "name": "label.widgets.test.dev", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "engine-widgets-webhook", "namespace": "engine-system",
                                         "path": "/mutate/label.widgets.test.dev", "port": 443}},
            "rules": [{"apiGroups": ["widgets.test.dev"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["widgets"], "scope": "*"}],
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 3, "matchPolicy": "Equivalent",
            "namespaceSelector": {}, "objectSelector": {"matchLabels": {"managed": "yes"}},
            "reinvocationPolicy": "Never",
        }],
    }
    assert [(w["name"], w["failurePolicy"]) for w in configs[1]["webhooks"]] == [
        ("deny-big.widgets.test.dev", "Fail"), ("crash.widgets.test.dev", "Fail"),
        ("crash-ignored.widgets.test.dev", "Ignore"),
        ("slow.widgets.test.dev", "Fail"), ("background.widgets.test.dev", "Fail")]


def test_a_crd_with_a_conversion_webhook_gets_the_stanza_and_the_url_config_carries_the_ca() -> None:
    crd = {"metadata": {"name": "widgets.test.dev"}, "spec": {"group": "test.dev"}}
    other = {"metadata": {"name": "gadgets.test.dev"}, "spec": {}}
    converted = with_conversion([crd, other], WEBHOOKS, client_config=url_client_config("https://h:1/", b"PEM"),
                                annotations={INJECT_CA_ANNOTATION: "ns/cert"})
    assert converted[0] == {"metadata": {"name": "widgets.test.dev", "annotations": {INJECT_CA_ANNOTATION: "ns/cert"}},
                            "spec": {"group": "test.dev", "conversion": {"strategy": "Webhook", "webhook": {
                                "clientConfig": {"url": "https://h:1/convert/widgets.test.dev",
                                                 "caBundle": base64.b64encode(b"PEM").decode()},
                                "conversionReviewVersions": ["v1"]}}}}
    assert converted[1] == other and "conversion" not in crd["spec"]


async def test_metrics_have_controller_runtimes_names(autojump_clock: trio.testing.MockClock) -> None:
    s = server()
    async with in_process(s) as client:
        await post(client, "/validate/deny-big.widgets.test.dev", review())
        await post(client, "/validate/deny-big.widgets.test.dev", b"{")
    registry = CollectorRegistry()
    registry.register(WebhookCollector(s))
    text = generate_latest(registry).decode()
    assert ('controller_runtime_webhook_requests_total{code="200",webhook="/validate/deny-big.widgets.test.dev"} 1.0'
            in text)
    assert ('controller_runtime_webhook_requests_total{code="400",webhook="/validate/deny-big.widgets.test.dev"} 1.0'
            in text)
    assert 'controller_runtime_webhook_latency_seconds_count{webhook="/validate/deny-big.widgets.test.dev"} 2.0' in text
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate/label.widgets.test.dev"} 0.0' in text


# --- HTTPS and certificates ------------------------------------------------------------------------


def _write_cert(directory: Path, ca: trustme.CA) -> None:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(directory / "tls.key.new"))
    (directory / "tls.crt.new").write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
    (directory / "tls.key.new").replace(directory / "tls.key")
    (directory / "tls.crt.new").replace(directory / "tls.crt")


def _client(ca_pem: bytes) -> httpx.AsyncClient:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return httpx.AsyncClient(verify=context, timeout=10)


async def test_https_with_a_generated_ca_answers_reviews_and_refuses_oversized_bodies() -> None:
    s = WebhookServer(WEBHOOKS, port=0, max_body=64 * 1024)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        assert s.certificates.ca_bundle is not None
        async with _client(s.certificates.ca_bundle) as client:
            answer = await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())
            huge = await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", content=b" " * (64 * 1024 + 1))
        async with _client(trustme.CA().cert_pem.bytes()) as stranger:
            with pytest.raises(httpx.ConnectError):
                await stranger.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())
        async with httpx.AsyncClient(timeout=10) as plain:
            with pytest.raises(httpx.RemoteProtocolError):
                await plain.post(f"{s.url.replace('https', 'http')}/validate/deny-big.widgets.test.dev",
                                 json=review())
        async with _client(s.certificates.ca_bundle) as client:
            after = await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())
        assert after.status_code == 200, "failed handshakes do not take the server down"
        nursery.cancel_scope.cancel()
    assert answer.json()["response"]["allowed"] is True
    assert huge.status_code == 413


async def test_certificates_from_a_directory_are_reloaded_when_they_change(tmp_path: Path) -> None:
    first, second = trustme.CA(), trustme.CA()
    _write_cert(tmp_path, first)
    certificates = WebhookCertificates.from_dir(tmp_path)
    s = WebhookServer(WEBHOOKS, port=0, certificates=certificates, reload_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        async with _client(first.cert_pem.bytes()) as client:
            assert (await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())).status_code == 200
        assert await certificates.reload_if_changed() is False
        _write_cert(tmp_path, second)
        assert await certificates.reload_if_changed() is True
        async with _client(second.cert_pem.bytes()) as client:
            assert (await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())).status_code == 200
        async with _client(first.cert_pem.bytes()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.post(f"{s.url}/validate/deny-big.widgets.test.dev", json=review())
        (tmp_path / "tls.key").write_text("garbage")
        assert await certificates.reload_if_changed() is False
        assert certificates.reloads == 1
        nursery.cancel_scope.cancel()


def test_an_unreadable_certificate_is_one_error_line(tmp_path: Path) -> None:
    with pytest.raises(WebhookError, match=rf"^cannot read the webhook certificate {tmp_path}/tls.crt and key "
                                           rf"{tmp_path}/tls.key: No such file or directory$"):
        WebhookCertificates.from_dir(tmp_path)
    _write_cert(tmp_path, trustme.CA())
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(WebhookError, match=r"^cannot read the webhook certificate .*/tls.crt and key .*/tls.key: "
                                           r"\[SSL\][^\n]*$"):
        WebhookCertificates.from_dir(tmp_path)
    shutil.rmtree(tmp_path)


async def test_the_watcher_reloads_changed_files_every_interval(
    tmp_path: Path, autojump_clock: trio.testing.MockClock,
) -> None:
    _write_cert(tmp_path, trustme.CA())
    certificates = WebhookCertificates.from_dir(tmp_path)
    first = certificates.context
    async with trio.open_nursery() as nursery:
        nursery.start_soon(certificates.watch, 10.0)
        await trio.sleep(25)
        assert (certificates.reloads, certificates.context) == (0, first)
        _write_cert(tmp_path, trustme.CA())
        await trio.sleep(4)
        assert certificates.reloads == 0
        await trio.sleep(2)
        assert certificates.reloads == 1 and certificates.context is not first
        nursery.cancel_scope.cancel()


async def test_a_shorter_timeout_the_api_server_sends_shortens_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with in_process(server()) as client:
        started = trio.current_time()
        answer = await post(client, "/validate/slow.widgets.test.dev?timeout=2500ms", review())
        took = trio.current_time() - started
        longer = await post(client, "/validate/slow.widgets.test.dev?timeout=1m", review())
    assert took == pytest.approx(2.0)
    assert answer.json()["response"]["status"]["message"] == (
        "webhook handler did not answer within 2s (timeoutSeconds 2.5s)")
    assert longer.json()["response"]["status"]["message"] == (
        "webhook handler did not answer within 8s (timeoutSeconds 10s)")
