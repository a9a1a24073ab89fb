"""Resource paths (engine.kube._client._resource): names and namespaces escaped as path segments."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from engine.kube import Resource


@pytest.mark.parametrize("name", ["w-0001", "a.b_c~d", "A9", "a/b", "a b", "a%2F", "ä", "a?b#c", ".."])
def test_a_name_and_a_namespace_are_escaped_as_one_path_segment(name: str) -> None:
    widgets = Resource(group="bench.example.com", version="v1", kind="Widget", plural="widgets", namespaced=True)
    path = widgets.path(namespace=name, name=name, subresource="status")
    segment = quote(name, safe="")
    assert path == f"/apis/bench.example.com/v1/namespaces/{segment}/widgets/{segment}/status"
