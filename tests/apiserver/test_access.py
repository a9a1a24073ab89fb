"""Access reviews, RBAC validation and TokenRequests."""

from __future__ import annotations

import base64
import json

import httpx

from .test_api import assert_status

AUTHZ = "/apis/authorization.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def attributes(verb: str = "list") -> dict[str, object]:
    return {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": "configmaps"}}


async def test_the_only_user_may_do_everything(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{AUTHZ}/selfsubjectaccessreviews", json={"spec": attributes()})
    assert r.status_code == 201 and r.json()["status"] == {"allowed": True}
    assert (await client.get(f"{AUTHZ}/selfsubjectaccessreviews")).status_code == 405
    bad = await client.post(f"{AUTHZ}/selfsubjectaccessreviews", json={"spec": {}})
    assert_status(bad, 422, "Invalid")


async def test_subject_access_reviews_follow_the_stored_rbac(client: httpx.AsyncClient) -> None:
    async def allowed(user: str, verb: str = "list", groups: list[str] | None = None) -> bool:
        spec = {"user": user, "groups": groups or [], **attributes(verb)}
        r = await client.post(f"{AUTHZ}/subjectaccessreviews", json={"spec": spec})
        assert r.status_code == 201
        return bool(r.json()["status"]["allowed"])

    assert await allowed("admin", groups=["system:masters"])
    assert not await allowed("alice")
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
    await client.post(f"{RBAC}/namespaces/default/roles", json={"metadata": {"name": "reader"}, "rules": [rule]})
    binding = {
        "metadata": {"name": "alice-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }
    assert (await client.post(f"{RBAC}/namespaces/default/rolebindings", json=binding)).status_code == 201
    assert await allowed("alice") and not await allowed("alice", "delete") and not await allowed("bob")
    no_verbs = {"metadata": {"name": "x"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"]}]}
    r = await client.post(f"{RBAC}/clusterroles", json=no_verbs)
    assert_status(r, 422, "Invalid")
    assert [(c["reason"], c["field"]) for c in r.json()["details"]["causes"]] == [("FieldValueRequired", "rules[0].verbs")]


async def test_token_request(client: httpx.AsyncClient) -> None:
    sas = "/api/v1/namespaces/default/serviceaccounts"
    assert_status(await client.post(f"{sas}/op/token", json={"spec": {}}), 404, "NotFound")
    sa = (await client.post(sas, json={"metadata": {"name": "op"}})).json()
    r = await client.post(f"{sas}/op/token", json={"spec": {"audiences": ["x"], "expirationSeconds": 600}})
    assert r.status_code == 201
    answer = r.json()
    assert answer["kind"] == "TokenRequest" and answer["spec"]["boundObjectRef"] is None
    assert answer["metadata"]["uid"] == sa["metadata"]["uid"]
    payload = answer["status"]["token"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == "system:serviceaccount:default:op" and claims["aud"] == ["x"]
    assert claims["kubernetes.io"]["serviceaccount"]["uid"] == sa["metadata"]["uid"]
    assert_status(await client.post(f"{sas}/op/token", json={"spec": {"expirationSeconds": 60}}), 422, "Invalid")
