"""Tests of engine.kube._runtime._compact: the informer's compact copies of decoded objects."""

from __future__ import annotations

import copy
import gc
import json
import pickle
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from engine.kube._runtime._compact import KeyShapes, compact

cpython_only = pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="key-sharing dictionaries are CPython's"
)


def configmap(i: int) -> dict[str, Any]:
    return json.loads(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"cm-{i}",
                    "namespace": "default",
                    "uid": f"uid-{i}",
                    "resourceVersion": str(100 + i),
                    "labels": {"app": "x", "shard": str(i % 3)},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u"}],
                },
                "data": {"key": f"value-{i}", "n": i, "flag": True, "nothing": None, "list": [[1, {"a": "b"}]]},
            }
        )
    )


def shared_copies(count: int, shapes: KeyShapes | None = None) -> list[dict[str, Any]]:
    shapes = shapes if shapes is not None else KeyShapes()
    return [compact(configmap(i), shapes) for i in range(count)]


def assert_same_tree(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_tree(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_tree(x, y)
    else:
        assert a == b


def test_a_compact_copy_is_the_same_tree_of_plain_dicts_and_lists() -> None:
    for i, obj in enumerate(shared_copies(2 * KeyShapes.min_sightings)):
        original = configmap(i)
        assert_same_tree(obj, original)
        assert obj == original
        assert json.dumps(obj) == json.dumps(original)
        assert pickle.loads(pickle.dumps(obj)) == original
        assert copy.deepcopy(obj) == original


def traced(make: Callable[[], object]) -> int:
    """Bytes allocated by ``make()`` and still held by what it returns."""
    gc.collect()
    tracemalloc.start()
    try:
        kept = make()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return size


@cpython_only
def test_dicts_whose_keys_recur_share_one_key_table() -> None:
    shapes = KeyShapes()
    objects = shared_copies(2 * KeyShapes.min_sightings, shapes)
    assert len(shapes) == 6  # the object, metadata, labels, an owner reference, data, {"a": "b"}
    last = objects[-1]
    for part in (last, last["metadata"], last["metadata"]["labels"], last["data"], last["metadata"]["ownerReferences"][0]):
        built = traced(lambda part=part: [shapes.build(part) for _ in range(200)])
        plain = traced(lambda part=part: [dict(part) for _ in range(200)])
        assert built < 0.75 * plain, (list(part), built, plain)
    # Until its sequence has been seen often enough, a dict is an ordinary one.
    fresh = KeyShapes()
    assert [fresh.build({"x": 1}) for _ in range(KeyShapes.min_sightings - 1)] == [None] * (KeyShapes.min_sightings - 1)
    assert fresh.build({"x": 1}) == {"x": 1}


@cpython_only
def test_changing_a_shared_dict_changes_only_that_dict() -> None:
    objects = shared_copies(3 * KeyShapes.min_sightings)
    a, b, c = objects[-3:]
    a["metadata"]["labels"]["new"] = "yes"
    del b["metadata"]["labels"]["app"]
    c["metadata"]["labels"]["shard"] = "changed"
    assert a["metadata"]["labels"] == {"app": "x", "shard": str((len(objects) - 3) % 3), "new": "yes"}
    assert list(b["metadata"]["labels"]) == ["shard"]
    assert c["metadata"]["labels"]["shard"] == "changed"
    for other in objects[-6:-3]:
        assert list(other["metadata"]["labels"]) == ["app", "shard"]
    assert_same_tree(compact(configmap(7)), configmap(7))


def test_keys_that_name_attributes_of_every_class_are_stored_as_items() -> None:
    shapes = KeyShapes()
    items = {"__class__": "a", "__dict__": {"b": 1}, "__weakref__": None, "__init__": 3}
    for _ in range(KeyShapes.min_sightings + 1):
        out = compact(items, shapes)
        assert out == items and type(out) is dict and list(out) == list(items)
    assert len(shapes) == 2  # items, and {"b": 1}


def test_shapes_are_bounded() -> None:
    shapes = KeyShapes()
    shapes.max_shapes = 3
    shapes.max_sightings = 10
    for round_ in range(KeyShapes.min_sightings):
        for i in range(5):
            compact({f"k{i}": round_}, shapes)
    assert len(shapes) == 3
    # A sequence seen once per round of many distinct ones never gets a class: its sightings
    # are forgotten when max_sightings distinct sequences have piled up.
    many = KeyShapes()
    many.max_sightings = 10
    for round_ in range(KeyShapes.min_sightings + 1):
        for i in range(11):
            compact({f"k{i}": round_}, many)
    assert len(many) == 0
    wide = KeyShapes()
    for _ in range(KeyShapes.min_sightings + 1):
        compact({f"k{i}": i for i in range(KeyShapes.max_keys + 1)}, wide)
    assert len(wide) == 0


def test_keys_and_repeated_values_are_interned() -> None:
    a, b = (compact(json.loads(json.dumps(configmap(i)))) for i in range(2))
    for outer, inner in ((a, b), (a["metadata"], b["metadata"]), (a["data"], b["data"])):
        for key in outer:
            assert next(k for k in inner if k == key) is key
            assert key is sys.intern(key)
    assert a["kind"] is b["kind"] and a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["metadata"]["labels"]["app"] is b["metadata"]["labels"]["app"]
    assert a["metadata"]["uid"] is not b["metadata"]["uid"]


def test_the_keys_of_key_sharing_copies_are_interned() -> None:
    shapes = KeyShapes()
    copies = [compact(json.loads(json.dumps(configmap(i))), shapes) for i in range(KeyShapes.min_sightings + 2)]
    assert len(shapes) == 6
    last = copies[-1]
    for part in (last, last["metadata"], last["metadata"]["labels"], last["data"]):
        for key in part:
            assert key is sys.intern(key)


def test_keys_that_are_not_strings_are_kept_as_they_are() -> None:
    shapes = KeyShapes()
    items = {"metadata": {"name": "a", "labels": {1: "one", "k": 2}}, 7: "seven", ("t",): None}
    for _ in range(KeyShapes.min_sightings + 1):
        out = compact(items, shapes)
        assert_same_tree(out, items)
    assert len(shapes) == 1  # metadata alone
