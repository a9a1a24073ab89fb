"""Watch-list streaming of a watcher's initial state, and the paged list where a server refuses it."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Config,
    Informer,
    Resource,
    Restarted,
    Watcher,
    WatcherEvent,
    WatchOptions,
    server_streams_lists,
)

CONFIGMAPS = Resource("", "v1", "ConfigMap", "configmaps", True)

REFUSED_BY_1_32 = {
    "type": "ERROR",
    "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "InternalError",
        "code": 500,
        "message": "a watch stream was requested by the client but the required storage feature "
        "RequestWatchProgress is disabled",
    },
}  # fmt: skip
"""What kube-apiserver 1.32.6 on etcd 3.4 answers to ``sendInitialEvents=true`` (HTTP 200)."""


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


class Counting(httpx.AsyncBaseTransport):
    """The embedded server's memory transport, recording each request as ``list``,
    ``watch-list`` or ``watch``; with ``refuse``, answering watch-list requests as 1.32.6 on
    etcd 3.4 does."""

    def __init__(self, api: ApiServer, *, refuse: bool = False) -> None:
        self.transport = api.memory_transport()
        self.refuse = refuse
        self.kinds: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        params = request.url.params
        if request.method == "GET" and "configmaps" in request.url.path:
            if params.get("sendInitialEvents") == "true":
                self.kinds.append("watch-list")
                if self.refuse:
                    return httpx.Response(200, content=json.dumps(REFUSED_BY_1_32).encode() + b"\n")
            else:
                self.kinds.append("watch" if params.get("watch") == "true" else "list")
        return await self.transport.handle_async_request(request)


def names(event: WatcherEvent) -> list[str]:
    assert isinstance(event, Restarted)
    return sorted(obj["metadata"]["name"] for obj in event.objects)


async def wait_until(condition: Any) -> None:
    while not condition():
        await trio.sleep(0.01)


async def test_the_state_is_streamed_on_the_watch_that_follows(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "engine.kube.informer")
    async with ApiServer() as api:
        transport = Counting(api)
        async with Client(Config.from_dict(api.kubeconfig), transport=transport) as client:
            for name in ("a", "b", "c"):
                await client.create(CONFIGMAPS, cm(name))
            events: list[WatcherEvent] = []
            watcher = Watcher(client, CONFIGMAPS, namespace="default", options=WatchOptions(page_size=2))
            assert server_streams_lists(client) is None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watcher.run, events.append)
                await wait_until(lambda: len(events) == 1)
                assert names(events[0]) == ["a", "b", "c"]
                assert events[0].resource_version == str(api.store.resource_version)  # type: ignore[union-attr]
                await client.create(CONFIGMAPS, cm("d"))
                await wait_until(lambda: len(events) == 2)
                second: list[WatcherEvent] = []
                other = Watcher(client, CONFIGMAPS, namespace="default")
                nursery.start_soon(other.run, second.append)
                await wait_until(lambda: len(second) == 1)
                nursery.cancel_scope.cancel()
    assert type(events[1]).__name__ == "Added" and events[1].obj["metadata"]["name"] == "d"  # type: ignore[union-attr]
    assert names(second[0]) == ["a", "b", "c", "d"]
    assert transport.kinds == ["watch-list", "watch-list"], "no list, no second watch"
    assert (watcher.statistics().lists, watcher.statistics().watches) == (1, 1)
    assert server_streams_lists(client) is True
    assert caplog.text.count("streams initial states") == 1


async def test_a_server_that_refuses_it_is_listed_in_pages_and_not_asked_again(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "engine.kube.informer")
    async with ApiServer() as api:
        transport = Counting(api, refuse=True)
        async with Client(Config.from_dict(api.kubeconfig), transport=transport) as client:
            for name in ("a", "b", "c"):
                await client.create(CONFIGMAPS, cm(name))
            informers = [
                Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(page_size=2)) for _ in range(2)
            ]
            async with trio.open_nursery() as nursery:
                for informer in informers:
                    await nursery.start(informer.run)
                    await informer.wait_synced()
                await client.create(CONFIGMAPS, cm("d"))
                await wait_until(lambda: all(len(i.store) == 4 for i in informers))
                nursery.cancel_scope.cancel()
    assert [sorted(o["metadata"]["name"] for o in i.store) for i in informers] == [["a", "b", "c", "d"]] * 2
    # One refused stream in all; each informer lists in two pages of two, then watches.
    assert transport.kinds == ["watch-list", "list", "list", "watch", "list", "list", "list", "watch", "list"]
    assert server_streams_lists(client) is False
    assert caplog.text.count("does not stream initial states (500 InternalError: a watch stream was requested") == 1


async def test_an_informer_syncs_and_follows_changes_on_any_server(
    kube_client: Client, kube_target: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """On the embedded server and real ones: streamed where served (1.34 and later, or 1.32
    and 1.33 on etcd 3.5.13 and later), listed in pages where not (1.32 on etcd 3.4)."""
    caplog.set_level(logging.INFO, "engine.kube.informer")
    ns = kube_target.namespace
    for i in range(5):
        await kube_client.create(CONFIGMAPS, {"metadata": {"name": f"cm-{i}"}}, namespace=ns)
    informer = Informer(kube_client, CONFIGMAPS, namespace=ns, options=WatchOptions(page_size=2))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.run)
            await informer.wait_synced()
            assert sorted(o["metadata"]["name"] for o in informer.store) == [f"cm-{i}" for i in range(5)]
            await kube_client.create(CONFIGMAPS, {"metadata": {"name": "later"}}, namespace=ns)
            await kube_client.delete(CONFIGMAPS, "cm-0", namespace=ns)
            await wait_until(lambda: len(informer.store) == 5 and informer.store.get(ns, "later") is not None)
            nursery.cancel_scope.cancel()
    version = await kube_client.server_version()
    streams = server_streams_lists(kube_client)
    assert streams is not None
    if kube_target.api is not None or version.minor >= 34:
        assert streams is True
    assert ("streams initial states" if streams else "does not stream initial states") in caplog.text
