"""Tests of the Lease and Event helpers against the embedded ApiServer (memory transport)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer
from engine.kube import (
    AlreadyExistsError,
    Client,
    Config,
    ConflictError,
    Lease,
    NotFoundError,
)
from engine.kube.lowlevel import (
    CORE_EVENTS_RESOURCE,
    EVENTS_RESOURCE,
    build_event,
    create_event,
    create_lease,
    get_lease,
    patch_event_series,
    update_lease,
)

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=dt.UTC)


def memory_client(api: ApiServer) -> Client:
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport())


async def test_lease_create_get_update_with_optimistic_concurrency(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, memory_client(api) as client:
        with pytest.raises(NotFoundError):
            await get_lease(client, "leader", namespace="default")
        lease = Lease(
            name="leader",
            namespace="default",
            holder_identity="pod-a",
            lease_duration_seconds=15,
            acquire_time=NOW,
            renew_time=NOW,
            lease_transitions=0,
        )
        created = await create_lease(client, lease)
        assert created.resource_version and created.uid
        assert attrs.evolve(created, resource_version=None, uid=None) == lease
        with pytest.raises(AlreadyExistsError):
            await create_lease(client, lease)

        read = await get_lease(client, "leader", namespace="default")
        assert read == created
        renewed = await update_lease(client, attrs.evolve(read, renew_time=NOW + dt.timedelta(seconds=5)))
        assert renewed.renew_time == NOW + dt.timedelta(seconds=5)
        assert renewed.resource_version != read.resource_version

        stolen = attrs.evolve(read, holder_identity="pod-b", lease_transitions=1)
        with pytest.raises(ConflictError):
            await update_lease(client, stolen)
        assert (await get_lease(client, "leader", namespace="default")).holder_identity == "pod-a"
        with pytest.raises(ValueError, match=r"^update_lease needs the resource_version the lease was read at$"):
            await update_lease(client, lease)


def test_lease_round_trips_through_its_object() -> None:
    lease = Lease("l", "ns", "me", 10, NOW, NOW, 3, "42", "uid-1")
    obj = lease.to_object()
    assert obj["spec"]["renewTime"] == "2026-12-02T12:00:00.123456Z"
    assert obj["metadata"] == {"name": "l", "namespace": "ns", "resourceVersion": "42"}
    assert attrs.evolve(Lease.from_object(obj), uid="uid-1") == lease


REGARDING: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
}


def test_build_event_bodies() -> None:
    event = build_event(
        REGARDING,
        reason="ReconcileFailed",
        note="x" * 2000,
        type="Warning",
        action="Reconcile",
        reporting_controller="example.com/widgets",
        reporting_instance="pod-a",
        now=NOW,
    )
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["metadata"]["name"].startswith("w.") and event["metadata"]["namespace"] == "default"
    assert event["regarding"] == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert len(event["note"].encode()) == 1024 and event["note"].endswith("...")
    assert event["eventTime"] == "2026-12-02T12:00:00.123456Z"
    assert (event["type"], event["reportingController"], event["reportingInstance"]) == (
        "Warning",
        "example.com/widgets",
        "pod-a",
    )
    core = build_event(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        reason="Ready",
        note="up",
        action="Check",
        reporting_controller="c",
        reporting_instance="i",
        api_version="v1",
        now=NOW,
    )
    assert core["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert core["metadata"]["namespace"] == "default"
    assert (core["message"], core["count"], core["source"]) == ("up", 1, {"component": "c"})
    assert core["firstTimestamp"] == core["lastTimestamp"] == "2026-12-02T12:00:00Z"
    with pytest.raises(ValueError, match=r"^an event's type must be 'Normal' or 'Warning'$"):
        build_event(REGARDING, reason="R", note="n", action="a", reporting_controller="c",
                    reporting_instance="i", type="Bad")  # type: ignore[arg-type]


@pytest.mark.parametrize("api_version", ["events.k8s.io/v1", "v1"])
async def test_create_and_aggregate_events(
    api_version: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with ApiServer(listen=False) as api, memory_client(api) as client:
        event = build_event(
            REGARDING,
            reason="Progressing",
            note="working",
            action="Reconcile",
            reporting_controller="example.com/widgets",
            reporting_instance="pod-a",
            api_version=api_version,
            now=NOW,
        )
        created = await create_event(client, event)
        assert created["metadata"]["name"] == event["metadata"]["name"]
        later = NOW + dt.timedelta(seconds=30)
        patched = await patch_event_series(client, created, count=2, now=later)
        resource = EVENTS_RESOURCE if api_version != "v1" else CORE_EVENTS_RESOURCE
        stored = await client.get(resource, event["metadata"]["name"], namespace="default")
        if api_version == "v1":
            assert (stored["count"], stored["lastTimestamp"]) == (2, "2026-12-02T12:00:30Z")
        else:
            assert stored["series"] == {"count": 2, "lastObservedTime": "2026-12-02T12:00:30.123456Z"}
        assert patched["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        with pytest.raises(ValueError, match=r"^a series count must be >= 2"):
            await patch_event_series(client, created, count=1)
