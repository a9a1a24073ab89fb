from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from engine.apiserver import ApiServer


def admin_headers(api: ApiServer) -> dict[str, str]:
    """The credential of the server's kubeconfig user, for raw HTTP clients."""
    return {"Authorization": f"Bearer {api.admin_token}"}


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(seed=1) as server:
        yield server


@pytest.fixture
async def client(api: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    with trio.fail_after(30):
        async with httpx.AsyncClient(base_url=api.url, timeout=10, headers=admin_headers(api)) as c:
            yield c


def cm(name: str, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    body.update(extra)
    return body


CM = "/api/v1/namespaces/default/configmaps"
