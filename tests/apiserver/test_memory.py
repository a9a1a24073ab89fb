"""The in-memory transport: same HTTP/1.1 bytes, no sockets, deterministic under MockClock."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer

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


async def test_a_stopped_server_refuses_new_memory_connections(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        transport = api.memory_transport()
    async with httpx.AsyncClient(transport=transport, base_url=api.url) as client:
        with pytest.raises(httpx.ConnectError, match=r"^the embedded API server is not running: the server has stopped$"):
            await client.get(CM)


async def test_bookmarks_and_timeouts_follow_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False, bookmark_interval=30) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            start = trio.current_time()
            params = {"watch": "1", "resourceVersion": "1", "allowWatchBookmarks": "1", "timeoutSeconds": "100"}
            async with client.stream("GET", CM, params=params) as r:
                events = [(trio.current_time() - start, json.loads(line)["type"]) async for line in r.aiter_lines() if line]
            assert events == [(30, "BOOKMARK"), (60, "BOOKMARK"), (90, "BOOKMARK"), (98, "BOOKMARK")]
            assert trio.current_time() - start == 100


async def test_same_seed_same_objects(autojump_clock: trio.testing.MockClock) -> None:
    objects = []
    for _ in range(2):
        start = trio.current_time()
        async with ApiServer(listen=False, seed=42, wall_clock=lambda start=start: 1e9 + trio.current_time() - start) as api:
            async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
                await trio.sleep(61)
                objects.append((await client.post(CM, json={"metadata": {"generateName": "x-"}})).json())
    assert objects[0] == objects[1]
    assert objects[0]["metadata"]["creationTimestamp"] == "2001-09-09T01:47:41Z"


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


async def run_informer_system(seed: int, direct: bool = False) -> list[tuple[float, str, str]]:
    """A miniature list/watch informer against the server, fully inside one trio run (through
    the direct transport with ``direct``)."""
    log: list[tuple[float, str, str]] = []
    start = trio.current_time()
    async with ApiServer(listen=False, seed=seed, bookmark_interval=5) as api:
        transport = api.direct_transport if direct else api.memory_transport
        client = httpx.AsyncClient(
            transport=transport(), base_url=api.url, timeout=None, headers={"user-agent": "informer-a/1"}
        )
        writer = httpx.AsyncClient(transport=transport(), base_url=api.url, timeout=None)
        api.faults.expire_next_watch(client="informer-a")
        done = trio.Event()

        async def informer() -> None:
            cache: dict[str, str] = {}
            while not done.is_set():
                listing = (await client.get(CM)).json()
                cache = {i["metadata"]["name"]: i["metadata"]["uid"] for i in listing["items"]}
                rv = listing["metadata"]["resourceVersion"]
                log.append((trio.current_time() - start, "LIST", ",".join(sorted(cache))))
                params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "1", "timeoutSeconds": "12"}
                async with client.stream("GET", CM, params=params) as r:
                    async for line in r.aiter_lines():
                        event = json.loads(line)
                        obj = event["object"]
                        name = obj["metadata"].get("name", str(obj.get("code", "")))
                        log.append((trio.current_time() - start, event["type"], name))
                        if event["type"] == "ERROR":
                            break
                        if event["type"] == "ADDED":
                            cache[obj["metadata"]["name"]] = obj["metadata"]["uid"]
                        if event["type"] == "BOOKMARK" and len(cache) == 3:
                            done.set()
                            break

        async with trio.open_nursery() as nursery:
            nursery.start_soon(informer)
            for i in range(3):
                await trio.sleep(1)
                await writer.post(CM, json=cm(f"obj{i}"))
            await done.wait()
        await client.aclose()
        await writer.aclose()
    return log


@pytest.mark.parametrize("direct", [False, True], ids=["memory", "direct"])
async def test_whole_system_is_deterministic_under_mock_clock(autojump_clock: trio.testing.MockClock, direct: bool) -> None:
    first = await run_informer_system(seed=7, direct=direct)
    assert first == [
        (0.0, "LIST", ""),
        (0.0, "ERROR", "410"),
        (0.0, "LIST", ""),
        (1.0, "ADDED", "obj0"),
        (2.0, "ADDED", "obj1"),
        (3.0, "ADDED", "obj2"),
        (5.0, "BOOKMARK", ""),
    ]
    assert await run_informer_system(seed=7, direct=direct) == first



# ----- the direct transport: the same answers without HTTP/1.1 bytes -----


async def _exchange(api: ApiServer, transport: httpx.AsyncBaseTransport) -> list[tuple[int, str | None, object]]:
    answers: list[tuple[int, str | None, object]] = []
    async with httpx.AsyncClient(transport=transport, base_url=api.url) as client:
        for response in [
            await client.post(CM, json=cm("a")),
            await client.post(CM, json=cm("a")),
            await client.get(f"{CM}/a"),
            await client.patch(f"{CM}/a", json={"data": {"k": "v"}}, headers={"content-type": "application/merge-patch+json"}),
            await client.get(CM, params={"labelSelector": "x=y"}),
            await client.head(f"{CM}/a"),
            await client.delete(f"{CM}/a"),
            await client.get(f"{CM}/a"),
        ]:
            answers.append((response.status_code, response.headers.get("content-type"), response.content and response.json()))
    return answers


async def test_the_direct_transport_answers_as_the_memory_transport_does(autojump_clock: trio.testing.MockClock) -> None:
    answers = []
    for direct in (False, True):
        start = trio.current_time()
        async with ApiServer(listen=False, seed=5, wall_clock=lambda start=start: 1e9 + trio.current_time() - start) as api:
            answers.append(await _exchange(api, api.direct_transport() if direct else api.memory_transport()))
    assert [a[0] for a in answers[1]] == [201, 409, 200, 200, 200, 405, 200, 404]
    assert answers[1] == answers[0]


async def test_a_stopped_server_refuses_direct_requests(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        transport = api.direct_transport()
    async with httpx.AsyncClient(transport=transport, base_url=api.url) as client:
        with pytest.raises(httpx.ConnectError, match=r"^the embedded API server is not running: the server has stopped$"):
            await client.get(CM)


async def test_a_direct_request_the_client_gave_up_on_is_still_answered(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        api.faults.add_latency(5, count=1)
        async with httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url, timeout=1) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(CM, json=cm("late"))
            with trio.move_on_after(1):
                await client.get(CM)  # not delayed: the fault was for one request
            await trio.sleep(5)
            assert (await client.get(f"{CM}/late")).status_code == 200


async def test_direct_watches_end_when_closed_cut_or_the_server_stops(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        async with ApiServer(listen=False, bookmark_interval=30) as api:
            client = httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url, timeout=None)
            async with client.stream("GET", CM, params={"watch": "1", "allowWatchBookmarks": "1"}) as r:
                lines = r.aiter_lines()
                await client.post(CM, json=cm("w"))
                assert json.loads(await lines.__anext__())["type"] == "ADDED"
            await trio.sleep(0)
            assert not api.store.subscriptions()  # closing the response ended the server's stream

            cut, ended = trio.Event(), trio.Event()

            async def watch(done: trio.Event) -> None:
                with pytest.raises(httpx.RemoteProtocolError):
                    async with client.stream("GET", CM, params={"watch": "1"}) as r:
                        async for _ in r.aiter_lines():
                            pass
                done.set()

            nursery.start_soon(watch, cut)
            while not api.store.subscriptions():
                await trio.sleep(0)
            assert api.faults.drop_watches(abrupt=True) == 1
            with trio.fail_after(1):
                await cut.wait()
            nursery.start_soon(watch, ended)
            while not api.store.subscriptions():
                await trio.sleep(0)
        with trio.fail_after(1):
            await ended.wait()
        await client.aclose()
