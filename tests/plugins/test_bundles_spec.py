"""The bundles plugin's own checks of what it reads (plugins/bundles/_spec.py, _labels.py),
without a server: exact messages, cycles, label values, and index keys of malformed objects."""

from __future__ import annotations

from typing import Any

import pytest

from engine.plugins.bundles._controller import _source_key
from engine.plugins.bundles._labels import label_value
from engine.plugins.bundles._spec import InvalidSpec, find_cycle, parse_bundle_spec, parse_source_spec

LONG_NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])


def bundle(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "app", "namespace": "demo"}, "spec": spec}


def test_a_valid_spec_is_parsed_with_defaults() -> None:
    spec = parse_bundle_spec(bundle(sourceRef={"name": "repo"}, dependsOn=[{"name": "a"}, {"name": "a"}]))
    assert (spec.source, spec.depends_on, spec.interval, spec.timeout, spec.health_check_wait, spec.prune) == (
        "repo", ("a",), 600.0, 300.0, 0.0, True)


@pytest.mark.parametrize(("spec", "message"), [
    ({"sourceRef": {"name": "repo"}, "dependsOn": {"name": "infra"}, "prune": "yes"},
     "spec.dependsOn must be a list such as [{name: other-bundle}], got object; "
     "spec.prune must be a boolean, got string 'yes'"),
    ({}, "spec.sourceRef is required"),
    ({"sourceRef": "platform"}, "spec.sourceRef must be an object such as {name: my-source}, got string 'platform'"),
    ({"sourceRef": {"name": ""}}, "spec.sourceRef.name must be a non-empty string, got string ''"),
    ({"sourceRef": {"name": "r", "kind": "GitRepository"}}, "spec.sourceRef.kind must be 'Source', got string 'GitRepository'"),
    ({"sourceRef": {"name": "r"}, "dependsOn": ["infra", {"name": 3}]},
     "spec.dependsOn[0] must be an object such as {name: other-bundle}, got string 'infra'; "
     "spec.dependsOn[1] must be an object with a non-empty string name, got object"),
    ({"sourceRef": {"name": "r"}, "interval": 30, "timeout": "0s", "healthCheckWait": "5 minutes"},
     "spec.interval must be a duration string such as 30s or 5m, got number 30; "
     "spec.timeout must be greater than 0, got '0s'; "
     "spec.healthCheckWait: invalid duration '5 minutes' (use e.g. 30s, 5m, 1h30m, 500ms)"),
])
def test_each_broken_rule_is_named(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_bundle_spec(bundle(**spec))
    assert str(caught.value) == message


@pytest.mark.parametrize(("obj", "message"), [
    ({"metadata": {"name": "app"}}, "spec is required"),
    ({"metadata": {"name": "app"}, "spec": ["x"]}, "spec must be an object, got array"),
])
def test_a_missing_or_wrong_spec(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=rf"^{message}$"):
        parse_bundle_spec(obj)


def test_source_artifact_entries_must_be_manifests() -> None:
    with pytest.raises(InvalidSpec, match=(
            r"^spec.revision must be a non-empty string, got number 7; "
            r"spec.artifact\[1\] must be a manifest with apiVersion, kind and metadata.name$")):
        parse_source_spec({"spec": {"revision": 7, "artifact": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}, "oops"]}})


def test_find_cycle_names_the_shortest_cycle_through_the_start() -> None:
    graph = {"a": ["b", "x"], "b": ["c", "a"], "c": ["a"], "x": ["y"], "y": ["x"]}
    assert find_cycle("a", lambda n: graph.get(n, [])) == ["a", "b", "a"]
    assert find_cycle("c", lambda n: graph.get(n, [])) == ["c", "a", "b", "c"]
    assert find_cycle("s", lambda n: ["s"] if n == "s" else []) == ["s", "s"]
    assert find_cycle("x", lambda n: graph.get(n, [])) == ["x", "y", "x"]
    assert find_cycle("z", lambda n: {"z": ["x"]}.get(n, graph.get(n, []))) is None, "x<->y is not z's cycle"


def test_label_values_fit_and_are_stable() -> None:
    assert label_value("app") == "app"
    assert label_value("a" * 63) == "a" * 63
    value = label_value(LONG_NAME)
    assert len(value) <= 63
    assert value == "a" * 52 + "-" + "5fcf065db5", "the hash never changes between releases"
    assert label_value("a" * 51 + "." + "b" * 20) == "a" * 51 + "-" + label_value("a" * 51 + "." + "b" * 20)[-10:]
    assert label_value("a" * 64) != label_value("a" * 65)


@pytest.mark.parametrize("obj", [
    {"metadata": {"name": "b", "namespace": "demo"}, "spec": {"sourceRef": "platform"}},
    {"metadata": {"name": "b", "namespace": "demo"}, "spec": "nonsense"},
    {"metadata": {"name": "b", "namespace": "demo"}, "spec": {"sourceRef": {"name": ["x"]}}},
    {"metadata": {"name": "b", "namespace": "demo"}},
    {},
])
def test_the_index_key_of_a_malformed_bundle_is_empty(obj: dict[str, Any]) -> None:
    assert _source_key(obj) == []


def test_the_index_key_of_a_bundle_is_its_source() -> None:
    assert _source_key(bundle(sourceRef={"name": "repo"})) == ["demo/repo"]
