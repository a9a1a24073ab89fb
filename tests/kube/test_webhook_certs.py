"""The runner's own webhook certificate: issued into a Secret, reused, renewed, shared by
replicas, its CA written into the configurations and CRD conversions that call its Service."""

from __future__ import annotations

import base64
import datetime
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from cryptography import x509

from engine.apiserver import ApiServer
from engine.kube import (
    AdmissionRule,
    AdmissionWebhook,
    CertProvisioning,
    CertRotator,
    Client,
    Config,
    ConversionWebhook,
    KubeError,
    WebhookCertificates,
)
from engine.kube._webhooks._server import server_context

NAMESPACE, SERVICE = "ops", "engine-widgets-webhook"
HOSTS = [f"{SERVICE}.{NAMESPACE}.svc", f"{SERVICE}.{NAMESPACE}.svc.cluster.local"]
START = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.dev"},
    "spec": {"group": "test.dev", "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
             "scope": "Namespaced",
             "versions": [{"name": v, "served": True, "storage": v == "v1",
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}
                          for v in ("v1", "v2")],
             "conversion": {"strategy": "Webhook", "webhook": {
                 "conversionReviewVersions": ["v1"],
                 "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/convert"}}}}},
}


async def _allow(request: Any, ctx: Any) -> None:
    return None


async def _convert(obj: Any, api_version: str, ctx: Any) -> Any:
    return obj


WEBHOOKS = [
    AdmissionWebhook("validate.widgets.test.dev", _allow,
                     rules=[AdmissionRule("test.dev/v1", "widgets", ("CREATE",))]),
    ConversionWebhook("widgets.test.dev", _convert),
]


def _entry(name: str, service: str) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": service, "namespace": NAMESPACE, "path": f"/validate/{name}"}},
            "rules": [{"apiGroups": ["test.dev"], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["widgets"]}]}


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


@asynccontextmanager
async def cluster() -> AsyncIterator[Client]:
    async with ApiServer(listen=False) as api, Client(Config.from_dict(api.kubeconfig),
                                                      transport=api.memory_transport()) as client:
        await client.create(await client.resource("v1", "Namespace"),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        await client.create(await client.resource("v1", "Secret"),
                            {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                             "metadata": {"name": f"{SERVICE}-cert", "namespace": NAMESPACE}},
                            namespace=NAMESPACE)
        await client.create(await client.resource("admissionregistration.k8s.io/v1",
                                                  "ValidatingWebhookConfiguration"),
                            {"apiVersion": "admissionregistration.k8s.io/v1",
                             "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "engine-widgets"},
                             "webhooks": [_entry("validate.widgets.test.dev", SERVICE),
                                          _entry("other.widgets.test.dev", "someone-else")]})
        await client.create(await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition"), CRD)
        yield client


def rotator(client: Client, clock: Clock, **kwargs: Any) -> CertRotator:
    provisioning = CertProvisioning(SERVICE, NAMESPACE, "engine-widgets")
    made = provisioning.rotator(client, WEBHOOKS, WebhookCertificates(server_context()))
    made.now = clock
    for key, value in kwargs.items():
        setattr(made, key, value)
    return made


async def secret(client: Client) -> dict[str, bytes]:
    obj = await client.get(await client.resource("v1", "Secret"), f"{SERVICE}-cert", namespace=NAMESPACE)
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


async def bundles(client: Client) -> dict[str, str | None]:
    config = await client.get(await client.resource("admissionregistration.k8s.io/v1",
                                                    "ValidatingWebhookConfiguration"), "engine-widgets")
    crd = await client.get(await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
                           "widgets.test.dev")
    found = {w["name"]: w["clientConfig"].get("caBundle") for w in config["webhooks"]}
    found["conversion"] = crd["spec"]["conversion"]["webhook"]["clientConfig"].get("caBundle")
    return found


def _names(pem: bytes) -> list[str]:
    cert = x509.load_pem_x509_certificate(pem)
    return [str(n) for n in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            .value.get_values_for_type(x509.DNSName)]


async def test_an_empty_secret_gets_a_ca_and_a_certificate_whose_ca_goes_where_the_service_is_called() -> None:
    async with cluster() as client:
        made = rotator(client, Clock())
        await made.sync()
        data = await secret(client)
        assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(data["ca.crt"]))
        assert _names(data["tls.crt"]) == HOSTS
        bundle = base64.b64encode(data["ca.crt"]).decode()
        assert await bundles(client) == {"validate.widgets.test.dev": bundle, "other.widgets.test.dev": None,
                                         "conversion": bundle}
        assert (made.issued, made.loaded, made.injected) == (1, 1, 2)
        assert made.certificates.ca_bundle == data["ca.crt"]


async def test_the_server_context_serves_the_secrets_certificate_to_a_client_trusting_the_ca() -> None:
    async with cluster() as client:
        made = rotator(client, Clock())
        made.now = lambda: datetime.datetime.now(datetime.UTC)
        await made.sync()
        data = await secret(client)
        trusting = ssl.create_default_context(cadata=data["ca.crt"].decode())
        server_end, client_end = trio.testing.memory_stream_pair()
        server = trio.SSLStream(server_end, made.certificates.context, server_side=True)
        peer = trio.SSLStream(client_end, trusting, server_hostname=HOSTS[0])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)
            await peer.do_handshake()
        assert peer.getpeercert()["subject"] == ((("commonName", HOSTS[0]),),)


async def test_a_valid_secret_is_reused_and_nothing_is_written_again() -> None:
    async with cluster() as client:
        first = rotator(client, Clock())
        await first.sync()
        before = await secret(client)
        second = rotator(client, Clock())
        await second.sync()
        await first.sync()
        assert await secret(client) == before
        assert (second.issued, second.loaded, second.injected) == (0, 1, 0)
        assert (first.issued, first.loaded, first.injected) == (1, 1, 2)


async def test_a_certificate_near_expiry_is_renewed_by_the_same_ca_and_the_ca_near_expiry_anew() -> None:
    async with cluster() as client:
        clock = Clock()
        made = rotator(client, clock)
        await made.sync()
        first = await secret(client)
        clock.now = START + datetime.timedelta(days=330)
        await made.sync()
        assert (made.issued, made.loaded, made.injected) == (1, 1, 2)
        clock.now = START + datetime.timedelta(days=336)
        await made.sync()
        renewed = await secret(client)
        assert renewed["ca.crt"] == first["ca.crt"] and renewed["tls.crt"] != first["tls.crt"]
        assert (made.issued, made.loaded, made.injected) == (2, 2, 2)
        clock.now = START + datetime.timedelta(days=3650 - 29)
        await made.sync()
        fresh = await secret(client)
        assert fresh["ca.crt"] != first["ca.crt"]
        bundle = base64.b64encode(fresh["ca.crt"]).decode()
        assert (await bundles(client))["conversion"] == bundle
        assert (made.issued, made.loaded, made.injected) == (3, 3, 4)


async def test_the_private_key_is_not_left_on_disk_after_loading_or_renewal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    async with cluster() as client:
        clock = Clock()
        made = rotator(client, clock)
        await made.sync()
        clock.now = START + datetime.timedelta(days=336)
        await made.sync()
        assert made.loaded == 2
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("spoil", "reason"), [
    (lambda d: {**d, "tls.crt": b"not a pem"}, "the Secret's certificate cannot be read"),
    (lambda d: {**d, "ca.key": d["tls.key"]}, "the Secret's CA key does not match its CA"),
    (lambda d: {k: v for k, v in d.items() if k != "tls.key"}, "the Secret holds no certificate yet"),
])
async def test_a_spoilt_secret_is_issued_anew_with_the_reason_logged(
    spoil: Any, reason: str, caplog: pytest.LogCaptureFixture,
) -> None:
    async with cluster() as client:
        await rotator(client, Clock()).sync()
        secrets = await client.resource("v1", "Secret")
        obj = await client.get(secrets, f"{SERVICE}-cert", namespace=NAMESPACE)
        spoilt = spoil(await secret(client))
        await client.update(secrets, {**obj, "data": {k: base64.b64encode(v).decode() for k, v in spoilt.items()}},
                            namespace=NAMESPACE)
        made = rotator(client, Clock())
        with caplog.at_level("INFO", logger="engine.kube.webhooks"):
            await made.sync()
        assert made.issued == 1
        assert f"webhook certificate issued for {HOSTS[0]} ({reason})" in caplog.messages
        data = await secret(client)
        x509.load_pem_x509_certificate(data["tls.crt"]).verify_directly_issued_by(
            x509.load_pem_x509_certificate(data["ca.crt"]))


async def test_a_certificate_for_another_service_is_issued_anew_for_this_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with cluster() as client:
        other = CertRotator(client, "old-name", NAMESPACE, WebhookCertificates(server_context()),
                            secret=f"{SERVICE}-cert", now=Clock())
        await other.sync()
        made = rotator(client, Clock())
        with caplog.at_level("INFO", logger="engine.kube.webhooks"):
            await made.sync()
        assert f"webhook certificate issued for {HOSTS[0]} (the certificate does not name {', '.join(HOSTS)})" \
            in caplog.messages
        assert _names((await secret(client))["tls.crt"]) == HOSTS


async def test_replicas_racing_on_an_empty_secret_issue_once_and_serve_the_same_certificate() -> None:
    async with cluster() as client:
        replicas = [rotator(client, Clock()) for _ in range(3)]
        async with trio.open_nursery() as nursery:
            for made in replicas:
                nursery.start_soon(made.sync)
        assert sum(made.issued for made in replicas) == 1
        data = await secret(client)
        assert all(made.certificates.ca_bundle == data["ca.crt"] for made in replicas)
        assert {made._current for made in replicas} == {(data["tls.crt"], data["tls.key"], data["ca.crt"])}


async def test_a_secret_that_cannot_be_written_is_one_line_naming_it() -> None:
    async with cluster() as client:
        made = CertRotator(client, SERVICE, "nowhere", WebhookCertificates(server_context()), now=Clock())
        with pytest.raises(KubeError) as raised:
            await made.sync()
        message = str(raised.value)
        assert message.startswith(f"cannot write the webhook certificate to Secret nowhere/{SERVICE}-cert: ")
        assert "\n" not in message


async def test_run_retries_until_the_first_sync_succeeds_then_checks_every_interval(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
) -> None:
    async with cluster() as client:
        made = CertRotator(client, SERVICE, "later", WebhookCertificates(server_context()), now=Clock(),
                           check_interval=60.0)
        async with trio.open_nursery() as nursery:
            async def create_namespace_later() -> None:
                await trio.sleep(5)
                await client.create(await client.resource("v1", "Namespace"),
                                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}})
            nursery.start_soon(create_namespace_later)
            started = trio.current_time()
            await nursery.start(made.run)
            assert 5 <= trio.current_time() - started <= 8
            assert made.issued == 1
            errors = [r for r in caplog.records if r.levelname == "ERROR"]
            assert errors and all("retrying in" in r.getMessage() for r in errors)
            secrets = await client.resource("v1", "Secret")
            await client.delete(secrets, f"{SERVICE}-cert", namespace="later")
            await trio.sleep(61)
            assert made.issued == 2
            nursery.cancel_scope.cancel()


def test_provisioning_needs_only_its_own_objects() -> None:
    rules = CertProvisioning(SERVICE, NAMESPACE, "engine-widgets").rules(WEBHOOKS)
    assert [(r.group, r.resource, r.verbs, r.resource_names, r.namespace) for r in rules] == [
        ("", "secrets", ("get", "update"), (f"{SERVICE}-cert",), NAMESPACE),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", ("get", "update"), ("engine-widgets",),
         None),
        ("apiextensions.k8s.io", "customresourcedefinitions", ("get", "update"), ("widgets.test.dev",), None),
    ]
