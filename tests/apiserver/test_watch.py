"""Watch semantics over real sockets: replay, selectors, 410, bookmarks, timeouts."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio
import trio.testing

from engine.apiserver import ApiServer

from .conftest import CM, admin_headers, cm


class Watch:
    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines

    async def next(self) -> dict[str, Any]:
        with trio.fail_after(5):
            while True:
                line = await self._lines.__anext__()
                if line.strip():
                    return json.loads(line)  # type: ignore[no-any-return]

    async def rest(self) -> list[dict[str, Any]]:
        events = []
        with trio.fail_after(5):
            async for line in self._lines:
                if line.strip():
                    events.append(json.loads(line))
        return events


async def open_watch(client: httpx.AsyncClient, path: str, stack: Any, **params: str) -> Watch:
    response = await stack.enter_async_context(client.stream("GET", path, params={"watch": "true", **params}))
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    return Watch(response.aiter_lines())


async def test_watch_initial_state_then_live(client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    await client.post(CM, json=cm("before"))
    async with AsyncExitStack() as stack:
        w = await open_watch(client, CM, stack)
        first = await w.next()
        assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "before"
        assert first["object"]["kind"] == "ConfigMap"
        await client.post(CM, json=cm("after"))
        second = await w.next()
        assert second["type"] == "ADDED" and second["object"]["metadata"]["name"] == "after"
        obj = second["object"]
        obj["data"] = {"a": "b"}
        await client.put(f"{CM}/after", json=obj)
        assert (await w.next())["type"] == "MODIFIED"
        await client.delete(f"{CM}/after")
        deleted = await w.next()
        assert deleted["type"] == "DELETED"
        assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])


async def test_watch_replays_from_resource_version(client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    rv = (await client.post(CM, json=cm("one"))).json()["metadata"]["resourceVersion"]
    await client.post(CM, json=cm("two"))
    await client.delete(f"{CM}/one")
    async with AsyncExitStack() as stack:
        w = await open_watch(client, CM, stack, resourceVersion=rv)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in [await w.next(), await w.next()]] == [
            ("ADDED", "two"),
            ("DELETED", "one"),
        ]


async def test_watch_too_old_resource_version_answers_410() -> None:
    async with ApiServer(history_size=3) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        rv = (await client.post(CM, json=cm("a"))).json()["metadata"]["resourceVersion"]
        for i in range(5):
            await client.post(CM, json=cm(f"b{i}"))
        async with client.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
            events = await Watch(r.aiter_lines()).rest()
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"


async def test_watch_label_selector_transitions(client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    rv = (await client.get(CM)).json()["metadata"]["resourceVersion"]
    async with AsyncExitStack() as stack:
        w = await open_watch(client, CM, stack, resourceVersion=rv, labelSelector="app=web")
        await client.post(CM, json=cm("other"))
        obj = (await client.post(CM, json={"metadata": {"name": "x", "labels": {"app": "db"}}})).json()
        obj["metadata"]["labels"]["app"] = "web"
        obj = (await client.put(f"{CM}/x", json=obj)).json()
        added = await w.next()
        assert added["type"] == "ADDED" and added["object"]["metadata"]["name"] == "x"
        obj["metadata"]["labels"]["app"] = "db"
        await client.put(f"{CM}/x", json=obj)
        assert (await w.next())["type"] == "DELETED"


async def test_watch_observers_hear_each_event_as_the_watch_sends_it(api: ApiServer, client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    heard: list[tuple[str, str, str, str]] = []
    api.add_watch_observer(lambda info, type_, obj: heard.append(
        (info.user_agent, info.resource or "", type_, obj["metadata"]["name"])))
    await client.post(CM, json=cm("before", metadata={"name": "before", "labels": {"app": "web"}}))
    async with AsyncExitStack() as stack:
        w = await open_watch(client, CM, stack, labelSelector="app=web")
        await w.next()
        obj = (await client.post(CM, json={"metadata": {"name": "x", "labels": {"app": "web"}}})).json()
        await w.next()
        obj["metadata"]["labels"]["app"] = "db"
        await client.put(f"{CM}/x", json=obj)
        await client.post(CM, json=cm("unseen"))
        await w.next()
    agent = heard[0][0]
    assert heard == [(agent, "configmaps", "ADDED", "before"), (agent, "configmaps", "ADDED", "x"),
                     (agent, "configmaps", "DELETED", "x")]


async def test_watch_single_object_and_namespace_scope(client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    await client.post("/api/v1/namespaces", json={"metadata": {"name": "elsewhere"}})
    rv = (await client.get(CM)).json()["metadata"]["resourceVersion"]
    async with AsyncExitStack() as stack:
        w = await open_watch(client, CM, stack, resourceVersion=rv, fieldSelector="metadata.name=want")
        await client.post("/api/v1/namespaces/elsewhere/configmaps", json=cm("want"))
        await client.post(CM, json=cm("nope"))
        await client.post(CM, json=cm("want"))
        event = await w.next()
        assert event["object"]["metadata"]["namespace"] == "default"
        assert event["object"]["metadata"]["name"] == "want"


async def test_watch_timeout_seconds_ends_stream(client: httpx.AsyncClient) -> None:
    rv = (await client.get(CM)).json()["metadata"]["resourceVersion"]
    with trio.fail_after(5):
        async with client.stream("GET", CM, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "0.2"}) as r:
            assert await Watch(r.aiter_lines()).rest() == []


async def test_bookmarks_are_sent_periodically() -> None:
    async with ApiServer(bookmark_interval=0.05) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        rv = (await client.get(CM)).json()["metadata"]["resourceVersion"]
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with client.stream("GET", CM, params=params) as r:
            w = Watch(r.aiter_lines())
            await client.post(CM, json=cm("x"))
            events = [await w.next() for _ in range(3)]
        types = [e["type"] for e in events]
        assert types[0] in ("ADDED", "BOOKMARK") and "BOOKMARK" in types
        bookmark = next(e for e in events if e["type"] == "BOOKMARK")
        assert bookmark["object"]["kind"] == "ConfigMap"
        assert set(bookmark["object"]["metadata"]) == {"resourceVersion"}


async def test_send_initial_events_ends_with_marked_bookmark(client: httpx.AsyncClient) -> None:
    from contextlib import AsyncExitStack

    await client.post(CM, json=cm("x"))
    async with AsyncExitStack() as stack:
        w = await open_watch(
            client, CM, stack, sendInitialEvents="true", allowWatchBookmarks="true", resourceVersionMatch="NotOlderThan"
        )
        assert (await w.next())["type"] == "ADDED"
        bookmark = await w.next()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_slow_watcher_loses_its_stream_without_blocking_writers() -> None:
    async with ApiServer(watch_buffer=2) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        rv = (await client.get(CM)).json()["metadata"]["resourceVersion"]
        api.faults.delay_watch(3600)
        async with client.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
            with trio.fail_after(5):
                while not api.store.subscriptions():
                    await trio.sleep(0)
                sub = api.store.subscriptions()[0]
            for i in range(5):
                assert (await client.post(CM, json=cm(f"x{i}"))).status_code == 201
            assert sub.overflowed
            events = await Watch(r.aiter_lines()).rest()
        assert events == []


def too_large(status: dict[str, Any], wanted: int, current: int) -> bool:
    return status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {wanted}, current: {current}",
        "reason": "Timeout",
        "code": 504,
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    }


@contextlib.asynccontextmanager
async def memory_client() -> AsyncIterator[httpx.AsyncClient]:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            yield client


async def test_a_read_from_a_resource_version_newer_than_the_latest_waits_3s_then_answers_504(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with memory_client() as client:
        await client.post(CM, json=cm("a"))
        current = int((await client.get(CM)).json()["metadata"]["resourceVersion"])
        for params in ({"resourceVersion": str(current + 1), "resourceVersionMatch": "NotOlderThan"},
                       {"resourceVersion": str(current + 1), "limit": "1"}):
            start = trio.current_time()
            r = await client.get(CM, params=params)
            assert trio.current_time() - start == 3
            assert r.status_code == 504 and too_large(r.json(), current + 1, current)
        r = await client.get(f"{CM}/a", params={"resourceVersion": "999999999999"})
        assert r.status_code == 504 and too_large(r.json(), 999999999999, current)
        ok = await client.get(CM, params={"resourceVersion": str(current), "resourceVersionMatch": "NotOlderThan"})
        assert ok.status_code == 200 and [i["metadata"]["name"] for i in ok.json()["items"]] == ["a"]


async def test_a_read_answers_once_the_resource_version_it_waits_for_arrives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with memory_client() as client:
        current = int((await client.get(CM)).json()["metadata"]["resourceVersion"])
        answers: list[tuple[float, httpx.Response]] = []

        async def read() -> None:
            start = trio.current_time()
            r = await client.get(CM, params={"resourceVersion": str(current + 1)})
            answers.append((trio.current_time() - start, r))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.sleep(2)
            await client.post(CM, json=cm("late"))
        [(waited, r)] = answers
        assert waited == 2 and r.status_code == 200
        assert [i["metadata"]["name"] for i in r.json()["items"]] == ["late"]


async def test_a_watch_from_a_resource_version_newer_than_the_latest_waits_for_newer_changes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with memory_client() as client:
        current = int((await client.get(CM)).json()["metadata"]["resourceVersion"])
        async with contextlib.AsyncExitStack() as stack:
            w = await open_watch(client, CM, stack, resourceVersion=str(current + 2))
            await client.post(CM, json=cm("older-1"))
            await client.post(CM, json=cm("older-2"))
            await client.post(CM, json=cm("newer"))
            event = await w.next()
            assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "newer")
        start = trio.current_time()
        async with client.stream(
            "GET", CM, params={"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                               "resourceVersionMatch": "NotOlderThan", "resourceVersion": "999999999999"}
        ) as r:
            events = await Watch(r.aiter_lines()).rest()
        assert trio.current_time() - start == 3
        assert [e["type"] for e in events] == ["ERROR"] and too_large(events[0]["object"], 999999999999, current + 3)


async def test_initial_events_end_at_the_state_streamed_not_at_changes_queued_meanwhile() -> None:
    async with ApiServer(listen=False) as api, httpx.AsyncClient(
        transport=api.memory_transport(), base_url=api.url
    ) as client:
        for i in range(100):
            await client.post(CM, json=cm(f"x{i}") | {"data": {"k": "v" * 2000}})
        params = {
            "watch": "true", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
        }

        async def write_while_streaming() -> None:
            while not api.store.subscriptions():
                await trio.sleep(0)
            await client.post(CM, json=cm("late"))

        events: list[tuple[str, str | None, int]] = []
        async with trio.open_nursery() as nursery, client.stream("GET", CM, params=params) as response:
            nursery.start_soon(write_while_streaming)
            with trio.fail_after(5):
                async for line in response.aiter_lines():
                    if line.strip():
                        event = json.loads(line)
                        meta = event["object"]["metadata"]
                        events.append((event["type"], meta.get("name"), int(meta["resourceVersion"])))
                        if meta.get("name") == "late":
                            break
    end = [kind for kind, _, _ in events].index("BOOKMARK")
    assert [name for _, name, _ in events[end + 1:]] == ["late"]
    assert all(rv > events[end][2] for _, _, rv in events[end + 1:])
