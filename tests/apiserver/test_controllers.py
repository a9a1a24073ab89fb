"""The controllers beside the API server: they act after the request, and only when present."""

from __future__ import annotations

import httpx

from engine.apiserver import ApiServer

from .conftest import CM, admin_headers, cm

CRD = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


async def test_work_happens_after_the_answer(api: ApiServer) -> None:
    async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
        owner = (await client.post(CM, json=cm("owner"))).json()
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        await client.post(CM, json={"metadata": {"name": "child", "ownerReferences": [ref]}})
        r = await client.request("DELETE", f"{CM}/owner", json={"propagationPolicy": "Foreground"})
        assert r.json()["metadata"]["finalizers"] == ["foregroundDeletion"]
        await api.settle()
        assert (await client.get(f"{CM}/owner")).status_code == 404
        assert (await client.get(f"{CM}/child")).status_code == 404


async def test_crd_deletion_removes_its_objects_first() -> None:
    async with ApiServer(controllers=False) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        await client.post(CRDS, json=CRD)
        await client.post(WIDGETS, json={"metadata": {"name": "w1"}})
        await client.post(WIDGETS, json={"metadata": {"name": "w2", "finalizers": ["hold"]}})
        r = await client.delete(f"{CRDS}/widgets.example.com")
        crd = r.json()
        assert crd["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
        assert crd["status"]["conditions"][-1]["type"] == "Terminating"
        await api.settle()
        assert (await client.get(f"{WIDGETS}/w1")).status_code == 404
        held = (await client.get(f"{WIDGETS}/w2")).json()
        assert held["metadata"]["deletionTimestamp"]
        assert (await client.get(f"{CRDS}/widgets.example.com")).status_code == 200
        held["metadata"]["finalizers"] = []
        await client.put(f"{WIDGETS}/w2", json=held)
        await api.settle()
        assert (await client.get(f"{CRDS}/widgets.example.com")).status_code == 404
        assert (await client.get(WIDGETS)).status_code == 404


async def test_without_controllers_finalizers_of_the_garbage_collector_stay() -> None:
    async with ApiServer(controllers=False) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        await client.post(CM, json=cm("owner"))
        r = await client.delete(f"{CM}/owner", params={"propagationPolicy": "Orphan"})
        assert r.json()["metadata"]["finalizers"] == ["orphan"]
        await api.settle()
        assert (await client.get(f"{CM}/owner")).json()["metadata"]["finalizers"] == ["orphan"]
        released = await client.patch(
            f"{CM}/owner", json={"metadata": {"finalizers": None}}, headers={"content-type": "application/merge-patch+json"}
        )
        assert released.status_code == 200
        assert (await client.get(f"{CM}/owner")).status_code == 404


async def test_after_a_restore_the_garbage_collector_knows_the_restored_owners(api: ApiServer) -> None:
    async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
        owner = (await client.post(CM, json=cm("owner"))).json()
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        await client.post(CM, json={"metadata": {"name": "child", "ownerReferences": [ref]}})
        snapshot = api.snapshot()
        await client.delete(f"{CM}/owner")
        await api.settle()
        assert (await client.get(f"{CM}/child")).status_code == 404

        api.restore(snapshot)
        assert (await client.get(f"{CM}/owner")).json()["metadata"]["uid"] == owner["metadata"]["uid"]
        assert (await client.get(f"{CM}/child")).status_code == 200
        await client.delete(f"{CM}/owner")
        await api.settle()
        assert (await client.get(f"{CM}/child")).status_code == 404
