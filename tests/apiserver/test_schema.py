"""Custom resources are pruned, defaulted and validated against their CRD's schema, as a real
kube-apiserver 1.32 does (expectations taken from its recorded answers where there is one)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from engine.apiserver._schema import FieldError, compile_schema, go_float, structural_errors

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "g1.diffapi.test"
SHAPES = f"/apis/{GROUP}/v1/namespaces/default/shapes"
WIDGETS = f"/apis/{GROUP}/v1/namespaces/default/widgets"
MERGE = {"content-type": "application/merge-patch+json"}
NOT_CHECKED = {
    "reason": "FieldValueInvalid",
    "field": "<nil>",
    "message": 'Invalid value: null: some validation rules were not checked because the object was invalid; '
    "correct the existing errors to complete validation",
}

SHAPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["name"],
            "x-kubernetes-validations": [
                {"rule": "self.size <= 5 || self.mode == 'slow'", "message": "size above 5 needs mode slow"}
            ],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                "enabled": {"type": "boolean", "default": True},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port"],
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {"port": {"type": "integer"}, "proto": {"type": "string", "default": "TCP"}},
                    },
                },
                "nested": {
                    "type": "object",
                    "properties": {
                        "inner": {"type": "object", "properties": {"flag": {"type": "boolean"}}},
                        "level": {"type": "integer", "default": 1},
                    },
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "tags": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
                "target": {"x-kubernetes-int-or-string": True},
                "labelsMap": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string", "enum": ["Pending", "Ready"], "default": "Pending"},
                "count": {"type": "integer", "minimum": 0},
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "status"],
                        "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string"},
                            "reason": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}, "x-kubernetes-preserve-unknown-fields": True},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def crd(plural: str, kind: str, schema: Any, *, status: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {"name": "v1", "served": True, "storage": True}
    if schema is not None:
        version["schema"] = {"openAPIV3Schema": schema}
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [version],
        },
    }


def shape(object_name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Shape", "metadata": {"name": object_name}, "spec": spec}


@pytest.fixture
async def shapes(client: httpx.AsyncClient) -> httpx.AsyncClient:
    r = await client.post(CRDS, json=crd("shapes", "Shape", SHAPE_SCHEMA))
    assert r.status_code == 201, r.text
    return client


def causes(r: httpx.Response) -> list[dict[str, str]]:
    found = r.json()["details"]["causes"]
    return sorted(({k: c[k] for k in ("reason", "field", "message")} for c in found), key=lambda c: (c["field"], c["message"]))


# ----- schema.* steps of the recorded real server -----


async def test_create_prunes_unknown_fields_and_applies_defaults(shapes: httpx.AsyncClient) -> None:
    body = shape(
        "s1",
        name="one",
        size=2,
        ports=[{"port": 80}],
        unknownField="x",
        nested={"inner": {"flag": True, "junk": 1}},
        free={"anything": {"goes": [1, "two"]}},
    )
    body["extra"] = "top-level unknown"
    body["status"] = {"phase": "Ready"}
    r = await shapes.post(SHAPES, json=body)
    assert r.status_code == 201
    created = r.json()
    assert created["spec"] == {
        "enabled": True,
        "free": {"anything": {"goes": [1, "two"]}},
        "mode": "slow",
        "name": "one",
        "nested": {"inner": {"flag": True}, "level": 1},
        "ports": [{"port": 80, "proto": "TCP"}],
        "size": 2,
    }
    assert "extra" not in created and "status" not in created and created["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("spec", "expected", "message"),
    [
        pytest.param(
            {"size": 1},
            [{"reason": "FieldValueRequired", "field": "spec.name", "message": "Required value"}, NOT_CHECKED],
            None,
            id="missing_required",
        ),
        pytest.param(
            {"name": "a", "size": 1, "nested": "flat"},
            [
                {
                    "reason": "FieldValueTypeInvalid",
                    "field": "spec.nested",
                    "message": 'Invalid value: "string": spec.nested in body must be of type object: "string"',
                },
                NOT_CHECKED,
            ],
            None,
            id="wrong_type_object",
        ),
        pytest.param(
            {"name": "a", "size": 1, "tags": "one"},
            [
                {
                    "reason": "FieldValueTypeInvalid",
                    "field": "spec.tags",
                    "message": 'Invalid value: "string": spec.tags in body must be of type array: "string"',
                },
                NOT_CHECKED,
            ],
            None,
            id="wrong_type_array",
        ),
        pytest.param(
            {"name": "a", "size": 0},
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.size",
                    "message": "Invalid value: 0: spec.size in body should be greater than or equal to 1",
                }
            ],
            'Shape.g1.diffapi.test "bad" is invalid: spec.size: Invalid value: 0: spec.size in body should be '
            "greater than or equal to 1",
            id="minimum",
        ),
        pytest.param(
            {"name": "a", "size": 11, "mode": "slow"},
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.size",
                    "message": "Invalid value: 11: spec.size in body should be less than or equal to 10",
                }
            ],
            None,
            id="maximum",
        ),
        pytest.param(
            {"name": "Upper1", "size": 1},
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.name",
                    "message": "Invalid value: \"Upper1\": spec.name in body should match '^[a-z]+$'",
                }
            ],
            None,
            id="pattern",
        ),
        pytest.param(
            {"name": "abcdefghij", "size": 1},
            [{"reason": "FieldValueTooLong", "field": "spec.name", "message": "Too long: may not be more than 8 bytes"}, NOT_CHECKED],
            None,
            id="max_length",
        ),
        pytest.param(
            {"name": "a", "size": 1, "tags": ["a", "b", "c", "d"]},
            [{"reason": "FieldValueTooMany", "field": "spec.tags", "message": "Too many: 4: must have at most 3 items"}, NOT_CHECKED],
            None,
            id="max_items",
        ),
        pytest.param(
            {"name": "a", "size": 1, "target": True},
            [
                {
                    "reason": "FieldValueTypeInvalid",
                    "field": "spec.target",
                    "message": 'Invalid value: "boolean": spec.target in body must be of type integer,string: "boolean"',
                },
                NOT_CHECKED,
            ],
            None,
            id="int_or_string",
        ),
        pytest.param(
            {"name": "a", "size": 1, "labelsMap": {"k": 1}},
            [
                {
                    "reason": "FieldValueTypeInvalid",
                    "field": "spec.labelsMap.k",
                    "message": 'Invalid value: "integer": spec.labelsMap.k in body must be of type string: "integer"',
                },
                NOT_CHECKED,
            ],
            None,
            id="additional_properties",
        ),
        pytest.param(
            {"name": "a", "size": 7, "mode": "fast"},
            [{"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: size above 5 needs mode slow'}],
            'Shape.g1.diffapi.test "bad" is invalid: spec: Invalid value: size above 5 needs mode slow',
            id="cel_rule",
        ),
        pytest.param(
            {"name": "UP", "size": 0, "mode": "medium"},
            [
                NOT_CHECKED,
                {
                    "reason": "FieldValueNotSupported",
                    "field": "spec.mode",
                    "message": 'Unsupported value: "medium": supported values: "fast", "slow"',
                },
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.name",
                    "message": "Invalid value: \"UP\": spec.name in body should match '^[a-z]+$'",
                },
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.size",
                    "message": "Invalid value: 0: spec.size in body should be greater than or equal to 1",
                },
            ],
            None,
            id="multiple",
        ),
    ],
)
async def test_invalid_custom_resources_answer_the_real_servers_causes(
    shapes: httpx.AsyncClient, spec: dict[str, Any], expected: list[dict[str, str]], message: str | None
) -> None:
    r = await shapes.post(SHAPES, json=shape("bad", **spec))
    assert r.status_code == 422
    body = r.json()
    assert body["reason"] == "Invalid"
    assert {k: body["details"][k] for k in ("name", "group", "kind")} == {"name": "bad", "group": GROUP, "kind": "Shape"}
    assert causes(r) == sorted(expected, key=lambda c: (c["field"], c["message"]))
    if message is not None:
        assert body["message"] == message
    elif len(expected) > 1:
        assert body["message"].startswith('Shape.g1.diffapi.test "bad" is invalid: [') and body["message"].endswith("]")


async def test_invalid_name_and_missing_spec(shapes: httpx.AsyncClient) -> None:
    r = await shapes.post(SHAPES, json=shape("Bad_Name", name="a", size=1))
    assert r.status_code == 422
    assert causes(r) == [
        {
            "reason": "FieldValueInvalid",
            "field": "metadata.name",
            "message": "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
            "[a-z0-9])?)*')",
        }
    ]
    nospec = {"apiVersion": f"{GROUP}/v1", "kind": "Shape", "metadata": {"name": "nospec"}}
    r = await shapes.post(SHAPES, json=nospec)
    assert r.status_code == 201 and "spec" not in r.json()


async def test_updates_are_validated_and_defaulted_and_status_has_its_own_schema(shapes: httpx.AsyncClient) -> None:
    created = (await shapes.post(SHAPES, json=shape("s1", name="one", size=2))).json()
    r = await shapes.patch(f"{SHAPES}/s1", json={"spec": {"size": 100}}, headers=MERGE)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Shape.g1.diffapi.test "s1" is invalid: spec.size: Invalid value: 100: spec.size in body should be less '
        "than or equal to 10"
    )
    r = await shapes.patch(f"{SHAPES}/s1", json={"spec": {"mode": None, "enabled": None}}, headers=MERGE)
    assert r.status_code == 200
    assert r.json()["spec"]["mode"] == "slow" and r.json()["spec"]["enabled"] is True
    assert r.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    status = {"status": {"phase": "Ready", "count": 2, "conditions": [{"type": "Ready", "status": "True", "reason": "Fine"}]}}
    r = await shapes.patch(f"{SHAPES}/s1/status", json=status, headers=MERGE)
    assert r.status_code == 200 and r.json()["status"] == status["status"]
    r = await shapes.patch(f"{SHAPES}/s1/status", json={"status": {"count": -1}}, headers=MERGE)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Shape.g1.diffapi.test "s1" is invalid: status.count: Invalid value: -1: count in body should be greater '
        "than or equal to 0"
    )
    r = await shapes.patch(f"{SHAPES}/s1/status", json={"status": {"conditions": [{"type": "Ready"}]}}, headers=MERGE)
    assert r.status_code == 422
    assert causes(r) == [
        NOT_CHECKED,
        {"reason": "FieldValueRequired", "field": "status.conditions[0].status", "message": "Required value"},
    ]
    r = await shapes.patch(f"{SHAPES}/s1/status", json={"status": {"phase": None}}, headers=MERGE)
    assert r.json()["status"]["phase"] == "Pending"
    current = (await shapes.get(f"{SHAPES}/s1")).json()
    current["status"] = {"phase": "Nope"}
    r = await shapes.put(f"{SHAPES}/s1/status", json=current)
    assert r.status_code == 422
    assert causes(r) == [
        NOT_CHECKED,
        {
            "reason": "FieldValueNotSupported",
            "field": "status.phase",
            "message": 'Unsupported value: "Nope": supported values: "Pending", "Ready"',
        },
    ]


# ----- cr.* steps: a schema that preserves unknown fields under spec -----


async def test_widget_create_prunes_top_level_and_checks_types_and_kind(client: httpx.AsyncClient) -> None:
    assert (await client.post(CRDS, json=crd("widgets", "Widget", WIDGET_SCHEMA))).status_code == 201
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 1, "nested": {"free": ["form", 1]}},
        "status": {"phase": "ignored-on-create"},
        "extra": "pruned?",
    }
    r = await client.post(WIDGETS, json=body)
    assert r.status_code == 201
    assert {k: v for k, v in r.json().items() if k not in ("metadata",)} == {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "spec": {"size": 1, "nested": {"free": ["form", 1]}},
    }
    r = await client.post(WIDGETS, json={**body, "metadata": {"name": "w2"}, "spec": {"size": "big"}})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Widget.g1.diffapi.test "w2" is invalid: spec.size: Invalid value: "string": spec.size in body must be of '
        'type integer: "string"'
    )
    assert causes(r)[0]["reason"] == "FieldValueTypeInvalid"
    r = await client.post(WIDGETS, json={**body, "kind": "Gadget", "metadata": {"name": "w3"}, "spec": {}})
    assert r.status_code == 422
    assert r.json()["message"] == 'Gadget.g1.diffapi.test "w3" is invalid: kind: Invalid value: "Gadget": must be Widget'
    assert r.json()["details"] == {
        "name": "w3",
        "group": GROUP,
        "kind": "Gadget",
        "causes": [{"reason": "FieldValueInvalid", "message": 'Invalid value: "Gadget": must be Widget', "field": "kind"}],
    }


# ----- defaulting on read, ratcheting -----


async def test_objects_stored_before_a_default_was_added_read_with_it(client: httpx.AsyncClient) -> None:
    schema = copy.deepcopy(WIDGET_SCHEMA)
    assert (await client.post(CRDS, json=crd("widgets", "Widget", schema))).status_code == 201
    definition = (await client.get(f"{CRDS}/widgets.{GROUP}")).json()
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    stored = (await client.post(WIDGETS, json=body)).json()
    assert stored["spec"] == {}
    definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]["default"] = 3
    assert (await client.put(f"{CRDS}/widgets.{GROUP}", json=definition)).status_code == 200
    read = (await client.get(f"{WIDGETS}/w")).json()
    assert read["spec"] == {"size": 3}
    assert read["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    listed = (await client.get(WIDGETS)).json()["items"]
    assert [i["spec"] for i in listed] == [{"size": 3}]


async def test_unchanged_invalid_values_are_ratcheted_on_update(client: httpx.AsyncClient) -> None:
    loose = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer"}, "m": {"type": "integer"}}}}}
    assert (await client.post(CRDS, json=crd("widgets", "Widget", loose))).status_code == 201
    definition = (await client.get(f"{CRDS}/widgets.{GROUP}")).json()
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"n": 50, "m": 1}}
    assert (await client.post(WIDGETS, json=body)).status_code == 201
    definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["n"]["maximum"] = 10
    assert (await client.put(f"{CRDS}/widgets.{GROUP}", json=definition)).status_code == 200
    assert (await client.patch(f"{WIDGETS}/w", json={"spec": {"m": 2}}, headers=MERGE)).status_code == 200
    r = await client.patch(f"{WIDGETS}/w", json={"spec": {"n": 60}}, headers=MERGE)
    assert r.status_code == 422 and causes(r)[0]["field"] == "spec.n"


# ----- CEL rules -----


def cel_schema(*rules: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": list(rules),
                "properties": props or {"name": {"type": "string"}, "replicas": {"type": "integer"}},
            }
        },
    }


async def make_widgets(client: httpx.AsyncClient, schema: dict[str, Any]) -> None:
    r = await client.post(CRDS, json=crd("widgets", "Widget", schema))
    assert r.status_code == 201, r.text


def widget(object_name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": object_name}, "spec": spec}


async def test_transition_rules_see_old_self_only_on_update(client: httpx.AsyncClient) -> None:
    await make_widgets(client, cel_schema({"rule": "self.name == oldSelf.name", "message": "name is immutable"}))
    assert (await client.post(WIDGETS, json=widget("w", name="a", replicas=1))).status_code == 201
    assert (await client.patch(f"{WIDGETS}/w", json={"spec": {"replicas": 2}}, headers=MERGE)).status_code == 200
    r = await client.patch(f"{WIDGETS}/w", json={"spec": {"name": "b"}}, headers=MERGE)
    assert r.status_code == 422
    assert causes(r) == [{"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: name is immutable'}]


async def test_rule_reason_field_path_message_expression_and_default_message(client: httpx.AsyncClient) -> None:
    await make_widgets(
        client,
        cel_schema(
            {"rule": "self.replicas >= 0", "reason": "FieldValueForbidden", "fieldPath": ".replicas", "messageExpression": "'replicas is ' + string(self.replicas)"},
            {"rule": "self.name.lowerAscii() == self.name && self.name.split('-').size() <= 2"},
        ),
    )
    r = await client.post(WIDGETS, json=widget("w", name="A-b-c", replicas=-1))
    assert r.status_code == 422
    assert causes(r) == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": "Invalid value: failed rule: self.name.lowerAscii() == self.name && self.name.split('-').size() <= 2"},
        {"reason": "FieldValueForbidden", "field": "spec.replicas", "message": "Forbidden: replicas is -1"},
    ]
    assert (await client.post(WIDGETS, json=widget("ok", name="a-b", replicas=0))).status_code == 201


async def test_rule_evaluation_errors_are_worded_as_the_real_server_words_them(client: httpx.AsyncClient) -> None:
    await make_widgets(client, cel_schema({"rule": "self.name.size() > 0"}))
    r = await client.post(WIDGETS, json=widget("w", replicas=1))
    assert r.status_code == 422
    assert causes(r) == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: no such key: name evaluating rule: self.name.size() > 0'}
    ]


async def test_rules_on_list_items_and_map_values_report_indexed_paths(client: httpx.AsyncClient) -> None:
    item = {"type": "object", "properties": {"n": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.n > 0", "message": "n must be positive"}]}
    schema = cel_schema(items={"type": "array", "items": item}, byName={"type": "object", "additionalProperties": item})
    await make_widgets(client, schema)
    r = await client.post(WIDGETS, json=widget("w", items=[{"n": 1}, {"n": 0}], byName={"x": {"n": -1}}))
    assert r.status_code == 422
    assert [c["field"] for c in causes(r)] == ["spec.byName[x]", "spec.items[1]"]


# ----- definitions -----


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            None,
            [{"reason": "FieldValueRequired", "field": "spec.versions[0].schema.openAPIV3Schema", "message": "Required value: schemas are required"}],
            id="no_schema",
        ),
        pytest.param(
            {"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}},
            [
                {
                    "reason": "FieldValueRequired",
                    "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
                    "message": "Required value: must not be empty for specified object fields",
                }
            ],
            id="untyped_field",
        ),
        pytest.param(
            {"type": "object", "properties": {"spec": {"type": "array"}}},
            [
                {
                    "reason": "FieldValueRequired",
                    "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].items",
                    "message": "Required value: must be specified",
                }
            ],
            id="array_without_items",
        ),
        pytest.param(
            {"type": "string"},
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.versions[0].schema.openAPIV3Schema.type",
                    "message": 'Invalid value: "string": must be object at the root',
                }
            ],
            id="root_not_object",
        ),
        pytest.param(
            {"type": "object", "properties": {"spec": {"type": "object", "anyOf": [{"type": "object"}]}}},
            [
                {
                    "reason": "FieldValueForbidden",
                    "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].anyOf[0].type",
                    "message": "Forbidden: must be empty to be structural",
                }
            ],
            id="typed_any_of",
        ),
        pytest.param(
            {"type": "object", "properties": {"spec": {"type": "object", "properties": {"m": {"type": "string", "enum": ["a"], "default": "b"}}}}},
            [
                {
                    "reason": "FieldValueNotSupported",
                    "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[m].default",
                    "message": 'Unsupported value: "b": supported values: "a"',
                }
            ],
            id="invalid_default",
        ),
    ],
)
async def test_definitions_without_a_structural_schema_are_rejected(
    client: httpx.AsyncClient, schema: Any, expected: list[dict[str, str]]
) -> None:
    r = await client.post(CRDS, json=crd("widgets", "Widget", schema))
    assert r.status_code == 422
    assert r.json()["details"]["kind"] == "CustomResourceDefinition"
    assert causes(r) == expected
    assert (await client.get(f"/apis/{GROUP}/v1")).status_code == 404


async def test_a_rule_that_does_not_parse_rejects_the_definition(client: httpx.AsyncClient) -> None:
    r = await client.post(CRDS, json=crd("widgets", "Widget", cel_schema({"rule": "self.name >"})))
    assert r.status_code == 422
    [cause] = causes(r)
    assert cause["field"] == "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    assert cause["message"].startswith('Invalid value: "self.name >": compilation failed: ')


# ----- units -----


def test_go_number_formatting_matches_go() -> None:
    assert [go_float(f) for f in (1.0, 1.5, 123456.0, 1e6, 1234567.0, 0.0001, 1e-05, -2.5)] == [
        "1", "1.5", "123456", "1e+06", "1.234567e+06", "0.0001", "1e-05", "-2.5"
    ]


def test_nulls_in_non_nullable_fields_are_defaulted_or_dropped() -> None:
    schema = compile_schema(SHAPE_SCHEMA)
    obj: dict[str, Any] = {"spec": {"name": "a", "mode": None, "size": None}}
    assert schema.prune_and_default(obj) == []
    assert obj["spec"] == {"name": "a", "mode": "slow", "enabled": True}


def test_structural_errors_are_sorted_like_the_real_server() -> None:
    errors = structural_errors({"type": "object", "properties": {"b": {}, "a": {"type": "array"}}}, "x")
    assert [str(e) for e in errors] == [
        "x.properties[a].items: Required value: must be specified",
        "x.properties[b].type: Required value: must not be empty for specified object fields",
    ]
    assert errors[0] == FieldError("FieldValueRequired", "x.properties[a].items", "Required value: must be specified")
