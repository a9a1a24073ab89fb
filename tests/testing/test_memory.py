"""The in-memory transport: same HTTP/1.1 bytes, no sockets, deterministic under MockClock."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

from engine.testing import ApiServer, ApiServerError

from .conftest import CM, cm


async def test_memory_transport_keeps_connections_alive(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False, seed=3) as api:
        assert api.url == "http://embedded-apiserver.invalid"
        transport = api.memory_transport()
        async with httpx.AsyncClient(transport=transport, base_url=api.url) as client:
            for i in range(5):
                assert (await client.post(CM, json=cm(f"c{i}"))).status_code == 201
            assert len((await client.get(CM)).json()["items"]) == 5
            pool = transport._pool
            assert len(pool.connections) == 1


async def test_bookmarks_and_timeouts_follow_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False, bookmark_interval=30) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            start = trio.current_time()
            params = {"watch": "1", "resourceVersion": "1", "allowWatchBookmarks": "1", "timeoutSeconds": "100"}
            async with client.stream("GET", CM, params=params) as r:
                events = [(trio.current_time() - start, json.loads(line)["type"]) async for line in r.aiter_lines() if line]
            assert events == [(30, "BOOKMARK"), (60, "BOOKMARK"), (90, "BOOKMARK")]
            assert trio.current_time() - start == 100


async def test_same_seed_same_uids(autojump_clock: trio.testing.MockClock) -> None:
    uids = []
    for _ in range(2):
        async with ApiServer(listen=False, seed=42) as api:
            async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
                uids.append((await client.post(CM, json=cm("x"))).json()["metadata"]["uid"])
    assert uids[0] == uids[1]


async def test_closing_the_server_ends_memory_watches(autojump_clock: trio.testing.MockClock) -> None:
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        async with ApiServer(listen=False) as api:
            client = httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None)

            async def watch() -> None:
                with pytest.raises(httpx.HTTPError):
                    async with client.stream("GET", CM, params={"watch": "1"}) as r:
                        async for _ in r.aiter_lines():
                            pass
                ended.set()

            nursery.start_soon(watch)
            while not api.store.subscriptions():
                await trio.sleep(0)
        with trio.fail_after(1):
            await ended.wait()
        await client.aclose()


async def test_lifecycle_errors() -> None:
    api = ApiServer(listen=False)
    with pytest.raises(ApiServerError, match=r"^the ApiServer is unopened: it must be running \(inside `async with`\)$"):
        api.memory_transport()
    async with api:
        pass
    with pytest.raises(ApiServerError, match=r"^an ApiServer can be started only once$"):
        async with api:
            pass
