"""``engine/testing/builtin_fields.json`` (the fields of the built-in types, which unknown-field
detection reads) is generated from the Kubernetes API definitions; this test regenerates it
from the ``kubernetes`` Python client's models and checks the committed file is current.

Regenerate with ``python -m tests.testing.test_builtin_fields``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine.apiserver._fields import DATA, load, unknown_fields

KINDS = {
    "v1/ConfigMap": "V1ConfigMap",
    "v1/Secret": "V1Secret",
    "v1/Namespace": "V1Namespace",
    "v1/Event": "CoreV1Event",
    "events.k8s.io/v1/Event": "EventsV1Event",
    "v1/ServiceAccount": "V1ServiceAccount",
    "v1/Service": "V1Service",
    "v1/Pod": "V1Pod",
    "apps/v1/Deployment": "V1Deployment",
    "apps/v1/ReplicaSet": "V1ReplicaSet",
    "apps/v1/StatefulSet": "V1StatefulSet",
    "apps/v1/DaemonSet": "V1DaemonSet",
    "batch/v1/Job": "V1Job",
    "batch/v1/CronJob": "V1CronJob",
    "networking.k8s.io/v1/Ingress": "V1Ingress",
    "rbac.authorization.k8s.io/v1/Role": "V1Role",
    "rbac.authorization.k8s.io/v1/RoleBinding": "V1RoleBinding",
    "rbac.authorization.k8s.io/v1/ClusterRole": "V1ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "V1ClusterRoleBinding",
    "coordination.k8s.io/v1/Lease": "V1Lease",
    "apiextensions.k8s.io/v1/CustomResourceDefinition": "V1CustomResourceDefinition",
}
_REF = re.compile(r"^(List|Dict)\[(?:str, )?(\w+)\]$|^(\w+)$")


def generate() -> dict[str, Any]:
    models = pytest.importorskip("kubernetes.client.models")
    types: dict[str, dict[str, str]] = {}

    def ref(type_name: str) -> str:
        m = _REF.match(type_name)
        if m is None:
            return ""
        inner = m.group(2) or m.group(3)
        if not hasattr(models, inner):
            return ""
        walk(inner)
        return {"List": "[", "Dict": "{", None: ""}[m.group(1)] + inner

    def walk(name: str) -> None:
        if name in types:
            return
        cls = getattr(models, name)
        types[name] = {}
        types[name] = {cls.attribute_map[a]: ref(t) for a, t in sorted(cls.openapi_types.items())}

    for model in KINDS.values():
        walk(model)
    return {"kinds": KINDS, "types": dict(sorted(types.items()))}


def test_committed_file_is_current() -> None:
    assert json.loads(DATA.read_text()) == generate()


def test_unknown_fields_are_found_with_their_paths() -> None:
    load.cache_clear()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x", "labels": {"any": "thing"}, "bogus": 1},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "Always"}]}},
        },
        "extra": True,
    }
    assert unknown_fields("apps/v1/Deployment", deployment) == [
        "extra",
        "metadata.bogus",
        "spec.template.spec.containers[0].imagePullPolicyy",
    ]
    assert "imagePullPolicyy" not in deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert unknown_fields("v1/ConfigMap", {"data": {"k": "v"}, "metadata": {"name": "x"}}) == []


if __name__ == "__main__":
    Path(DATA).write_text(json.dumps(generate(), indent=0, sort_keys=False, separators=(",", ":")) + "\n")
