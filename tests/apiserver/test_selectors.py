"""Label and field selector parsing."""

from __future__ import annotations

import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._resources import BUILTIN_TYPES, resource_types_from_crd
from engine.apiserver._selectors import parse_field_selector, parse_label_selector

LABELS = {"app": "web", "tier": "front", "example.com/owner": "me"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web, db)", True),
        ("app notin (web)", False),
        ("missing notin (web)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("example.com/owner=me,tier in (front,back)", True),
        ("app=web,tier=back", False),
        ("app=", False),
    ],
)
def test_label_selector(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


@pytest.mark.parametrize("selector", ["app in (a", "bad key!=x=y", "app=in valid", "a=(b)"])
def test_malformed_label_selector(selector: str) -> None:
    with pytest.raises(RequestRejected, match=r"^unable to parse requirement: label "):
        parse_label_selector(selector)


def test_field_selector() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"n": 3}}
    assert parse_field_selector("metadata.name=a").matches(obj)
    assert parse_field_selector("metadata.name==a,metadata.namespace=ns").matches(obj)
    assert not parse_field_selector("metadata.name!=a").matches(obj)
    assert parse_field_selector("spec.n=3").matches(obj)
    assert parse_field_selector("spec.missing=").matches(obj)
    with pytest.raises(RequestRejected, match=r"^unable to parse requirement: field "):
        parse_field_selector("metadata.name")


def test_field_selector_supported_fields_per_type() -> None:
    configmaps = next(rt for rt in BUILTIN_TYPES if rt.plural == "configmaps")
    namespaces = next(rt for rt in BUILTIN_TYPES if rt.plural == "namespaces")
    secrets = next(rt for rt in BUILTIN_TYPES if rt.plural == "secrets")
    parse_field_selector("metadata.name=a,metadata.namespace=b", configmaps)
    with pytest.raises(RequestRejected, match=r'"data.n" is not a known field selector') as info:
        parse_field_selector("data.n=x", configmaps)
    assert info.value.code == 400
    assert parse_field_selector("status.phase=Active", namespaces).matches({"status": {"phase": "Active"}})
    with pytest.raises(RequestRejected, match="field label not supported: metadata.namespace"):
        parse_field_selector("metadata.namespace=x", namespaces)
    parse_field_selector("type=Opaque", secrets)
    crd = {
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "selectableFields": [{"jsonPath": ".spec.on"}]}
            ],
        },
    }
    things = resource_types_from_crd(crd)[0]
    selector = parse_field_selector("spec.on=true", things)
    assert selector.matches({"spec": {"on": True}}) and not selector.matches({"spec": {"on": False}})
    with pytest.raises(RequestRejected, match="field label not supported: spec.size"):
        parse_field_selector("spec.size=1", things)
