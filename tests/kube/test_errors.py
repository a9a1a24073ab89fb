"""What the client says when the API server cannot be reached or its certificate fails
verification (engine.kube._client._errors.transport_error), over real sockets."""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import re
import socket
import ssl
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from engine import Manager
from engine.apiserver import ApiServer
from engine.kube import Client, Config, PluginError, RetryPolicy, TLSVerificationError, TransportError, run_plugins

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)
UNKNOWN_AUTHORITY = "x509: certificate signed by unknown authority"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(server: str, path: Path, cluster: dict[str, Any] | None = None) -> Config:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": {"token": "abc.def"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return Config.from_dict(doc, path=path)


async def serve_tls(nursery: trio.Nursery, cert: trustme.LeafCert) -> tuple[int, list[int]]:
    """A loopback TLS server presenting ``cert``; returns its port and a list that grows by one
    per connection (so a test can tell whether the client tried again)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    connections: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        connections.append(1)
        with contextlib.suppress(trio.BrokenResourceError):
            await trio.SSLStream(stream, context, server_side=True).do_handshake()

    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1], connections


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("case", "reason", "source"),
    [
        ("unknown-ca-data", UNKNOWN_AUTHORITY, 'certificate-authority-data of cluster "c" in kubeconfig {kubeconfig}'),
        ("unknown-ca-file", UNKNOWN_AUTHORITY, 'certificate-authority {ca_file} of cluster "c" in kubeconfig {kubeconfig}'),
        ("system-store", UNKNOWN_AUTHORITY, "the system trust store"),
        ("hostname", "x509: certificate is not valid for 127.0.0.1", 'certificate-authority-data of cluster "c" in kubeconfig {kubeconfig}'),
        ("expired", "x509: certificate has expired or is not yet valid", 'certificate-authority-data of cluster "c" in kubeconfig {kubeconfig}'),
    ],
)
async def test_a_certificate_that_fails_verification_is_named_and_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, reason: str, source: str
) -> None:
    caplog.set_level(logging.WARNING, "engine.kube.client")
    ca1, ca2 = trustme.CA(), trustme.CA()
    if case == "hostname":
        cert = ca1.issue_cert("kube.other.example")
    elif case == "expired":
        cert = ca1.issue_cert(
            "127.0.0.1",
            not_before=datetime.datetime(2019, 1, 1, tzinfo=datetime.UTC),
            not_after=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
        )
    else:
        cert = ca1.issue_cert("127.0.0.1")
    trusted = ca2 if case.startswith("unknown") else ca1
    ca_file = tmp_path / "ca.pem"
    trusted.cert_pem.write_to_path(str(ca_file))
    cluster = (
        {} if case == "system-store"
        else {"certificate-authority": str(ca_file)} if case == "unknown-ca-file"
        else {"certificate-authority-data": b64(trusted.cert_pem.bytes())}
    )
    kubeconfig = tmp_path / "kubeconfig"
    async with trio.open_nursery() as nursery:
        port, connections = await serve_tls(nursery, cert)
        async with Client(config(f"https://127.0.0.1:{port}", kubeconfig, cluster), retry=FAST_RETRY) as client:
            with pytest.raises(TLSVerificationError) as info:
                await client.resource("v1", "ConfigMap")
        nursery.cancel_scope.cancel()
    where = source.format(kubeconfig=kubeconfig, ca_file=ca_file)
    assert str(info.value) == (
        f"cannot verify the certificate of the API server at https://127.0.0.1:{port}: {reason} "
        f"(trusted authorities: {where})"
    )
    assert isinstance(info.value, TransportError)
    assert (info.value.server, info.value.request, info.value.ca_source) == (
        f"https://127.0.0.1:{port}", "GET /api/v1", where)
    assert len(connections) == 1, "a certificate that fails verification is not retried"
    assert not [r for r in caplog.records if r.getMessage().startswith("retrying")]


async def test_the_embedded_server_in_tls_mode_is_not_trusted_with_another_ca(tmp_path: Path) -> None:
    async with ApiServer(tls=True) as api:
        doc = api.kubeconfig
        doc["clusters"][0]["cluster"]["certificate-authority-data"] = b64(trustme.CA().cert_pem.bytes())
        async with Client(Config.from_dict(doc, path=tmp_path / "kc"), retry=FAST_RETRY) as client:
            with pytest.raises(TLSVerificationError, match=(
                rf"^cannot verify the certificate of the API server at {re.escape(api.url)}: {UNKNOWN_AUTHORITY} "
                rf'\(trusted authorities: certificate-authority-data of cluster "embedded" in kubeconfig .*/kc\)$'
            )):
                await client.get(await client.resource("v1", "ConfigMap"), "x", namespace="default")


async def test_an_unreachable_server_says_so_with_a_reason_after_retrying(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "engine.kube.client")
    port = free_port()
    async with Client(config(f"https://127.0.0.1:{port}", tmp_path / "kc"), retry=FAST_RETRY) as client:
        with pytest.raises(TransportError) as info:
            await client.resource("v1", "ConfigMap")
    message = f"cannot reach the API server at https://127.0.0.1:{port}: connection refused"
    assert str(info.value) == message
    assert not isinstance(info.value, TLSVerificationError)
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying")]
    assert len(retries) == 2 and all(f"after TransportError: {message}" in r for r in retries)


@pytest.mark.parametrize("strict", [False, True])
async def test_an_unreachable_server_is_not_blamed_on_a_plugin(tmp_path: Path, strict: bool) -> None:
    port = free_port()
    async with Client(config(f"http://127.0.0.1:{port}", tmp_path / "kc"), retry=FAST_RETRY) as client:
        with pytest.raises(TransportError, match=rf"^cannot reach the API server at http://127\.0\.0\.1:{port}: connection refused$"):
            try:
                await run_plugins(client, ["tests.programs.plugins_for_tests:good"],
                                  manager=Manager(handle_signals=False), strict=strict)
            except PluginError as exc:  # pragma: no cover - the failure this test guards against
                pytest.fail(f"blamed on a plugin: {exc}")
