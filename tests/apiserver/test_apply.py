"""Field ownership (managedFields) and server-side apply, as the real field manager keeps them."""

from __future__ import annotations

import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._apply import apply_config, managed_base, record_update
from engine.apiserver._resources import BUILTIN_TYPES, resource_types_from_crd

CONFIGMAPS = next(rt for rt in BUILTIN_TYPES if rt.plural == "configmaps")
WIDGETS = resource_types_from_crd(
    {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}],
        },
    }
)[0]


def now() -> str:
    return "2025-01-01T00:00:00Z"


def test_update_keeps_the_managers_fields_and_takes_changed_ones() -> None:
    created = {"metadata": {"name": "c"}, "data": {"a": "1"}}
    created["metadata"]["managedFields"] = record_update(CONFIGMAPS, None, created, "alice", now)
    assert created["metadata"]["managedFields"] == [
        {
            "manager": "alice",
            "operation": "Update",
            "apiVersion": "v1",
            "time": now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}},
        }
    ]
    changed = {"metadata": {"name": "c"}, "data": {"a": "2", "b": "1"}}
    entries = record_update(CONFIGMAPS, created, changed, "bob", now)
    assert [(e["manager"], e["fieldsV1"]) for e in entries] == [
        ("alice", {"f:data": {}}),
        ("bob", {"f:data": {"f:a": {}, "f:b": {}}}),
    ]
    assert record_update(CONFIGMAPS, created, dict(created), "carol", now) == created["metadata"]["managedFields"]


def test_status_writes_are_their_own_entry_and_main_writes_ignore_status() -> None:
    live = {"metadata": {"name": "w"}, "spec": {"size": 1}}
    live["metadata"]["managedFields"] = record_update(WIDGETS, None, live, "m", now)
    with_status = {**live, "status": {"phase": "Ready"}, "spec": {"size": 9}}
    entries = record_update(WIDGETS, live, with_status, "m", now, subresource="status")
    assert entries[-1]["subresource"] == "status" and entries[-1]["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}
    assert entries[0]["fieldsV1"] == {"f:spec": {".": {}, "f:size": {}}}
    main = record_update(WIDGETS, live, {**live, "status": {"phase": "X"}}, "other", now)
    assert [e["manager"] for e in main] == ["m"]


def test_managed_fields_sent_with_a_write() -> None:
    live = {
        "metadata": {
            "name": "c",
            "managedFields": [{"manager": "a", "operation": "Update", "fieldsV1": {"f:data": {}}}],
        }
    }
    assert managed_base(live, {"metadata": {"managedFields": []}}, None) == []
    assert managed_base(live, {"metadata": {}}, None) == live["metadata"]["managedFields"]
    mine = [{"manager": "b", "operation": "Update", "fieldsV1": {"f:data": {}}}]
    assert managed_base(live, {"metadata": {"managedFields": mine}}, None) == mine
    assert managed_base(live, {"metadata": {"managedFields": mine}}, "status") == live["metadata"]["managedFields"]


def test_apply_conflicts_force_and_prune() -> None:
    first = apply_config(
        CONFIGMAPS, None, "c", {"metadata": {"name": "c"}, "data": {"k": "v", "x": "1"}}, "a", now, force=False
    )
    assert first["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {"f:k": {}, "f:x": {}}}
    with pytest.raises(RequestRejected) as info:
        apply_config(CONFIGMAPS, first, "c", {"metadata": {"name": "c"}, "data": {"k": "w"}}, "b", now, force=False)
    assert info.value.code == 409 and info.value.status["details"]["causes"][0]["field"] == ".data.k"
    shared = apply_config(
        CONFIGMAPS, first, "c", {"metadata": {"name": "c"}, "data": {"k": "v"}}, "b", now, force=False
    )
    assert sorted(e["manager"] for e in shared["metadata"]["managedFields"]) == ["a", "b"]
    forced = apply_config(CONFIGMAPS, first, "c", {"metadata": {"name": "c"}, "data": {"k": "w"}}, "b", now, force=True)
    assert forced["data"] == {"k": "w", "x": "1"}
    assert forced["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {"f:x": {}}}
    pruned = apply_config(CONFIGMAPS, forced, "c", {"metadata": {"name": "c"}}, "a", now, force=False)
    assert pruned["data"] == {"k": "w"}


def test_an_item_of_a_keyed_list_that_is_no_longer_applied_goes_with_its_key() -> None:
    from engine.plugins.bundles import plugin

    bundles = next(
        rt for crd in plugin.crds for rt in resource_types_from_crd(dict(crd)) if rt.plural == "bundles"
    )

    def bundle(*deps: str) -> dict[str, object]:
        return {"metadata": {"name": "b"}, "spec": {"sourceRef": {"name": "s"}, "dependsOn": [{"name": d} for d in deps]}}

    live = apply_config(bundles, None, "b", bundle("a"), "m", now, force=False)
    live = apply_config(bundles, live, "b", bundle("c"), "m", now, force=False)
    assert live["spec"]["dependsOn"] == [{"name": "c"}]
    live = apply_config(bundles, live, "b", bundle("a", "c"), "m", now, force=False)
    assert sorted(d["name"] for d in live["spec"]["dependsOn"]) == ["a", "c"]
