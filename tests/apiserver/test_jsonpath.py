"""The JSONPath subset of printer columns."""

from __future__ import annotations

import pytest

from engine.apiserver._jsonpath import JsonPathError, compile_path

OBJ = {
    "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}},
    "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
    "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True", "n": 2}]},
}


@pytest.mark.parametrize(
    ("path", "found"),
    [
        (".spec.replicas", [3]),
        ("{.spec.replicas}", [3]),
        (".spec.missing", []),
        (".spec.ports[1].port", [443]),
        (".spec.ports[-1].port", [443]),
        (".spec.ports[*].port", [80, 443]),
        (".spec.ports[5].port", []),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type=='Synced')].status", ["False"]),
        (".status.conditions[?(@.n > 1)].type", ["Ready"]),
        (".status.conditions[?(@.n)].type", ["Ready"]),
        (".metadata.labels['app.kubernetes.io/name']", ["web"]),
        ("..port", [80, 443]),
    ],
)
def test_paths(path: str, found: list[object]) -> None:
    assert compile_path(path)(OBJ) == found


@pytest.mark.parametrize("path", ["spec", ".spec[", ".status.conditions[?(@.type ~ 1)]"])
def test_unsupported_paths(path: str) -> None:
    with pytest.raises(JsonPathError):
        compile_path(path)
