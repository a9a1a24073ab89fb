"""The CRDs of the bundles plugin."""

from __future__ import annotations

from typing import Any

GROUP = "bundles.engine.dev"
_DURATION = r"^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h))+)$"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


def _crd(kind: str, plural: str, spec_schema: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
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
                                "status": _STATUS_SCHEMA,
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

_STATUS_SCHEMA = {
    "type": "object",
    "properties": {
        "conditions": {
            "type": "array",
            "items": _CONDITION,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    },
    "x-kubernetes-preserve-unknown-fields": True,
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
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
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
                "properties": {"name": {"type": "string", "minLength": 1}},
                "required": ["name"],
            },
            "dependsOn": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}}, "required": ["name"]},
            },
            "interval": {
                "type": "string",
                "pattern": _DURATION,
                "default": "10m",
                "description": "Periodic resync, e.g. 10m.",
            },
            "timeout": {
                "type": "string",
                "pattern": _DURATION,
                "default": "5m",
                "description": "Bound of the health check.",
            },
            "healthCheckWait": {
                "type": "string",
                "pattern": _DURATION,
                "default": "0s",
                "description": "How long applied objects must stay healthy before the bundle is Ready.",
            },
            "prune": {"type": "boolean", "default": True, "description": "Delete objects no longer in the artifact."},
        },
    },
    [
        {"name": "Revision", "type": "string", "jsonPath": ".status.lastAppliedRevision"},
        *_READY_COLUMNS,
        _AGE_COLUMN,
    ],
)
