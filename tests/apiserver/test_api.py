"""Direct HTTP tests against the embedded server over real sockets (httpx)."""

from __future__ import annotations

import httpx
import trio
import trio.testing

from engine.apiserver import ApiServer

from .conftest import CM, admin_headers, cm


def assert_status(r: httpx.Response, code: int, reason: str) -> dict[str, object]:
    assert r.status_code == code, r.text
    body = r.json()
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["reason"] == reason
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    return body  # type: ignore[no-any-return]


async def test_discovery(client: httpx.AsyncClient) -> None:
    assert (await client.get("/version")).json()["major"] == "1"
    assert (await client.get("/api")).json()["versions"] == ["v1"]
    core = (await client.get("/api/v1")).json()
    names = {r["name"] for r in core["resources"]}
    assert {"namespaces", "namespaces/status", "namespaces/finalize", "configmaps", "secrets", "events"} <= names
    assert {"services", "pods", "serviceaccounts", "serviceaccounts/token"} <= names
    resources = {r["name"]: r for r in core["resources"]}
    assert "deletecollection" not in resources["namespaces"]["verbs"]
    assert "deletecollection" in resources["configmaps"]["verbs"]
    assert resources["serviceaccounts/token"]["kind"] == "TokenRequest"
    groups = {g["name"] for g in (await client.get("/apis")).json()["groups"]}
    assert {"coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io", "apps", "batch", "rbac.authorization.k8s.io"} <= groups
    apps = {r["name"]: r for r in (await client.get("/apis/apps/v1")).json()["resources"]}
    assert apps["deployments/scale"]["kind"] == "Scale" and apps["deployments/scale"]["group"] == "autoscaling"
    assert apps["deployments"]["shortNames"] == ["deploy"] and apps["deployments"]["categories"] == ["all"]
    reviews = (await client.get("/apis/authorization.k8s.io/v1")).json()["resources"]
    assert {r["name"]: r["verbs"] for r in reviews}["selfsubjectaccessreviews"] == ["create"]
    leases = (await client.get("/apis/coordination.k8s.io/v1")).json()
    assert leases["resources"][0]["name"] == "leases"
    assert (await client.get("/apis/coordination.k8s.io")).json()["preferredVersion"]["version"] == "v1"
    index = (await client.get("/openapi/v3")).json()["paths"]
    doc = (await client.get(index["api/v1"]["serverRelativeURL"])).json()
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "ConfigMap"
    assert (await client.get("/apis/nope/v1")).status_code == 404


async def test_crud_and_metadata(client: httpx.AsyncClient) -> None:
    r = await client.post(CM, json=cm("a", data={"k": "v"}))
    assert r.status_code == 201
    created = r.json()
    meta = created["metadata"]
    assert meta["namespace"] == "default" and "generation" not in meta  # ConfigMaps have none
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    rv1 = int(meta["resourceVersion"])
    got = (await client.get(f"{CM}/a")).json()
    assert got["data"] == {"k": "v"} and got["kind"] == "ConfigMap" and got["apiVersion"] == "v1"
    got["data"]["k"] = "w"
    updated = (await client.put(f"{CM}/a", json=got)).json()
    assert int(updated["metadata"]["resourceVersion"]) > rv1
    assert "generation" not in updated["metadata"]
    same = (await client.put(f"{CM}/a", json=updated)).json()
    assert same["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    r = await client.delete(f"{CM}/a")
    assert r.status_code == 200 and r.json()["status"] == "Success"
    body = assert_status(await client.get(f"{CM}/a"), 404, "NotFound")
    assert body["details"] == {"name": "a", "kind": "configmaps"}


async def test_resource_versions_increase_globally(client: httpx.AsyncClient) -> None:
    rvs = []
    for i in range(3):
        rvs.append(int((await client.post(CM, json=cm(f"c{i}"))).json()["metadata"]["resourceVersion"]))
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
    r = await client.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=lease)
    rvs.append(int(r.json()["metadata"]["resourceVersion"]))
    assert rvs == sorted(rvs) and len(set(rvs)) == 4
    listed = (await client.get(CM)).json()
    assert listed["kind"] == "ConfigMapList" and int(listed["metadata"]["resourceVersion"]) >= rvs[-1]


async def test_conflicts_and_errors(client: httpx.AsyncClient) -> None:
    first = (await client.post(CM, json=cm("x"))).json()
    body = assert_status(await client.post(CM, json=cm("x")), 409, "AlreadyExists")
    assert body["details"] == {"name": "x", "kind": "configmaps"}  # no group for the core group
    await client.put(f"{CM}/x", json={**first, "data": {"a": "1"}})
    stale = assert_status(await client.put(f"{CM}/x", json={**first, "data": {"a": "2"}}), 409, "Conflict")
    assert "the object has been modified" in str(stale["message"])
    invalid = assert_status(await client.post(CM, json=cm("Bad_Name")), 422, "Invalid")
    assert invalid["details"]["kind"] == "ConfigMap"  # type: ignore[index]
    assert invalid["details"]["causes"][0]["field"] == "metadata.name"  # type: ignore[index]
    missing = assert_status(
        await client.post("/api/v1/namespaces/ghost/configmaps", json=cm("y")), 404, "NotFound"
    )
    assert missing["message"] == 'namespaces "ghost" not found'
    assert_status(await client.put(f"{CM}/nope", json=cm("nope")), 404, "NotFound")
    assert_status(await client.post(CM, content=b"{", headers={"content-type": "application/json"}), 400, "BadRequest")
    assert_status(
        await client.post(
            "/api/v1/namespaces/kube-system/configmaps", json={**cm("z"), "metadata": {"name": "z", "namespace": "default"}}
        ),
        400,
        "BadRequest",
    )
    assert_status(
        await client.post(CM, content=b"k8s\x00", headers={"content-type": "application/vnd.kubernetes.protobuf"}),
        415,
        "UnsupportedMediaType",
    )
    assert_status(
        await client.post(CM, content=b"\xa1", headers={"content-type": "application/cbor"}), 415, "UnsupportedMediaType"
    )


async def test_generate_name_and_dry_run(client: httpx.AsyncClient) -> None:
    r = await client.post(CM, json={"metadata": {"generateName": "gen-"}})
    assert r.json()["metadata"]["name"].startswith("gen-") and len(r.json()["metadata"]["name"]) == 9
    r = await client.post(CM, params={"dryRun": "All"}, json=cm("dry"))
    assert r.status_code == 201
    assert (await client.get(f"{CM}/dry")).status_code == 404


async def test_label_and_field_selectors(client: httpx.AsyncClient) -> None:
    for name, labels in [("a", {"app": "web", "tier": "front"}), ("b", {"app": "db"}), ("c", {"tier": "back"})]:
        await client.post(CM, json={"metadata": {"name": name, "labels": labels}})

    async def names(**params: str) -> list[str]:
        r = await client.get(CM, params=params)
        assert r.status_code == 200, r.text
        return [i["metadata"]["name"] for i in r.json()["items"]]

    assert await names(labelSelector="app=web") == ["a"]
    assert await names(labelSelector="app==db") == ["b"]
    assert await names(labelSelector="app!=web") == ["b", "c"]
    assert await names(labelSelector="app in (web,db)") == ["a", "b"]
    assert await names(labelSelector="tier notin (front)") == ["b", "c"]
    assert await names(labelSelector="app") == ["a", "b"]
    assert await names(labelSelector="!app") == ["c"]
    assert await names(labelSelector="app,tier") == ["a"]
    assert await names(fieldSelector="metadata.name=b") == ["b"]
    assert await names(fieldSelector="metadata.name!=b,metadata.namespace=default") == ["a", "c"]
    all_ns = (await client.get("/api/v1/configmaps", params={"fieldSelector": "metadata.namespace=default"})).json()
    assert len(all_ns["items"]) == 3
    assert_status(await client.get(CM, params={"labelSelector": "a in (b"}), 400, "BadRequest")


async def test_paging(client: httpx.AsyncClient) -> None:
    for i in range(7):
        await client.post(CM, json=cm(f"p{i}"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        params = {"limit": "3"}
        if token:
            params["continue"] = token
        body = (await client.get(CM, params=params)).json()
        seen += [i["metadata"]["name"] for i in body["items"]]
        pages += 1
        token = body["metadata"].get("continue")
        if not token:
            break
        assert body["metadata"]["remainingItemCount"] == 7 - len(seen)
    assert pages == 3 and seen == [f"p{i}" for i in range(7)]
    assert_status(await client.get(CM, params={"limit": "2", "continue": "garbage!"}), 400, "BadRequest")


async def test_continue_token_expires_with_history() -> None:
    async with ApiServer(history_size=2) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        for i in range(3):
            await client.post(CM, json=cm(f"p{i}"))
        token = (await client.get(CM, params={"limit": "1"})).json()["metadata"]["continue"]
        for i in range(3):
            await client.post(CM, json=cm(f"q{i}"))
        assert_status(await client.get(CM, params={"limit": "1", "continue": token}), 410, "Expired")


async def test_status_subresource_and_generation(client: httpx.AsyncClient) -> None:
    ns = (await client.post("/api/v1/namespaces", json={"metadata": {"name": "team"}, "status": {"phase": "X"}})).json()
    assert ns["status"]["phase"] == "Active"
    ns["status"] = {"phase": "Weird"}
    ns["metadata"]["labels"] = {"a": "b"}
    kept = (await client.put("/api/v1/namespaces/team", json=ns)).json()
    assert kept["status"]["phase"] == "Active" and kept["metadata"]["labels"]["a"] == "b"
    kept["status"] = {"phase": "Weird"}
    kept["metadata"]["labels"] = {}
    status_only = (await client.put("/api/v1/namespaces/team/status", json=kept)).json()
    assert status_only["status"]["phase"] == "Weird" and status_only["metadata"]["labels"]["a"] == "b"
    assert "generation" not in status_only["metadata"]


async def test_secrets_string_data(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/api/v1/namespaces/default/secrets", json={"metadata": {"name": "s"}, "stringData": {"pw": "hunter2"}}
    )
    assert r.json()["data"] == {"pw": "aHVudGVyMg=="} and "stringData" not in r.json()


async def test_finalizers(client: httpx.AsyncClient) -> None:
    await client.post(CM, json={"metadata": {"name": "f", "finalizers": ["example.com/hold"]}})
    r = await client.delete(f"{CM}/f")
    assert r.status_code == 200
    held = r.json()
    assert held["kind"] == "ConfigMap"
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["deletionGracePeriodSeconds"] == 0
    still = (await client.get(f"{CM}/f")).json()
    assert still["metadata"]["finalizers"] == ["example.com/hold"]
    add = {**still, "metadata": {**still["metadata"], "finalizers": ["example.com/hold", "other"]}}
    assert_status(await client.put(f"{CM}/f", json=add), 422, "Invalid")
    still["metadata"]["finalizers"] = []
    r = await client.put(f"{CM}/f", json=still)
    assert r.status_code == 200
    assert (await client.get(f"{CM}/f")).status_code == 404


async def test_delete_preconditions(client: httpx.AsyncClient) -> None:
    obj = (await client.post(CM, json=cm("d"))).json()
    body = {"preconditions": {"uid": "not-it"}}
    r = await client.request("DELETE", f"{CM}/d", json=body)
    assert_status(r, 409, "Conflict")
    r = await client.request("DELETE", f"{CM}/d", json={"preconditions": {"resourceVersion": "1"}})
    assert_status(r, 409, "Conflict")
    good = {"preconditions": {"uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"]}}
    assert (await client.request("DELETE", f"{CM}/d", json=good)).status_code == 200


def owned(name: str, owner: dict[str, object], block: bool = False, **extra: object) -> dict[str, object]:
    meta = owner["metadata"]
    assert isinstance(meta, dict)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}
    if block:
        ref["blockOwnerDeletion"] = True
    return {"metadata": {"name": name, "ownerReferences": [ref], **extra}}


async def test_cascading_delete_background(api: ApiServer, client: httpx.AsyncClient) -> None:
    owner = (await client.post(CM, json=cm("owner"))).json()
    child = (await client.post(CM, json=owned("child", owner))).json()
    await client.post(CM, json=owned("grandchild", child))
    other = (await client.post(CM, json=cm("other"))).json()
    shared = owned("shared", owner)
    shared["metadata"]["ownerReferences"].append(  # type: ignore[index]
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": other["metadata"]["uid"]}
    )
    await client.post(CM, json=shared)
    r = await client.delete(f"{CM}/owner")
    assert r.json()["kind"] == "Status"
    await api.settle()
    assert (await client.get(f"{CM}/child")).status_code == 404
    assert (await client.get(f"{CM}/grandchild")).status_code == 404
    kept = (await client.get(f"{CM}/shared")).json()
    assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["other"]


async def test_cascading_delete_orphan(api: ApiServer, client: httpx.AsyncClient) -> None:
    owner = (await client.post(CM, json=cm("owner"))).json()
    await client.post(CM, json=owned("child", owner))
    r = await client.delete(f"{CM}/owner", params={"propagationPolicy": "Orphan"})
    assert r.json()["metadata"]["finalizers"] == ["orphan"]
    await api.settle()
    assert (await client.get(f"{CM}/owner")).status_code == 404
    child = (await client.get(f"{CM}/child")).json()
    assert "ownerReferences" not in child["metadata"]


async def test_cascading_delete_foreground(api: ApiServer, client: httpx.AsyncClient) -> None:
    owner = (await client.post(CM, json=cm("owner"))).json()
    await client.post(CM, json=owned("child", owner, block=True, finalizers=["hold"]))
    await client.post(CM, json=owned("loose", owner))
    r = await client.request("DELETE", f"{CM}/owner", json={"propagationPolicy": "Foreground"})
    assert r.json()["metadata"]["finalizers"] == ["foregroundDeletion"]
    await api.settle()
    child = (await client.get(f"{CM}/child")).json()
    assert child["metadata"]["deletionTimestamp"]
    assert (await client.get(f"{CM}/loose")).status_code == 404
    assert (await client.get(f"{CM}/owner")).status_code == 200
    child["metadata"]["finalizers"] = []
    await client.put(f"{CM}/child", json=child)
    await api.settle()
    assert (await client.get(f"{CM}/child")).status_code == 404
    assert (await client.get(f"{CM}/owner")).status_code == 404


async def test_dependent_of_a_missing_owner_is_collected(api: ApiServer, client: httpx.AsyncClient) -> None:
    ghost = {"metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}}
    await client.post(CM, json=owned("orphaned", ghost))
    await api.settle()
    assert (await client.get(f"{CM}/orphaned")).status_code == 404


async def test_namespace_deletion_removes_contents(api: ApiServer, client: httpx.AsyncClient) -> None:
    ns = (await client.post("/api/v1/namespaces", json={"metadata": {"name": "gone"}})).json()
    assert ns["spec"] == {"finalizers": ["kubernetes"]} and ns["status"] == {"phase": "Active"}
    await client.post("/api/v1/namespaces/gone/configmaps", json={"metadata": {"name": "x", "finalizers": ["hold"]}})
    await client.post("/api/v1/namespaces/gone/configmaps", json={"metadata": {"name": "y"}})
    r = await client.delete("/api/v1/namespaces/gone")
    assert r.status_code == 200 and r.json()["status"]["phase"] == "Terminating"
    forbidden = await client.post("/api/v1/namespaces/gone/configmaps", json=cm("z"))
    assert_status(forbidden, 403, "Forbidden")
    assert forbidden.json()["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    await api.settle()
    assert (await client.get("/api/v1/namespaces/gone/configmaps/y")).status_code == 404
    x = (await client.get("/api/v1/namespaces/gone/configmaps/x")).json()
    assert x["metadata"]["deletionTimestamp"]
    assert (await client.get("/api/v1/namespaces/gone")).json()["status"]["phase"] == "Terminating"
    x["metadata"]["finalizers"] = []
    await client.put("/api/v1/namespaces/gone/configmaps/x", json=x)
    await api.settle()
    assert (await client.get("/api/v1/namespaces/gone")).status_code == 404


async def test_without_controllers_nothing_is_collected() -> None:
    async with ApiServer(controllers=False) as api, httpx.AsyncClient(base_url=api.url, headers=admin_headers(api)) as client:
        owner = (await client.post(CM, json=cm("owner"))).json()
        await client.post(CM, json=owned("child", owner))
        await client.delete(f"{CM}/owner")
        await client.post("/api/v1/namespaces", json={"metadata": {"name": "gone"}})
        await client.post("/api/v1/namespaces/gone/configmaps", json=cm("x"))
        ns = (await client.delete("/api/v1/namespaces/gone")).json()
        await api.settle()
        assert (await client.get(f"{CM}/child")).status_code == 200
        assert (await client.get("/api/v1/namespaces/gone/configmaps/x")).status_code == 200
        assert (await client.get("/api/v1/namespaces/gone")).json()["status"]["phase"] == "Terminating"
        await client.delete("/api/v1/namespaces/gone/configmaps/x")
        ns["spec"]["finalizers"] = []
        assert (await client.put("/api/v1/namespaces/gone/finalize", json=ns)).status_code == 200
        assert (await client.get("/api/v1/namespaces/gone")).status_code == 404


async def test_merge_json_and_strategic_patches(client: httpx.AsyncClient) -> None:
    await client.post(CM, json={"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}})
    merge = {"content-type": "application/merge-patch+json"}
    r = await client.patch(f"{CM}/p", json={"metadata": {"labels": {"a": None}}, "data": {"y": "2"}}, headers=merge)
    assert r.json()["metadata"]["labels"] == {"b": "2"} and r.json()["data"] == {"x": "1", "y": "2"}
    jp = {"content-type": "application/json-patch+json"}
    ops = [{"op": "test", "path": "/data/x", "value": "1"}, {"op": "replace", "path": "/data/x", "value": "9"}]
    assert (await client.patch(f"{CM}/p", json=ops, headers=jp)).json()["data"]["x"] == "9"
    bad = [{"op": "test", "path": "/data/x", "value": "nope"}]
    assert_status(await client.patch(f"{CM}/p", json=bad, headers=jp), 422, "Invalid")
    smp = {"content-type": "application/strategic-merge-patch+json"}
    body = {"metadata": {"finalizers": ["f1"]}, "data": {"$patch": "replace", "only": "this"}}
    r = await client.patch(f"{CM}/p", json=body, headers=smp)
    assert r.json()["data"] == {"only": "this"} and r.json()["metadata"]["finalizers"] == ["f1"]
    r = await client.patch(f"{CM}/p", json={"metadata": {"finalizers": ["f2"]}}, headers=smp)
    assert r.json()["metadata"]["finalizers"] == ["f1", "f2"]
    r = await client.patch(f"{CM}/p", json={"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}, headers=smp)
    assert r.json()["metadata"]["finalizers"] == ["f2"]
    stale = {"metadata": {"resourceVersion": "2"}, "data": {"z": "1"}}
    assert_status(await client.patch(f"{CM}/p", json=stale, headers=merge), 409, "Conflict")
    assert_status(await client.patch(f"{CM}/nope", json={}, headers=merge), 404, "NotFound")
    r = await client.patch(f"{CM}/p", json={}, headers={"content-type": "text/plain"})
    assert_status(r, 415, "UnsupportedMediaType")


APPLY = {"content-type": "application/apply-patch+yaml"}


async def test_server_side_apply(client: httpx.AsyncClient) -> None:
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s\ndata:\n  a: '1'\n  b: '2'\n"
    r = await client.patch(f"{CM}/s", content=config, headers=APPLY, params={"fieldManager": "alice"})
    assert r.status_code == 201, r.text
    managed = r.json()["metadata"]["managedFields"]
    assert managed[0]["manager"] == "alice" and managed[0]["operation"] == "Apply"
    assert managed[0]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    config2 = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s\ndata:\n  a: '1'\n"
    r = await client.patch(f"{CM}/s", content=config2, headers=APPLY, params={"fieldManager": "alice"})
    assert r.json()["data"] == {"a": "1"}
    bob = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s\ndata:\n  a: '9'\n"
    r = await client.patch(f"{CM}/s", content=bob, headers=APPLY, params={"fieldManager": "bob"})
    body = assert_status(r, 409, "Conflict")
    assert body["details"]["causes"][0]["field"] == ".data.a"  # type: ignore[index]
    r = await client.patch(f"{CM}/s", content=bob, headers=APPLY, params={"fieldManager": "bob", "force": "true"})
    assert r.status_code == 200 and r.json()["data"] == {"a": "9"}
    managers = {e["manager"]: e["fieldsV1"] for e in r.json()["metadata"]["managedFields"]}
    assert managers == {"bob": {"f:data": {"f:a": {}}}}
    r = await client.patch(f"{CM}/s", content=bob, headers=APPLY)
    assert_status(r, 422, "Invalid")


async def test_unknown_routes(client: httpx.AsyncClient) -> None:
    assert_status(await client.get("/api/v1/widgets"), 404, "NotFound")
    assert_status(await client.get("/api/v1/namespaces/default/namespaces"), 404, "NotFound")
    assert_status(await client.get(f"{CM}/x/scale"), 404, "NotFound")
    assert (await client.get("/healthz")).text == "ok"


async def test_delete_options_and_answers(client: httpx.AsyncClient) -> None:
    await client.post(CM, json={"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"k": "v"}})
    both = {"kind": "DeleteOptions", "propagationPolicy": "Foreground", "orphanDependents": False}
    body = assert_status(await client.request("DELETE", f"{CM}/held", json=both), 422, "Invalid")
    assert body["details"] == {
        "group": "meta.k8s.io",
        "kind": "DeleteOptions",
        "causes": [{"reason": "FieldValueInvalid", "message": body["details"]["causes"][0]["message"], "field": "propagationPolicy"}],  # type: ignore[index]
    }
    unknown = assert_status(await client.delete(f"{CM}/held", params={"propagationPolicy": "Sideways"}), 422, "Invalid")
    assert unknown["details"]["causes"][0]["reason"] == "FieldValueNotSupported"  # type: ignore[index]
    assert not (await client.get(f"{CM}/held")).json()["metadata"].get("deletionTimestamp")
    r = await client.request("DELETE", f"{CM}/held", json={"kind": "DeleteOptions", "orphanDependents": False})
    assert r.status_code == 202 and r.json()["kind"] == "ConfigMap" and r.json()["metadata"]["deletionTimestamp"]
    deleting_rv = r.json()["metadata"]["resourceVersion"]
    released = await client.patch(
        f"{CM}/held", json={"metadata": {"finalizers": None}}, headers={"content-type": "application/merge-patch+json"}
    )
    assert released.status_code == 200 and released.json()["kind"] == "ConfigMap"
    assert "finalizers" not in released.json()["metadata"]
    assert released.json()["metadata"]["resourceVersion"] == deleting_rv  # removed, not written
    assert_status(await client.get(f"{CM}/held"), 404, "NotFound")


async def test_the_system_namespaces_may_not_be_deleted(client: httpx.AsyncClient) -> None:
    for name in ("default", "kube-system", "kube-public"):
        assert_status(await client.delete(f"/api/v1/namespaces/{name}"), 403, "Forbidden")
    assert (await client.get("/api/v1/namespaces/default")).json()["status"]["phase"] == "Active"


async def test_a_write_being_answered_when_the_storage_is_restored_does_not_land(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # As on a server restarted on a restored etcd: what it was answering is not carried out there.
    async with ApiServer(listen=False) as api:
        snapshot = api.snapshot()
        api.faults.add_latency(5, count=1, verbs={"create"})
        answers: list[httpx.Response] = []
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=60) as client:

            async def create() -> None:
                answers.append(await client.post(CM, json=cm("in-flight")))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(create)
                await trio.sleep(1)
                api.restore(snapshot)
            body = assert_status(answers[0], 503, "ServiceUnavailable")
            assert body["message"] == (
                "the API server restarted on restored storage while answering; the request was not carried out"
            )
            assert (await client.get(f"{CM}/in-flight")).status_code == 404
            assert api.store.resource_version == snapshot.resource_version
            assert (await client.post(CM, json=cm("after"))).status_code == 201
