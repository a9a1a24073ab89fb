"""CustomResourceDefinitions: creating one serves its resource, deleting it stops serving."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._resources import resource_types_from_crd

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd(scope: str = "Namespaced", *, status: bool = True, plural: str = "widgets") -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": plural, "singular": plural[:-1], "kind": plural[:-1].capitalize(), "shortNames": ["wd"]},
            "versions": [version, {**version, "name": "v1beta1", "storage": False}],
        },
    }


async def test_crd_serves_namespaced_resource_with_status(client: httpx.AsyncClient) -> None:
    r = await client.post(CRDS, json=crd())
    assert r.status_code == 201
    assert r.json()["status"] == {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"]}
    got = (await client.get(f"{CRDS}/widgets.example.com")).json()
    conditions = {c["type"]: c["status"] for c in got["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    groups = {g["name"]: g for g in (await client.get("/apis")).json()["groups"]}
    assert [v["version"] for v in groups["example.com"]["versions"]] == ["v1", "v1beta1"]
    resources = (await client.get("/apis/example.com/v1")).json()["resources"]
    assert [x["name"] for x in resources] == ["widgets", "widgets/status"]
    path = "/apis/example.com/v1/namespaces/default/widgets"
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ok": True}}
    created = (await client.post(path, json=body)).json()
    assert "status" not in created and created["metadata"]["generation"] == 1
    created["spec"]["size"] = 2
    created["status"] = {"ok": True}
    updated = (await client.put(f"{path}/w", json=created)).json()
    assert updated["metadata"]["generation"] == 2 and "status" not in updated
    updated["status"] = {"ok": True}
    updated["spec"]["size"] = 99
    status = (await client.put(f"{path}/w/status", json=updated)).json()
    assert status["status"] == {"ok": True} and status["spec"]["size"] == 2 and status["metadata"]["generation"] == 2
    merge = {"content-type": "application/merge-patch+json"}
    patched = (await client.patch(f"{path}/w/status", json={"status": {"n": 1}}, headers=merge)).json()
    assert patched["status"] == {"ok": True, "n": 1}
    other = (await client.get("/apis/example.com/v1beta1/namespaces/default/widgets/w")).json()
    assert other["apiVersion"] == "example.com/v1beta1" and other["spec"]["size"] == 2
    smp = {"content-type": "application/strategic-merge-patch+json"}
    assert (await client.patch(f"{path}/w", json={}, headers=smp)).status_code == 415

    assert (await client.delete(f"{CRDS}/widgets.example.com")).status_code == 200
    assert (await client.get(path)).status_code == 404
    assert "example.com" not in {g["name"] for g in (await client.get("/apis")).json()["groups"]}


async def test_crd_cluster_scoped_without_status(client: httpx.AsyncClient) -> None:
    assert (await client.post(CRDS, json=crd("Cluster", status=False, plural="gadgets"))).status_code == 201
    path = "/apis/example.com/v1/gadgets"
    body = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "status": {"x": 1}}
    created = (await client.post(path, json=body)).json()
    assert created["status"] == {"x": 1} and "namespace" not in created["metadata"]
    assert (await client.get(f"{path}/g/status")).status_code == 404
    assert (await client.get("/apis/example.com/v1/namespaces/default/gadgets")).status_code == 404
    assert [i["metadata"]["name"] for i in (await client.get(path)).json()["items"]] == ["g"]


async def test_crd_deletion_ends_watches_with_deleted_events(client: httpx.AsyncClient) -> None:
    import json

    import trio

    await client.post(CRDS, json=crd())
    path = "/apis/example.com/v1/namespaces/default/widgets"
    await client.post(path, json={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    with trio.fail_after(5):
        async with client.stream("GET", path, params={"watch": "1"}) as r:
            lines = r.aiter_lines()
            assert json.loads(await lines.__anext__())["type"] == "ADDED"
            await client.delete(f"{CRDS}/widgets.example.com")
            rest = [json.loads(line) for line in [x async for x in lines] if line]
    assert [e["type"] for e in rest] == ["DELETED"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"metadata": {"name": "wrong.example.com"}}, "metadata.name"),
        ({"spec": {"group": "nodot"}}, "spec.group"),
        ({"spec": {"scope": "Galaxy"}}, "spec.scope"),
        ({"spec": {"versions": []}}, "spec.versions"),
    ],
)
def test_crd_validation(change: dict[str, Any], field: str) -> None:
    body = crd()
    for key, value in change.items():
        body[key] = {**body[key], **value}
    with pytest.raises(RequestRejected, match=rf'^CustomResourceDefinition.apiextensions.k8s.io "[^"]*" is invalid: {field}: '):
        resource_types_from_crd(body)


async def test_crd_invalid_answers_422(client: httpx.AsyncClient) -> None:
    body = crd()
    body["spec"]["scope"] = "Galaxy"
    r = await client.post(CRDS, json=body)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.scope"
