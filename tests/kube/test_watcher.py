"""Tests of engine.kube.Watcher used alone, against the embedded ApiServer under virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from engine import LifecycleError
from engine.kube import (
    Added,
    Bookmark,
    Client,
    Config,
    Deleted,
    Modified,
    Resource,
    Restarted,
    RetryPolicy,
    Watcher,
    WatcherEvent,
)
from engine.testing import ApiServer

CONFIGMAPS = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)


def cm(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}}


def memory_client(api: ApiServer) -> Client:
    retry = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1)
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), retry=retry)


def summary(event: WatcherEvent) -> tuple[str, Any]:
    if isinstance(event, Restarted):
        return ("Restarted", sorted(o["metadata"]["name"] for o in event.objects))
    if isinstance(event, Bookmark):
        return ("Bookmark", None)
    kind = {Added: "Added", Modified: "Modified", Deleted: "Deleted"}[type(event)]
    return (kind, event.obj["metadata"]["name"])


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(listen=False, bookmark_interval=30) as server:
        yield server


async def wait_until(condition: Any) -> None:
    with trio.fail_after(600):
        while not condition():
            await trio.sleep(0.05)


async def test_lists_watches_and_relists_after_gone(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    events: list[WatcherEvent] = []
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        watcher = Watcher(client, CONFIGMAPS, namespace="default")
        nursery.start_soon(watcher.run, events.append)
        await wait_until(lambda: watcher.statistics().watches == 1)
        assert [summary(e) for e in events] == [("Restarted", ["a"])]
        assert isinstance(events[0], Restarted) and events[0].resource_version == watcher.resource_version

        await client.create(CONFIGMAPS, cm("b"))
        await client.patch(CONFIGMAPS, "a", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "b")
        await wait_until(lambda: len(events) >= 4)
        assert [summary(e) for e in events[1:]] == [("Added", "b"), ("Modified", "a"), ("Deleted", "b")]

        api.faults.expire_next_watch()
        assert api.faults.drop_watches(abrupt=True) == 1
        await wait_until(lambda: watcher.statistics().gone == 1 and watcher.statistics().lists == 2)
        await wait_until(lambda: any(isinstance(e, Restarted) for e in events[4:]))
        assert [summary(e) for e in events[4:] if not isinstance(e, Bookmark)] == [("Restarted", ["a"])]
        with pytest.raises(LifecycleError, match=r"^a Watcher can run only once at a time$"):
            await watcher.run(events.append)
        nursery.cancel_scope.cancel()


async def test_an_exception_from_on_event_ends_the_run(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client:
        await client.create(CONFIGMAPS, cm("a"))
        watcher = Watcher(client, CONFIGMAPS, namespace="default")

        def fail(event: WatcherEvent) -> None:
            raise LookupError("consumer failed")

        with pytest.raises(LookupError, match=r"^consumer failed$"):
            await watcher.run(fail)
        assert watcher.statistics().lists == 1 and watcher.resource_version is None


async def test_invalid_arguments_are_refused(api: ApiServer) -> None:
    client = memory_client(api)
    with pytest.raises(ValueError, match=r"^page_size must be >= 1$"):
        Watcher(client, CONFIGMAPS, page_size=0)
    with pytest.raises(ValueError, match=r"^backoff bounds must satisfy 0 < min_backoff <= max_backoff$"):
        Watcher(client, CONFIGMAPS, min_backoff=2, max_backoff=1)
