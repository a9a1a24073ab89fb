"""Label and field selector parsing."""

from __future__ import annotations

import pytest

from engine.testing import RequestRejected
from engine.testing._selectors import parse_field_selector, parse_label_selector

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
