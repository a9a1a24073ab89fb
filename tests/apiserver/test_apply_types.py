"""Server-side apply of a custom object whose values do not fit its CRD schema's types: the real
server's typed conversion answers 500, naming each misfit, before any validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from engine.kube import Client, InvalidError, NotFoundError, ServerError, install_crds
from engine.testing import KubeTarget

SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "enabled": {"type": "boolean"},
        "size": {"type": "integer"},
        "color": {"type": "string"},
        "ref": {"type": "object", "properties": {"name": {"type": "string"}}},
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "port": {"type": "integer"}}},
        },
        "endpoints": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["host", "port"],
            "items": {"type": "object", "required": ["host", "port"], "properties": {
                "host": {"type": "string"}, "port": {"type": "integer"}}},
        },
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "count": {"x-kubernetes-int-or-string": True},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def gizmo_crd(spec_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.types.test.dev"},
        "spec": {
            "group": "types.test.dev",
            "scope": "Namespaced",
            "names": {"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo", "listKind": "GizmoList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}],
        },
    }


def gizmo(namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "types.test.dev/v1", "kind": "Gizmo", "metadata": {"name": "g", "namespace": namespace},
            "spec": spec}


def as_of(minor: int, answers: Mapping[int, str]) -> str:
    """The answer of the newest release in ``answers`` (by minor version) not newer than ``minor``."""
    return answers[max(m for m in answers if m <= minor)]


async def apply_failure(client: Client, body: dict[str, Any]) -> ServerError:
    gizmos = await client.resource("types.test.dev/v1", "Gizmo")
    with pytest.raises(ServerError) as caught:
        await client.apply(gizmos, body, field_manager="t", force=True)
    return caught.value


async def test_an_applied_value_of_the_wrong_type_is_a_500_naming_it(
    kube_target: KubeTarget, kube_client: Client
) -> None:
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    failure = await apply_failure(kube_client, gizmo(ns, enabled="yes", count={"n": 1}, extra={"any": ["thing"]}))
    assert failure.status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
        "message": f"failed to create typed patch object ({ns}/g; types.test.dev/v1, Kind=Gizmo): "
                   ".spec.enabled: expected boolean, got &{yes}",
    }
    assert failure.reason == ""
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    assert (await kube_client.list(gizmos, namespace=ns)).items == [], "nothing was stored"


@pytest.mark.parametrize("subresource", [None, "status"])
async def test_metadata_of_the_wrong_type_is_read_as_the_real_server_reads_it(
    kube_target: KubeTarget, kube_client: Client, subresource: str | None
) -> None:
    """``metadata`` goes through the typed conversion too, before validation's 422 (seen on real
    kube-apiserver 1.36.2: ``.metadata.labels: expected map, got &{[1]}`` for both)."""
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    await kube_client.create(gizmos, gizmo(ns, color="blue"), namespace=ns)
    body = gizmo(ns, color="red")
    body["metadata"]["labels"] = [1]
    with pytest.raises(ServerError) as caught:
        await kube_client.apply(gizmos, body, field_manager="t", force=True, subresource=subresource)
    assert caught.value.message == (
        f"failed to create typed patch object ({ns}/g; types.test.dev/v1, Kind=Gizmo): .metadata.labels: expected map, "
        "got &{[1]}"
    )
    assert (await kube_client.get(gizmos, "g", namespace=ns))["spec"] == {"color": "blue"}


async def test_a_status_apply_to_a_missing_object_is_a_404_before_its_types_are_read(
    kube_target: KubeTarget, kube_client: Client
) -> None:
    """Real kube-apiserver 1.36.2 answers 404 for a status apply of an object that does not
    exist, whatever its body holds."""
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    with pytest.raises(NotFoundError):
        await kube_client.apply(gizmos, gizmo(kube_target.namespace, size="big"), field_manager="t", force=True,
                                subresource="status")


@pytest.mark.parametrize(("spec", "problem"), [
    ({"ref": "platform"}, ".spec.ref: expected map, got &{platform}"),
    ({"ports": {"name": "x"}}, ".spec.ports: expected list, got &{map[name:x]}"),
    ({"ports": [{"name": "a"}, {"name": "a"}]}, '.spec.ports: duplicate entries for key [name="a"]'),
    ({"ports": [{"port": 1}]}, {
        32: '.spec.ports: element 0: associative list with keys has an element that omits key field "name" (and '
            "doesn't have default value)",
        36: '.spec.ports: element 0: associative list with keys has an element that omits all key fields ["name"] '
            "(and doesn't have default values for any key fields)"}),
    ({"endpoints": [{}]}, {
        32: '.spec.endpoints: element 0: associative list with keys has an element that omits key field "host" (and '
            "doesn't have default value)",
        36: '.spec.endpoints: element 0: associative list with keys has an element that omits all key fields '
            '["host" "port"] (and doesn\'t have default values for any key fields)'}),
    ({"ports": ["a"]}, ".spec.ports: element 0: associative list with keys may not have non-map elements"),
    ({"ports": [{"name": "a", "port": "80"}]}, '.spec.ports[name="a"].port: expected numeric (int or float), '
                                               "got string"),
    ({"tags": ["a", {"b": 1}]}, ".spec.tags: element 1: associative list without keys has an element that's a "
                                "map type"),
    ({"color": 5}, ".spec.color: expected string, got &value.valueUnstructured{Value:5}"),
    ({"size": True}, ".spec.size: expected numeric (int or float), got bool"),
])
async def test_each_kind_of_misfit_is_worded_as_the_real_server_words_it(
    kube_target: KubeTarget, kube_client: Client, spec: dict[str, Any], problem: str | Mapping[int, str]
) -> None:
    """Where releases word it differently, as the target's release does (taken from real
    kube-apiserver 1.32.6 and 1.36.2)."""
    if not isinstance(problem, str):
        problem = as_of((await kube_client.server_version()).minor, problem)
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    failure = await apply_failure(kube_client, gizmo(ns, **spec))
    assert failure.message == f"failed to create typed patch object ({ns}/g; types.test.dev/v1, Kind=Gizmo): {problem}"


async def test_an_element_with_some_of_its_keys_is_left_to_validation_since_1_33(
    kube_target: KubeTarget, kube_client: Client
) -> None:
    """kube-apiserver 1.32 refuses it in the typed conversion (500, the first key it lacks);
    1.36 converts it and validation answers 422 for the key it lacks (both seen on the real
    binaries)."""
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    body = gizmo(ns, endpoints=[{"host": "a"}])
    if (await kube_client.server_version()).minor <= 32:
        failure = await apply_failure(kube_client, body)
        assert failure.message.endswith('.spec.endpoints: element 0: associative list with keys has an element that '
                                        'omits key field "port" (and doesn\'t have default value)')
        return
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    with pytest.raises(InvalidError, match=r"spec\.endpoints\[0\]\.port: Required value"):
        await kube_client.apply(gizmos, body, field_manager="t", force=True)


async def test_several_misfits_are_listed_one_a_line(kube_target: KubeTarget, kube_client: Client) -> None:
    """The real server walks the object's maps in Go's (random) order, so only the lines are
    compared on a real server; the embedded one lists them by field name."""
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    failure = await apply_failure(kube_client, gizmo(ns, size="big", enabled="yes", ports={"name": "x"}))
    header, *lines = failure.message.split("\n")
    assert header == f"failed to create typed patch object ({ns}/g; types.test.dev/v1, Kind=Gizmo): errors:"
    expected = ["  .spec.enabled: expected boolean, got &{yes}", "  .spec.ports: expected list, got &{map[name:x]}",
                "  .spec.size: expected numeric (int or float), got string"]
    assert sorted(lines) == expected
    if kube_target.api is not None:
        assert lines == expected


@pytest.mark.kube_embedded(reason="replaces a CRD's schema under a stored object and applies at once; a real "
                                  "server takes a moment to serve the new schema")
async def test_a_stored_value_of_the_wrong_type_is_a_500_naming_the_live_object(
    kube_target: KubeTarget, kube_client: Client
) -> None:
    """Stored under a schema that took anything, then read as the new schema prunes it."""
    await install_crds(kube_client, [gizmo_crd({"type": "object", "x-kubernetes-preserve-unknown-fields": True})])
    ns = kube_target.namespace
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    await kube_client.create(gizmos, gizmo(ns, enabled="yes", ports={"name": "x"}), namespace=ns)
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    failure = await apply_failure(kube_client, gizmo(ns, color="blue"))
    assert failure.message == (
        f"failed to create typed live object ({ns}/g; types.test.dev/v1, Kind=Gizmo): errors:\n"
        "  .spec.enabled: expected boolean, got &{yes}\n"
        "  .spec.ports: expected list, got &{map[]}"
    )
    assert (await kube_client.get(gizmos, "g", namespace=ns))["spec"] == {"enabled": "yes", "ports": {"name": "x"}}
    failure = await apply_failure(kube_client, gizmo(ns, enabled="no"))
    assert failure.message.startswith("failed to create typed patch object"), "the configuration is read first"


async def test_a_create_of_the_same_values_is_a_422_with_causes(kube_target: KubeTarget, kube_client: Client) -> None:
    """Only apply reads through the typed conversion: a create is validated (what a test that
    wants a schema's verdict on a wrong type should send)."""
    await install_crds(kube_client, [gizmo_crd(SPEC_SCHEMA)])
    ns = kube_target.namespace
    gizmos = await kube_client.resource("types.test.dev/v1", "Gizmo")
    with pytest.raises(InvalidError) as caught:
        await kube_client.create(gizmos, gizmo(ns, enabled="yes"), namespace=ns)
    assert [c["field"] for c in caught.value.causes] == ["spec.enabled"]
