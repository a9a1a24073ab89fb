"""Authentication and RBAC authorization of every request."""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from engine.apiserver import ApiServer

from .conftest import admin_headers

AUTHZ = "/apis/authorization.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SAS = "/api/v1/namespaces/default/serviceaccounts"
SA_USER = "system:serviceaccount:default:op"


async def token_for(admin: httpx.AsyncClient, name: str = "op", **spec: Any) -> str:
    if (await admin.get(f"{SAS}/{name}")).status_code == 404:
        assert (await admin.post(SAS, json={"metadata": {"name": name}})).status_code == 201
    r = await admin.post(f"{SAS}/{name}/token", json={"spec": spec})
    assert r.status_code == 201, r.text
    return str(r.json()["status"]["token"])


async def grant(admin: httpx.AsyncClient, rules: list[dict[str, Any]], *, namespace: str | None = "default",
                name: str = "op") -> None:
    where = f"/namespaces/{namespace}" if namespace else ""
    kind = "Role" if namespace else "ClusterRole"
    r = await admin.post(f"{RBAC}{where}/{kind.lower()}s", json={"metadata": {"name": name}, "rules": rules})
    assert r.status_code == 201, r.text
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "default"}],
    }
    r = await admin.post(f"{RBAC}{where}/{kind.lower()}bindings", json=binding)
    assert r.status_code == 201, r.text


@pytest.fixture
async def sa(api: ApiServer, client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    token = await token_for(client)
    async with httpx.AsyncClient(base_url=api.url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def forbidden(message: str, **details: str) -> dict[str, Any]:
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
        "reason": "Forbidden", "details": details, "code": 403,
    }


async def test_a_service_account_token_names_its_service_account(sa: httpx.AsyncClient) -> None:
    r = await sa.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})
    assert r.status_code == 201
    info = r.json()["status"]["userInfo"]
    assert (info["username"], info["groups"]) == (
        SA_USER, ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"])


async def test_denials_are_the_real_servers_403(sa: httpx.AsyncClient) -> None:
    r = await sa.get("/api/v1/namespaces/default/configmaps")
    assert r.status_code == 403
    assert r.json() == forbidden(
        f'configmaps is forbidden: User "{SA_USER}" cannot list resource "configmaps" in API group "" '
        'in the namespace "default"', kind="configmaps")
    r = await sa.get("/apis/apps/v1/namespaces/default/deployments/web")
    assert r.json() == forbidden(
        f'deployments.apps "web" is forbidden: User "{SA_USER}" cannot get resource "deployments" in API group '
        '"apps" in the namespace "default"', name="web", group="apps", kind="deployments")
    r = await sa.patch("/apis/apps/v1/namespaces/default/deployments/web/status", json={},
                       headers={"content-type": "application/merge-patch+json"})
    assert r.json()["message"] == (
        f'deployments.apps "web" is forbidden: User "{SA_USER}" cannot patch resource "deployments/status" in API '
        'group "apps" in the namespace "default"')
    r = await sa.get("/api/v1/namespaces")
    assert r.json()["message"] == (
        f'namespaces is forbidden: User "{SA_USER}" cannot list resource "namespaces" in API group "" at the '
        "cluster scope")
    r = await sa.get("/api/v1/configmaps", params={"watch": "true"})
    assert r.json()["message"] == (
        f'configmaps is forbidden: User "{SA_USER}" cannot watch resource "configmaps" in API group "" at the '
        "cluster scope")
    r = await sa.get("/metrics")
    assert r.json() == forbidden(f'forbidden: User "{SA_USER}" cannot get path "/metrics"')


async def test_every_authenticated_user_may_discover(sa: httpx.AsyncClient) -> None:
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/openapi/v3", "/healthz"):
        assert (await sa.get(path)).status_code == 200, path


async def test_roles_grant_verbs_resources_names_and_subresources(client: httpx.AsyncClient,
                                                                  sa: httpx.AsyncClient) -> None:
    await grant(client, [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["*"]},
    ])
    await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "mine"}})
    await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "other"}})
    assert (await sa.get("/api/v1/namespaces/default/configmaps")).status_code == 200
    assert (await sa.get("/api/v1/namespaces/default/configmaps/mine")).status_code == 200
    assert (await sa.get("/api/v1/namespaces/default/configmaps/other")).status_code == 403
    assert (await sa.get("/api/v1/namespaces/kube-system/configmaps")).status_code == 403
    assert (await sa.delete("/api/v1/namespaces/default/configmaps/mine")).status_code == 403
    assert (await sa.get("/apis/apps/v1/namespaces/default/deployments/web/status")).status_code == 404
    assert (await sa.get("/apis/apps/v1/namespaces/default/deployments/web")).status_code == 403
    apply = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine-too"}}
    r = await sa.patch("/api/v1/namespaces/default/configmaps/mine-too", params={"fieldManager": "t"}, json=apply,
                       headers={"content-type": "application/apply-patch+yaml"})
    assert r.status_code == 403 and " cannot patch " in r.json()["message"]


async def test_only_a_request_that_would_create_needs_create(client: httpx.AsyncClient, sa: httpx.AsyncClient) -> None:
    await grant(client, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch", "update"]}])
    path = "/api/v1/namespaces/default/configmaps/gone"
    r = await sa.patch(path, json=[{"op": "remove", "path": "/metadata/finalizers/0"}],
                       headers={"content-type": "application/json-patch+json"})
    assert r.status_code == 404, r.text
    r = await sa.patch(path, json={"data": {"a": "1"}}, headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 404, r.text
    apply = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}}
    r = await sa.patch(path, params={"fieldManager": "t"}, json=apply, headers={"content-type": "application/apply-patch+yaml"})
    assert r.status_code == 403 and " cannot create " in r.json()["message"]
    r = await sa.put(path, json=apply)
    assert r.status_code == 403 and " cannot create " in r.json()["message"]
    await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "gone"}})
    r = await sa.patch(path, params={"fieldManager": "t"}, json=apply, headers={"content-type": "application/apply-patch+yaml"})
    assert r.status_code == 200, r.text


async def test_cluster_roles_and_self_reviews(client: httpx.AsyncClient, sa: httpx.AsyncClient) -> None:
    async def allowed(verb: str, resource: str, namespace: str = "") -> bool:
        spec = {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}
        r = await sa.post(f"{AUTHZ}/selfsubjectaccessreviews", json={"spec": spec})
        assert r.status_code == 201
        return bool(r.json()["status"]["allowed"])

    assert not await allowed("list", "secrets", "default")
    await grant(client, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}], namespace=None)
    assert await allowed("list", "secrets", "default") and await allowed("list", "secrets")
    assert not await allowed("get", "secrets", "default")
    assert (await sa.get("/api/v1/secrets")).status_code == 200
    r = await sa.post(f"{AUTHZ}/selfsubjectrulesreviews", json={"spec": {"namespace": "default"}})
    status = r.json()["status"]
    assert {"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]} in status["resourceRules"]
    assert {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]} in (
        status["nonResourceRules"])
    r = await client.post(f"{AUTHZ}/selfsubjectaccessreviews",
                          json={"spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}})
    assert r.json()["status"] == {"allowed": True}


async def test_tokens_the_server_did_not_issue_are_401(api: ApiServer, client: httpx.AsyncClient) -> None:
    token = await token_for(client)
    header, payload, signature = token.split(".")
    unauthorized = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    for bad in ("nonsense", f"{header}.{payload}.", f"{header}.{payload}x.{signature}", token + "x"):
        r = await client.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {bad}"})
        assert (r.status_code, r.json()) == (401, unauthorized)
    # kube-apiserver has no basic auth: such a header is no credential at all (anonymous)
    r = await client.get("/api", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert (r.status_code, r.json()["message"]) == (403, 'forbidden: User "system:anonymous" cannot get path "/api"')
    assert (await client.get("/version", headers={"Authorization": "Basic dXNlcjpwYXNz"})).status_code == 200
    assert (await client.delete(f"{SAS}/op")).status_code == 200
    r = await client.get("/api", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401
    await token_for(client)
    r = await client.get("/api", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401, "a recreated service account has another uid"


async def test_a_token_bound_to_a_secret_dies_with_it(client: httpx.AsyncClient) -> None:
    secret = (await client.post("/api/v1/namespaces/default/secrets", json={"metadata": {"name": "s"}})).json()
    ref = {"kind": "Secret", "apiVersion": "v1", "name": "s", "uid": secret["metadata"]["uid"]}
    token = await token_for(client, boundObjectRef=ref)
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/api", headers=headers)).status_code == 200
    await client.delete("/api/v1/namespaces/default/secrets/s")
    assert (await client.get("/api", headers=headers)).status_code == 401


async def test_tokens_expire_by_the_servers_wall_clock() -> None:
    now = [1_700_000_000.0]
    async with ApiServer(wall_clock=lambda: now[0]) as api, httpx.AsyncClient(
        base_url=api.url, headers=admin_headers(api)
    ) as admin:
        token = await token_for(admin, expirationSeconds=600)
        headers = {"Authorization": f"Bearer {token}"}
        now[0] += 599
        assert (await admin.get("/api", headers=headers)).status_code == 200
        now[0] += 1
        assert (await admin.get("/api", headers=headers)).status_code == 401


async def test_authorization_off_lets_every_user_do_everything() -> None:
    async with ApiServer(authorization=False) as api, httpx.AsyncClient(
        base_url=api.url, headers=admin_headers(api)
    ) as admin:
        token = await token_for(admin)
        r = await admin.get("/api/v1/namespaces/kube-system/secrets", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        async with httpx.AsyncClient(base_url=api.url) as anonymous:
            r = await anonymous.get("/api/v1/namespaces/kube-system/secrets")
            assert (r.status_code, r.json()["message"]) == (403, 'secrets is forbidden: User "system:anonymous" cannot '
                                                            'list resource "secrets" in API group "" in the namespace '
                                                            '"kube-system"')


async def test_client_certificates_name_a_user_and_groups(tmp_path: Path) -> None:
    pytest.importorskip("trustme")
    async with ApiServer(tls=True) as api:
        assert api.ca_pem is not None

        def client(cert: tuple[bytes, bytes] | None, token: str | None = None) -> httpx.AsyncClient:
            context = ssl.create_default_context(cadata=api.ca_pem.decode() if api.ca_pem else None)
            if cert is not None:
                (tmp_path / "c.pem").write_bytes(cert[0])
                (tmp_path / "k.pem").write_bytes(cert[1])
                context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.AsyncClient(base_url=api.url, verify=context, headers=headers)

        async def whoami(c: httpx.AsyncClient) -> tuple[int, Any]:
            r = await c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})
            return r.status_code, r.json().get("status", {}).get("userInfo")

        def credential_id(cert: tuple[bytes, bytes]) -> dict[str, list[str]]:
            der = ssl.PEM_cert_to_DER_cert(cert[0].decode())
            return {"authentication.kubernetes.io/credential-id": [f"X509SHA256={hashlib.sha256(der).hexdigest()}"]}

        jane_cert = api.issue_client_certificate("jane", ["devs"])
        assert api.client_cert_pem is not None
        async with client(api.client_cert_pem) as admin, client(jane_cert) as jane:
            assert await whoami(admin) == (201, {"username": "kubernetes-admin",
                                                 "groups": ["system:masters", "system:authenticated"],
                                                 "extra": credential_id(api.client_cert_pem)})
            assert await whoami(jane) == (201, {"username": "jane", "groups": ["devs", "system:authenticated"],
                                                "extra": credential_id(jane_cert)})
            r = await jane.get("/api/v1/namespaces")
            assert r.status_code == 403 and r.json()["message"].startswith('namespaces is forbidden: User "jane"')
            token = await token_for(admin)
        async with client(None) as anonymous, client(None, token) as sa, client(api.client_cert_pem, "x") as both:
            assert (await anonymous.get("/api")).status_code == 403
            assert (await anonymous.get("/version")).status_code == 200
            assert (await whoami(sa))[1]["username"] == SA_USER
            assert (await whoami(both))[1]["username"] == "kubernetes-admin", "the certificate is checked first"
        with pytest.raises(ValueError, match=r"^a generated client certificate names at most one group \(organization\)$"):
            api.issue_client_certificate("x", ["a", "b"])


async def test_memory_transport_carries_tokens() -> None:
    with trio.fail_after(30):
        async with ApiServer(listen=False) as api, httpx.AsyncClient(
            transport=api.memory_transport(), base_url=api.url
        ) as admin:
            token = await token_for(admin)
            r = await admin.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 403
