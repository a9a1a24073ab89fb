"""Regression tests for what fuzzing the embedded API server found (issue 36, item 3)."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from .conftest import CM, cm
from .fuzzing import seed_objects
from .hostile import CR_PATH

DEEP_CR = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _nested_json(depth: int) -> bytes:
    return json.dumps(cm("deep")).encode()[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [101, 5_000, 100_000])
async def test_a_json_body_nested_too_deep_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    # Python's parser gave up at about 1,000 levels with RecursionError: a 500.
    answer = await client.post(CM, content=_nested_json(depth), headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "the request body nests deeper than 100 levels"
    assert answer.json()["reason"] == "BadRequest"


@pytest.mark.parametrize("depth", [101, 100_000])
async def test_a_yaml_body_nested_too_deep_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    # libyaml's composer recurses in C: 100,000 levels crashed the process (SIGSEGV).
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx: " + b"[" * depth + b"]" * depth + b"\n"
    answer = await client.post(CM, content=body, headers={"content-type": "application/yaml"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "the request body nests deeper than 100 levels"


async def test_a_body_nested_up_to_the_limit_is_served(client: httpx.AsyncClient) -> None:
    answer = await client.post(CM, content=_nested_json(98), headers={"content-type": "application/json"})
    assert answer.status_code == 201, answer.text
    assert (await client.get(f"{CM}/deep")).status_code == 200


async def test_yaml_aliases_that_expand_beyond_the_body_are_a_400(client: httpx.AsyncClient) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        prev, cur = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    lines += ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: laughs}"]
    with trio.fail_after(10):
        answer = await client.post(CM, content="\n".join(lines).encode(), headers={"content-type": "application/yaml"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "the request body contains excessive aliasing"


async def test_a_large_yaml_body_does_not_stall_the_server(client: httpx.AsyncClient) -> None:
    # PyYAML's pure-Python loader took about 4 s for 1.6 MB, with no checkpoint in between.
    await client.post(CM, json=cm("big"))
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  b: " + b"x" * 2_500_000 + b"\n"
    began = trio.current_time()
    answer = await client.put(f"{CM}/big", content=body, headers={"content-type": "application/yaml"})
    assert trio.current_time() - began < 3
    assert answer.status_code == 422, answer.text
    assert answer.json()["details"]["causes"][0]["reason"] == "FieldValueTooLong"


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_an_update_or_patch_of_a_collection_is_a_405(client: httpx.AsyncClient, method: str) -> None:
    # Was an AssertionError: a 500.
    answer = await client.request(
        method, CM, content=b"{}", headers={"content-type": "application/merge-patch+json"}
    )
    assert answer.status_code == 405, answer.text
    assert answer.json()["reason"] == "MethodNotAllowed"


async def test_an_update_whose_metadata_is_not_an_object_is_a_client_error(client: httpx.AsyncClient) -> None:
    # Was an AttributeError: a 500.
    await client.post(CM, json=cm("c"))
    answer = await client.put(f"{CM}/c", json={**cm("c"), "metadata": -1})
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["kind"] == "Status"


@pytest.mark.parametrize("version", [{}, [], 1.5, 7])
async def test_a_patch_that_makes_api_version_not_a_string_is_a_400(client: httpx.AsyncClient, version: object) -> None:
    # Was an AttributeError (``.split`` of a non-string): a 500; bench/apiserver_fuzz.py found it.
    await client.post(CM, json=cm("v"))
    answer = await client.patch(
        f"{CM}/v", json={"apiVersion": version}, headers={"content-type": "application/merge-patch+json"}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["reason"] == "BadRequest"


@pytest.mark.parametrize(("ops", "status", "message"), [
    ([{"op": "add", "path": None, "from": ""}], 422, "the server rejected our request due to an error in our request"),
    ([{"op": "add", "value": 1}], 422, "the server rejected our request due to an error in our request"),
    ([{"op": "remove", "path": None}], 422, "the server rejected our request due to an error in our request"),
    ([{"op": "move", "path": "/data/x", "from": None}], 422,
     "the server rejected our request due to an error in our request"),
    ([{"op": "add", "path": 5, "value": 1}], 400,
     "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.path of type string"),
    ([{"op": "move", "path": "/data/x", "from": 5}], 400,
     "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.from of type string"),
])
async def test_a_json_patch_whose_path_is_null_or_not_a_string_is_answered_as_real_1_36_2_answers(
    client: httpx.AsyncClient, ops: list[dict[str, object]], status: int, message: str
) -> None:
    # The volume run's one 500: a null "path" reached str.startswith (AttributeError).
    assert (await client.post(CM, json=cm("jp", data={"k": "v"}))).status_code == 201
    answer = await client.patch(f"{CM}/jp", content=json.dumps(ops), headers={"content-type": "application/json-patch+json"})
    assert (answer.status_code, answer.json()["message"]) == (status, message), answer.text


@pytest.mark.parametrize(("metadata", "problem"), [
    ({"name": ["\u00e9", 0]}, "array into Go struct field ObjectMeta.metadata.name"),
    ({"name": 5}, "number into Go struct field ObjectMeta.metadata.name"),
    ({"generateName": ["a"]}, "array into Go struct field ObjectMeta.metadata.generateName"),
])
async def test_a_metadata_name_that_is_not_a_string_is_the_decoders_400(
    client: httpx.AsyncClient, metadata: dict[str, object], problem: str
) -> None:
    # The volume run's second 500 (seed 3): a list as the name reached a dict key (unhashable).
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}
    answer = await client.post(CM, content=json.dumps(body), headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["message"]) == (
        400, f'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal {problem} of type string'
    ), answer.text



@pytest.mark.parametrize("kind", ["Widget", {"replicas": None}, "Gadget"])
async def test_a_custom_object_whose_metadata_is_not_an_object_is_a_400_whatever_its_kind(
    client: httpx.AsyncClient, kind: object,
) -> None:
    # Found by the volume run with seed 4: a kind other than the resource's, with metadata a
    # number, was a 500 (the kind's error read the name out of the metadata).
    await seed_objects(client)
    body = {"apiVersion": "fuzz.example.com/v1", "kind": kind, "metadata": -9223372036854775809,
            "spec": {"replicas": 1, "size": "s"}}
    answer = await client.post(CR_PATH, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "metadata must be a JSON object"
