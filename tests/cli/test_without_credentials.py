"""No one in without credentials: every server the project starts, probed with curl as an
outsider would probe it (no kubeconfig, no token; ``-k`` where it is HTTPS).

For each API server (``ApiServer`` over plain HTTP and over TLS, ``python -m engine apiserver``
with its default HTTPS and with ``--plain-http``, ``python -m engine run --embedded``), a
Secret, a ConfigMap and a custom object are created with the kubeconfig's credentials; then
every get, list and watch of them, every write, the fault admin endpoint and discovery answer
401 or 403 without credentials, and no answer carries their data. ``/version``, ``/healthz``,
``/readyz`` and ``/livez`` answer 200, as ``system:public-info-viewer`` lets everyone read them
on a cluster. Discovery (``/api``, ``/apis``, ``/openapi/v3``) is 403 for ``system:anonymous``
here as on real kube-apiserver 1.36.2, which answered (recorded 2026-12-04)::

    GET /api/v1/secrets -> 403 secrets is forbidden: User "system:anonymous" cannot list resource
        "secrets" in API group "" at the cluster scope   (details {"kind": "secrets"})
    GET /api -> 403 forbidden: User "system:anonymous" cannot get path "/api"   (details {})
    GET /version, /healthz, /readyz, /livez -> 200; Authorization: Bearer nope -> 401 Unauthorized

The live stream and dashboard of ``run`` refuse the page and the websocket without their token.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml

from engine.apiserver import ApiServer

from .._e2e import ROOT
from .test_run import _embedded

CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="curl is not installed")

SECRET_VALUE = "s3cr3t-value-nobody-may-read"
CONFIG_VALUE = "configmap-value-nobody-may-read"
CUSTOM_VALUE = "custom-value-nobody-may-read"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


async def curl(base: str, path: str, *, method: str = "GET", body: Any = None,
               headers: tuple[str, ...] = ()) -> tuple[int, str]:
    """``(status, body)`` of one request by curl, with no credentials unless ``headers`` say."""
    assert CURL is not None
    argv = [CURL, "-sk", "--max-time", "3", "-X", method, "-o", "-", "-w", "\n%{http_code}"]
    for header in headers:
        argv += ["-H", header]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    with trio.fail_after(15):
        result = await trio.run_process([*argv, base + path], capture_stdout=True, check=False)
    text, _, code = result.stdout.decode().rpartition("\n")
    return int(code), text


def admin_client(kubeconfig: dict[str, Any], tmp_path: Path) -> httpx.AsyncClient:
    """An httpx client with the kubeconfig's credentials (its CA, client certificate or token)."""
    cluster = kubeconfig["clusters"][0]["cluster"]
    user = kubeconfig["users"][0]["user"]
    headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}
    verify: ssl.SSLContext | bool = True
    if "certificate-authority-data" in cluster:
        verify = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        if "client-certificate-data" in user:
            (tmp_path / "admin.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
            (tmp_path / "admin.key").write_bytes(base64.b64decode(user["client-key-data"]))
            verify.load_cert_chain(tmp_path / "admin.crt", tmp_path / "admin.key")
    return httpx.AsyncClient(base_url=cluster["server"], headers=headers, verify=verify, timeout=10)


async def seed(admin: httpx.AsyncClient) -> None:
    """A Secret, a ConfigMap and a custom object, created with the admin's credentials."""
    secret = {"metadata": {"name": "s"}, "data": {"password": base64.b64encode(SECRET_VALUE.encode()).decode()}}
    assert (await admin.post("/api/v1/namespaces/default/secrets", json=secret)).status_code == 201
    configmap = {"metadata": {"name": "c"}, "data": {"k": CONFIG_VALUE}}
    assert (await admin.post("/api/v1/namespaces/default/configmaps", json=configmap)).status_code == 201
    assert (await admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD)).status_code == 201
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"v": CUSTOM_VALUE}}
    with trio.fail_after(10):
        while (await admin.post(WIDGETS, json=widget)).status_code != 201:
            await trio.sleep(0.05)


async def assert_no_one_gets_in(base: str, admin: httpx.AsyncClient, custom: tuple[str, ...] = ()) -> None:
    """Every resource path is 401/403 without credentials and carries no object data; the
    public endpoints answer; nothing was written."""
    reads = [
        "/api/v1/secrets", "/api/v1/namespaces/default/secrets", "/api/v1/namespaces/default/secrets/s",
        "/api/v1/secrets?watch=true", "/api/v1/namespaces/default/secrets?watch=1&resourceVersion=0",
        "/api/v1/watch/namespaces/default/secrets", "/api/v1/namespaces/default/secrets?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        "/api/v1/configmaps", "/api/v1/namespaces/default/configmaps/c", "/api/v1/configmaps?watch=true",
        "/apis/example.com/v1/widgets", f"{WIDGETS}/w", "/apis/example.com/v1/widgets?watch=true",
        "/api/v1/namespaces", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "/_faults",
        "/api", "/apis", "/api/v1", "/apis/example.com/v1", "/openapi/v2", "/openapi/v3", "/healthz/ping",
        *custom,
    ]
    writes: list[tuple[str, str, Any]] = [
        ("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "intruder"}}),
        ("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "intruder"}}),
        ("POST", WIDGETS, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "intruder"}}),
        ("PUT", "/api/v1/namespaces/default/configmaps/c", {"metadata": {"name": "c"}, "data": {"k": "changed"}}),
        ("PATCH", f"{WIDGETS}/w", {"spec": {"v": "changed"}}),
        ("DELETE", "/api/v1/namespaces/default/secrets/s", None),
        ("DELETE", "/api/v1/namespaces/default/configmaps", None),
        ("POST", "/_faults", {"type": "fail", "status": 500}),
        ("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", {"spec": {}}),
    ]
    answers: dict[str, tuple[int, str]] = {}
    for path in reads:
        answers[f"GET {path}"] = await curl(base, path)
    for method, path, body in writes:
        extra = ("Content-Type: application/merge-patch+json",) if method == "PATCH" else ()
        answers[f"{method} {path}"] = await curl(base, path, method=method, body=body, headers=extra)
    let_in = {what: code for what, (code, _) in answers.items() if code not in (401, 403)}
    assert not let_in, f"answered without credentials: {let_in}"
    for what, (_, text) in answers.items():
        for value in (SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode(), CONFIG_VALUE, CUSTOM_VALUE):
            assert value not in text, f"{what} leaked {value}"
    code, text = await curl(base, "/api/v1/secrets")
    assert (code, json.loads(text)) == (403, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'secrets is forbidden: User "system:anonymous" cannot list resource "secrets" in API group "" '
                   "at the cluster scope",
        "reason": "Forbidden", "details": {"kind": "secrets"}, "code": 403,
    })
    code, text = await curl(base, "/api")
    assert (code, json.loads(text)["message"], json.loads(text)["details"]) == (
        403, 'forbidden: User "system:anonymous" cannot get path "/api"', {})
    assert (await curl(base, "/version", headers=("Authorization: Bearer nope",)))[0] == 401
    for path in ("/version", "/healthz", "/readyz", "/livez"):
        assert (await curl(base, path))[0] == 200, path
    secret = (await admin.get("/api/v1/namespaces/default/secrets/s")).json()
    assert base64.b64decode(secret["data"]["password"]).decode() == SECRET_VALUE
    assert (await admin.get("/api/v1/namespaces/default/configmaps/c")).json()["data"] == {"k": CONFIG_VALUE}
    assert (await admin.get(f"{WIDGETS}/w")).json()["spec"] == {"v": CUSTOM_VALUE}
    assert (await admin.get("/api/v1/namespaces/default/configmaps/intruder")).status_code == 404
    assert (await admin.get("/_faults")).json() == {"faults": []}


@pytest.mark.parametrize("tls", [False, True], ids=["plain-http", "https"])
async def test_the_embedded_api_server_lets_no_one_in(tmp_path: Path, tls: bool) -> None:
    async with ApiServer(tls=tls) as api, admin_client(api.kubeconfig, tmp_path) as admin:
        await seed(admin)
        await assert_no_one_gets_in(api.url, admin)


@asynccontextmanager
async def cli_apiserver(tmp_path: Path, *args: str) -> AsyncIterator[dict[str, Any]]:
    """``python -m engine apiserver`` in a subprocess; yields its kubeconfig."""
    path = tmp_path / "kubeconfig"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "apiserver", "--write-kubeconfig", str(path), *args],
        stdout=subprocess.PIPE, cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        out = b""
        with trio.fail_after(30):
            while b"kubeconfig written to" not in out:
                chunk = await proc.stdout.receive_some()
                assert chunk, out
                out += chunk
        yield yaml.safe_load(path.read_text())
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize("args", [(), ("--plain-http",)], ids=["default-https", "plain-http"])
async def test_python_m_engine_apiserver_lets_no_one_in(tmp_path: Path, args: tuple[str, ...]) -> None:
    async with cli_apiserver(tmp_path, *args) as kubeconfig, admin_client(kubeconfig, tmp_path) as admin:
        server = kubeconfig["clusters"][0]["cluster"]["server"]
        assert server.startswith("http://" if args else "https://")
        await seed(admin)
        await assert_no_one_gets_in(server, admin)


async def test_run_embedded_lets_no_one_into_the_api_or_the_live_dashboard(tmp_path: Path) -> None:
    async with _embedded(tmp_path, "--plugin", "bundles", "--progress", "never", "--webhook-bind-address", "0",
                         "--live-bind-address", "127.0.0.1:0") as run:
        kubeconfig = yaml.safe_load((tmp_path / "cache" / "engine" / "embedded.kubeconfig").read_text())
        async with admin_client(kubeconfig, tmp_path) as admin:
            await seed(admin)
            bundles = "/apis/bundles.engine.dev/v1alpha1"
            assert (await admin.get(f"{bundles}/namespaces/demo/bundles/infra")).status_code == 200
            await assert_no_one_gets_in(kubeconfig["clusters"][0]["cluster"]["server"], admin, (
                f"{bundles}/bundles", f"{bundles}/namespaces/demo/bundles/infra", f"{bundles}/bundles?watch=true",
                f"{bundles}/sources", "/apis/coordination.k8s.io/v1/leases", "/api/v1/events",
            ))
        [dashboard] = [line.split()[2] for line in run.lines if line.startswith("dashboard at ")]
        page, _, token = dashboard.partition("?token=")
        assert token
        live = page.replace("http://", "ws://") + "live"
        upgrade = ("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
        refused = {
            "page": await curl(page, ""), "page, wrong token": await curl(page, "?token=wrong"),
            "page, wrong bearer": await curl(page, "", headers=("Authorization: Bearer wrong",)),
            "stream": await curl(live.replace("ws://", "http://"), "", headers=upgrade),
            "stream, wrong token": await curl(live.replace("ws://", "http://"), "?token=wrong", headers=upgrade),
        }
        assert {what: code for what, (code, _) in refused.items()} == dict.fromkeys(refused, 401)
        assert all("infra" not in text and "demo" not in text for _, text in refused.values())
        assert (await curl(page, f"?token={token}"))[0] == 200, "the printed URL opens the dashboard"
        assert (await curl(page, "dashboard.js"))[0] == 200, "the script is public package data"
        run.proc.send_signal(signal.SIGTERM)
    assert token not in run.err.decode()
