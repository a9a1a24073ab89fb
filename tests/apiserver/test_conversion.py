"""Custom resources converted between versions by the CRD's conversion webhook (in-process
through ``webhook_transport``)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from engine.apiserver import ApiServer

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
V1 = "/apis/example.com/v1/namespaces/default/widgets"
V2 = "/apis/example.com/v2/namespaces/default/widgets"


def _schema(field: str) -> dict[str, Any]:
    return {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {field: {"type": "string"}}}}}}


def crd(conversion: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "group": "example.com",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "scope": "Namespaced",
        "versions": [
            {"name": "v1", "served": True, "storage": True, "schema": _schema("color")},
            {"name": "v2", "served": True, "storage": False, "schema": _schema("colour")},
        ],
    }
    if conversion is not None:
        spec["conversion"] = conversion
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}, "spec": spec}


WEBHOOK = {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://convert.example.com/convert"}, "conversionReviewVersions": ["v1"]}}


def to_version(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    spec = dict(obj.get("spec") or {})
    if api_version.endswith("/v2") and "color" in spec:
        spec["colour"] = spec.pop("color")
    if api_version.endswith("/v1") and "colour" in spec:
        spec["color"] = spec.pop("colour")
    return {**obj, "apiVersion": api_version, "spec": spec}


class Converter:
    """The CRD's conversion webhook at ``/convert``; ``admission`` answers admission reviews
    at other paths (``path -> response fields``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: Any = None

        self.admission: dict[str, Any] = {}
        self.reviews: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        review = json.loads(request.content)
        if request.url.path != "/convert":
            self.reviews.append(review["request"])
            response = {"uid": review["request"]["uid"], **self.admission[request.url.path]}
            return httpx.Response(200, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
        self.requests.append(review["request"])
        if self.answer is not None:
            answer = self.answer(review["request"])
            return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)
        desired = review["request"]["desiredAPIVersion"]
        response = {
            "uid": review["request"]["uid"],
            "result": {"status": "Success"},
            "convertedObjects": [to_version(o, desired) for o in review["request"]["objects"]],
        }
        return httpx.Response(200, json={"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(listen=False, seed=2) as server:
        yield server


@pytest.fixture
def converter(api: ApiServer) -> Converter:
    converter = Converter()
    api.webhook_transport = httpx.MockTransport(converter)
    return converter


@pytest.fixture
async def client(api: ApiServer, converter: Converter) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url) as c:
        response = await c.post(CRDS, json=crd(WEBHOOK))
        assert response.status_code == 201, response.text
        yield c


def widget(name: str, version: str = "v2", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"example.com/{version}", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("conversion", "message"),
    [
        ({"strategy": "Webhook"}, "spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook"),
        ({"strategy": "Sometimes"}, 'spec.conversion.strategy: Unsupported value: "Sometimes": supported values: "None", "Webhook"'),
        ({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://c.example.com/"}}},
         "spec.conversion.webhook.conversionReviewVersions: Required value: must specify one of v1, v1beta1"),
        ({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "http://c.example.com/"}, "conversionReviewVersions": ["v1"]}},
         "spec.conversion.webhook.clientConfig.url: Invalid value: \"http://c.example.com/\": 'https' is the only allowed URL scheme"),
    ],
)
async def test_conversion_stanza_validation(api: ApiServer, conversion: dict[str, Any], message: str) -> None:
    async with httpx.AsyncClient(transport=api.direct_transport(), base_url=api.url) as c:
        response = await c.post(CRDS, json=crd(conversion))
    assert response.status_code == 422, response.text
    assert response.json()["message"] == f'CustomResourceDefinition.apiextensions.k8s.io "widgets.example.com" is invalid: {message}'


async def test_write_and_read_through_another_version(api: ApiServer, client: httpx.AsyncClient, converter: Converter) -> None:
    created = await client.post(V2, json=widget("w", colour="red"))
    assert created.status_code == 201, created.text
    assert created.json()["apiVersion"] == "example.com/v2" and created.json()["spec"] == {"colour": "red"}
    stored = api.store.stored(("example.com", "widgets"), ("default", "w"))
    assert stored is not None
    assert (stored["apiVersion"], stored["spec"]) == ("example.com/v1", {"color": "red"})
    assert [r["desiredAPIVersion"] for r in converter.requests] == ["example.com/v1", "example.com/v2"]
    assert converter.requests[0]["objects"][0]["spec"] == {"colour": "red"}
    converter.requests.clear()
    assert (await client.get(f"{V1}/w")).json()["spec"] == {"color": "red"}
    assert converter.requests == []
    got = (await client.get(f"{V2}/w")).json()
    assert (got["apiVersion"], got["spec"]) == ("example.com/v2", {"colour": "red"})
    await client.post(V1, json=widget("x", "v1", color="blue"))
    converter.requests.clear()
    items = (await client.get(V2)).json()["items"]
    assert [i["spec"] for i in items] == [{"colour": "red"}, {"colour": "blue"}]
    assert len(converter.requests) == 1 and len(converter.requests[0]["objects"]) == 2


async def test_patch_through_another_version(api: ApiServer, client: httpx.AsyncClient) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))
    patched = await client.patch(
        f"{V2}/w", json={"metadata": {"labels": {"a": "b"}}}, headers={"content-type": "application/merge-patch+json"}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["spec"] == {"colour": "red"}
    stored = api.store.stored(("example.com", "widgets"), ("default", "w"))
    assert stored is not None
    assert (stored["apiVersion"], stored["spec"], stored["metadata"]["labels"]) == ("example.com/v1", {"color": "red"}, {"a": "b"})
    replaced = await client.put(f"{V2}/w", json={**patched.json(), "spec": {"colour": "green"}})
    assert replaced.status_code == 200, replaced.text
    assert api.store.stored(("example.com", "widgets"), ("default", "w"))["spec"] == {"color": "green"}  # type: ignore[index]


async def test_watch_events_are_converted(client: httpx.AsyncClient) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))
    lines = []
    async with client.stream("GET", V2, params={"watch": "true", "timeoutSeconds": "1"}) as response:
        async for line in response.aiter_lines():
            if line:
                lines.append(json.loads(line))
            if len(lines) == 2:
                break
            await client.post(V1, json=widget("x", "v1", color="blue"))
    assert [(e["type"], e["object"]["apiVersion"], e["object"]["spec"]) for e in lines] == [
        ("ADDED", "example.com/v2", {"colour": "red"}),
        ("ADDED", "example.com/v2", {"colour": "blue"}),
    ]


def _failed(request: dict[str, Any]) -> Any:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": request["uid"], "result": {"status": "Failure", "message": "cannot convert"}}}


def _wrong_uid(request: dict[str, Any]) -> Any:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "nope", "result": {"status": "Success"}, "convertedObjects": []}}


def _wrong_version(request: dict[str, Any]) -> Any:
    objects = [to_version(o, "example.com/v1") for o in request["objects"]]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": request["uid"], "result": {"status": "Success"}, "convertedObjects": objects}}


def _refused(request: dict[str, Any]) -> Any:
    return httpx.Response(503, content=b"down")


def _renamed(request: dict[str, Any]) -> Any:
    objects = [to_version(o, request["desiredAPIVersion"]) for o in request["objects"]]
    for o in objects:
        o["metadata"] = {**o["metadata"], "name": "other"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": request["uid"], "result": {"status": "Success"}, "convertedObjects": objects}}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_failed, "conversion webhook for example.com/v1, Kind=Widget failed: cannot convert"),
        (_wrong_uid, 'conversion webhook for example.com/v1, Kind=Widget failed: expected response.uid="'),
        (_wrong_version, "conversion webhook for example.com/v1, Kind=Widget returned invalid object at index 0: invalid groupVersion (expected example.com/v2, received example.com/v1)"),
        (_refused, "conversion webhook for example.com/v1, Kind=Widget failed: the server is currently unable to handle the request"),
        (_renamed, "conversion webhook for example.com/v1, Kind=Widget returned invalid object: must have the same name: w != other"),
    ],
)
async def test_conversion_failures(client: httpx.AsyncClient, converter: Converter, answer: Any, message: str) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))
    converter.answer = answer
    response = await client.get(f"{V2}/w")
    assert response.status_code == 500
    assert "reason" not in response.json()
    assert response.json()["message"].startswith(message)
    assert (await client.get(f"{V1}/w")).status_code == 200


async def test_list_conversion_failure(client: httpx.AsyncClient, converter: Converter) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))
    converter.answer = _wrong_version
    response = await client.get(V2)
    assert response.status_code == 500
    assert response.json()["message"] == (
        "conversion webhook for example.com/v1, Kind=WidgetList returned invalid converted object at index 1: "
        "invalid groupVersion (expected example.com/v2, received example.com/v1)"
    )


async def test_webhook_may_change_only_labels_and_annotations(client: httpx.AsyncClient, converter: Converter) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))

    def rename(request: dict[str, Any]) -> Any:
        objects = []
        for o in request["objects"]:
            converted = to_version(o, request["desiredAPIVersion"])
            converted["metadata"] = {**o["metadata"], "generation": 99, "labels": {"converted": "yes"}}
            objects.append(converted)
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": request["uid"], "result": {"status": "Success"}, "convertedObjects": objects}}

    converter.answer = rename
    got = (await client.get(f"{V2}/w")).json()
    assert got["metadata"]["generation"] == 1 and got["metadata"]["labels"] == {"converted": "yes"}


async def test_watch_ends_when_conversion_fails(client: httpx.AsyncClient, converter: Converter) -> None:
    await client.post(V1, json=widget("w", "v1", color="red"))
    converter.answer = _failed
    with trio.fail_after(4):
        response = await client.get(V2, params={"watch": "true", "timeoutSeconds": "30"})
    assert response.status_code == 200
    assert response.text == ""


def _configuration(kind: str, match_policy: str, **more: Any) -> dict[str, Any]:
    path = "/mutate" if kind.startswith("Mutating") else "/validate"
    hook = {
        "name": f"{path[1:]}.example.com",
        "clientConfig": {"url": f"https://hooks.example.com{path}"},
        "rules": more.pop("rules", [{"operations": ["CREATE"], "apiGroups": ["example.com"], "apiVersions": ["v1"], "resources": ["widgets"]}]),
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "matchPolicy": match_policy,
        **more,
    }
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "h"}, "webhooks": [hook]}


@pytest.mark.parametrize("policy", ["Equivalent", "Exact"])
async def test_match_policy_equivalent_sends_the_rule_version(client: httpx.AsyncClient, converter: Converter, policy: str) -> None:
    converter.admission["/validate"] = {"allowed": True}
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    assert (await client.post(path, json=_configuration("ValidatingWebhookConfiguration", policy))).status_code == 201
    assert (await client.post(V2, json=widget("w", colour="red"))).status_code == 201
    if policy == "Exact":
        assert converter.reviews == []
        return
    [review] = converter.reviews
    assert review["kind"]["version"] == "v1" and review["requestKind"]["version"] == "v2"
    assert review["resource"]["version"] == "v1" and review["requestResource"]["version"] == "v2"
    assert (review["object"]["apiVersion"], review["object"]["spec"]) == ("example.com/v1", {"color": "red"})


async def test_equivalent_mutation_is_converted_back(api: ApiServer, client: httpx.AsyncClient, converter: Converter) -> None:
    ops = [{"op": "replace", "path": "/spec/color", "value": "blue"}]
    converter.admission["/mutate"] = {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    assert (await client.post(path, json=_configuration("MutatingWebhookConfiguration", "Equivalent"))).status_code == 201
    created = await client.post(V2, json=widget("w", colour="red"))
    assert created.status_code == 201, created.text
    assert created.json()["spec"] == {"colour": "blue"}
    assert api.store.stored(("example.com", "widgets"), ("default", "w"))["spec"] == {"color": "blue"}  # type: ignore[index]


async def test_delete_through_another_version(client: httpx.AsyncClient, converter: Converter) -> None:
    converter.admission["/validate"] = {"allowed": True}
    held = widget("w", "v1", color="red")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    await client.post(V1, json=held)
    rules = [{"operations": ["DELETE"], "apiGroups": ["example.com"], "apiVersions": ["v2"], "resources": ["widgets"]}]
    configuration = _configuration("ValidatingWebhookConfiguration", "Exact", rules=rules)
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    assert (await client.post(path, json=configuration)).status_code == 201
    response = await client.delete(f"{V2}/w")
    assert response.status_code == 200
    assert (response.json()["apiVersion"], response.json()["spec"]) == ("example.com/v2", {"colour": "red"})
    [review] = converter.reviews
    assert review["operation"] == "DELETE" and review["oldObject"]["spec"] == {"colour": "red"}


async def test_apply_through_another_version(api: ApiServer, client: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/apply-patch+yaml"}
    params = {"fieldManager": "applier"}
    created = await client.patch(f"{V2}/w", content=json.dumps(widget("w", colour="red")), headers=headers, params=params)
    assert created.status_code == 201, created.text
    assert created.json()["spec"] == {"colour": "red"}
    assert api.store.stored(("example.com", "widgets"), ("default", "w"))["spec"] == {"color": "red"}  # type: ignore[index]
    labelled = {"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "w", "labels": {"a": "b"}}}
    applied = await client.patch(f"{V2}/w", content=json.dumps(labelled), headers=headers, params={"fieldManager": "labeller"})
    assert applied.status_code == 200, applied.text
    assert (applied.json()["spec"], applied.json()["metadata"]["labels"]) == ({"colour": "red"}, {"a": "b"})
    stored = api.store.stored(("example.com", "widgets"), ("default", "w"))
    assert stored is not None and (stored["apiVersion"], stored["spec"]) == ("example.com/v1", {"color": "red"})
