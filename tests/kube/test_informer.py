"""Tests of engine.kube.Informer, against the embedded ApiServer through its memory transport
under virtual time (and an httpx.MockTransport where the server cannot misbehave enough)."""

from __future__ import annotations

import copy
import gc
import itertools
import json
import logging
import random
import re
import sys
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine import LifecycleError
from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Config,
    Informer,
    InformerEvent,
    Resource,
    Restarted,
    RetryPolicy,
    Store,
    WatcherEvent,
    WatchEventType,
    WatchOptions,
    server_streams_lists,
    strip_managed_fields,
)

ADDED, MODIFIED, DELETED = WatchEventType.ADDED, WatchEventType.MODIFIED, WatchEventType.DELETED

CONFIGMAPS = Resource(
    group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True
)


def cm(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": data}


def memory_client(api: ApiServer, **kwargs: Any) -> Client:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1))
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), **kwargs)


async def wait_for(condition: Callable[[], bool], *, timeout: float = 600.0) -> None:
    """Poll in virtual time (these tests run under MockClock)."""
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


class Recorder:
    """A handler recording events, checking the store already reflects each one."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.events: list[tuple[WatchEventType, str]] = []
        self.violations: list[str] = []

    def __call__(self, event: InformerEvent) -> None:
        meta = event.obj["metadata"]
        cached = self.informer.store.get(meta.get("namespace"), meta["name"])
        if event.type is DELETED:
            if cached is not None:
                self.violations.append(f"{meta['name']} still cached on DELETED")
        elif cached is not event.obj:
            self.violations.append(f"{meta['name']} not cached on {event.type.value}")
        self.events.append((event.type, meta["name"]))

    def since(self, n: int) -> list[tuple[WatchEventType, str]]:
        return self.events[n:]


def ordered(events: list[tuple[WatchEventType, str]]) -> list[tuple[WatchEventType, str]]:
    return sorted(events, key=lambda e: (e[0].value, e[1]))


def cached(informer: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.store.list()}


async def listed(client: Client, namespace: str | None = "default") -> dict[str, str]:
    result = await client.list_all(CONFIGMAPS, namespace=namespace)
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in result.items}


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    """The server; tests using it also take ``autojump_clock`` (pytest-trio only picks up a
    clock passed to the test function itself)."""
    async with ApiServer(listen=False, bookmark_interval=30) as server:
        yield server


async def test_list_then_watch_with_handlers_after_store(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(5):
            await client.create(CONFIGMAPS, cm(f"pre{i}"))
        informer = Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(page_size=2))
        early = Recorder(informer)
        informer.add_handler(early)
        assert not informer.synced and not informer.has_synced()
        await nursery.start(informer.run)
        with trio.fail_after(10):
            await informer.wait_synced()
        assert informer.synced
        assert sorted(cached(informer)) == [f"pre{i}" for i in range(5)]
        assert sorted(early.events) == [(ADDED, f"pre{i}") for i in range(5)]
        late = Recorder(informer)
        informer.add_handler(late)
        assert sorted(late.events) == sorted(early.events)

        n = len(early.events)
        await client.create(CONFIGMAPS, cm("new"))
        await client.patch(CONFIGMAPS, "pre0", {"data": {"k": "v"}})
        await client.delete(CONFIGMAPS, "pre1")
        await client.create(CONFIGMAPS, cm("other-ns", "kube-system"))
        await wait_for(lambda: len(early.events) >= n + 3)
        assert early.since(n) == [(ADDED, "new"), (MODIFIED, "pre0"), (DELETED, "pre1")]
        assert late.since(5) == early.since(n)
        assert early.violations == [] and late.violations == []
        assert cached(informer) == await listed(client)
        assert informer.store.get("default", "pre0")["data"] == {"k": "v"}  # type: ignore[index]
        nursery.cancel_scope.cancel()
    assert not informer.synced


async def test_events_of_a_list_are_marked_listed_and_watch_events_are_not(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name))
        informer = Informer(client, CONFIGMAPS, namespace="default")
        seen: list[tuple[WatchEventType, str, bool]] = []
        informer.add_handler(lambda e: seen.append((e.type, e.obj["metadata"]["name"], e.listed)))
        await nursery.start(informer.run)
        await informer.wait_synced()
        await wait_for(lambda: informer.statistics().watches == 1)
        assert sorted(seen, key=lambda e: e[1]) == [(ADDED, name, True) for name in ("change", "keep", "remove")]
        replayed: list[bool] = []
        informer.add_handler(lambda e: replayed.append(e.listed))
        assert replayed == [True, True, True]

        await client.create(CONFIGMAPS, cm("watched"))
        await wait_for(lambda: len(seen) == 4)
        assert seen[-1] == (ADDED, "watched", False)

        del seen[:]
        blocked = api.faults.fail(503, count=None, verbs={"watch"})
        assert api.faults.drop_watches(abrupt=True) == 1
        await wait_for(lambda: blocked.hits >= 2)
        await client.create(CONFIGMAPS, cm("added"))
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "remove")
        api.faults.expire_next_watch()
        api.faults.remove(blocked)
        await wait_for(lambda: len(seen) >= 3)
        assert sorted(seen, key=lambda e: e[1]) == [
            (ADDED, "added", True), (MODIFIED, "change", True), (DELETED, "remove", False)
        ]
        nursery.cancel_scope.cancel()


async def test_relist_after_watch_error_410_emits_the_difference(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    await _relist_after_410(api, http_status=False)


async def test_relist_after_http_410_emits_the_difference(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    await _relist_after_410(api, http_status=True)


async def _relist_after_410(api: ApiServer, *, http_status: bool) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name))
        informer = Informer(client, CONFIGMAPS, namespace="default")
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await wait_for(lambda: informer.statistics().watches == 1)
        n = len(rec.events)

        blocked = api.faults.fail(503, count=None, verbs={"watch"})
        assert api.faults.drop_watches(abrupt=True) == 1
        await wait_for(lambda: blocked.hits >= 2)
        await client.create(CONFIGMAPS, cm("added"))
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "remove")
        assert rec.since(n) == []
        if http_status:
            api.faults.fail(410, count=1, verbs={"watch"})
        else:
            api.faults.expire_next_watch()
        api.faults.remove(blocked)

        await wait_for(lambda: len(rec.events) >= n + 3)
        assert ordered(rec.since(n)) == ordered([(ADDED, "added"), (MODIFIED, "change"), (DELETED, "remove")])
        assert rec.violations == []
        assert informer.statistics().gone == 1
        assert informer.synced
        assert cached(informer) == await listed(client)

        await client.create(CONFIGMAPS, cm("after"))
        await wait_for(lambda: (ADDED, "after") in rec.events)
        nursery.cancel_scope.cancel()


async def test_dropped_streams_resume_without_loss(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS, namespace="default")
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        for round_ in range(6):
            await wait_for(lambda r=round_: informer.statistics().watches == r + 1)
            await client.create(CONFIGMAPS, cm(f"o{round_}"))
            if round_:
                await client.patch(CONFIGMAPS, f"o{round_ - 1}", {"data": {"r": str(round_)}})
            assert api.faults.drop_watches(abrupt=round_ % 2 == 0) == 1
            await client.create(CONFIGMAPS, cm(f"while-down{round_}"))
        expected = await listed(client)
        await wait_for(lambda: cached(informer) == expected)
        stats = informer.statistics()
        assert stats.lists == 1 and stats.gone == 0 and stats.restarts == 0
        assert stats.watches >= 7
        assert rec.violations == []
        assert sorted(n for t, n in rec.events if t is ADDED) == sorted(expected)
        nursery.cancel_scope.cancel()


async def test_bookmarks_advance_the_resume_point(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(idle_timeout=None))
        await nursery.start(informer.run)
        await informer.wait_synced()
        start_rv = informer.resource_version
        for i in range(3):
            await client.create(CONFIGMAPS, cm(f"x{i}", "kube-system"))
        server_rv = str(api.store.resource_version)
        assert start_rv != server_rv
        await wait_for(lambda: informer.resource_version == server_rv, timeout=45)
        assert len(informer.store) == 0
        seen: list[str] = []
        original = client.watch

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(kwargs["resource_version"])
            return original(*args, **kwargs)

        client.watch = spy  # type: ignore[method-assign]
        api.faults.drop_watches()
        await wait_for(lambda: bool(seen))
        assert seen[0] == server_rv
        nursery.cancel_scope.cancel()


class PoisonedStore(Store):
    """A store with a bug: applying any event that carries ``poison`` raises."""

    def apply(self, event: WatcherEvent) -> list[InformerEvent]:
        carried = event.objects if isinstance(event, Restarted) else [getattr(event, "obj", {"metadata": {}})]
        if any(o["metadata"].get("name") == "poison" for o in carried):
            raise RuntimeError("store exploded")
        return super().apply(event)


async def test_unexpected_exception_restarts_and_reports_unsynced(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a", flavour="x"))
        informer = Informer(client, CONFIGMAPS, namespace="default", store=PoisonedStore(), options=WatchOptions(max_backoff=5))
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await client.create(CONFIGMAPS, cm("poison"))
        await wait_for(lambda: not informer.synced)
        assert informer.statistics().restarts >= 1
        assert "informer for configmaps/v1 failed; restarting" in caplog.text
        assert "store exploded" in caplog.text
        await client.create(CONFIGMAPS, cm("b", flavour="x"))
        await wait_for(lambda: informer.statistics().restarts >= 3)
        assert not informer.synced
        await client.delete(CONFIGMAPS, "poison")
        with trio.fail_after(30):
            await informer.wait_synced()
        assert cached(informer) == await listed(client)
        assert (ADDED, "b") in rec.events and rec.violations == []
        await client.create(CONFIGMAPS, cm("c"))
        await wait_for(lambda: (ADDED, "c") in rec.events)
        nursery.cancel_scope.cancel()


async def test_an_index_function_raising_for_one_object_leaves_the_informer_running(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    def by_flavour(obj: Any) -> list[str]:
        return [obj["data"]["flavour"]]

    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a", flavour="x"))
        await client.create(CONFIGMAPS, cm("listed-poison"))
        await client.create(CONFIGMAPS, cm("b", flavour="x"))
        informer = Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(max_backoff=5))
        informer.store.add_index("flavour", by_flavour)
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        with trio.fail_after(60):
            await informer.wait_synced()
        poison = await client.create(CONFIGMAPS, cm("watched-poison"))
        await client.create(CONFIGMAPS, cm("c", flavour="x"))
        await wait_for(lambda: (ADDED, "c") in rec.events)
        assert ordered(rec.events) == ordered(
            [(ADDED, n) for n in ("a", "b", "c", "listed-poison", "watched-poison")]
        )
        assert sorted(o["metadata"]["name"] for o in informer.store.by_index("flavour", "x")) == ["a", "b", "c"]
        stats = informer.statistics()
        assert (stats.lists, stats.restarts, stats.object_errors) == (1, 0, 2)
        assert informer.synced and cached(informer) == await listed(client)
        rv = poison["metadata"]["resourceVersion"]
        assert (
            f"index function 'flavour' raised for configmaps/v1 default/watched-poison (resourceVersion {rv}); "
            "leaving this object out of it: KeyError: 'flavour'"
        ) in caplog.text
        nursery.cancel_scope.cancel()


async def test_handler_exception_does_not_disturb_the_informer(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS, namespace="default")

        def bad(event: InformerEvent) -> None:
            raise ValueError("handler bug")

        informer.add_handler(bad)
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await client.create(CONFIGMAPS, cm("a"))
        await wait_for(lambda: rec.events == [(ADDED, "a")])
        assert informer.synced and informer.statistics().restarts == 0
        assert "informer handler test_handler_exception_does_not_disturb_the_informer.<locals>.bad on ADDED " \
            "raised for configmaps/v1 default/a" in caplog.text
        assert informer.statistics().object_errors == 1
        nursery.cancel_scope.cancel()


async def test_half_dead_connection_is_replaced(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(idle_timeout=20))
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await wait_for(lambda: informer.statistics().watches == 1)
        stall = api.faults.delay_watch(10_000)
        start = trio.current_time()
        await client.create(CONFIGMAPS, cm("late"))
        await wait_for(lambda: informer.statistics().stream_failures >= 1)
        assert 19 <= trio.current_time() - start < 22
        assert rec.events == []
        api.faults.remove(stall)
        await wait_for(lambda: rec.events == [(ADDED, "late")], timeout=30)
        assert trio.current_time() - start < 60
        assert informer.synced
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("watch_list", [True, False], ids=["streamed", "paged"])
async def test_wait_synced_waits_for_the_first_list(
    api: ApiServer, autojump_clock: trio.testing.MockClock, watch_list: bool
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        api.faults.add_latency(7, count=1, verbs={"watch" if watch_list else "list"})
        informer = Informer(client, CONFIGMAPS, options=WatchOptions(watch_list=watch_list))
        start = trio.current_time()
        await nursery.start(informer.run)
        assert trio.current_time() - start < 0.01
        assert not informer.synced
        await informer.wait_synced()
        assert trio.current_time() - start == pytest.approx(7, abs=0.1)
        assert cached(informer).keys() == {"a"}
        await informer.wait_synced()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("watch_list", [True, False], ids=["streamed", "paged"])
async def test_list_failures_are_retried_until_synced(
    api: ApiServer, autojump_clock: trio.testing.MockClock, watch_list: bool
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        fault = api.faults.fail(500, count=6, verbs={"watch" if watch_list else "list"})
        informer = Informer(client, CONFIGMAPS, options=WatchOptions(watch_list=watch_list))
        await nursery.start(informer.run)
        with trio.fail_after(60):
            await informer.wait_synced()
        assert fault.hits == 6
        assert informer.statistics().restarts == 3
        assert server_streams_lists(client) is (True if watch_list else None)
        nursery.cancel_scope.cancel()


async def test_informer_runs_once_at_a_time(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS)
        await nursery.start(informer.run)
        with pytest.raises(LifecycleError, match=r"^an Informer can run only once at a time$"):
            await informer.run()
        nursery.cancel_scope.cancel()


# --- malformed data, which the embedded server never produces: a scripted MockTransport ---


class ScriptedApi:
    """Serves one list, then watch streams whose lines the test pushes; refuses watch-list
    streams (as a server older than 1.27 does), so informers list in pages. Lists answer the
    newest resourceVersion streamed so far (at least 10): the server's current one."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.watches: list[trio.MemorySendChannel[bytes]] = []
        self.watch_rvs: list[str | None] = []
        self.newest = 10

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("sendInitialEvents") == "true":
            refused = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "BadRequest", "code": 400}
            return httpx.Response(400, json=refused)
        if request.url.params.get("watch") != "true":
            body = {"kind": "ConfigMapList", "metadata": {"resourceVersion": str(self.newest)}, "items": self.items}
            return httpx.Response(200, json=body)
        send, receive = trio.open_memory_channel[bytes](100)
        self.watches.append(send)
        self.watch_rvs.append(request.url.params.get("resourceVersion"))
        server = self

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async with receive:
                    async for chunk in receive:
                        for rv in re.findall(rb'"resourceVersion": "(\d+)"', chunk):
                            server.newest = max(server.newest, int(rv))
                        yield chunk

        return httpx.Response(200, stream=Stream())


def line(type_: str, name: str | None, rv: str) -> bytes:
    meta: dict[str, Any] = {"namespace": "d", "resourceVersion": rv}
    if name is not None:
        meta["name"] = name
    return json.dumps({"type": type_, "object": {"metadata": meta}}).encode() + b"\n"


async def test_malformed_list_items_and_stream_lines_are_skipped(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    server = ScriptedApi(
        [
            {"metadata": {"name": "good", "namespace": "d", "resourceVersion": "5"}},
            {"metadata": {"namespace": "d", "resourceVersion": "6"}},
            {"nometadata": True},
            "not an object",
        ]
    )
    config = Config.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://k8s.test"}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    async with Client(config, transport=httpx.MockTransport(server)) as client, trio.open_nursery() as nursery:
        informer = Informer(client, CONFIGMAPS, options=WatchOptions(idle_timeout=None))
        events: list[tuple[WatchEventType, str]] = []
        informer.add_handler(lambda e: events.append((e.type, e.obj["metadata"]["name"])))
        await nursery.start(informer.run)
        await informer.wait_synced()
        assert cached(informer) == {"good": "5"}
        await wait_for(lambda: bool(server.watches))
        feed = server.watches[0]
        await feed.send(b'{"type": "ADDED", "object": {"metadata": {"name": "x", "namespa')
        await feed.send(b'ce": "d", "resourceVersion": "11"}}}\n{this is not json}\n')
        await feed.send(line("ADDED", None, "12"))
        await feed.send(b'{"type": "ADDED", "object": {"metadata": {"name": "bad-ns", "namespace": 7, "resourceVersion": "13"}}}\n')
        await feed.send(b"\xff\xfe not UTF-8\n[]\n" + line("MODIFIED", "good", "14"))
        await wait_for(lambda: len(events) == 3)
        assert events == [(ADDED, "good"), (ADDED, "x"), (MODIFIED, "good")]
        assert informer.resource_version == "14"
        assert len(server.watches) == 1
        await feed.aclose()
        await wait_for(lambda: len(server.watches) == 2)
        assert server.watch_rvs == ["10", "14"]
        assert informer.statistics().skipped == 2 + 5
        assert informer.synced
        assert "skipping a malformed watch line" in caplog.text
        assert "skipping a malformed list item" in caplog.text
        nursery.cancel_scope.cancel()


async def test_a_server_restored_to_an_earlier_snapshot_is_relisted_from_scratch(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name, v="1"))
        informer = Informer(client, CONFIGMAPS, namespace="default")
        rec = Recorder(informer)
        informer.add_handler(rec)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await wait_for(lambda: informer.statistics().watches == 1)
        snapshot = api.snapshot()
        before = cached(informer)

        await client.create(CONFIGMAPS, cm("created-since", v="1"))
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "remove")
        await wait_for(lambda: len(rec.events) == 6)
        held = api.store.resource_version
        assert held == snapshot.resource_version + 3

        n = len(rec.events)
        api.restore(snapshot)
        assert await listed(client) == before
        await client.create(CONFIGMAPS, cm("new", v="1"))
        await client.patch(CONFIGMAPS, "keep", {"data": {"v": "3"}})
        after = await listed(client)
        assert int(after["new"]) < held, "the new writes reuse resourceVersions the informer saw before the restore"
        await wait_for(lambda: cached(informer) == after)

        assert informer.statistics().resets == 1 and rec.violations == []
        went_back = re.search(r"the API server's history of configmaps/v1 went backwards \(the server's current "
                              r"resourceVersion is (\d+), older than (\d+) seen before\)", caplog.text)
        assert went_back is not None and int(went_back[1]) < held and int(went_back[2]) == held
        since = set(rec.since(n))
        assert {(DELETED, "created-since"), (ADDED, "remove"), (MODIFIED, "change")} <= since
        assert (ADDED, "new") in since and (MODIFIED, "keep") in since
        assert informer.store.get("default", "change")["data"] == {"v": "1"}  # type: ignore[index]
        assert informer.store.get("default", "keep")["data"] == {"v": "3"}  # type: ignore[index]

        await client.create(CONFIGMAPS, cm("later"))
        await wait_for(lambda: (ADDED, "later") in rec.events)
        assert informer.statistics().resets == 1
        nursery.cancel_scope.cancel()


def test_strip_managed_fields_removes_only_managed_fields_in_place() -> None:
    obj = {"metadata": {"name": "a", "managedFields": [{"manager": "m"}], "labels": {"x": "y"}}, "data": {}}
    assert strip_managed_fields(obj) is obj
    assert obj == {"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {}}
    assert strip_managed_fields(obj) == {"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {}}
    assert strip_managed_fields({"kind": "NoMetadata"}) == {"kind": "NoMetadata"}


async def test_transform_applies_to_list_watch_events_and_relist(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    calls: list[str] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(obj["metadata"]["name"])
        obj["metadata"].setdefault("annotations", {})["transformed"] = obj["metadata"]["resourceVersion"]
        return strip_managed_fields(obj)

    def transformed(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return "managedFields" not in meta and meta["annotations"]["transformed"] == meta["resourceVersion"]

    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name))
        assert all("managedFields" in o["metadata"] for o in (await client.list(CONFIGMAPS, namespace="default")).items)
        informer = Informer(client, CONFIGMAPS, namespace="default", transform=transform)
        assert informer.transform is transform
        rec = Recorder(informer)
        seen: list[InformerEvent] = []
        informer.add_handler(rec)
        informer.add_handler(seen.append)
        await nursery.start(informer.run)
        await informer.wait_synced()
        assert sorted(calls) == ["change", "keep", "remove"]
        assert all(transformed(o) for o in informer.store.list())

        await client.create(CONFIGMAPS, cm("added"))
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "remove")
        await wait_for(lambda: len(seen) == 6)
        assert [(e.type, e.obj["metadata"]["name"]) for e in seen[3:]] == [
            (ADDED, "added"), (MODIFIED, "change"), (DELETED, "remove")
        ]
        assert all(transformed(e.obj) for e in seen)
        assert calls[3:] == ["added", "change", "remove"]

        del calls[:]
        await wait_for(lambda: informer.statistics().watches >= 1)
        api.faults.expire_next_watch()
        api.faults.drop_watches()
        await client.patch(CONFIGMAPS, "keep", {"data": {"v": "3"}})
        await wait_for(lambda: informer.statistics().gone == 1 and len(seen) == 7)
        assert calls == ["keep"], "the relist transforms what changed and keeps the cached form of the rest"
        assert (seen[-1].type, seen[-1].obj["metadata"]["name"]) == (MODIFIED, "keep")
        assert all(transformed(o) for o in informer.store.list())
        assert rec.violations == []
        assert cached(informer) == await listed(client)
        nursery.cancel_scope.cancel()


async def test_a_transform_failing_for_one_object_caches_it_as_decoded(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    def transform(obj: dict[str, Any]) -> Any:
        name = obj["metadata"]["name"]
        if name == "raises":
            raise ValueError("no")
        if name == "renames":
            return {"metadata": {"name": "other", "namespace": "default", "resourceVersion": "1"}}
        if name == "not-a-dict":
            return [obj]
        return strip_managed_fields(obj)

    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("raises"))
        await client.create(CONFIGMAPS, cm("fine"))
        informer = Informer(client, CONFIGMAPS, namespace="default", transform=transform)
        await nursery.start(informer.run)
        await informer.wait_synced()
        await client.create(CONFIGMAPS, cm("renames"))
        await client.create(CONFIGMAPS, cm("not-a-dict"))
        await client.create(CONFIGMAPS, cm("after"))
        await wait_for(lambda: informer.store.get("default", "after") is not None)
        kept = {o["metadata"]["name"]: "managedFields" in o["metadata"] for o in informer.store.list()}
        assert kept == {"raises": True, "fine": False, "renames": True, "not-a-dict": True, "after": False}
        stats = informer.statistics()
        assert (stats.object_errors, stats.restarts, stats.lists) == (3, 0, 1)
        assert informer.synced
        assert "informer transform test_a_transform_failing_for_one_object_caches_it_as_decoded.<locals>.transform raised for configmaps/v1 default/raises" in caplog.text
        assert "ValueError: no" in caplog.text and "returned list" in caplog.text
        nursery.cancel_scope.cancel()


async def test_cached_objects_share_keys_and_repeated_values(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, {"metadata": {"name": "listed", "labels": {"app": "x"}}, "data": {"k": "v"}}, namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default")
        await nursery.start(informer.run)
        await informer.wait_synced()
        for name in ("watched-1", "watched-2"):
            await client.create(CONFIGMAPS, {"metadata": {"name": name, "labels": {"app": "x"}}, "data": {"k": "v"}}, namespace="default")
        await wait_for(lambda: len(informer.store) == 3)
        objects = [informer.store.get("default", n) for n in ("listed", "watched-1", "watched-2")]
        for a, b in itertools.combinations(objects, 2):
            assert a is not None and b is not None
            for outer, inner in ((a, b), (a["metadata"], b["metadata"]), (a["data"], b["data"])):
                for key in outer:
                    assert next(k for k in inner if k == key) is key
            assert a["kind"] is b["kind"] and a["apiVersion"] is b["apiVersion"]
            assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
            assert a["metadata"]["labels"]["app"] is b["metadata"]["labels"]["app"]
            assert a["metadata"]["uid"] != b["metadata"]["uid"]
        nursery.cancel_scope.cancel()


def served_configmap(i: int, rng: random.Random) -> dict[str, Any]:
    """A ConfigMap as a server returns it, ``managedFields`` included (bench/cache_memory.py's)."""
    stamp = f"2026-12-03T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}Z"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i:06d}",
            "namespace": "default",
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": stamp,
            "labels": {"app": "bench", "shard": str(i % 16)},
            "annotations": {"bench.example.com/index": str(i)},
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:data": {".": {}, "f:config.yaml": {}, "f:key": {}},
                        "f:metadata": {
                            "f:annotations": {".": {}, "f:bench.example.com/index": {}},
                            "f:labels": {".": {}, "f:app": {}, "f:shard": {}},
                        },
                    },
                }
            ],
        },
        "data": {"key": f"value-{i}", "config.yaml": "a: 1\nb: [x, y, z]\n" * 4},
    }


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the figure is CPython's")
async def test_the_cache_holds_an_object_in_at_most_one_and_a_half_times_its_json(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 14's bound on cache growth at N = 10,000, as ``bench/cache_memory.py`` measures
    it against a server: memory traced from before the informer started, per cached object, against
    the object's JSON as the server sends it; once synced, and after a watch changed them all."""
    n = 10_000
    rng = random.Random(14)
    server = ScriptedApi([served_configmap(i, rng) for i in range(n)])
    size = sum(len(json.dumps(o, separators=(",", ":"))) for o in server.items) / n
    changes = []
    for i, obj in enumerate(copy.deepcopy(server.items)):
        obj["metadata"]["resourceVersion"] = str(1000 + n + i)
        obj["data"]["key"] = f"value-{i}-1"
        changes.append(json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n")
    config = Config.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://k8s.test"}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    changed = 0

    def count(event: InformerEvent) -> None:
        nonlocal changed
        changed += event.type is MODIFIED

    def traced() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    async with Client(config, transport=httpx.MockTransport(server)) as client, trio.open_nursery() as nursery:
        tracemalloc.start()
        try:
            base = traced()
            informer = Informer(client, CONFIGMAPS, transform=strip_managed_fields, options=WatchOptions(idle_timeout=None))
            informer.add_handler(count)
            await nursery.start(informer.run)
            await informer.wait_synced()
            at_sync = (traced() - base) / n
            await wait_for(lambda: bool(server.watches))
            for change in changes:
                await server.watches[0].send(change)
            await wait_for(lambda: changed == n)
            after_watch = (traced() - base) / n
        finally:
            tracemalloc.stop()
        nursery.cancel_scope.cancel()
    assert len(informer.store) == n
    assert at_sync <= 1.5 * size, (at_sync, size)
    assert after_watch <= 1.5 * size, (after_watch, size)


async def test_a_relist_after_410_reads_pages_and_keeps_the_cached_form_of_unchanged_objects(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for i in range(5):
            await client.create(CONFIGMAPS, cm(f"cm-{i}"))
        informer = Informer(client, CONFIGMAPS, namespace="default", options=WatchOptions(page_size=2))
        seen: list[InformerEvent] = []
        informer.add_handler(seen.append)
        await nursery.start(informer.run)
        await informer.wait_synced()
        before = {o["metadata"]["name"]: o for o in informer.store.list()}
        assert len(before) == 5
        await wait_for(lambda: informer.statistics().watches >= 1)
        api.faults.expire_next_watch()
        api.faults.drop_watches()
        await client.patch(CONFIGMAPS, "cm-1", {"data": {"v": "2"}})
        await wait_for(lambda: informer.statistics().gone == 1 and len(seen) == 6)
        after = {o["metadata"]["name"]: o for o in informer.store.list()}
        assert [name for name in sorted(after) if after[name] is before[name]] == ["cm-0", "cm-2", "cm-3", "cm-4"]
        assert after["cm-1"]["data"] == {"v": "2"}
        assert (seen[-1].type, seen[-1].obj["metadata"]["name"]) == (MODIFIED, "cm-1")
        assert informer.watcher.statistics().lists == 2
        assert cached(informer) == await listed(client)
        nursery.cancel_scope.cancel()


async def test_held_triggers_keep_the_store_current_and_are_released_as_a_listed_replay(
    api: ApiServer, autojump_clock: trio.testing.MockClock,
) -> None:
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name))
        informer = Informer(client, CONFIGMAPS, namespace="default")
        seen: list[tuple[WatchEventType, str, bool]] = []
        informer.add_handler(lambda e: seen.append((e.type, e.obj["metadata"]["name"], e.listed)))
        informer.hold_triggers()
        assert informer.triggers_held
        await nursery.start(informer.run)
        await informer.wait_synced()
        await wait_for(lambda: informer.statistics().watches == 1)
        await client.create(CONFIGMAPS, cm("added"))
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, "remove")
        await wait_for(lambda: informer.store.get("default", "remove") is None)
        late: list[str] = []
        informer.add_handler(lambda e: late.append(e.obj["metadata"]["name"]))
        assert seen == [] and late == [], "held: no handler is called, none replayed"
        assert (informer.store.get("default", "change") or {}).get("data") == {"v": "2"}

        await informer.release_triggers()
        assert not informer.triggers_held
        assert sorted(seen) == [(ADDED, name, True) for name in ("added", "change", "keep")]
        assert sorted(late) == ["added", "change", "keep"]
        await informer.release_triggers()
        assert len(seen) == 3, "releasing again replays nothing"
        await client.create(CONFIGMAPS, cm("after"))
        await wait_for(lambda: len(seen) == 4)
        assert seen[-1] == (ADDED, "after", False)
        nursery.cancel_scope.cancel()


async def test_a_release_replays_in_batches_what_is_still_cached_when_its_turn_comes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from engine.kube import Deleted

    async with ApiServer(listen=False) as api, memory_client(api) as client:
        informer = Informer(client, CONFIGMAPS, namespace="default")
        informer.hold_triggers()
        names = [f"cm-{i}" for i in range(6)]
        informer.store.apply(Restarted(
            [{"metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}} for name in names], "1"))
        seen: list[str] = []

        def handler(event: InformerEvent) -> None:
            seen.append(event.obj["metadata"]["name"])
            if len(seen) == 1:
                gone = next(n for n in informer.store.keys() if n[1] not in seen)
                informer.store.apply(Deleted(informer.store.get(*gone) or {}))
                seen.append(f"deleted {gone[1]}")

        informer.add_handler(handler)
        assert seen == []
        progress: list[int] = []

        async def observe() -> None:
            while len(progress) < 20:
                progress.append(len(seen))
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(observe)
            nursery.start_soon(partial(informer.release_triggers, batch=2))
        deleted = next(s.split()[1] for s in seen if s.startswith("deleted"))
        assert sorted(s for s in seen if not s.startswith("deleted")) == sorted(set(names) - {deleted})
        assert any(0 < p < len(seen) for p in progress), "other tasks run between batches"
        with pytest.raises(ValueError, match=r"^batch must be >= 1$"):
            informer.hold_triggers()
            await informer.release_triggers(batch=0)
