"""The structure of each type's objects, for field tracking (:class:`._fieldsets.Shape`).

Custom resources take theirs from the CRD version's ``openAPIV3Schema``
(``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``,
``properties`` against ``additionalProperties`` and ``x-kubernetes-preserve-unknown-fields``).
Built-in types take theirs from a table written after the Kubernetes API definitions: which lists
are keyed (``containers`` by ``name``, Service ``ports`` by ``port`` and ``protocol``), which
structs are atomic (``selector``, ``involvedObject``), and which fields an empty object of the type
already has (a Deployment always has ``spec.template.metadata``): those are never *added* by a
write, so their nodes get no ``"."`` entry, as on the real server. Parts the table does not
describe are treated as plain structs with atomic lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._fieldsets import ATOMIC, DEDUCED, LOOSE, ListType, Shape

__all__ = ["METADATA", "builtin_shape", "register_builtin_shape", "shape_from_schema"]

_STRING_MAP = Shape(elements=LOOSE)


def _keyed(*keys: str, items: Shape = LOOSE) -> Shape:
    return Shape(list_type="map", keys=keys, items=items)


_ATOMIC_LIST = Shape(list_type="atomic")

METADATA = Shape(
    fields={
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": Shape(list_type="set"),
        "ownerReferences": _keyed("uid", items=ATOMIC),
        "managedFields": _ATOMIC_LIST,
    }
)
"""``metadata``: labels and annotations are maps, finalizers a set, owner references keyed by
uid (each one atomic)."""

_CONTAINER = Shape(
    fields={
        "ports": _keyed("containerPort", "protocol"),
        "env": _keyed("name"),
        "volumeMounts": _keyed("mountPath"),
        "volumeDevices": _keyed("devicePath"),
        "resizePolicy": Shape(list_type="atomic"),
        "resources": Shape(fields={"limits": _STRING_MAP, "requests": _STRING_MAP}),
    }
)

_POD_SPEC = Shape(
    fields={
        "containers": _keyed("name", items=_CONTAINER),
        "initContainers": _keyed("name", items=_CONTAINER),
        "ephemeralContainers": _keyed("name", items=_CONTAINER),
        "volumes": _keyed("name"),
        "imagePullSecrets": _keyed("name"),
        "hostAliases": _keyed("ip"),
        "topologySpreadConstraints": _keyed("topologyKey", "whenUnsatisfiable"),
        "resourceClaims": _keyed("name"),
        "schedulingGates": _keyed("name"),
        "nodeSelector": ATOMIC,
        "overhead": _STRING_MAP,
    }
)

_TEMPLATE = Shape(fields={"metadata": METADATA, "spec": _POD_SPEC})
_EMPTY_TEMPLATE: dict[str, Any] = {"metadata": {}, "spec": {"containers": None}}


def _root(fields: Mapping[str, Shape] | None = None, empty: Mapping[str, Any] | None = None) -> Shape:
    return Shape(fields={"metadata": METADATA, **(fields or {})}, empty=empty or {})


def _workload(extra: Mapping[str, Shape], empty_spec: Mapping[str, Any], empty_status: Mapping[str, Any]) -> Shape:
    spec = Shape(fields={"selector": ATOMIC, "template": _TEMPLATE, **extra})
    return _root(
        {"spec": spec},
        {"spec": {"selector": None, "template": _EMPTY_TEMPLATE, **empty_spec}, "status": dict(empty_status)},
    )


_JOB_SPEC = Shape(fields={"selector": ATOMIC, "template": _TEMPLATE, "podFailurePolicy": LOOSE})

_BUILTIN: dict[tuple[str, str], Shape] = {
    ("", "configmaps"): _root({"data": _STRING_MAP, "binaryData": _STRING_MAP}),
    ("", "secrets"): _root({"data": _STRING_MAP, "stringData": _STRING_MAP}),
    ("", "namespaces"): _root({"spec": Shape(fields={"finalizers": _ATOMIC_LIST})}, {"spec": {}, "status": {}}),
    ("", "serviceaccounts"): _root({"secrets": _keyed("name"), "imagePullSecrets": _keyed("name")}),
    ("", "pods"): _root({"spec": _POD_SPEC}, {"spec": {"containers": None}, "status": {}}),
    ("", "services"): _root(
        {"spec": Shape(fields={"ports": _keyed("port", "protocol"), "selector": ATOMIC})},
        {"spec": {}, "status": {"loadBalancer": {}}},
    ),
    ("coordination.k8s.io", "leases"): _root(empty={"spec": {}}),
    ("", "events"): _root({"involvedObject": ATOMIC, "related": ATOMIC}, {"involvedObject": {}, "source": {}}),
    ("events.k8s.io", "events"): _root(
        {"regarding": ATOMIC, "related": ATOMIC}, {"regarding": {}, "deprecatedSource": {}}
    ),
    ("apps", "deployments"): _workload({}, {"strategy": {}}, {}),
    ("apps", "replicasets"): _workload({}, {}, {"replicas": 0}),
    ("apps", "statefulsets"): _workload(
        {"volumeClaimTemplates": _ATOMIC_LIST}, {"updateStrategy": {}}, {"replicas": 0, "availableReplicas": 0}
    ),
    ("apps", "daemonsets"): _workload(
        {},
        {"updateStrategy": {}},
        {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0},
    ),
    ("batch", "jobs"): _root({"spec": _JOB_SPEC}, {"spec": {"template": _EMPTY_TEMPLATE}, "status": {}}),
    ("batch", "cronjobs"): _root(
        {"spec": Shape(fields={"jobTemplate": Shape(fields={"metadata": METADATA, "spec": _JOB_SPEC})})},
        {
            "spec": {
                "schedule": "",
                "jobTemplate": {"metadata": {}, "spec": {"template": _EMPTY_TEMPLATE}},
            },
            "status": {},
        },
    ),
    ("networking.k8s.io", "ingresses"): _root(empty={"spec": {}, "status": {"loadBalancer": {}}}),
    ("rbac.authorization.k8s.io", "roles"): _root(empty={"rules": None}),
    ("rbac.authorization.k8s.io", "clusterroles"): _root(empty={"rules": None}),
    ("rbac.authorization.k8s.io", "rolebindings"): _root(empty={"roleRef": {"apiGroup": "", "kind": "", "name": ""}}),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): _root(
        empty={"roleRef": {"apiGroup": "", "kind": "", "name": ""}}
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): _root(
        {
            "spec": Shape(fields={"versions": _ATOMIC_LIST}),
            "status": Shape(fields={"conditions": _keyed("type"), "storedVersions": _ATOMIC_LIST}),
        },
        {"spec": {"names": {}}, "status": {"acceptedNames": {}, "conditions": None, "storedVersions": None}},
    ),
}

_DEFAULT_ROOT = _root()


def builtin_shape(group: str, plural: str) -> Shape:
    """The shape of the built-in type ``group``/``plural`` (metadata only for types without an
    entry)."""
    return _BUILTIN.get((group, plural), _DEFAULT_ROOT)


def register_builtin_shape(group: str, plural: str, fields: Mapping[str, Shape], empty: Mapping[str, Any]) -> None:
    """Declare the shape of a built-in type: its top-level fields (``metadata`` is added) and
    what an empty object of the type has."""
    _BUILTIN[(group, plural)] = _root(fields, empty)


def _from_schema(schema: Any) -> Shape:
    if not isinstance(schema, dict):
        return DEDUCED
    if schema.get("x-kubernetes-int-or-string"):
        return LOOSE
    kind = schema.get("type")
    if kind == "array":
        declared = schema.get("x-kubernetes-list-type")
        list_type: ListType = "set" if declared == "set" else "map" if declared == "map" else "atomic"
        return Shape(
            list_type=list_type,
            keys=tuple(schema.get("x-kubernetes-list-map-keys") or ()),
            items=_from_schema(schema.get("items")),
        )
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    if kind != "object" and not properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
        return LOOSE
    if schema.get("x-kubernetes-map-type") == "atomic":
        return ATOMIC
    elements = _from_schema(additional) if isinstance(additional, dict) else DEDUCED
    fields = {k: _from_schema(v) for k, v in properties.items()} if isinstance(properties, dict) else {}
    return Shape(fields=fields, elements=elements)


def shape_from_schema(schema: Any) -> Shape:
    """The shape of custom resources whose version declares ``openAPIV3Schema`` ``schema``."""
    root = _from_schema(schema)
    return Shape(fields={**root.fields, "metadata": METADATA}, elements=root.elements)
