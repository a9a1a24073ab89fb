"""The CRDs of the bundles plugin."""

from __future__ import annotations

from typing import Any

GROUP = "bundles.engine.dev"
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
                            "properties": {
                                "spec": spec_schema,
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


_READY_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].message'},
]

SOURCE_CRD = _crd(
    "Source",
    "sources",
    {
        "type": "object",
        "required": ["revision"],
        "properties": {
            "revision": {"type": "string", "description": "The revision of the artifact, e.g. a commit."},
            "artifact": {
                "type": "array",
                "description": "The manifests of this revision.",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
    [{"name": "Revision", "type": "string", "jsonPath": ".spec.revision"}],
)

BUNDLE_CRD = _crd(
    "Bundle",
    "bundles",
    {
        "type": "object",
        "required": ["sourceRef"],
        "properties": {
            "sourceRef": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            "dependsOn": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            },
            "interval": {"type": "string", "description": "Periodic resync, e.g. 10m (default 10m)."},
            "timeout": {"type": "string", "description": "Bound of the health check (default 5m)."},
            "healthCheckWait": {
                "type": "string",
                "description": "How long applied objects must stay healthy before the bundle is Ready (default 0s).",
            },
            "prune": {"type": "boolean", "description": "Delete objects no longer in the artifact (default true)."},
        },
    },
    [
        {"name": "Revision", "type": "string", "jsonPath": ".status.lastAppliedRevision"},
        *_READY_COLUMNS,
    ],
)
