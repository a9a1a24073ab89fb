"""Answers the embedded server gives as kube-apiserver 1.32 does (issue 19: no known difference)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer

from .conftest import CM, cm
from .test_resources import CRDS, crd

APPLY = {"content-type": "application/apply-patch+yaml"}


def _status(r: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = r.json()
    body.pop("message")
    return body


async def test_json_patch_failures_and_unsupported_patch_types_carry_empty_details(client: httpx.AsyncClient) -> None:
    await client.post(CM, json=cm("p", data={"a": "1"}))
    json_patch = {"content-type": "application/json-patch+json"}
    for patch in ([{"op": "test", "path": "/data/a", "value": "2"}], [{"op": "remove", "path": "/data/nope"}]):
        r = await client.patch(f"{CM}/p", content=json.dumps(patch), headers=json_patch)
        assert r.status_code == 422
        assert _status(r) == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Invalid",
            "code": 422, "details": {},
        }
    r = await client.patch(f"{CM}/p", json={"data": {"x": "1"}}, headers={"content-type": "application/json"})
    assert r.status_code == 415
    assert _status(r) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "UnsupportedMediaType",
        "code": 415, "details": {},
    }


async def test_a_create_or_update_body_in_a_patch_or_unknown_media_type_is_415(client: httpx.AsyncClient) -> None:
    body = json.dumps(cm("m"))
    for media in ("application/merge-patch+json", "application/json-patch+json", "application/apply-patch+yaml",
                  "application/strategic-merge-patch+json", "text/plain", "application/x-yaml", "*/*"):
        for method, url in (("POST", CM), ("PUT", f"{CM}/m")):
            r = await client.request(method, url, content=body, headers={"content-type": media})
            assert (r.status_code, r.json()["message"]) == (415, (
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json, application/yaml, application/vnd.kubernetes.protobuf"
            )), (method, media)
            assert _status(r) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "reason": "UnsupportedMediaType", "code": 415}
    for media in ("application/json; charset=utf-8", "application/yaml"):
        assert (await client.post(CM, content=json.dumps(cm(f"ok-{media[12:16]}")),
                                  headers={"content-type": media})).status_code == 201
    assert (await client.put(f"{CM}/ok-json", content=json.dumps(cm("ok-json")))).status_code == 200


async def test_a_custom_object_larger_than_etcd_stores_answers_400(client: httpx.AsyncClient) -> None:
    assert (await client.post(CRDS, json=crd())).status_code == 201
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "huge"}, "spec": {"color": "x" * 1_600_000}}
    r = await client.post("/apis/example.com/v1/namespaces/default/widgets", json=body)
    assert r.status_code == 400
    assert _status(r) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "BadRequest", "code": 400}


async def test_a_watch_with_bookmarks_gets_one_2s_before_its_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            for seconds, expected in (("6", [(4, "BOOKMARK")]), ("2", []), ("1", [])):
                start = trio.current_time()
                params = {"watch": "1", "labelSelector": "suite=none", "allowWatchBookmarks": "true", "timeoutSeconds": seconds}
                async with client.stream("GET", CM, params=params) as r:
                    events = [(trio.current_time() - start, json.loads(line)["type"]) async for line in r.aiter_lines() if line]
                assert events == expected
                assert trio.current_time() - start == float(seconds)


async def test_a_paged_list_counts_the_remaining_items_only_without_selectors(client: httpx.AsyncClient) -> None:
    for i in range(4):
        await client.post(CM, json=cm(f"c{i}", metadata={"name": f"c{i}", "labels": {"a": "b"}}))
    page = (await client.get(CM, params={"limit": "1"})).json()["metadata"]
    assert page["remainingItemCount"] == 3 and page["continue"]
    for selector in ({"labelSelector": "a=b"}, {"fieldSelector": "metadata.name!=c0"}):
        page = (await client.get(CM, params={"limit": "1", **selector})).json()["metadata"]
        assert "remainingItemCount" not in page and page["continue"]
    last = (await client.get(CM, params={"limit": "4"})).json()["metadata"]
    assert "remainingItemCount" not in last and "continue" not in last


async def test_an_apply_conflict_has_only_causes_in_its_details(client: httpx.AsyncClient) -> None:
    def applied(manager: str, **data: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": data}

    r = await client.patch(f"{CM}/s", params={"fieldManager": "m1"}, content=json.dumps(applied("m1", a="1")), headers=APPLY)
    assert r.status_code == 201
    r = await client.patch(f"{CM}/s", json={"data": {"b": "1"}}, params={"fieldManager": "m2"},
                           headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200
    r = await client.patch(f"{CM}/s", params={"fieldManager": "m3"}, content=json.dumps(applied("m3", a="2")), headers=APPLY)
    assert r.status_code == 409
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Conflict", "code": 409,
        "message": 'Apply failed with 1 conflict: conflict with "m1": .data.a',
        "details": {"causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "m1"', "field": ".data.a"}]},
    }
    r = await client.patch(f"{CM}/s", params={"fieldManager": "m3"}, content=json.dumps(applied("m3", a="2", b="2")), headers=APPLY)
    assert r.status_code == 409
    assert r.json()["message"] == (
        'Apply failed with 2 conflicts: conflicts with "m1":\n- .data.a\nconflicts with "m2" using v1:\n- .data.b'
    )
    assert r.json()["details"] == {
        "causes": [
            {"reason": "FieldManagerConflict", "message": 'conflict with "m1"', "field": ".data.a"},
            {"reason": "FieldManagerConflict", "message": 'conflict with "m2" using v1', "field": ".data.b"},
        ]
    }


TABLE = {"accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}


async def _watch_lines(client: httpx.AsyncClient, headers: dict[str, str], **params: str) -> list[dict[str, Any]]:
    async with client.stream("GET", CM, params={"watch": "1", "timeoutSeconds": "1", **params}, headers=headers) as r:
        assert r.status_code == 200
        return [json.loads(line) async for line in r.aiter_lines() if line]


async def test_a_watch_served_as_tables_prints_the_headers_once(client: httpx.AsyncClient) -> None:
    a = (await client.post(CM, json=cm("a", data={"k": "v"}))).json()
    b = (await client.post(CM, json=cm("b"))).json()
    events = await _watch_lines(client, TABLE)
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]
    first, second = (e["object"] for e in events)
    assert [c["name"] for c in first["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert second["columnDefinitions"] is None
    for table, obj in ((first, a), (second, b)):
        assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
        assert table["metadata"] == {"resourceVersion": obj["metadata"]["resourceVersion"]}
        [row] = table["rows"]
        assert row["cells"][:2] == [obj["metadata"]["name"], len(obj.get("data", {}))]
        assert row["object"]["kind"] == "PartialObjectMetadata"
        assert row["object"]["metadata"]["uid"] == obj["metadata"]["uid"]
    events = await _watch_lines(client, TABLE, includeObject="None")
    assert [list(e["object"]["rows"][0]) for e in events] == [["cells"], ["cells"]]
    r = await client.get(CM, params={"watch": "1", "includeObject": "All"}, headers=TABLE)
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"


async def test_a_watch_served_as_partial_object_metadata(client: httpx.AsyncClient) -> None:
    await client.post(CM, json=cm("a", data={"k": "v"}))
    partial = {"accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}
    [event] = await _watch_lines(client, partial)
    assert event["object"]["kind"] == "PartialObjectMetadata" and "data" not in event["object"]
    assert event["object"]["metadata"]["name"] == "a"
    as_list = {"accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
    r = await client.get(CM, params={"watch": "1"}, headers=as_list)
    assert r.status_code == 406 and r.json()["reason"] == "NotAcceptable"


async def test_a_watch_from_before_the_watch_window_answers_410_in_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            first = int((await client.post(CM, json=cm("c0"))).json()["metadata"]["resourceVersion"])
            for i in range(1, 101):
                await client.post(CM, json=cm(f"c{i}"))
            params = {"watch": "1", "resourceVersion": str(first), "timeoutSeconds": "1"}
            async with client.stream("GET", CM, params=params) as r:
                replayed = [json.loads(line) async for line in r.aiter_lines() if line]
            assert len(replayed) == 100 and {e["type"] for e in replayed} == {"ADDED"}
            await trio.sleep(76)
            last = int((await client.post(CM, json=cm("late"))).json()["metadata"]["resourceVersion"])
            async with client.stream("GET", CM, params=params) as r:
                assert r.status_code == 200
                events = [json.loads(line) async for line in r.aiter_lines() if line]
            assert events == [
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"too old resource version: {first} ({first + 1})", "reason": "Expired", "code": 410,
                    },
                }
            ]
            params["resourceVersion"] = str(first + 1)
            async with client.stream("GET", CM, params=params) as r:
                events = [json.loads(line) async for line in r.aiter_lines() if line]
            assert len(events) == 100 and events[-1]["object"]["metadata"]["resourceVersion"] == str(last)
            lease = {"metadata": {"name": "l"}, "spec": {}}
            await client.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=lease)
            params["resourceVersion"] = str(first)
            async with client.stream("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases", params=params) as r:
                events = [json.loads(line) async for line in r.aiter_lines() if line]
            assert [e["type"] for e in events] == ["ADDED"]


async def test_discovery_lists_every_resource_of_the_groups_served(client: httpx.AsyncClient) -> None:
    apps = (await client.get("/apis/apps/v1")).json()["resources"]
    assert [r["name"] for r in apps] == [
        "controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
        "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
        "statefulsets/scale", "statefulsets/status",
    ]
    core = {r["name"]: r for r in (await client.get("/api/v1")).json()["resources"]}
    for name, namespaced, short in (
        ("endpoints", True, ["ep"]), ("limitranges", True, ["limits"]), ("podtemplates", True, None),
        ("replicationcontrollers", True, ["rc"]), ("resourcequotas", True, ["quota"]),
        ("persistentvolumeclaims", True, ["pvc"]), ("persistentvolumes", False, ["pv"]), ("nodes", False, ["no"]),
    ):
        assert (core[name]["namespaced"], core[name].get("shortNames")) == (namespaced, short)
    assert {"replicationcontrollers/scale", "replicationcontrollers/status", "nodes/status"} <= set(core)
    networking = [r["name"] for r in (await client.get("/apis/networking.k8s.io/v1")).json()["resources"]]
    assert networking == ["ingressclasses", "ingresses", "ingresses/status", "networkpolicies"]


async def test_newly_served_types_print_as_the_real_server_does(client: httpx.AsyncClient) -> None:
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    sts = {"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template}}
    uid = (await client.post("/apis/apps/v1/namespaces/default/statefulsets", json=sts)).json()["metadata"]["uid"]
    revisions = "/apis/apps/v1/namespaces/default/controllerrevisions"
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": uid, "controller": True}
    body = {"metadata": {"name": "db-1", "ownerReferences": [owner]}, "revision": 3, "data": {}}
    assert (await client.post(revisions, json=body)).status_code == 201
    table = (await client.get(f"{revisions}/db-1", headers=TABLE)).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Controller", "Revision", "Age"]
    assert table["rows"][0]["cells"][:3] == ["db-1", "statefulset.apps/db", 3]
    rcs = "/api/v1/namespaces/default/replicationcontrollers"
    rc = {"metadata": {"name": "rc"}, "spec": {"replicas": 2, "selector": {"app": "a", "tier": "b"}, "template": template}}
    assert (await client.post(rcs, json=rc)).status_code == 201
    scale = (await client.get(f"{rcs}/rc/scale")).json()
    assert (scale["spec"], scale["status"]) == ({"replicas": 2}, {"replicas": 0, "selector": "app=a,tier=b"})
    cells = (await client.get(f"{rcs}/rc", headers=TABLE)).json()["rows"][0]["cells"]
    assert cells[:4] + cells[5:] == ["rc", 2, 0, 0, "c", "nginx", "app=a,tier=b"]


async def test_service_ports_are_validated_cause_by_cause(client: httpx.AsyncClient) -> None:
    ports = [
        {"port": 80},
        {"name": "Web", "port": 80, "protocol": ""},
        {"name": "b", "port": 0, "protocol": "XX", "targetPort": "x--y"},
        {"name": "b", "port": 81, "targetPort": 70000, "nodePort": 30001},
        {"name": "c", "port": 82, "targetPort": "a-very-long-port-name"},
    ]
    body = {"metadata": {"name": "s"}, "spec": {"selector": {"app": "a"}, "ports": ports}}
    r = await client.post("/api/v1/namespaces/default/services", json=body)
    assert r.status_code == 422
    causes = {(c["field"], c["reason"]) for c in r.json()["details"]["causes"]}
    assert causes == {
        ("spec.ports[0].name", "FieldValueRequired"),
        ("spec.ports[1].name", "FieldValueInvalid"),
        ("spec.ports[1]", "FieldValueDuplicate"),
        ("spec.ports[2].port", "FieldValueInvalid"),
        ("spec.ports[2].protocol", "FieldValueNotSupported"),
        ("spec.ports[2].targetPort", "FieldValueInvalid"),
        ("spec.ports[3].name", "FieldValueDuplicate"),
        ("spec.ports[3].targetPort", "FieldValueInvalid"),
        ("spec.ports[3].nodePort", "FieldValueForbidden"),
        ("spec.ports[4].targetPort", "FieldValueInvalid"),
    }
    ok = {"metadata": {"name": "ok"}, "spec": {"ports": [{"port": 80, "protocol": "", "targetPort": 0}]}}
    created = (await client.post("/api/v1/namespaces/default/services", json=ok)).json()
    assert created["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]


@pytest.fixture
async def bare() -> AsyncIterator[httpx.AsyncClient]:
    """A client of a server without controllers, as the recording's (no controller manager)."""
    async with ApiServer(seed=1, controllers=False, listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
            yield client


async def test_deletes_consume_resource_versions_as_the_real_server(bare: httpx.AsyncClient) -> None:
    client = bare

    async def rv() -> int:
        return int((await client.get(CM)).json()["metadata"]["resourceVersion"])

    held = {"metadata": {"name": "held", "finalizers": ["x.test/hold"]}}
    created = int((await client.post(CM, json=held)).json()["metadata"]["resourceVersion"])
    deleting = (await client.request("DELETE", f"{CM}/held", json={"propagationPolicy": "Orphan"})).json()
    assert deleting["metadata"]["finalizers"] == ["x.test/hold", "orphan"]
    assert int(deleting["metadata"]["resourceVersion"]) == created + 1 == await rv()
    again = (await client.delete(f"{CM}/held")).json()
    assert again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    merge = {"content-type": "application/merge-patch+json"}
    released = (await client.patch(f"{CM}/held", json={"metadata": {"finalizers": None}}, headers=merge)).json()
    assert released["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    assert await rv() == created + 2
    await client.post(CM, json=cm("fg"))
    before = await rv()
    fg = (await client.request("DELETE", f"{CM}/fg", json={"propagationPolicy": "Foreground"})).json()
    assert fg["metadata"]["finalizers"] == ["foregroundDeletion"] and int(fg["metadata"]["resourceVersion"]) == before + 1


async def test_deletecollection_answers_the_removed_objects_at_their_last_resource_version(
    client: httpx.AsyncClient,
) -> None:
    plain = (await client.post(CM, json=cm("a", metadata={"name": "a", "labels": {"del": "1"}}))).json()
    body = cm("b", metadata={"name": "b", "labels": {"del": "1"}, "finalizers": ["x.test/hold"]})
    kept = (await client.post(CM, json=body)).json()
    answer = (await client.delete(CM, params={"labelSelector": "del=1"})).json()
    by_name = {i["metadata"]["name"]: i for i in answer["items"]}
    assert by_name["a"]["metadata"]["resourceVersion"] == plain["metadata"]["resourceVersion"]
    assert int(by_name["b"]["metadata"]["resourceVersion"]) > int(kept["metadata"]["resourceVersion"])
    assert "deletionTimestamp" in by_name["b"]["metadata"]


async def test_a_new_crd_is_answered_before_its_status_controllers_write(bare: httpx.AsyncClient) -> None:
    client = bare
    created = (await client.post(CRDS, json=crd())).json()
    assert created["status"] == {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"]}
    assert [(e["manager"], e["operation"], e.get("subresource")) for e in created["metadata"]["managedFields"]] == [
        ("python-httpx", "Update", None)
    ]
    params = {"watch": "1", "resourceVersion": str(int(created["metadata"]["resourceVersion"]) - 1), "timeoutSeconds": "1"}
    async with client.stream("GET", CRDS, params=params) as r:
        events = [json.loads(line) async for line in r.aiter_lines() if line]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED"] and rvs == [rvs[0], rvs[0] + 1, rvs[0] + 2]
    states = [{c["type"]: (c["status"], c["reason"]) for c in e["object"]["status"].get("conditions", [])} for e in events]
    assert states == [
        {},
        {"NamesAccepted": ("True", "NoConflicts"), "Established": ("False", "Installing")},
        {"NamesAccepted": ("True", "NoConflicts"), "Established": ("True", "InitialNamesAccepted")},
    ]
    final = events[-1]["object"]
    assert final["status"]["acceptedNames"]["plural"] == "widgets"
    [status_entry] = [e for e in final["metadata"]["managedFields"] if e.get("subresource") == "status"]
    assert (status_entry["manager"], status_entry["operation"]) == ("kube-apiserver", "Update")
    assert set(status_entry["fieldsV1"]["f:status"]) == {"f:acceptedNames", "f:conditions"}
    assert (await client.get("/apis/example.com/v1/namespaces/default/widgets")).status_code == 200


async def test_write_options_are_validated_as_the_real_server(client: httpx.AsyncClient) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}

    def invalid(kind: str, reason: str, field: str, message: str) -> dict[str, Any]:
        return {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
            "message": f'{kind}.meta.k8s.io "" is invalid: {field}: {message}',
            "details": {
                "group": "meta.k8s.io", "kind": kind, "causes": [{"reason": reason, "message": message, "field": field}],
            },
        }

    r = await client.patch(f"{CM}/a", content=json.dumps(body), headers=APPLY)
    assert r.status_code == 422
    assert r.json() == invalid("PatchOptions", "FieldValueRequired", "fieldManager", "Required value: is required for apply patch")
    r = await client.patch(f"{CM}/a", params={"force": "false"}, json={"data": {}}, headers={"content-type": "application/merge-patch+json"})
    assert r.json() == invalid("PatchOptions", "FieldValueForbidden", "force", "Forbidden: may not be specified for non-apply patch")
    r = await client.post(CM, params={"fieldManager": "m" * 129}, json=body)
    assert r.json() == invalid("CreateOptions", "FieldValueTooLong", "fieldManager", "Too long: may not be more than 128 bytes")
    assert (await client.post(CM, params={"fieldManager": "m" * 128}, json=body)).status_code == 201
    r = await client.put(f"{CM}/a", params={"fieldManager": "a\tb"}, json=body)
    assert r.status_code == 422 and r.json()["details"]["kind"] == "UpdateOptions"
