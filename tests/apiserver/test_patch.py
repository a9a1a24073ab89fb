"""Patch formats, unit-tested (the HTTP paths are covered in test_api.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.apiserver import RequestRejected
from engine.apiserver._patch import (
    apply_json_patch,
    fields_to_paths,
    leaf_paths,
    merge_patch,
    paths_to_fields,
    strategic_merge_patch,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=10,
)
objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


@given(objects, objects)
def test_merge_patch_is_idempotent_and_pure(target: dict[str, Any], patch: dict[str, Any]) -> None:
    snapshot = repr((target, patch))
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
    assert repr((target, patch)) == snapshot


def test_merge_patch_rfc7386_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    ops = [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "remove", "path": "/c"},
        {"op": "copy", "from": "/a/b", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "replace", "path": "/a/b/1", "value": 9},
        {"op": "test", "path": "/e~1f", "value": [0, 1, 2, 3]},
    ]
    assert apply_json_patch(doc, ops) == {"a": {"b": [0, 9, 2, 3]}, "e/f": [0, 1, 2, 3]}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}
    with pytest.raises(RequestRejected, match=r"^JSON patch path '/nope' does not exist$"):
        apply_json_patch(doc, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(RequestRejected, match=r"^JSON patch test failed at '/c'$"):
        apply_json_patch(doc, [{"op": "test", "path": "/c", "value": "y"}])
    with pytest.raises(RequestRejected, match=r"^unknown JSON patch operation 'frob'$"):
        apply_json_patch(doc, [{"op": "frob", "path": "/c"}])


def test_strategic_merge_patch_directives() -> None:
    target = {
        "metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}, {"uid": "2", "name": "y"}]},
        "spec": {"keep": 1, "drop": 2, "nested": {"a": 1}},
    }
    patch = {
        "metadata": {
            "finalizers": ["b"],
            "ownerReferences": [{"uid": "1", "name": "renamed"}, {"uid": "2", "$patch": "delete"}, {"uid": "3"}],
        },
        "spec": {"$retainKeys": ["keep", "nested"], "nested": {"$patch": "replace", "b": 2}},
    }
    result = strategic_merge_patch(target, patch)
    assert result["metadata"]["finalizers"] == ["a", "b"]
    assert result["metadata"]["ownerReferences"] == [{"uid": "1", "name": "renamed"}, {"uid": "3"}]
    assert result["spec"] == {"keep": 1, "nested": {"b": 2}}
    ordered = strategic_merge_patch(
        {"conditions": [{"type": "A"}, {"type": "B"}]},
        {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}], "conditions": [{"type": "A", "s": 1}]},
    )
    assert ordered == {"conditions": [{"type": "B"}, {"type": "A", "s": 1}]}
    assert strategic_merge_patch({"a": {"b": 1}}, {"a": {"$patch": "delete"}}) == {}
    assert strategic_merge_patch({"l": [1, 2]}, {"l": [3]}) == {"l": [3]}


@given(objects)
def test_fields_round_trip(obj: dict[str, Any]) -> None:
    paths = leaf_paths(obj)
    assert fields_to_paths(paths_to_fields(paths)) == paths
