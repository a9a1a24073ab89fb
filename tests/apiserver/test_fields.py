"""Request bodies: unknown and duplicate fields under fieldValidation, size limits, list options."""

from __future__ import annotations

import json

import httpx

from .conftest import CM, cm
from .test_api import assert_status


async def test_field_validation_modes(client: httpx.AsyncClient) -> None:
    body = {**cm("w", data={"a": "1"}), "bogus": 1}
    r = await client.post(CM, json=body)
    assert r.status_code == 201 and r.headers.get_list("warning") == ['299 - "unknown field \\"bogus\\""']
    assert "bogus" not in r.json()
    r = await client.post(CM, json={**body, "metadata": {"name": "s"}}, params={"fieldValidation": "Strict"})
    assert_status(r, 400, "BadRequest")
    assert r.json()["message"] == 'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "bogus"'
    r = await client.post(CM, json={**body, "metadata": {"name": "i"}}, params={"fieldValidation": "Ignore"})
    assert r.status_code == 201 and "warning" not in r.headers
    raw = b'{"metadata": {"name": "d"}, "data": {"a": "1", "a": "2"}}'
    r = await client.post(CM, content=raw, headers={"content-type": "application/json"})
    assert r.json()["data"] == {"a": "2"} and r.headers.get_list("warning") == ['299 - "duplicate field \\"data.a\\""']
    r = await client.post(CM, content=raw, headers={"content-type": "application/json"}, params={"fieldValidation": "Strict"})
    assert_status(r, 400, "BadRequest")
    assert_status(await client.post(CM, json=cm("x"), params={"fieldValidation": "Loose"}), 400, "BadRequest")


async def test_size_limits(client: httpx.AsyncClient) -> None:
    r = await client.post(CM, json=cm("big", data={"k": "x" * (3 * 1024 * 1024)}))
    assert_status(r, 413, "RequestEntityTooLarge")
    r = await client.post(CM, json=cm("mib", data={"k": "x" * (1024 * 1024 + 1)}))
    assert_status(r, 422, "Invalid")
    assert r.json()["details"]["causes"][0]["reason"] == "FieldValueTooLong"
    crd = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {}}
    assert (await client.post("/api/v1/namespaces/default/secrets", json=crd)).status_code == 201
    lease = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}
    r = await client.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=lease)
    assert [c["field"] for c in assert_status(r, 422, "Invalid")["details"]["causes"]] == ["spec.leaseDurationSeconds"]  # type: ignore[index]


async def test_list_resource_versions(client: httpx.AsyncClient) -> None:
    first = (await client.post(CM, json=cm("a", data={"v": "1"}))).json()
    rv = first["metadata"]["resourceVersion"]
    await client.put(f"{CM}/a", json=cm("a", data={"v": "2"}))
    await client.post(CM, json=cm("b"))
    exact = (await client.get(CM, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})).json()
    assert exact["metadata"]["resourceVersion"] == rv and [o["data"] for o in exact["items"]] == [{"v": "1"}]
    latest = (await client.get(CM, params={"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"})).json()
    assert [o["metadata"]["name"] for o in latest["items"]] == ["a", "b"]
    everything = (await client.get(CM, params={"resourceVersion": "0", "limit": "1"})).json()
    assert len(everything["items"]) == 2 and "continue" not in everything["metadata"]
    r = await client.get(CM, params={"resourceVersionMatch": "Exact"})
    details = assert_status(r, 422, "Invalid")["details"]
    assert details == {  # no name: the real server omits an empty one
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                "field": "resourceVersionMatch",
            }
        ],
    }
    r = await client.get(CM, params={"resourceVersion": "0", "resourceVersionMatch": "Exact"})
    assert_status(r, 422, "Invalid")
    assert json.loads(r.text)["details"]["causes"][0]["field"] == "resourceVersionMatch"


async def test_custom_resources_report_what_their_schema_prunes(client: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }
    assert (await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)).status_code == 201
    widgets = "/apis/example.com/v1/namespaces/default/widgets"
    r = await client.post(widgets, json={"metadata": {"name": "w"}, "spec": {"size": 1, "colour": "red"}})
    assert r.status_code == 201 and r.headers.get_list("warning") == ['299 - "unknown field \\"spec.colour\\""']
    r = await client.post(widgets, json={"metadata": {"name": "s"}, "spec": {"colour": "red"}}, params={"fieldValidation": "Strict"})
    assert_status(r, 400, "BadRequest")
    assert r.json()["message"].endswith('strict decoding error: unknown field "spec.colour"')
    raw = b'{"metadata": {"name": "d"}, "spec": {"size": 1, "size": 2}}'
    r = await client.post(widgets, content=raw, headers={"content-type": "application/json"}, params={"fieldValidation": "Strict"})
    assert r.json()["message"].endswith('strict decoding error: duplicate field "spec.size"')
