"""HTTPS mode: a generated CA, and client-certificate authentication."""

from __future__ import annotations

import base64
import ssl

import httpx
import pytest
import trio

from engine.apiserver import ApiServer

pytest.importorskip("trustme")


def context(api: ApiServer, *, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    config = api.kubeconfig
    ctx.load_verify_locations(cadata=base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode())
    if with_cert:
        user = config["users"][0]["user"]
        assert "client-certificate-data" in user and "client-key-data" in user
        pems = api.client_cert_pem
        assert pems is not None
        import os
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
            open(cert, "wb").write(pems[0])
            open(key, "wb").write(pems[1])
            ctx.load_cert_chain(cert, key)
    return ctx


async def test_tls_with_client_certificate() -> None:
    with trio.fail_after(20):
        async with ApiServer(tls=True) as api:
            assert api.url.startswith("https://127.0.0.1:")
            async with httpx.AsyncClient(base_url=api.url, verify=context(api, with_cert=True)) as client:
                r = await client.get("/api/v1/namespaces")
                assert r.status_code == 200
                r = await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "x"}})
                assert r.status_code == 201
                async with client.stream("GET", "/api/v1/namespaces/default/configmaps", params={"watch": "1"}) as w:
                    async for line in w.aiter_lines():
                        assert '"ADDED"' in line
                        break


async def test_tls_clients_without_certificate_are_anonymous() -> None:
    with trio.fail_after(20):
        async with ApiServer(tls=True) as api:
            async with httpx.AsyncClient(base_url=api.url, verify=context(api, with_cert=False)) as client:
                r = await client.get("/api/v1/namespaces")
                assert r.status_code == 403
                assert r.json()["message"] == (
                    'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" '
                    "at the cluster scope"
                )
                r = await client.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {api.admin_token}"})
                assert r.status_code == 200, "the admin token is accepted over HTTPS too"
            async with httpx.AsyncClient(base_url=api.url) as untrusting:
                with pytest.raises(httpx.ConnectError):
                    await untrusting.get("/version")


def test_tls_needs_sockets() -> None:
    with pytest.raises(ValueError, match=r"^tls=True needs listen=True: the memory transport is plain HTTP$"):
        ApiServer(tls=True, listen=False)

