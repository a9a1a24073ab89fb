"""Tests of engine.kube.Store: lookups and indexes (synchronous, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kube import (
    NAMESPACE_INDEX,
    OWNER_INDEX,
    Added,
    Bookmark,
    Deleted,
    Modified,
    Restarted,
    Store,
    WatcherEvent,
    object_key,
)


def obj(name: str, namespace: str | None = "default", owners: list[str] = (), **labels: str) -> dict[str, Any]:  # type: ignore[assignment]
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    if owners:
        meta["ownerReferences"] = [{"uid": u, "kind": "X", "name": u} for u in owners]
    return {"metadata": meta}


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_get_list_and_builtin_indexes() -> None:
    store = Store()
    a, b, c = obj("a", owners=["u1"]), obj("b", "other", owners=["u1", "u2"]), obj("c", None)
    for o in (a, b, c):
        assert store._put(o) is None
    assert store.get("default", "a") is a
    assert store.get(None, "c") is c and store.get("", "c") is c
    assert store.get("other", "a") is None
    assert len(store) == 3 and ("other", "b") in store
    assert names(store.list()) == ["a", "b", "c"]
    assert names(store.by_index(NAMESPACE_INDEX, "default")) == ["a"]
    assert names(store.by_index(OWNER_INDEX, "u1")) == ["a", "b"]
    assert names(store.by_index(OWNER_INDEX, "u2")) == ["b"]
    assert store.by_index(OWNER_INDEX, "nobody") == []
    assert sorted(store.index_values(NAMESPACE_INDEX)) == ["default", "other"]
    assert store.by_index(NAMESPACE_INDEX, "") == [] and store.by_index(NAMESPACE_INDEX, "nowhere") == []
    for name in (NAMESPACE_INDEX, OWNER_INDEX):
        with pytest.raises(ValueError, match=f"^index names must be unique, and '{name}' exists$"):
            store.add_index(name, lambda o: [])


def test_an_update_keeps_one_name_string_per_object() -> None:
    store = Store()
    first = obj("a" * 20)
    store._put(first)
    second = obj("".join(["a"] * 20))
    assert second["metadata"]["name"] is not first["metadata"]["name"]
    store._put(second)
    assert store.get("default", "a" * 20) is second
    assert second["metadata"]["name"] is first["metadata"]["name"]


def test_update_refiles_and_remove_unfiles() -> None:
    store = Store()
    store._put(obj("a", owners=["u1"]))
    old = store.get("default", "a")
    new = obj("a", owners=["u2"])
    assert store._put(new) is old
    assert store.by_index(OWNER_INDEX, "u1") == []
    assert store.by_index(OWNER_INDEX, "u2") == [new]
    assert store._remove(("default", "a")) is new
    assert store._remove(("default", "a")) is None
    assert store.index_values(OWNER_INDEX) == [] and len(store) == 0


def test_custom_index_added_before_or_after_population() -> None:
    store = Store()
    store._put(obj("a", app="web"))
    store.add_index("app", lambda o: [o["metadata"]["labels"]["app"]] if "app" in o["metadata"]["labels"] else [])
    store._put(obj("b", app="web"))
    store._put(obj("c", app="db"))
    store._put(obj("d"))
    assert names(store.by_index("app", "web")) == ["a", "b"]
    assert names(store.by_index("app", "db")) == ["c"]
    with pytest.raises(ValueError, match=r"^index names must be unique, and 'app' exists$"):
        store.add_index("app", lambda o: [])
    with pytest.raises(KeyError, match=r"no index named 'nope'; add it with add_index\(\) first"):
        store.by_index("nope", "x")


def test_failing_index_function_leaves_only_that_object_out_of_that_index(caplog: pytest.LogCaptureFixture) -> None:
    store = Store()
    store._put(obj("a", app="web"))

    def explode(o: Any) -> list[str]:
        if o["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        return [o["metadata"]["labels"].get("app", "")]

    store.add_index("app", explode)
    store.add_index("other", explode)
    store._put(versioned("bad", "1", app="web"))
    store._put(obj("b", app="web"))
    assert names(store.list()) == ["a", "b", "bad"]
    assert names(store.by_index("app", "web")) == ["a", "b"]
    assert names(store.by_index(NAMESPACE_INDEX, "default")) == ["a", "b", "bad"]
    assert store._faults.count == 2
    logged = [r.getMessage() for r in caplog.records]
    assert logged == [
        "index function 'app' raised for object default/bad (resourceVersion 1); "
        "leaving this object out of it: RuntimeError: boom",
        "index function 'other' raised for object default/bad (resourceVersion 1); "
        "leaving this object out of it: RuntimeError: boom",
    ]


def test_an_object_fault_is_logged_once_per_object_resource_version_and_site(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store()
    store.add_index("app", lambda o: [o["metadata"]["labels"]["app"]])
    bad = versioned("bad", "1")
    assert changes(store, Added(bad)) == [("ADDED", "bad", None)]
    store._faults.report("index function 'app'", ("index", "app"), bad, KeyError("app"))
    assert store._faults.count == 2 and len(caplog.records) == 1
    assert changes(store, Modified(versioned("bad", "2"))) == [("MODIFIED", "bad", "1")]
    assert store._faults.count == 3 and len(caplog.records) == 2
    assert changes(store, Deleted(versioned("bad", "3"))) == [("DELETED", "bad", "2")]
    assert changes(store, Added(versioned("bad", "2"))) == [("ADDED", "bad", None)]
    assert store._faults.count == 4 and len(caplog.records) == 3, "a deleted object is forgotten"


def test_object_key() -> None:
    assert object_key(obj("a")) == ("default", "a")
    assert object_key(obj("a", None)) == (None, "a")


ops = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["n1", "n2", None]),
        st.lists(st.sampled_from(["u1", "u2", "u3"]), max_size=2),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_indexes_agree_with_a_scan(operations: list[tuple[bool, str, str | None, list[str]]]) -> None:
    store = Store()
    expected_keys = set()
    for put, name, ns, owners in operations:
        if put:
            store._put(obj(name, ns, owners=owners))
            expected_keys.add((ns, name))
        else:
            store._remove((ns, name))
            expected_keys.discard((ns, name))
    assert len(store) == len(expected_keys) == len(store.list())
    assert sorted(store.keys(), key=str) == sorted(expected_keys, key=str)
    assert all(key in store for key in expected_keys) and ("n3", "a") not in store and "a" not in store
    assert sorted(store.index_values(NAMESPACE_INDEX)) == sorted({ns for ns, _ in expected_keys if ns})
    for ns in ("n1", "n2"):
        assert names(store.by_index(NAMESPACE_INDEX, ns)) == names(
            [o for o in store.list() if o["metadata"].get("namespace") == ns]
        )
    for uid in ("u1", "u2", "u3"):
        expected = [
            o for o in store.list() if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))
        ]
        assert names(store.by_index(OWNER_INDEX, uid)) == names(expected)


def versioned(name: str, rv: str, namespace: str | None = "default", **labels: str) -> dict[str, Any]:
    o = obj(name, namespace, **labels)
    o["metadata"]["resourceVersion"] = rv
    return o


def changes(store: Store, event: WatcherEvent) -> list[tuple[str, str, str | None]]:
    return [
        (c.type.value, c.obj["metadata"]["name"], c.old["metadata"]["resourceVersion"] if c.old else None)
        for c in store.apply(event)
    ]


def test_apply_watch_events() -> None:
    store = Store()
    a1, a2 = versioned("a", "1"), versioned("a", "2")
    assert changes(store, Added(a1)) == [("ADDED", "a", None)]
    assert changes(store, Modified(versioned("a", "1"))) == []
    assert store.get("default", "a") is a1
    assert changes(store, Modified(a2)) == [("MODIFIED", "a", "1")]
    assert changes(store, Added(versioned("a", "3"))) == [("MODIFIED", "a", "2")]
    assert changes(store, Bookmark("9")) == []
    assert changes(store, Deleted(versioned("a", "4"))) == [("DELETED", "a", "3")]
    assert "a" not in names(store.list())
    assert changes(store, Deleted(versioned("ghost", "5"))) == [("DELETED", "ghost", None)]


def test_apply_restarted_emits_the_difference_after_the_whole_list_is_stored() -> None:
    store = Store()
    store.apply(Restarted([versioned("keep", "1"), versioned("change", "1"), versioned("gone", "1")], "1"))
    new = [versioned("keep", "1"), versioned("change", "2"), versioned("added", "3")]
    assert changes(store, Restarted(new, "3")) == [
        ("MODIFIED", "change", "1"),
        ("ADDED", "added", None),
        ("DELETED", "gone", "1"),
    ]
    assert names(store.list()) == ["added", "change", "keep"]


def with_uid(name: str, rv: str, uid: str) -> dict[str, Any]:
    o = versioned(name, rv)
    o["metadata"]["uid"] = uid
    return o


def test_a_relist_reports_an_object_recreated_under_its_name_as_deleted_then_added() -> None:
    # bundles simulation seed 269: a Source deleted and re-created while the watch was away came
    # back from the relist as MODIFIED with the same generation, and generation_changed dropped it.
    store = Store()
    store.apply(Restarted([with_uid("src", "1", "uid-old"), with_uid("same", "1", "uid-same")], "1"))
    events = store.apply(Restarted([with_uid("src", "7", "uid-new"), with_uid("same", "8", "uid-same")], "8"))
    assert [(e.type.value, e.obj["metadata"]["uid"], e.old["metadata"]["uid"] if e.old else None) for e in events] == [
        ("DELETED", "uid-old", "uid-old"),
        ("ADDED", "uid-new", None),
        ("MODIFIED", "uid-same", "uid-same"),
    ]
    assert store.get("default", "src")["metadata"]["uid"] == "uid-new"  # type: ignore[index]


def test_a_watch_event_for_a_new_object_under_a_cached_name_is_deleted_then_added() -> None:
    store = Store()
    store.apply(Added(with_uid("a", "1", "uid-1")))
    assert changes(store, Added(with_uid("a", "5", "uid-2"))) == [("DELETED", "a", "1"), ("ADDED", "a", None)]


def test_apply_restarted_files_every_object_when_an_index_function_raises_for_one() -> None:
    store = Store()
    store.apply(Restarted([versioned("a", "1", app="web")], "1"))

    def by_app(o: Mapping[str, Any]) -> list[str]:
        if o["metadata"]["name"] == "bad":
            raise RuntimeError("index function failed")
        return [o["metadata"]["labels"].get("app", "")]

    store.add_index("app", by_app)
    listed = [versioned("a", "2", app="db"), versioned("bad", "2"), versioned("c", "2", app="web")]
    assert changes(store, Restarted(listed, "2")) == [
        ("MODIFIED", "a", "1"),
        ("ADDED", "bad", None),
        ("ADDED", "c", None),
    ]
    assert names(store.list()) == ["a", "bad", "c"]
    assert names(store.by_index("app", "db")) == ["a"]
    assert names(store.by_index("app", "web")) == ["c"]
    assert sorted(store.index_values("app")) == ["db", "web"]
    assert store._faults.count == 1


def test_apply_restarted_with_reset_reports_every_listed_object() -> None:
    store = Store()
    store.apply(Restarted([versioned("keep", "5"), versioned("gone", "6")], "6"))
    listed = [versioned("keep", "5"), versioned("new", "2")]
    assert changes(store, Restarted(listed, "3")) == [("ADDED", "new", None), ("DELETED", "gone", "6")]
    assert changes(store, Restarted(listed, "3", reset=True)) == [("MODIFIED", "keep", "5"), ("MODIFIED", "new", "2")]
