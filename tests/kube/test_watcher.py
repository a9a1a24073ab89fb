"""Tests of engine.kube.Watcher used alone, against the embedded ApiServer under virtual time
(and one, marked kube_real, on a real kube-apiserver)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine import LifecycleError
from engine.apiserver import ApiServer
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
    WatchOptions,
)
from engine.testing import KubeTarget

KUBECONFIG = {
    "clusters": [{"name": "c", "cluster": {"server": "http://k8s.test"}}],
    "users": [{"name": "u", "user": {}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}
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
        Watcher(client, CONFIGMAPS, options=WatchOptions(page_size=0))
    with pytest.raises(ValueError, match=r"^backoff bounds must satisfy 0 < min_backoff <= max_backoff$"):
        Watcher(client, CONFIGMAPS, options=WatchOptions(min_backoff=2, max_backoff=1))


class Switchboard(httpx.AsyncBaseTransport):
    """Routes every request to whichever server is plugged in now (a server "restarted")."""

    def __init__(self, server: ApiServer) -> None:
        self.transport = server.memory_transport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.transport.handle_async_request(request)


async def test_a_server_restarted_empty_is_detected_and_relisted_from_scratch(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[WatcherEvent] = []
    async with ApiServer(listen=False) as old, ApiServer(listen=False) as new:
        board = Switchboard(old)
        retry = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1)
        async with Client(Config.from_dict(old.kubeconfig), transport=board, retry=retry) as client:
            for name in ("a", "b", "c"):
                await client.create(CONFIGMAPS, cm(name))
            async with trio.open_nursery() as nursery:
                watcher = Watcher(client, CONFIGMAPS, namespace="default", options=WatchOptions(rng=random.Random(7)))
                nursery.start_soon(watcher.run, events.append)
                await wait_until(lambda: watcher.statistics().watches == 1)
                held = watcher.resource_version
                assert held is not None and int(held) > new.store.resource_version + 1
                empty = new.store.resource_version

                board.transport = new.memory_transport()
                assert old.faults.drop_watches(abrupt=True) == 1
                await client.create(CONFIGMAPS, cm("after-restart"))
                await wait_until(lambda: any("after-restart" in str(summary(e)) for e in events))
                await client.create(CONFIGMAPS, cm("later"))
                await wait_until(lambda: summary(events[-1]) == ("Added", "later"))
                nursery.cancel_scope.cancel()
    restarts = [(summary(e), e.reset) for e in events if isinstance(e, Restarted)]
    assert len(restarts) == 2 and restarts[0] == (("Restarted", ["a", "b", "c"]), False) and restarts[1][1]
    assert restarts[1][0][1] in ([], ["after-restart"]), "the new server's objects only"
    assert (watcher.statistics().lists, watcher.statistics().resets) == (2, 1)
    found = re.search(r"went backwards \(the server's current resourceVersion is (\d+), older than (\d+) seen before\)",
                      caplog.text)
    assert found is not None and int(found[1]) in (empty, empty + 1) and found[2] == held


def item(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}


def event_line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode() + b"\n"


TOO_LARGE = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Timeout", "code": 504,
    "message": "Timeout: Too large resource version: 10, current: 4",
    "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]},
}


WATCH_LIST_REFUSED = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "BadRequest", "code": 400,
    "message": "resourceVersionMatch is forbidden for watch",
}


class ScriptedServer:
    """Answers lists from ``listings`` and watches from ``watches`` in order (lines to send, or a
    complete response); a watch with nothing left to say stays open and silent. It refuses
    watch-list streams, as a server older than 1.27 does, so the watcher lists in pages. The watcher's
    history checks (one-item lists without a resourceVersion) are answered from ``current`` in
    order while it lasts, then with the last listing's resourceVersion."""

    def __init__(
        self, listings: list[tuple[str, list[dict[str, Any]]]], watches: list[Any], current: list[str] | None = None
    ) -> None:
        self.listings = listings
        self.watches = watches
        self.current = current or []
        self.listed: str | None = None
        self.watch_rvs: list[str | None] = []
        self.checked: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("sendInitialEvents") == "true":
            return httpx.Response(400, json=WATCH_LIST_REFUSED)
        if request.url.params.get("watch") != "true" and request.url.params.get("limit") == "1":
            assert "resourceVersion" not in request.url.params
            assert self.listed is not None
            rv = self.current.pop(0) if self.current else self.listed
            self.checked.append(rv)
            return httpx.Response(200, json={"kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": []})
        if request.url.params.get("watch") != "true":
            rv, items = self.listings.pop(0)
            self.listed = rv
            return httpx.Response(200, json={"kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": items})
        self.watch_rvs.append(request.url.params.get("resourceVersion"))
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, httpx.Response):
            return script
        lines: list[bytes] = script

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                for line in lines:
                    yield line
                await trio.sleep_forever()

        return httpx.Response(200, stream=Stream())


DEFAULT_RETRY = RetryPolicy()


async def watch_for_a_minute(server: ScriptedServer, retry: RetryPolicy = DEFAULT_RETRY) -> tuple[list[WatcherEvent], Watcher]:
    """Run a watcher against ``server`` for 60 virtual seconds (``retry``: the client's read
    policy): what it emitted, and itself."""
    events: list[WatcherEvent] = []
    async with Client(Config.from_dict(KUBECONFIG), transport=httpx.MockTransport(server), retry=retry) as client:
        watcher = Watcher(client, CONFIGMAPS, options=WatchOptions(idle_timeout=None, rng=random.Random(7)))
        with trio.move_on_after(60):
            await watcher.run(events.append)
    return events, watcher


@pytest.mark.parametrize(
    ("watch", "why"),
    [
        ([event_line("BOOKMARK", {"metadata": {"resourceVersion": "3"}})],
         "a watch bookmark has resourceVersion 3, older than 11 seen before"),
        ([event_line("MODIFIED", item("a", "6"))], "a watch MODIFIED event has resourceVersion 6, older than 11 seen before"),
        ([event_line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})],
         "a list answered resourceVersion 4, older than 11 seen before"),
    ],
    ids=["older-bookmark", "older-event", "older-list-after-410"],
)
async def test_resource_versions_going_backwards_relist_from_scratch(
    watch: list[bytes], why: str, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    server = ScriptedServer([("10", [item("a", "5")]), ("4", [item("a", "2")])], [[event_line("ADDED", item("b", "11")), *watch]])
    events, watcher = await watch_for_a_minute(server)
    assert [(summary(e), getattr(e, "reset", None)) for e in events] == [
        (("Restarted", ["a"]), False), (("Added", "b"), None), (("Restarted", ["a"]), True)
    ]
    assert server.watch_rvs == ["10", "4"]
    assert watcher.statistics().resets == 1 and watcher.resource_version == "4"
    assert f"the API server's history of configmaps/v1 went backwards ({why}); listing again from scratch" in caplog.text


async def test_a_watch_answered_too_large_on_a_server_gone_back_relists_from_scratch(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    server = ScriptedServer([("10", [item("a", "5")]), ("4", [])], [httpx.Response(504, json=TOO_LARGE)], current=["4"])
    events, watcher = await watch_for_a_minute(server, RetryPolicy(max_attempts=1))
    assert [(summary(e), getattr(e, "reset", None)) for e in events] == [
        (("Restarted", ["a"]), False), (("Restarted", []), True)
    ]
    assert server.watch_rvs == ["10", "4"] and server.checked == ["4", "4"]
    assert watcher.statistics().stream_failures == 0
    assert "went backwards (the server's current resourceVersion is 4, older than 10 seen before)" in caplog.text


async def test_a_watch_answered_too_large_by_a_server_not_gone_back_is_resumed_not_relisted(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """"Too large" says only that the server's watch cache has not heard of the resourceVersion
    yet (with etcd sending no progress notifications, it does not for a type nothing wrote to):
    the server's current resourceVersion decides, and it is not older."""
    server = ScriptedServer(
        [("10", [item("a", "5")])], [httpx.Response(504, json=TOO_LARGE), [event_line("ADDED", item("b", "12"))]]
    )
    events, watcher = await watch_for_a_minute(server, RetryPolicy(max_attempts=1))
    assert [summary(e) for e in events] == [("Restarted", ["a"]), ("Added", "b")]
    assert server.watch_rvs == ["10", "10"] and server.checked == ["10", "10"]
    stats = watcher.statistics()
    assert (stats.lists, stats.resets, stats.stream_failures) == (1, 0, 1)
    assert "went backwards" not in caplog.text
    assert "watch of configmaps/v1 failed (ServerError: 504 Timeout: Timeout: Too large resource version: 10, " in caplog.text


async def test_a_history_check_answered_older_relists_from_scratch(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """The first answer counts: the server's counter coming back up to the resourceVersion held
    afterwards (new writes after a restore) does not hide that it went back."""
    server = ScriptedServer([("10", [item("a", "5")]), ("4", [])], [], current=["4"])
    events, watcher = await watch_for_a_minute(server, RetryPolicy(max_attempts=5, base_delay=0.05, max_delay=0.1))
    assert [(summary(e), getattr(e, "reset", None)) for e in events] == [
        (("Restarted", ["a"]), False), (("Restarted", []), True)
    ]
    assert server.checked == ["4", "4"] and server.watch_rvs == ["10", "4"]
    assert watcher.statistics().resets == 1
    assert "went backwards (the server's current resourceVersion is 4, older than 10 seen before)" in caplog.text


async def test_a_history_check_the_server_cannot_answer_yet_is_asked_again_with_the_next_watch(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[WatcherEvent] = []
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        watcher = Watcher(client, CONFIGMAPS, namespace="default", options=WatchOptions(rng=random.Random(7)))
        nursery.start_soon(watcher.run, events.append)
        await wait_until(lambda: watcher.statistics().watches == 1)
        snapshot = api.snapshot()
        for name in ("b", "c", "d"):
            await client.create(CONFIGMAPS, cm(name))
        await wait_until(lambda: len(events) == 4)
        held = watcher.resource_version

        api.restore(snapshot)
        lists_down = api.faults.fail(503, count=None, verbs={"list"})
        await wait_until(lambda: lists_down.hits >= 6)
        stats = watcher.statistics()
        assert stats.watches > 1 and stats.resets == 0 and len(events) == 4, "each watch closed unread"
        api.faults.remove(lists_down)
        await wait_until(lambda: watcher.statistics().resets == 1)
        await client.create(CONFIGMAPS, cm("after"))
        await wait_until(lambda: summary(events[-1]) == ("Added", "after"))
        nursery.cancel_scope.cancel()
    assert summary(events[4]) == ("Restarted", ["a"]) and events[4].reset  # type: ignore[union-attr]
    assert f"went backwards (the server's current resourceVersion is 6, older than {held} seen before)" in caplog.text


async def test_a_watch_that_ended_cleanly_is_not_resumed_on_a_restored_server_unchecked(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    # A server going down to restart on a restored etcd may end its watches cleanly, after
    # they delivered changes; the one that answers the resumed watch has gone back in time.
    events: list[WatcherEvent] = []
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        watcher = Watcher(client, CONFIGMAPS, namespace="default", options=WatchOptions(rng=random.Random(7)))
        nursery.start_soon(watcher.run, events.append)
        await wait_until(lambda: watcher.statistics().watches == 1)
        snapshot = api.snapshot()
        for name in ("b", "c", "d"):
            await client.create(CONFIGMAPS, cm(name))
        await wait_until(lambda: len(events) == 4)
        held = watcher.resource_version

        assert api.faults.drop_watches() == 1
        api.restore(snapshot)
        with trio.move_on_after(10):
            await wait_until(lambda: watcher.statistics().resets == 1)
        assert watcher.statistics().resets == 1, "the watch was resumed from a resourceVersion the server no longer has"
        nursery.cancel_scope.cancel()
    assert summary(events[-1]) == ("Restarted", ["a"]) and events[-1].reset  # type: ignore[union-attr]
    assert f"went backwards (the server's current resourceVersion is 6, older than {held} seen before)" in caplog.text


class RestoreAtWatch(httpx.AsyncBaseTransport):
    """Restores ``snapshot`` into the server once, at a watch request: just before it reaches
    the server (``when="before"``: the server restarted on a restored etcd between the
    watcher's list and its watch), or the moment the server answers it with an error
    (``when="failed"``: between a watch's failed attempt and the next one)."""

    def __init__(self, server: ApiServer, when: str) -> None:
        self.server = server
        self.when = when
        self.transport = server.memory_transport()
        self.snapshot: Any = None

    def _restore(self) -> None:
        self.server.restore(self.snapshot)
        self.snapshot = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        watch = request.url.params.get("watch") == "true" and self.snapshot is not None
        if watch and self.when == "before":
            self._restore()
        response = await self.transport.handle_async_request(request)
        if watch and self.when == "failed" and response.status_code >= 500:
            self._restore()
        return response


async def test_a_restore_between_the_list_and_its_watch_is_noticed(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """The watch from the list's resourceVersion arrives at a server that went back before it:
    the server accepts it and sends only changes newer than that, so without the check made
    once the watch is in place the watcher would sit on the undone objects (mirror seed 11290).
    Paged lists only: a watch-list stream has no such gap, its state and its watch being one
    request."""
    events: list[WatcherEvent] = []
    board = RestoreAtWatch(api, "before")
    retry = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1)
    async with Client(Config.from_dict(api.kubeconfig), transport=board, retry=retry) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        board.snapshot = api.snapshot()
        for name in ("b", "c", "d"):
            await client.create(CONFIGMAPS, cm(name))
        options = WatchOptions(rng=random.Random(7), watch_list=False)
        watcher = Watcher(client, CONFIGMAPS, namespace="default", options=options)
        nursery.start_soon(watcher.run, events.append)
        with trio.move_on_after(10):
            await wait_until(lambda: watcher.statistics().resets == 1)
        assert board.snapshot is None
        assert watcher.statistics().resets == 1, "the first watch after the list was left on the restored server"
        await client.create(CONFIGMAPS, cm("after"))
        await wait_until(lambda: summary(events[-1]) == ("Added", "after"))
        nursery.cancel_scope.cancel()
    assert [summary(e) for e in events] == [
        ("Restarted", ["a", "b", "c", "d"]), ("Restarted", ["a"]), ("Added", "after")]
    assert events[1].reset  # type: ignore[union-attr]
    assert "went backwards (the server's current resourceVersion is 6, older than 9 seen before)" in caplog.text


async def test_a_watch_that_fails_to_establish_is_checked_again_before_the_next_attempt(
    api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[WatcherEvent] = []
    board = RestoreAtWatch(api, "failed")
    retry = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.1)
    async with Client(Config.from_dict(api.kubeconfig), transport=board, retry=retry) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        watcher = Watcher(client, CONFIGMAPS, namespace="default", options=WatchOptions(rng=random.Random(7)))
        nursery.start_soon(watcher.run, events.append)
        await wait_until(lambda: watcher.statistics().watches == 1)
        board.snapshot = api.snapshot()
        for name in ("b", "c", "d"):
            await client.create(CONFIGMAPS, cm(name))
        await wait_until(lambda: len(events) == 4)
        held = watcher.resource_version

        down = api.faults.fail(503, count=1, verbs={"watch"})
        assert api.faults.drop_watches() == 1
        with trio.move_on_after(10):
            await wait_until(lambda: watcher.statistics().resets == 1)
        assert down.hits == 1 and board.snapshot is None
        assert watcher.statistics().resets == 1, "the watch was established on the restored server unchecked"
        nursery.cancel_scope.cancel()
    assert summary(events[-1]) == ("Restarted", ["a"]) and events[-1].reset  # type: ignore[union-attr]
    assert f"went backwards (the server's current resourceVersion is 6, older than {held} seen before)" in caplog.text


LEASES = Resource(group="coordination.k8s.io", version="v1", kind="Lease", plural="leases", namespaced=True)


@pytest.mark.parametrize("watch_list", [False, True], ids=["paged-lists", "watch-list"])
async def test_an_idle_type_on_a_server_whose_watch_caches_hear_no_progress_is_listed_once(
    watch_list: bool, api: ApiServer, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """kube-apiserver 1.32 on etcd 3.4 (envtest: no progress notifications) answers any read
    "not older than" a list's resourceVersion with "too large" for a type nothing wrote to since
    others were written (a Lease renewed every 2 s here, as the server's own are): the watcher
    must not take that for history going back and list again every few seconds, and still
    hears of the type's next change. Watches are cut now and then, so the resumed ones are
    checked too (the only ones after a watch-list stream)."""
    events: list[WatcherEvent] = []
    async with memory_client(api) as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, cm("a"))
        api.faults.withhold_progress()

        async def renew() -> None:
            await client.create(LEASES, {"metadata": {"name": "l", "namespace": "default"}, "spec": {}})
            while True:
                await trio.sleep(2)
                await client.patch(LEASES, "l", {"spec": {"renewTime": f"{trio.current_time():.0f}"}}, namespace="default")

        nursery.start_soon(renew)
        await trio.sleep(1)
        options = WatchOptions(watch_list=watch_list, rng=random.Random(7))
        watcher = Watcher(client, CONFIGMAPS, namespace="default", options=options)
        nursery.start_soon(watcher.run, events.append)
        for _ in range(4):
            await trio.sleep(15)
            assert api.faults.drop_watches(resource="configmaps") == 1
        await trio.sleep(15)
        stats = watcher.statistics()
        assert (stats.lists, stats.resets, stats.gone) == (1, 0, 0), "history taken to have gone back"
        assert stats.watches >= 5
        await client.create(CONFIGMAPS, cm("b"))
        await wait_until(lambda: summary(events[-1]) == ("Added", "b"))
        nursery.cancel_scope.cancel()
    assert [summary(e) for e in events] == [("Restarted", ["a"]), ("Added", "b")]
    assert "went backwards" not in caplog.text


@pytest.mark.kube_real
@pytest.mark.timeout(120)
async def test_an_idle_type_on_a_real_server_is_listed_once(kube_target: KubeTarget) -> None:
    """On kube-apiserver 1.32 with etcd 3.4 (envtest's, without progress notifications), the
    watch cache of ConfigMaps stays where their last write left it while the server's own
    Lease renewals move the resourceVersion on: each read "not older than" a list answered
    "too large" after 3 s, and the watcher listed again every 3 s. Paged lists (as 1.32 there
    refuses watch-list), so every list is followed by the history check."""
    ns = kube_target.namespace
    events: list[WatcherEvent] = []
    async with kube_target.client(user_agent="idle-watcher") as client, trio.open_nursery() as nursery:
        await client.create(CONFIGMAPS, {"metadata": {"name": "a", "namespace": ns}})
        await client.create(LEASES, {"metadata": {"name": "moves-the-revision", "namespace": ns}, "spec": {}})
        options = WatchOptions(watch_list=False, rng=random.Random(7))
        watcher = Watcher(client, CONFIGMAPS, namespace=ns, options=options)
        nursery.start_soon(watcher.run, events.append)
        await trio.sleep(12)
        stats = watcher.statistics()
        assert (stats.lists, stats.resets, stats.gone, stats.stream_failures) == (1, 0, 0, 0), stats
        await client.create(CONFIGMAPS, {"metadata": {"name": "b", "namespace": ns}})
        with trio.fail_after(10):
            await wait_until(lambda: summary(events[-1]) == ("Added", "b"))
        nursery.cancel_scope.cancel()
    assert [summary(e) for e in events] == [("Restarted", ["a"]), ("Added", "b")]
