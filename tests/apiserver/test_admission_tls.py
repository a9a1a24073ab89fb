"""Admission webhooks over real HTTPS on loopback: the ``caBundle`` check, ``service``
references resolved through Endpoints, refused connections."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx
import pytest
import trio
import trio.testing
import trustme

from engine.apiserver import ApiServer

VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
CM = "/api/v1/namespaces/default/configmaps"


class TlsHook:
    """An HTTPS webhook denying every request with the path it was called on."""

    def __init__(self, ca: trustme.CA) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "hook.default.svc").configure_cert(self.context)
        self.port = 0
        self.hosts: list[str] = []
        self.delay = 0.0
        self.received = trio.Event()
        self.hang_up = False

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        ssl_listeners = [trio.SSLListener(listener, self.context, https_compatible=True) for listener in listeners]
        task_status.started()
        await trio.serve_listeners(self._handle, ssl_listeners)

    async def _handle(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            await self._converse(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass

    async def _converse(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        conn = h11.Connection(h11.SERVER)
        body, target = b"", ""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(bytes(data))
            elif isinstance(event, h11.Request):
                target = event.target.decode()
                self.hosts.extend(v.decode() for k, v in event.headers if k == b"host")
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self.received.set()
                if self.hang_up:
                    return
                await trio.sleep(self.delay)
                uid = json.loads(body)["request"]["uid"]
                answer = json.dumps({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": False, "status": {"message": f"called on {target}"}},
                }).encode()
                headers = [("content-type", "application/json"), ("content-length", str(len(answer)))]
                await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)))
                await stream.send_all(conn.send(h11.Data(data=answer)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
                return
            elif isinstance(event, h11.ConnectionClosed):
                return


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_hook(ca: trustme.CA, nursery: trio.Nursery) -> TlsHook:
    hook = TlsHook(ca)
    await nursery.start(hook.serve)
    return hook


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url, timeout=30) as c:
            yield c


def bundle(ca: trustme.CA) -> str:
    return base64.b64encode(ca.cert_pem.bytes()).decode()


async def register(client: httpx.AsyncClient, client_config: dict[str, Any], policy: str = "Fail", timeout: int = 5) -> None:
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v"},
        "webhooks": [{
            "name": "v.example.com",
            "clientConfig": client_config,
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": policy,
            "timeoutSeconds": timeout,
        }],
    }
    response = await client.post(VWC, json=body)
    assert response.status_code == 201, response.text


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


async def test_url_with_ca_bundle(client: httpx.AsyncClient, tls_hook: TlsHook, ca: trustme.CA) -> None:
    await register(client, {"url": f"https://127.0.0.1:{tls_hook.port}/check", "caBundle": bundle(ca)})
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 400
    assert response.json()["message"] == 'admission webhook "v.example.com" denied the request: called on /check?timeout=5s'


async def test_unknown_authority(client: httpx.AsyncClient, tls_hook: TlsHook) -> None:
    await register(client, {"url": f"https://127.0.0.1:{tls_hook.port}/check", "caBundle": bundle(trustme.CA())})
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 500
    assert response.json()["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: '
        f'Post "https://127.0.0.1:{tls_hook.port}/check?timeout=5s": '
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    )


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_connection_refused(client: httpx.AsyncClient, policy: str) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await register(client, {"url": f"https://127.0.0.1:{port}/check"}, policy)
    response = await client.post(CM, json=cm("a"))
    if policy == "Ignore":
        assert response.status_code == 201
        return
    assert response.status_code == 500
    assert response.json()["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: '
        f'Post "https://127.0.0.1:{port}/check?timeout=5s": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )


async def test_service_reference_through_endpoints(client: httpx.AsyncClient, tls_hook: TlsHook, ca: trustme.CA) -> None:
    service = {"name": "hook", "namespace": "default", "path": "/svc"}
    await register(client, {"service": service, "caBundle": bundle(ca)})
    prefix = 'Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: Post "https://hook.default.svc:443/svc?timeout=5s": '
    assert (await client.post(CM, json=cm("a"))).json()["message"] == prefix + 'service "hook" not found'
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook"}, "spec": {"ports": [{"port": 443, "targetPort": 9443}]}}
    assert (await client.post("/api/v1/namespaces/default/services", json=svc)).status_code == 201
    assert (await client.post(CM, json=cm("a"))).json()["message"] == prefix + 'endpoints "hook" not found'
    endpoints = {
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hook"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": tls_hook.port}]}],
    }
    assert (await client.post("/api/v1/namespaces/default/endpoints", json=endpoints)).status_code == 201
    response = await client.post(CM, json=cm("a"))
    assert response.json()["message"] == 'admission webhook "v.example.com" denied the request: called on /svc?timeout=5s'
    assert tls_hook.hosts == ["hook.default.svc:443"]


async def test_a_slow_answer_within_timeout_seconds(
    client: httpx.AsyncClient, ca: trustme.CA, nursery: trio.Nursery, mock_clock: trio.testing.MockClock
) -> None:
    # Virtual time moves only when the test says: the answer comes 6 s after the request, past
    # httpx's default 5 s read timeout, within the configuration's 10 s.
    hook = TlsHook(ca)
    hook.delay = 6
    await nursery.start(hook.serve)
    await register(client, {"url": f"https://127.0.0.1:{hook.port}/slow", "caBundle": bundle(ca)}, timeout=10)
    answers: list[httpx.Response] = []
    done = trio.Event()

    async def create() -> None:
        answers.append(await client.post(CM, json=cm("a")))
        done.set()

    nursery.start_soon(create)
    await hook.received.wait()
    await trio.testing.wait_all_tasks_blocked()
    mock_clock.jump(5.5)
    await trio.testing.wait_all_tasks_blocked()
    mock_clock.jump(1)
    await done.wait()
    assert answers[0].json()["message"] == 'admission webhook "v.example.com" denied the request: called on /slow?timeout=10s'


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_connection_closed_before_the_answer(client: httpx.AsyncClient, tls_hook: TlsHook, ca: trustme.CA, policy: str) -> None:
    tls_hook.hang_up = True
    await register(client, {"url": f"https://127.0.0.1:{tls_hook.port}/x", "caBundle": bundle(ca)}, policy)
    response = await client.post(CM, json=cm("a"))
    if policy == "Ignore":
        assert response.status_code == 201
        return
    assert response.json()["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: '
        f'Post "https://127.0.0.1:{tls_hook.port}/x?timeout=5s": EOF'
    )
