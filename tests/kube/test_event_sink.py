"""Tests of engine.kube.KubernetesEventSink against the embedded ApiServer."""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from engine import Controller, Event, EventSinkStatistics, EventType, Manager, ObjectRef, RunContext
from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Config,
    KubernetesEventSink,
    RetryPolicy,
    ServerError,
    TooManyRequestsError,
    TransportError,
)
from engine.kube.lowlevel import (
    EVENTS_RESOURCE,
    build_event,
    create_event,
)

WIDGET = ObjectRef("ConfigMap", "settings", "default")


def kubeconfig(server: str) -> Config:
    return Config.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def memory_client(api: ApiServer, **kwargs: Any) -> Client:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=1))
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), **kwargs)


def event(involved: ObjectRef = WIDGET, **kwargs: Any) -> Event:
    now = time.time()
    values: dict[str, Any] = {
        "involved": involved,
        "type": EventType.NORMAL,
        "reason": "ReconciliationSucceeded",
        "message": "applied revision 1",
        "controller": "settings",
        "timestamp": now,
        "first_timestamp": now,
    }
    values.update(kwargs)
    return Event(**values)


def sink(c: Client, **kwargs: Any) -> KubernetesEventSink:
    kwargs.setdefault("reporting_instance", "replica-1")
    return KubernetesEventSink(c, reporting_controller="example.com/engine", **kwargs)


async def events_in(c: Client, namespace: str = "default") -> list[dict[str, Any]]:
    return (await c.list(EVENTS_RESOURCE, namespace=namespace)).items


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(listen=False) as server:
        yield server


async def test_an_event_becomes_an_events_k8s_io_event(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as c:
        s = sink(c)
        await s.deliver(event(type=EventType.WARNING, reason="ReconciliationFailed", message="boom"))
        (stored,) = await events_in(c)
        assert stored["apiVersion"] == "events.k8s.io/v1"
        assert stored["regarding"] == {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings", "namespace": "default"}
        assert (stored["type"], stored["reason"], stored["note"], stored["action"]) == (
            "Warning", "ReconciliationFailed", "boom", "Reconcile"
        )
        assert (stored["reportingController"], stored["reportingInstance"]) == ("example.com/engine", "replica-1")
        assert stored["metadata"]["name"].startswith("settings.")
        assert "series" not in stored
        assert (s.created, s.patched, s.retries) == (1, 0, 0)
        assert sink(c, reporting_instance=None).reporting_instance == socket.gethostname()


async def test_regarding_carries_the_objects_uid_so_describe_finds_its_events(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as c:
        cms = await c.resource("v1", "ConfigMap")
        created = await c.create(cms, {"metadata": {"name": "settings"}}, namespace="default")
        uid = created["metadata"]["uid"]
        await sink(c).deliver(event())
        (stored,) = await events_in(c)
        assert stored["regarding"]["uid"] == uid
        # what `kubectl describe` asks for: core v1 Events by the involved object's uid
        core = await c.resource("v1", "Event")
        found = await c.list(
            core, namespace="default",
            field_selector=f"involvedObject.kind=ConfigMap,involvedObject.name=settings,involvedObject.uid={uid}",
        )
        assert [e["reason"] for e in found.items] == ["ReconciliationSucceeded"]


async def test_regarding_api_version_comes_from_discovery(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as c:
        s = sink(c)
        await s.deliver(event(ObjectRef("Lease", "leader", "default", group="coordination.k8s.io")))
        await s.deliver(event(ObjectRef("Widget", "w", "default", group="example.com")))
        await s.deliver(event(ObjectRef("Namespace", "team-a")))
        await s.deliver(event(ObjectRef("Lease", "other", "default", group="coordination.k8s.io")))
        stored = {e["regarding"]["name"]: e for e in await events_in(c)}
        assert stored["leader"]["regarding"]["apiVersion"] == "coordination.k8s.io/v1"
        assert stored["other"]["regarding"]["apiVersion"] == "coordination.k8s.io/v1"
        assert stored["w"]["regarding"] == {"kind": "Widget", "name": "w", "namespace": "default"}
        assert stored["team-a"]["regarding"] == {"apiVersion": "v1", "kind": "Namespace", "name": "team-a"}
        assert stored["team-a"]["metadata"]["namespace"] == "default", "cluster-scoped: namespace_default"

        other = sink(c, namespace_default="kube-system")
        await other.deliver(event(ObjectRef("Namespace", "team-b")))
        assert [e["regarding"]["name"] for e in await events_in(c, "kube-system")] == ["team-b"]


async def test_a_repeat_patches_the_series_of_the_event_it_created(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as c:
        s = sink(c)
        first = event()
        await s.deliver(first)
        await s.deliver(attrs.evolve(first, count=2, timestamp=first.timestamp + 30))
        await s.deliver(attrs.evolve(first, count=3, timestamp=first.timestamp + 60))
        (stored,) = await events_in(c)
        assert stored["series"]["count"] == 3
        assert stored["series"]["lastObservedTime"] > stored["eventTime"]
        assert (s.created, s.patched) == (1, 2)

        await s.deliver(attrs.evolve(first, message="applied revision 2"))
        assert len(await events_in(c)) == 2, "a different message is a different event"


async def test_a_repeat_of_an_unknown_or_expired_event_creates_a_new_one(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as c:
        s = sink(c, cache_size=1)
        a, b = event(reason="A"), event(reason="B")
        await s.deliver(a)
        await s.deliver(b)
        await s.deliver(attrs.evolve(a, count=2))
        assert len(await events_in(c)) == 3, "evicted from the LRU map: created anew"
        (b_event,) = [e for e in await events_in(c) if e["reason"] == "B"]
        await c.delete(EVENTS_RESOURCE, b_event["metadata"]["name"], namespace="default")
        await s.deliver(attrs.evolve(b, count=2))
        assert sorted(e["reason"] for e in await events_in(c)) == ["A", "A", "B"]
        assert (s.created, s.patched) == (4, 0)


async def test_a_500_is_retried_then_succeeds(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as c:
        s = sink(c, backoff=0.5)
        fault = api.faults.fail(500, count=2, resource="events", group="events.k8s.io", verbs={"create"})
        started = trio.current_time()
        await s.deliver(event())
        assert fault.hits == 2 and s.retries == 2
        assert 0.25 + 0.5 <= trio.current_time() - started <= 0.5 + 1.0
        assert len(await events_in(c)) == 1


async def test_429_retry_after_is_honoured(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_client(api) as c:
        s = sink(c)
        api.faults.throttle(count=1, retry_after=3, resource="events", verbs={"create"})
        started = trio.current_time()
        await s.deliver(event())
        assert trio.current_time() - started == pytest.approx(3.0, abs=0.01)
        assert len(await events_in(c)) == 1

        api.faults.throttle(count=1, retry_after=60, resource="events", verbs={"create"})
        with pytest.raises(TooManyRequestsError, match=r"^429 TooManyRequests"):
            await s.deliver(event(reason="Later"))
        assert trio.current_time() - started < 10, "a Retry-After beyond the bound is not waited for"


async def test_an_existing_event_of_the_same_name(api: ApiServer, autojump_clock: trio.testing.MockClock) -> None:
    """A create that finds its own Event (an earlier attempt was applied) counts as delivered;
    one that finds another event under its name retries under a new name."""
    async with memory_client(api) as c:
        s = sink(c)
        e = event()
        when = dt.datetime.fromtimestamp(int(e.timestamp * 1_000_000) / 1_000_000, dt.UTC)
        regarding = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}
        common: dict[str, Any] = {"action": "Reconcile", "reporting_controller": "example.com/engine", "reporting_instance": "replica-1"}
        await create_event(c, build_event(regarding, reason=e.reason, note=e.message, now=when, **common))
        await s.deliver(e)
        assert len(await events_in(c)) == 1 and s.created == 1

        later = attrs.evolve(e, timestamp=e.timestamp + 5)
        when = dt.datetime.fromtimestamp(int(later.timestamp * 1_000_000) / 1_000_000, dt.UTC)
        await create_event(c, build_event(regarding, reason="Other", note="another event", now=when, **common))
        await s.deliver(later)
        assert sorted(ev["reason"] for ev in await events_in(c)) == ["Other", e.reason, e.reason]
        assert s.created == 2 and s.retries == 1


async def test_a_refusing_server_makes_deliver_raise_after_its_attempts(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as c:
        s = sink(c, max_attempts=3, backoff=0.5, delivery_timeout=10)
        api.faults.fail(503, count=None, resource="events", verbs={"create"})
        started = trio.current_time()
        with pytest.raises(ServerError, match=r"^503 ServiceUnavailable: injected fault"):
            await s.deliver(event())
        assert trio.current_time() - started <= 0.5 + 1.0
        assert s.retries == 2 and s.created == 0
        api.faults.clear()
        api.faults.fail(403, count=1, resource="events", verbs={"create"})
        with pytest.raises(Exception, match=r"^403"):
            await s.deliver(event())
        assert s.retries == 2, "a 4xx is not retried"


async def test_a_black_holed_server_makes_deliver_raise_within_its_bound(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as c:
        s = sink(c, delivery_timeout=7)
        api.faults.add_latency(3600)
        started = trio.current_time()
        with pytest.raises(
            TransportError,
            match=r"^delivering event ReconciliationSucceeded about ConfigMap/default/settings must finish "
            r"within 7s \(delivery_timeout\), and it did not$",
        ):
            await s.deliver(event())
        assert trio.current_time() - started == pytest.approx(7.0)


async def test_an_unreachable_server_makes_deliver_raise(autojump_clock: trio.testing.MockClock) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Client(kubeconfig(f"http://127.0.0.1:{port}"), retry=RetryPolicy(max_attempts=1)) as c:
        s = sink(c, max_attempts=2, backoff=0.01, max_backoff=0.01)
        with trio.fail_after(5):
            with pytest.raises(TransportError, match=r"^cannot reach the API server at http://127\.0\.0\.1:\d+: connection refused"):
                await s.deliver(event())


def test_arguments() -> None:
    c = Client(kubeconfig("http://127.0.0.1:1"))
    with pytest.raises(ValueError, match=r"^reporting_controller must not be empty$"):
        KubernetesEventSink(c, reporting_controller="")
    with pytest.raises(ValueError, match=r"^max_attempts must be >= 1$"):
        KubernetesEventSink(c, reporting_controller="x", max_attempts=0)
    with pytest.raises(ValueError, match=r"^delivery_timeout must be > 0$"):
        KubernetesEventSink(c, reporting_controller="x", delivery_timeout=0)


async def test_a_manager_delivers_reconcile_events_through_the_sink(
    api: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with memory_client(api) as c:
        manager = Manager(handle_signals=False)
        s = sink(c)
        manager.add_sink(s)

        async def reconcile(ctx: RunContext) -> None:
            ctx.events.normal("Applied", "applied revision 1")

        controller = manager.add_controller(Controller("settings", reconcile))
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            controller.trigger(WIDGET)
            await trio.sleep(1)
            controller.trigger(WIDGET)
            await trio.sleep(1)
            manager.stop()
        stored = [e for e in await events_in(c) if e["reason"] == "Applied"]
        assert len(stored) == 1 and stored[0]["series"]["count"] == 2
        assert manager.events.statistics().sinks["kubernetes"] == EventSinkStatistics(delivered=2, failed=0)
