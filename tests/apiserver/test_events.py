"""Events: one storage, two views, their validation and field selectors."""

from __future__ import annotations

import httpx

from .test_api import assert_status

NEW = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE = "/api/v1/namespaces/default/events"
REF = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cm1", "uid": "u-1"}


def new_event(name: str, **extra: object) -> dict[str, object]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "engine.dev/ctl",
        "reportingInstance": "ctl-1",
        "action": "Reconcile",
        "reason": "Synced",
        "type": "Normal",
        "note": "done",
        "regarding": REF,
        **extra,
    }


def core_event(name: str, **extra: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": REF,
        "reason": "Started",
        "message": "old style",
        "type": "Warning",
        "count": 3,
        "source": {"component": "kubelet", "host": "node-1"},
        **extra,
    }


async def test_one_storage_two_views(client: httpx.AsyncClient) -> None:
    created = (await client.post(NEW, json=new_event("n1", series={"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}))).json()
    assert created["deprecatedSource"] == {} and created["deprecatedFirstTimestamp"] is None
    core = (await client.get(f"{CORE}/n1")).json()
    assert core["apiVersion"] == "v1" and core["message"] == "done" and core["involvedObject"] == REF
    assert core["reportingComponent"] == "engine.dev/ctl" and core["source"] == {} and core["firstTimestamp"] is None
    assert core["series"]["count"] == 2 and core["metadata"]["uid"] == created["metadata"]["uid"]
    assert core["metadata"]["managedFields"][0]["apiVersion"] == "events.k8s.io/v1"
    await client.post(CORE, json=core_event("c1"))
    new = (await client.get(f"{NEW}/c1")).json()
    assert new["note"] == "old style" and new["regarding"] == REF and new["deprecatedCount"] == 3
    assert new["deprecatedSource"] == {"component": "kubelet", "host": "node-1"} and new["eventTime"] is None
    assert "reportingController" not in new and "count" not in new
    assert [e["metadata"]["name"] for e in (await client.get(NEW)).json()["items"]] == ["c1", "n1"]
    assert [e["metadata"]["name"] for e in (await client.get(CORE)).json()["items"]] == ["c1", "n1"]
    patched = await client.patch(
        f"{NEW}/n1",
        json={"series": {"count": 5, "lastObservedTime": "2026-01-01T00:00:05.000000Z"}},
        headers={"content-type": "application/merge-patch+json"},
    )
    assert patched.json()["series"]["count"] == 5 and patched.json()["apiVersion"] == "events.k8s.io/v1"


async def test_validation(client: httpx.AsyncClient) -> None:
    body = new_event("bad")
    del body["eventTime"]
    r = await client.post(NEW, json=body)
    assert_status(r, 422, "Invalid")
    assert {(c["reason"], c["field"]) for c in r.json()["details"]["causes"]} >= {("FieldValueRequired", "eventTime")}
    r = await client.post(NEW, json=new_event("bad", type="Odd", series={"count": 1}))
    assert {c["field"] for c in r.json()["details"]["causes"]} == {"type", "series.count", "series.lastObservedTime"}
    other = core_event("elsewhere", involvedObject={**REF, "namespace": "kube-system"})
    r = await client.post(CORE, json=other)
    assert_status(r, 422, "Invalid")
    assert r.json()["details"] == {
        "name": "elsewhere",
        "kind": "Event",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "kube-system": does not match event.namespace',
                "field": "involvedObject.namespace",
            }
        ],
    }
    await client.post(NEW, json=new_event("n1"))
    r = await client.patch(f"{NEW}/n1", json={"note": "changed"}, headers={"content-type": "application/merge-patch+json"})
    assert_status(r, 422, "Invalid")
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["message"]
    r = await client.patch(f"{CORE}/n1", json={"message": "changed"}, headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["message"] == "changed"


async def test_field_selectors_across_views(client: httpx.AsyncClient) -> None:
    await client.post(NEW, json=new_event("n1"))
    await client.post(CORE, json=core_event("c1"))

    async def names(path: str, selector: str) -> list[str]:
        r = await client.get(path, params={"fieldSelector": selector})
        return [e["metadata"]["name"] for e in r.json()["items"]]

    assert await names(CORE, "source=engine.dev/ctl") == ["n1"]
    assert await names(CORE, "source=kubelet") == ["c1"]
    assert await names(CORE, "reportingComponent=engine.dev/ctl") == ["n1"]
    assert await names(NEW, "reportingController=engine.dev/ctl") == ["n1"]
    assert await names(NEW, "regarding.name=cm1") == ["c1", "n1"]
    assert await names(CORE, "involvedObject.uid=u-1,type=Warning") == ["c1"]
