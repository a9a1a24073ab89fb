"""The CRDs of the bundles plugin."""

from __future__ import annotations

from typing import Any

GROUP = "bundles.engine.dev"
_DURATION = r"^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h))+)$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
VERSION = "v1alpha1"
DEFAULT_INTERVAL = "10m"
"""The interval of a Bundle that gives none: the mutating webhook writes it into the object
(the schema has no default for it, so that what is stored comes from one place), and the
reconciler takes it for a Bundle stored without (written while the webhook was not registered)."""
API_VERSION = f"{GROUP}/{VERSION}"


def _crd(
    kind: str, plural: str, spec_schema: dict[str, Any], status_schema: dict[str, Any], columns: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


_CONDITION = {
    "type": "object",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string", "minLength": 1, "maxLength": 316},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string", "maxLength": 1024},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
    },
}


def _status_schema(**fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "conditions": {
                "type": "array",
                "items": _CONDITION,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            **fields,
        },
    }


_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": _DNS_SUBDOMAIN,
}
"""An object name (a DNS subdomain), as in a reference to another object."""


def _duration(default: str | None, description: str, *, positive: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "pattern": _DURATION, "description": description}
    if default is not None:
        schema["default"] = default
    if positive:
        schema["x-kubernetes-validations"] = [{"rule": "self.matches('[1-9]')", "message": "must be greater than 0"}]
    return schema


_INVENTORY_ENTRY = {
    "type": "object",
    "required": ["apiVersion", "kind", "name"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "namespace": {"type": "string"},
        "name": {"type": "string"},
    },
}

_READY_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].message'},
]
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

SOURCE_CRD = _crd(
    "Source",
    "sources",
    {
        "type": "object",
        "required": ["revision"],
        "properties": {
            "revision": {"type": "string", "minLength": 1, "description": "The revision of the artifact, e.g. a commit."},
            "artifact": {
                "type": "array",
                "description": "The manifests of this revision.",
                "items": {
                    "type": "object",
                    "required": ["apiVersion", "kind", "metadata"],
                    "properties": {
                        "apiVersion": {"type": "string", "minLength": 1},
                        "kind": {"type": "string", "minLength": 1},
                        "metadata": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string", "minLength": 1}},
                            "x-kubernetes-preserve-unknown-fields": True,
                        },
                    },
                    "x-kubernetes-preserve-unknown-fields": True,
                },
            },
        },
    },
    _status_schema(),
    [{"name": "Revision", "type": "string", "jsonPath": ".spec.revision"}, *_READY_COLUMNS, _AGE_COLUMN],
)

BUNDLE_CRD = _crd(
    "Bundle",
    "bundles",
    {
        "type": "object",
        "required": ["sourceRef"],
        "properties": {
            "sourceRef": {
                "type": "object",
                "description": "The Source whose artifact this Bundle applies, in the same namespace.",
                "required": ["name"],
                "properties": {
                    "kind": {"type": "string", "enum": ["Source"], "default": "Source"},
                    "name": _NAME,
                },
            },
            "dependsOn": {
                "type": "array",
                "description": "Bundles in the same namespace that must be Ready before this one is applied.",
                "items": {"type": "object", "required": ["name"], "properties": {"name": _NAME}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "interval": _duration(
                None, f"Periodic resync, e.g. 10m; the plugin's mutating webhook defaults it to {DEFAULT_INTERVAL}.",
                positive=True,
            ),
            "timeout": _duration("5m", "Bound of the health check.", positive=True),
            "healthCheckWait": _duration(
                "0s", "How long applied objects must stay healthy before the bundle is Ready.", positive=False
            ),
            "prune": {"type": "boolean", "default": True, "description": "Delete objects no longer in the artifact."},
        },
    },
    _status_schema(
        lastAppliedRevision={"type": "string"},
        inventory={"type": "array", "items": _INVENTORY_ENTRY},
    ),
    [
        {"name": "Revision", "type": "string", "jsonPath": ".status.lastAppliedRevision"},
        *_READY_COLUMNS,
        _AGE_COLUMN,
    ],
)
