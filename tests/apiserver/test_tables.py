"""Server-side printing (Tables) and metadata-only answers."""

from __future__ import annotations

import calendar
import time

import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._resources import BUILTIN_TYPES, resource_types_from_crd
from engine.apiserver._tables import Conversion, as_partial_list, as_table, human_duration, negotiate

NOW = float(calendar.timegm(time.strptime("2025-01-01T00:10:00", "%Y-%m-%dT%H:%M:%S")))
V1 = Conversion("Table", "v1")


def builtin(plural: str, group: str = ""):  # type: ignore[no-untyped-def]
    return next(rt for rt in BUILTIN_TYPES if rt.plural == plural and rt.group == group)


def test_negotiation() -> None:
    assert negotiate(None) is None and negotiate("application/json") is None
    assert negotiate("application/json;as=Table;g=meta.k8s.io;v=v1") == V1
    kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    assert negotiate(kubectl) == V1
    assert negotiate("application/json;as=Table;g=meta.k8s.io;v=v2,application/json") is None
    partial = negotiate("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    assert partial == Conversion("PartialObjectMetadataList", "v1")
    with pytest.raises(RequestRejected) as info:
        negotiate("application/json;as=Table;g=meta.k8s.io;v=v2")
    assert info.value.code == 406


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_builtin_table() -> None:
    cm = {
        "metadata": {"name": "a", "creationTimestamp": "2025-01-01T00:00:00Z", "resourceVersion": "7"},
        "data": {"x": "1", "y": "2"},
        "binaryData": {"z": ""},
    }
    table = as_table(builtin("configmaps"), [(cm, cm)], {"resourceVersion": "7"}, V1, now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["cells"] == ["a", 3, "10m"]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": cm["metadata"],
    }
    assert (
        "object" not in as_table(builtin("configmaps"), [(cm, cm)], {}, V1, now=NOW, include_object="None")["rows"][0]
    )
    with pytest.raises(RequestRejected):
        as_table(builtin("configmaps"), [(cm, cm)], {}, V1, now=NOW, include_object="Everything")
    lease = {"metadata": {"name": "l", "creationTimestamp": "2025-01-01T00:00:00Z"}}
    assert as_table(builtin("leases", "coordination.k8s.io"), [(lease, lease)], {}, V1, now=NOW)["rows"][0][
        "cells"
    ] == ["l", "", "10m"]
    crd = builtin("customresourcedefinitions", "apiextensions.k8s.io")
    row = as_table(crd, [(lease, lease)], {}, V1, now=NOW)
    assert [c["name"] for c in row["columnDefinitions"]] == ["Name", "Created At"]
    assert row["rows"][0]["cells"] == ["l", "2025-01-01T00:00:00Z"]


def test_event_table_puts_last_seen_first() -> None:
    event = {
        "metadata": {"name": "e1"},
        "type": "Normal",
        "reason": "Synced",
        "message": " done ",
        "involvedObject": {"kind": "ConfigMap", "name": "a"},
        "eventTime": "2025-01-01T00:09:00.000000Z",
        "reportingComponent": "ctl",
        "reportingInstance": "ctl-1",
    }
    table = as_table(builtin("events"), [(event, event)], {}, V1, now=NOW)
    assert table["columnDefinitions"][0]["name"] == "Last Seen"
    assert table["rows"][0]["cells"] == [
        "60s",
        "Normal",
        "Synced",
        "configmap/a",
        "",
        "ctl, ctl-1",
        "done",
        "60s",
        1,
        "e1",
    ]


def test_custom_resource_columns() -> None:
    columns = [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.replicas"},
        {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
        {"name": "Spec", "type": "string", "jsonPath": ".spec"},
        {"name": "Since", "type": "date", "jsonPath": ".spec.since"},
    ]
    crd = {
        "metadata": {"name": "gizmos.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gizmos", "kind": "Gizmo"},
            "versions": [{"name": "v1", "served": True, "storage": True, "additionalPrinterColumns": columns}],
        },
    }
    gizmos = resource_types_from_crd(crd)[0]
    obj = {
        "metadata": {"name": "g"},
        "spec": {"replicas": 2.0, "on": "yes", "since": "not a date"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    table = as_table(gizmos, [(obj, obj)], {}, V1, now=NOW)
    definitions = [(c["name"], c["type"], c["format"], c["priority"]) for c in table["columnDefinitions"]]
    assert definitions[:2] == [("Name", "string", "name", 0), ("Replicas", "integer", "", 1)]
    assert table["rows"][0]["cells"] == [
        "g",
        2,
        "True",
        2.0,
        None,
        '{"on":"yes","replicas":2.0,"since":"not a date"}',
        "<invalid>",
    ]
    bare = resource_types_from_crd(
        {**crd, "spec": {**crd["spec"], "versions": [{"name": "v1", "served": True, "storage": True}]}}
    )[0]
    assert [c["name"] for c in as_table(bare, [], {}, V1, now=NOW)["columnDefinitions"]] == ["Name", "Age"]


def test_partial_object_metadata_list() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1"}}
    answer = as_partial_list([cm], {"resourceVersion": "3"}, Conversion("PartialObjectMetadataList", "v1"))
    assert answer == {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "3"},
        "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}}],
    }
    with pytest.raises(RequestRejected) as info:
        as_partial_list([cm], {}, Conversion("PartialObjectMetadata", "v1"))
    assert info.value.code == 406
