"""Field sets as server-side apply computes them."""

from __future__ import annotations

from engine.apiserver._fieldsets import compare, decode, encode, format_path, merge, to_field_set
from engine.apiserver._shapes import builtin_shape, shape_from_schema

CM = builtin_shape("", "configmaps")
DEPLOY = builtin_shape("apps", "deployments")


def test_update_marks_added_maps_and_list_items() -> None:
    new = {"metadata": {"labels": {"a": "1"}, "finalizers": ["x/y"]}, "data": {"k": "v"}}
    changes = compare(None, new, CM)
    assert encode(changes.added) == {
        "f:metadata": {".": {}, "f:labels": {".": {}, "f:a": {}}, "f:finalizers": {".": {}, 'v:"x/y"': {}}},
        "f:data": {".": {}, "f:k": {}},
    }  # managedFields leave out the metadata node itself (see test_apply)
    later = compare(new, {"metadata": {"labels": {"a": "2", "b": "3"}}, "data": {"k": "v"}}, CM)
    assert later.modified == {("f:metadata", "f:labels", "f:a")}
    assert later.added == {("f:metadata", "f:labels", "f:b")}
    assert later.removed == {("f:metadata", "f:finalizers"), ("f:metadata", "f:finalizers", 'v:"x/y"')}


def test_typed_empty_fields_and_keyed_lists() -> None:
    deploy = {
        "spec": {
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
            "strategy": {},
        },
        "status": {},
    }
    fields = encode(compare(None, deploy, DEPLOY).added)
    assert fields["f:spec"] == {
        "f:selector": {},
        "f:template": {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:name": {}, "f:image": {}}}}},
    }


def test_apply_sets_leave_out_declared_structs() -> None:
    shape = shape_from_schema(
        {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}
    )
    assert to_field_set({"spec": {"size": 1}}, shape) == {("f:spec", "f:size")}
    assert to_field_set({"data": {"k": "v"}, "metadata": {"labels": {}}}, CM) == {
        ("f:data", "f:k"),
        ("f:metadata", "f:labels"),
    }


def test_encode_decode_round_trip_and_paths() -> None:
    fields = {"f:a": {".": {}, "f:b": {}}, "f:c": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}}}
    assert encode(decode(fields)) == fields
    assert format_path(("f:spec", "f:ports", 'k:{"port":80}', "f:name")) == ".spec.ports[port=80].name"
    assert format_path(("f:metadata", "f:finalizers", 'v:"a"')) == '.metadata.finalizers[="a"]'


def test_merge_by_list_semantics() -> None:
    live = {
        "metadata": {"finalizers": ["a"]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "1"}]}}},
    }
    config = {
        "metadata": {"finalizers": ["b"]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "2"}]}}},
    }
    merged = merge(live, config, DEPLOY)
    assert merged["metadata"]["finalizers"] == ["a", "b"]
    assert merged["spec"]["template"]["spec"]["containers"] == [{"name": "c", "image": "2"}]
