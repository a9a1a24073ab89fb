"""Admission webhooks called by the embedded server (in-process through ``webhook_transport``,
virtual time), and the configurations' validation."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
CM = "/api/v1/namespaces/default/configmaps"


class Hooks:
    """In-process webhooks: ``path -> handler(review request) -> response fields`` (or a raw
    ``httpx.Response``); every review received is kept."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.urls: list[str] = []

    def reviews(self, path: str) -> list[dict[str, Any]]:
        return [r["request"] for p, r in self.received if p == path]

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        review = json.loads(request.content)
        self.received.append((request.url.path, review))
        answer = await self.handlers[request.url.path](review["request"])
        if isinstance(answer, httpx.Response):
            return answer
        response = {"uid": review["request"]["uid"], **answer}
        return httpx.Response(200, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})


def allow(**more: Any) -> Handler:
    async def handler(request: dict[str, Any]) -> Any:
        return {"allowed": True, **more}

    return handler


def deny(**status: Any) -> Handler:
    async def handler(request: dict[str, Any]) -> Any:
        return {"allowed": False, "status": status}

    return handler


def patch_of(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(list(ops)).encode()).decode()}


def hook(name: str, path: str, **spec: Any) -> dict[str, Any]:
    rules = spec.pop("rules", [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}])
    return {
        "name": name,
        "clientConfig": {"url": f"https://hooks.example.com{path}"},
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **spec,
    }


def configuration(kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": list(hooks)}


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(listen=False, seed=5) as server:
        yield server


@pytest.fixture
def hooks(api: ApiServer) -> Hooks:
    hooks = Hooks()
    api.webhook_transport = httpx.MockTransport(hooks)
    return hooks


@pytest.fixture
async def client(api: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url) as c:
        yield c


async def register(client: httpx.AsyncClient, kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    path = VWC if kind == "ValidatingWebhookConfiguration" else MWC
    response = await client.post(path, json=configuration(kind, name, *hooks))
    assert response.status_code == 201, response.text
    return dict(response.json())


def cm(name: str, **more: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **more.pop("metadata", {})}, **more}


# ----- configurations -----


async def test_configuration_defaults(client: httpx.AsyncClient) -> None:
    stored = await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m"))
    webhook = stored["webhooks"][0]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["matchPolicy"] == "Equivalent"
    assert webhook["timeoutSeconds"] == 10
    assert webhook["reinvocationPolicy"] == "Never"
    assert webhook["namespaceSelector"] == {} and webhook["objectSelector"] == {}
    assert webhook["rules"][0]["scope"] == "*"
    validating = await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    assert "reinvocationPolicy" not in validating["webhooks"][0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sideEffects": None}, "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
        ({"sideEffects": "Some"}, 'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"'),
        ({"timeoutSeconds": 31}, "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
        ({"name": "short.name"}, 'webhooks[0].name: Invalid value: "short.name": should be a domain with at least three segments separated by dots'),
        ({"clientConfig": {"url": "http://x.example.com/v"}}, "webhooks[0].clientConfig.url: Invalid value: \"http://x.example.com/v\": 'https' is the only allowed URL scheme"),
        ({"clientConfig": {}}, "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
        ({"admissionReviewVersions": ["v2"]}, 'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1'),
        ({"failurePolicy": "Maybe"}, 'webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"'),
        ({"matchConditions": [{"name": "c", "expression": "object.("}]}, "webhooks[0].matchConditions[0].expression: Invalid value"),
        ({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
         'webhooks[0].objectSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator'),
        ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
         "webhooks[0].namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"),
    ],
)
async def test_configuration_validation(client: httpx.AsyncClient, change: dict[str, Any], message: str) -> None:
    spec = {**hook("v.example.com", "/v"), **change}
    body = configuration("ValidatingWebhookConfiguration", "v", {k: v for k, v in spec.items() if v is not None})
    response = await client.post(VWC, json=body)
    assert response.status_code == 422, response.text
    status = response.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('ValidatingWebhookConfiguration.admissionregistration.k8s.io "v" is invalid: ' + message)


async def test_duplicate_webhook_names(client: httpx.AsyncClient) -> None:
    body = configuration("ValidatingWebhookConfiguration", "v", hook("v.example.com", "/a"), hook("v.example.com", "/b"))
    response = await client.post(VWC, json=body)
    assert response.status_code == 422
    assert 'webhooks[1].name: Duplicate value: "v.example.com"' in response.json()["message"]


async def test_configurations_are_not_sent_to_webhooks(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny(message="no")
    everything = [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", rules=everything))
    response = await client.delete(f"{VWC}/v")
    assert response.status_code == 200
    assert hooks.received == []


# ----- the review sent, the answers applied -----


async def test_create_review_and_mutation(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/m"] = allow(**patch_of({"op": "add", "path": "/data", "value": {"added": "yes"}}))
    hooks.handlers["/v"] = allow()
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m"))
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    response = await client.post(CM, json=cm("a"), params={"fieldManager": "me"})
    assert response.status_code == 201, response.text
    assert response.json()["data"] == {"added": "yes"}
    stored = (await client.get(f"{CM}/a")).json()
    assert stored["data"] == {"added": "yes"}
    [mutating] = hooks.reviews("/m")
    assert mutating["operation"] == "CREATE"
    assert mutating["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert mutating["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert mutating["requestKind"] == mutating["kind"] and mutating["requestResource"] == mutating["resource"]
    assert mutating["name"] == "a" and mutating["namespace"] == "default"
    assert mutating["userInfo"]["username"] == "kubernetes-admin"
    assert mutating["object"]["metadata"]["name"] == "a" and "uid" not in mutating["object"]["metadata"]
    assert mutating["oldObject"] is None and mutating["dryRun"] is False
    assert mutating["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "me"}
    [validating] = hooks.reviews("/v")
    assert validating["object"]["data"] == {"added": "yes"}
    assert validating["object"]["metadata"]["uid"] == stored["metadata"]["uid"]
    assert validating["uid"] != mutating["uid"]
    assert all(url.endswith("?timeout=10s") for url in hooks.urls)


async def test_denial_message_and_code(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny(message="name is taken", code=403, reason="Forbidden")
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 403
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'admission webhook "v.example.com" denied the request: name is taken',
        "reason": "Forbidden",
        "code": 403,
    }
    assert (await client.get(f"{CM}/a")).status_code == 404


async def test_denial_without_code_or_message(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny()
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 400
    assert response.json()["message"] == 'admission webhook "v.example.com" denied the request without explanation'


def widget_crd(*versions: dict[str, Any], conversion: dict[str, Any] | None = None) -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {"size": {"type": "integer", "maximum": 10}, "color": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.color != 'black'", "message": "no black widgets"}],
                }
            },
        }
    }
    versions = versions or ({"name": "v1", "served": True, "storage": True},)
    spec: dict[str, Any] = {
        "group": "example.com",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "scope": "Namespaced",
        "versions": [{"schema": schema, **v} for v in versions],
    }
    if conversion is not None:
        spec["conversion"] = conversion
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}, "spec": spec}


WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
WIDGET_RULE = [{"operations": ["*"], "apiGroups": ["example.com"], "apiVersions": ["*"], "resources": ["widgets"]}]


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"color": "red", **spec}}


@pytest.mark.parametrize(
    ("patched", "message"),
    [
        ({"op": "replace", "path": "/spec/size", "value": 20}, "spec.size: Invalid value: 20: spec.size in body should be less than or equal to 10"),
        ({"op": "replace", "path": "/spec/color", "value": "black"}, "spec: Invalid value: no black widgets"),
    ],
)
async def test_mutation_is_validated_by_schema_and_cel_before_validating_webhooks(
    client: httpx.AsyncClient, hooks: Hooks, patched: dict[str, Any], message: str
) -> None:
    assert (await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=widget_crd())).status_code == 201
    hooks.handlers["/m"] = allow(**patch_of(patched))
    hooks.handlers["/v"] = allow()
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m", rules=WIDGET_RULE))
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", rules=WIDGET_RULE))
    response = await client.post(WIDGETS, json=widget("w", size=1))
    assert response.status_code == 422, response.text
    assert message in response.json()["message"]
    assert hooks.reviews("/v") == []
    assert len(hooks.reviews("/m")) == 1


async def test_mutating_webhooks_in_order_then_reinvoked_if_needed(client: httpx.AsyncClient, hooks: Hooks) -> None:
    seen: list[dict[str, Any]] = []

    async def first(request: dict[str, Any]) -> Any:
        seen.append(dict(request["object"].get("data") or {}))
        return {"allowed": True}

    hooks.handlers["/1"] = first
    hooks.handlers["/2"] = allow(**patch_of({"op": "add", "path": "/data", "value": {"two": "2"}}))
    await register(
        client, "MutatingWebhookConfiguration", "a",
        hook("one.example.com", "/1", reinvocationPolicy="IfNeeded"), hook("two.example.com", "/2"),
    )
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 201
    assert seen == [{}, {"two": "2"}]
    assert [p for p, _ in hooks.received] == ["/1", "/2", "/1"]


async def test_update_patch_and_delete_reviews(client: httpx.AsyncClient, hooks: Hooks) -> None:
    await client.post(CM, json=cm("a", data={"k": "1"}))
    hooks.handlers["/v"] = allow()
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    current = (await client.get(f"{CM}/a")).json()
    put = await client.put(f"{CM}/a", json={**current, "data": {"k": "2"}})
    assert put.status_code == 200
    patch = await client.patch(f"{CM}/a", json={"data": {"k": "3"}}, headers={"content-type": "application/merge-patch+json"})
    assert patch.status_code == 200
    delete = await client.delete(f"{CM}/a")
    assert delete.status_code == 200
    update, patched, deleted = hooks.reviews("/v")
    assert (update["operation"], update["options"]["kind"]) == ("UPDATE", "UpdateOptions")
    assert (update["oldObject"]["data"], update["object"]["data"]) == ({"k": "1"}, {"k": "2"})
    assert (patched["operation"], patched["options"]["kind"]) == ("UPDATE", "PatchOptions")
    assert (patched["oldObject"]["data"], patched["object"]["data"]) == ({"k": "2"}, {"k": "3"})
    assert (deleted["operation"], deleted["options"]["kind"]) == ("DELETE", "DeleteOptions")
    assert deleted["object"] is None and deleted["oldObject"]["data"] == {"k": "3"}


async def test_denied_delete_keeps_the_object(client: httpx.AsyncClient, hooks: Hooks) -> None:
    await client.post(CM, json=cm("a"))
    hooks.handlers["/v"] = deny(message="keep it")
    rule = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", rules=rule))
    response = await client.delete(f"{CM}/a")
    assert response.status_code == 400
    assert response.json()["message"] == 'admission webhook "v.example.com" denied the request: keep it'
    assert (await client.get(f"{CM}/a")).status_code == 200


async def test_apply_with_a_mutating_webhook(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/m"] = allow(**patch_of({"op": "add", "path": "/metadata/labels", "value": {"stamped": "yes"}}))
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m"))
    body = json.dumps(cm("a", data={"k": "v"}))
    params = {"fieldManager": "applier"}
    headers = {"content-type": "application/apply-patch+yaml"}
    created = await client.patch(f"{CM}/a", content=body, params=params, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["labels"] == {"stamped": "yes"}
    [review] = hooks.reviews("/m")
    assert review["operation"] == "CREATE" and review["options"]["kind"] == "PatchOptions"
    managers = [e["manager"] for e in created.json()["metadata"]["managedFields"]]
    assert managers == ["applier"]
    assert "f:labels" not in json.dumps(created.json()["metadata"]["managedFields"])
    again = await client.patch(f"{CM}/a", content=body, params=params, headers=headers)
    assert again.status_code == 200
    assert hooks.reviews("/m")[1]["operation"] == "UPDATE"


async def test_status_subresource_matches_only_rules_naming_it(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/plain"] = allow()
    hooks.handlers["/all"] = allow()
    hooks.handlers["/status"] = allow()
    any_group = {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"]}
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("plain.example.com", "/plain", rules=[{**any_group, "resources": ["*"]}]),
        hook("all.example.com", "/all", rules=[{**any_group, "resources": ["*/*"]}]),
        hook("status.example.com", "/status", rules=[{**any_group, "resources": ["services/status"]}]),
    )
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    await client.post("/api/v1/namespaces/default/services", json=service)
    response = await client.patch(
        "/api/v1/namespaces/default/services/s/status",
        json={"status": {"loadBalancer": {}}},
        headers={"content-type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    assert sorted(p for p, _ in hooks.received) == ["/all", "/status"]
    assert hooks.reviews("/status")[0]["subResource"] == "status"


async def test_rules_operations_groups_and_scope(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny(message="matched")
    rules = [
        {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]},
        {"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["*"]},
        {"operations": ["CREATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"},
    ]
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", rules=rules))
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    namespace = await client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
    assert namespace.status_code == 400
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    assert (await client.post("/apis/apps/v1/namespaces/default/deployments", json=deployment)).status_code == 400


async def test_namespace_and_object_selectors(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/ns"] = deny(message="namespace")
    hooks.handlers["/obj"] = deny(message="object")
    await client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "guarded", "labels": {"guard": "on"}}})
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("ns.example.com", "/ns", namespaceSelector={"matchLabels": {"guard": "on"}}),
        hook("obj.example.com", "/obj", objectSelector={"matchExpressions": [{"key": "protected", "operator": "Exists"}]}),
    )
    assert (await client.post(CM, json=cm("free"))).status_code == 201
    response = await client.post("/api/v1/namespaces/guarded/configmaps", json=cm("a"))
    assert response.json()["message"].endswith("denied the request: namespace")
    response = await client.post(CM, json=cm("b", metadata={"labels": {"protected": "yes"}}))
    assert response.json()["message"].endswith("denied the request: object")
    assert [p for p, _ in hooks.received] == ["/ns", "/obj"]


async def test_match_conditions(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny(message="matched")
    conditions = [{"name": "only-x", "expression": "object.metadata.name.startsWith('x')"}]
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", matchConditions=conditions))
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    assert (await client.post(CM, json=cm("xa"))).status_code == 400
    assert len(hooks.received) == 1


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_match_condition_error(client: httpx.AsyncClient, hooks: Hooks, policy: str) -> None:
    hooks.handlers["/v"] = allow()
    conditions = [{"name": "broken", "expression": "object.spec.missing == 'x'"}]
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("v.example.com", "/v", matchConditions=conditions, failurePolicy=policy),
    )
    response = await client.post(CM, json=cm("a"))
    if policy == "Ignore":
        assert response.status_code == 201
    else:
        assert response.status_code == 403
        assert response.json() == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": 'configmaps "a" is forbidden: expression \'object.spec.missing == \'x\'\' resulted in error: no such key: spec',
            "reason": "Forbidden", "details": {"name": "a", "kind": "configmaps"}, "code": 403,
        }
    assert hooks.received == []


async def test_a_false_match_condition_wins_over_an_error(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/v"] = deny(message="called")
    conditions = [
        {"name": "broken", "expression": "object.spec.missing == 'x'"},
        {"name": "never", "expression": "false"},
    ]
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", matchConditions=conditions))
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    assert hooks.received == []


# ----- failures and failurePolicy -----


async def _slow(request: dict[str, Any]) -> Any:
    await trio.sleep(60)
    return {"allowed": True}


async def _malformed(request: dict[str, Any]) -> Any:
    return httpx.Response(200, content=b"not json")


async def _wrong_uid(request: dict[str, Any]) -> Any:
    return httpx.Response(200, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "other", "allowed": True}})


async def _wrong_kind(request: dict[str, Any]) -> Any:
    return httpx.Response(200, json={"apiVersion": "v1", "kind": "Status", "response": {"uid": request["uid"], "allowed": True}})


async def _server_error(request: dict[str, Any]) -> Any:
    return httpx.Response(500, content=b"boom")


async def _patching_validator(request: dict[str, Any]) -> Any:
    return {"allowed": True, **patch_of({"op": "add", "path": "/data", "value": {}})}


FAILURES = [
    (_slow, 'failed to call webhook: Post "https://hooks.example.com/v?timeout=3s": context deadline exceeded'),
    (_malformed, "failed to call webhook: couldn't get version/kind; json parse error: "),
    (_wrong_uid, 'received invalid webhook response: expected response.uid="'),
    (_wrong_kind, "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Status"),
    (_server_error, 'failed to call webhook: an error on the server ("boom") has prevented the request from succeeding'),
    (_patching_validator, "received invalid webhook response: validating webhook may not return response.patch or response.patchType"),
]


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
@pytest.mark.parametrize(("handler", "reason"), FAILURES, ids=[f.__name__ for f, _ in FAILURES])
async def test_failure_policy(
    client: httpx.AsyncClient, hooks: Hooks, policy: str, handler: Handler, reason: str, autojump_clock: trio.testing.MockClock
) -> None:
    hooks.handlers["/v"] = handler
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("v.example.com", "/v", failurePolicy=policy, timeoutSeconds=3),
    )
    started = trio.current_time()
    response = await client.post(CM, json=cm("a"))
    if handler is _slow:
        assert trio.current_time() - started == pytest.approx(3)
    if policy == "Ignore":
        assert response.status_code == 201, response.text
        return
    assert response.status_code == 500, response.text
    status = response.json()
    assert status["reason"] == "InternalError"
    assert status["message"].startswith(f'Internal error occurred: failed calling webhook "v.example.com": {reason}')
    assert status["details"]["causes"][0]["message"] == status["message"].removeprefix("Internal error occurred: ")
    assert (await client.get(f"{CM}/a")).status_code == 404


async def test_an_http_error_status_is_an_internal_error(client: httpx.AsyncClient, hooks: Hooks) -> None:
    async def status(request: dict[str, Any]) -> Any:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "quota exhausted", "reason": "TooManyRequests", "code": 429}
        return httpx.Response(429, json=body)

    hooks.handlers["/v"] = status
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    response = await client.post(CM, json=cm("a"))
    assert response.status_code == 500
    assert response.json()["message"] == (
        'Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: quota exhausted'
    )


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_undecodable_patch(client: httpx.AsyncClient, hooks: Hooks, policy: str) -> None:
    hooks.handlers["/m"] = allow(patchType="JSONPatch", patch=base64.b64encode(b"{not json").decode())
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m", failurePolicy=policy))
    response = await client.post(CM, json=cm("a", data={"k": "v"}))
    if policy == "Ignore":
        assert response.status_code == 201 and response.json()["data"] == {"k": "v"}
        return
    assert response.status_code == 500
    assert response.json()["message"].startswith(
        'Internal error occurred: failed calling webhook "m.example.com": received undecodable patch in webhook response: '
    )


async def test_a_patch_on_delete_is_an_internal_error(client: httpx.AsyncClient, hooks: Hooks) -> None:
    await client.post(CM, json=cm("a"))
    hooks.handlers["/m"] = allow(**patch_of({"op": "add", "path": "/data", "value": {}}))
    rule = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m", rules=rule, failurePolicy="Ignore"))
    response = await client.delete(f"{CM}/a")
    assert response.status_code == 500
    assert response.json()["message"] == (
        'Internal error occurred: admission webhook "m.example.com" attempted to modify the object, '
        "which is not supported for this operation"
    )
    assert (await client.get(f"{CM}/a")).status_code == 200


async def test_validating_webhooks_are_called_at_once(client: httpx.AsyncClient, hooks: Hooks) -> None:
    both = trio.Event()
    arrived = 0

    async def meet(request: dict[str, Any]) -> Any:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        with trio.fail_after(5):
            await both.wait()
        return {"allowed": True}

    hooks.handlers["/a"] = meet
    hooks.handlers["/b"] = meet
    await register(client, "ValidatingWebhookConfiguration", "v", hook("a.example.com", "/a"), hook("b.example.com", "/b"))
    assert (await client.post(CM, json=cm("a"))).status_code == 201


async def test_first_denial_in_order_wins_and_warnings_are_headers(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/a"] = allow(warnings=["field x is deprecated"])
    hooks.handlers["/b"] = deny(message="second")
    hooks.handlers["/c"] = deny(message="third")
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("a.example.com", "/a"), hook("b.example.com", "/b"), hook("c.example.com", "/c"),
    )
    response = await client.post(CM, json=cm("a"))
    assert response.json()["message"] == 'admission webhook "b.example.com" denied the request: second'
    assert response.headers.get_list("warning") == ['299 - "field x is deprecated"']
    await client.delete(f"{VWC}/v")
    hooks.handlers["/m"] = allow(warnings=["defaulted y", 'quote "z"', "defaulted y"])
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m"))
    response = await client.post(CM, json=cm("b"))
    assert response.status_code == 201
    assert response.headers.get_list("warning") == ['299 - "defaulted y"', '299 - "quote \\"z\\""']


async def test_dry_run(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/m"] = allow(**patch_of({"op": "add", "path": "/data", "value": {"m": "1"}}))
    hooks.handlers["/v"] = allow()
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m", sideEffects="NoneOnDryRun"))
    await register(client, "ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v"))
    response = await client.post(CM, json=cm("a"), params={"dryRun": "All"})
    assert response.status_code == 201
    assert response.json()["data"] == {"m": "1"}
    assert (await client.get(f"{CM}/a")).status_code == 404
    for path in ("/m", "/v"):
        [review] = hooks.reviews(path)
        assert review["dryRun"] is True and review["options"]["dryRun"] == ["All"]


async def test_no_webhooks_means_no_calls(client: httpx.AsyncClient, hooks: Hooks) -> None:
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    assert hooks.received == []


async def test_scale_subresource(client: httpx.AsyncClient, hooks: Hooks) -> None:
    async def at_most_five(request: dict[str, Any]) -> Any:
        if request["object"]["spec"]["replicas"] > 5:
            return {"allowed": False, "status": {"message": "at most 5 replicas"}}
        return {"allowed": True}

    hooks.handlers["/scale"] = at_most_five
    hooks.handlers["/plain"] = allow()
    update = {"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"]}
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("scale.example.com", "/scale", rules=[{**update, "resources": ["deployments/scale"]}]),
        hook("plain.example.com", "/plain", rules=[{**update, "resources": ["deployments"]}]),
    )
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    assert (await client.post("/apis/apps/v1/namespaces/default/deployments", json=deployment)).status_code == 201
    scale = "/apis/apps/v1/namespaces/default/deployments/d/scale"
    merge = {"content-type": "application/merge-patch+json"}
    assert (await client.patch(scale, json={"spec": {"replicas": 3}}, headers=merge)).status_code == 200
    denied = await client.patch(scale, json={"spec": {"replicas": 9}}, headers=merge)
    assert denied.status_code == 400
    assert denied.json()["message"] == 'admission webhook "scale.example.com" denied the request: at most 5 replicas'
    assert (await client.get("/apis/apps/v1/namespaces/default/deployments/d")).json()["spec"]["replicas"] == 3
    first = hooks.reviews("/scale")[0]
    assert first["kind"] == first["requestKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    assert first["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    assert first["subResource"] == "scale" and first["options"]["kind"] == "PatchOptions"
    assert (first["oldObject"]["spec"]["replicas"], first["object"]["spec"]["replicas"]) == (1, 3)
    assert first["object"]["kind"] == "Scale"
    assert hooks.reviews("/plain") == []


async def test_missing_namespace_is_refused_before_webhooks(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/m"] = allow()
    await register(client, "MutatingWebhookConfiguration", "m", hook("m.example.com", "/m"))
    response = await client.post("/api/v1/namespaces/nowhere/configmaps", json=cm("a"))
    assert response.status_code == 404
    assert response.json()["message"] == 'namespaces "nowhere" not found'
    assert hooks.received == []


async def test_object_selector_on_delete_uses_the_old_labels(client: httpx.AsyncClient, hooks: Hooks) -> None:
    await client.post(CM, json=cm("kept", metadata={"labels": {"protected": "yes"}}))
    await client.post(CM, json=cm("free"))
    hooks.handlers["/v"] = deny(message="protected")
    rule = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]
    await register(
        client, "ValidatingWebhookConfiguration", "v",
        hook("v.example.com", "/v", rules=rule, objectSelector={"matchLabels": {"protected": "yes"}}),
    )
    assert (await client.delete(f"{CM}/free")).status_code == 200
    assert (await client.delete(f"{CM}/kept")).status_code == 400
    assert len(hooks.received) == 1


async def test_a_service_reference_through_the_transport(client: httpx.AsyncClient, hooks: Hooks) -> None:
    hooks.handlers["/validate"] = allow()
    spec = hook("v.example.com", "/validate")
    spec["clientConfig"] = {"service": {"name": "hook", "namespace": "system", "path": "/validate", "port": 8443}}
    await register(client, "ValidatingWebhookConfiguration", "v", spec)
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    assert hooks.urls == ["https://hook.system.svc:8443/validate?timeout=10s"]


async def test_dry_run_refused_by_a_webhook_with_side_effects(api: ApiServer, client: httpx.AsyncClient, hooks: Hooks) -> None:
    # v1 accepts only None and NoneOnDryRun; a configuration stored before (v1beta1's Some) is
    # still honoured, so it is put into storage directly here.
    hooks.handlers["/v"] = allow()
    vwc = api.store.find_type("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
    assert vwc is not None
    body = configuration("ValidatingWebhookConfiguration", "v", hook("v.example.com", "/v", sideEffects="Some"))
    body["metadata"]["uid"] = "u"
    api.store.commit(vwc, "ADDED", body, None)
    response = await client.post(CM, json=cm("a"), params={"dryRun": "All"})
    assert response.status_code == 400
    assert response.json()["message"] == 'admission webhook "v.example.com" does not support dry run'
    assert hooks.received == []
    assert (await client.post(CM, json=cm("a"))).status_code == 201
    assert len(hooks.received) == 1
