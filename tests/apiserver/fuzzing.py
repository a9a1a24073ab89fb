"""Sending :class:`~tests.apiserver.hostile.HostileRequest` objects, and the well-formed
requests interleaved with them, shared by the fuzz tests and ``bench/apiserver_fuzz.py``."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio

from .hostile import CR_PATH, CRD, NAMESPACE, WELL_FORMED, HostileRequest

__all__ = ["seed_objects", "send", "well_formed", "Answer"]

Answer = tuple[int, bytes, str]
"""Status, body (at most the first 64 KiB of a stream) and content type."""

_SAFE = "/%:@!$&'()*+,;=~.-_"


def target(request: HostileRequest) -> bytes:
    """The request target, with only non-ASCII and unsafe characters percent-encoded."""
    path = urllib.parse.quote(request.path, safe=_SAFE)
    if not path.startswith("/"):
        path = "/" + path
    if request.query:
        path += "?" + urllib.parse.urlencode(request.query)
    return path.encode("ascii")


async def _chunks(chunks: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def send(client: httpx.AsyncClient, request: HostileRequest, *, admin_token: str | None, timeout: float = 60.0) -> Answer:
    """Send ``request`` and read its answer; a watch's stream is read for its first bytes only.

    Raises ``trio.TooSlowError`` when no answer comes within ``timeout`` (trio time).
    """
    headers = [(name.encode(), value.encode()) for name, value in request.headers]
    if request.credentials == "admin" and admin_token is not None:
        headers.append((b"authorization", f"Bearer {admin_token}".encode()))
    elif request.credentials == "bogus":
        headers.append((b"authorization", b"Bearer not-a-token-this-server-issued"))
    url = httpx.URL(str(client.base_url).rstrip("/"), raw_path=target(request))
    content: Any = _chunks(request.chunks) if request.chunks is not None else request.body
    with trio.fail_after(timeout):
        built = client.build_request(request.method, url, headers=headers, content=content)
        response = await client.send(built, stream=True)
        try:
            body = b""
            ctype = response.headers.get("content-type", "")
            if response.status_code == 200 and request.watch:
                with trio.move_on_after(0.5):
                    async for piece in response.aiter_raw():
                        body += piece
                        break
            else:
                async for piece in response.aiter_raw():
                    body += piece
        finally:
            await response.aclose()
    return response.status_code, body, ctype


async def seed_objects(client: httpx.AsyncClient) -> None:
    """Create the namespace, CRD and objects the hostile requests name."""
    answers = [
        await client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        await client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WELL_FORMED}}),
        await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD),
    ]
    with trio.fail_after(30):
        while (await client.get(CR_PATH)).status_code != 200:
            await trio.sleep(0.05)
    answers += [
        await client.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                          json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "finalizers": ["x/y"]}, "data": {"k": "v"}}),
        await client.post(CR_PATH, json={"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                                         "spec": {"replicas": 1, "size": "s", "items": ["a"]}}),
        await client.post(f"/api/v1/namespaces/{NAMESPACE}/services",
                          json={"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cm1"},
                                "spec": {"ports": [{"name": "a", "port": 80}]}}),
        await client.post(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                          json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "w1"}}),
    ]
    for answer in answers:
        assert answer.status_code == 201, answer.text


async def well_formed(client: httpx.AsyncClient, serial: int) -> list[str]:
    """Create, read, list, patch and delete one ConfigMap; the problems with the answers."""
    name = f"ok-{serial}"
    path = f"/api/v1/namespaces/{WELL_FORMED}/configmaps"
    problems = []
    created = await client.post(path, json={"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": name, "labels": {"ok": str(serial)}}, "data": {"n": str(serial)}})
    if created.status_code != 201:
        problems.append(f"create {name}: {created.status_code} {created.text[:200]}")
        return problems
    got = await client.get(f"{path}/{name}")
    if got.status_code != 200 or got.json()["data"] != {"n": str(serial)}:
        problems.append(f"get {name}: {got.status_code} {got.text[:200]}")
    listed = await client.get(path, params={"labelSelector": f"ok={serial}"})
    if listed.status_code != 200 or [i["metadata"]["name"] for i in listed.json()["items"]] != [name]:
        problems.append(f"list ok={serial}: {listed.status_code} {listed.text[:200]}")
    patched = await client.patch(f"{path}/{name}", json={"data": {"m": "1"}},
                                 headers={"content-type": "application/merge-patch+json"})
    if patched.status_code != 200 or patched.json()["data"] != {"n": str(serial), "m": "1"}:
        problems.append(f"patch {name}: {patched.status_code} {patched.text[:200]}")
    deleted = await client.delete(f"{path}/{name}")
    if deleted.status_code != 200:
        problems.append(f"delete {name}: {deleted.status_code} {deleted.text[:200]}")
    return problems
