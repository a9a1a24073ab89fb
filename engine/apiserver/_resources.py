"""Resource types the embedded server serves, and the discovery documents that describe them."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import attrs

from ._errors import RequestRejected
from ._fieldsets import Shape
from ._schema import CompiledSchema, compile_schema
from ._shapes import shape_from_schema

__all__ = ["ResourceType", "BUILTIN_TYPES", "REVIEW_TYPES", "resource_types_from_crd", "openapi_schema", "VERBS"]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@attrs.frozen
class ResourceType:
    """One served ``group/version/plural``."""

    group: str
    """API group; ``""`` for the core group."""
    version: str
    """API version within the group, such as ``"v1"``."""
    plural: str
    """The resource name in URLs, such as ``"configmaps"``."""
    singular: str
    """Singular name, such as ``"configmap"``."""
    kind: str
    """Object kind, such as ``"ConfigMap"``."""
    namespaced: bool
    """Whether objects live in a namespace."""
    short_names: tuple[str, ...] = ()
    """Short names kubectl accepts (``cm``)."""
    has_status: bool = False
    """Whether a ``status`` subresource is served."""
    categories: tuple[str, ...] = ()
    """Categories such as ``all``."""
    printer_columns: tuple[dict[str, Any], ...] = ()
    """``additionalPrinterColumns`` of a custom resource (informational)."""
    has_generation: bool = False
    """Whether objects carry ``metadata.generation`` (custom resources, CRDs and the workload
    types; not ConfigMaps, Secrets, Namespaces, Leases, Events...)."""
    selectable_fields: tuple[str, ...] = ()
    """A custom resource's ``selectableFields`` (``spec.color``), beyond ``metadata.name`` and
    ``metadata.namespace``."""
    field_shape: Shape | None = attrs.field(default=None, eq=False, repr=False)
    """The structure field ownership is tracked with (from the CRD's schema for custom
    resources; ``None``: the built-in table of :mod:`._fieldsets`)."""
    verbs: tuple[str, ...] = tuple(VERBS)
    """The verbs discovery lists (and the server serves) for the resource itself."""
    subresources: tuple[str, ...] = ()
    """Subresources other than ``status``: ``scale``, ``finalize``, ``token``."""
    storage: tuple[str, str] | None = None
    """Another type's ``(group, plural)`` whose storage this type is a view of
    (``events.k8s.io`` Events are core Events)."""
    schema: CompiledSchema | None = attrs.field(default=None, eq=False, repr=False)
    """A custom resource's compiled ``openAPIV3Schema`` (``None`` for built-in types)."""

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        """Kind of a list of these objects."""
        return f"{self.kind}List"

    @property
    def storage_key(self) -> tuple[str, str]:
        """``(group, plural)``: objects are stored once whatever the version they are read in."""
        return self.storage or (self.group, self.plural)

    def api_resources(self) -> list[dict[str, Any]]:
        """Entries for an ``APIResourceList``: the resource and its subresources."""
        digest = hashlib.sha256(f"{self.api_version}/{self.kind}".encode()).digest()
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
            "storageVersionHash": base64.b64encode(digest[:8]).decode(),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if self.has_status:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        for sub in self.subresources:
            entries.append({"name": f"{self.plural}/{sub}", "singularName": "", "namespaced": self.namespaced, **_SUBRESOURCES[sub]})
        return entries


_SUBRESOURCES: dict[str, dict[str, Any]] = {
    "scale": {"group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]},
    "finalize": {"kind": "Namespace", "verbs": ["update"]},
    "token": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]},
}

_NO_COLLECTION = ("create", "delete", "get", "list", "patch", "update", "watch")
_CREATE_ONLY = ("create",)
_CORE_EVENTS = ("", "events")

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "", "v1", "namespaces", "namespace", "Namespace", False, ("ns",), True,
        verbs=_NO_COLLECTION, subresources=("finalize",),
    ),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "secret", "Secret", True),
    ResourceType("", "v1", "events", "event", "Event", True, ("ev",)),
    ResourceType("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), subresources=("token",)),
    ResourceType("", "v1", "services", "service", "Service", True, ("svc",), True, ("all",)),
    ResourceType("", "v1", "pods", "pod", "Pod", True, ("po",), True, ("all",)),
    ResourceType("", "v1", "endpoints", "endpoints", "Endpoints", True, ("ep",)),
    ResourceType("", "v1", "limitranges", "limitrange", "LimitRange", True, ("limits",)),
    ResourceType("", "v1", "podtemplates", "podtemplate", "PodTemplate", True, has_generation=True),
    ResourceType(
        "", "v1", "replicationcontrollers", "replicationcontroller", "ReplicationController", True, ("rc",), True,
        ("all",), subresources=("scale",), has_generation=True,
    ),
    ResourceType("", "v1", "resourcequotas", "resourcequota", "ResourceQuota", True, ("quota",), True),
    ResourceType("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", True, ("pvc",), True),
    ResourceType("", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", False, ("pv",), True),
    ResourceType("", "v1", "nodes", "node", "Node", False, ("no",), True),
    ResourceType("apps", "v1", "deployments", "deployment", "Deployment", True, ("deploy",), True, ("all",), subresources=("scale",), has_generation=True),
    ResourceType("apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, ("rs",), True, ("all",), subresources=("scale",), has_generation=True),
    ResourceType("apps", "v1", "statefulsets", "statefulset", "StatefulSet", True, ("sts",), True, ("all",), subresources=("scale",), has_generation=True),
    ResourceType("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, ("ds",), True, ("all",), has_generation=True),
    ResourceType("apps", "v1", "controllerrevisions", "controllerrevision", "ControllerRevision", True),
    ResourceType("batch", "v1", "jobs", "job", "Job", True, (), True, ("all",), has_generation=True),
    ResourceType("batch", "v1", "cronjobs", "cronjob", "CronJob", True, ("cj",), True, ("all",), has_generation=True),
    ResourceType("networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", True, ("ing",), True, has_generation=True),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", True, ("netpol",), has_generation=True),
    ResourceType("networking.k8s.io", "v1", "ingressclasses", "ingressclass", "IngressClass", False, has_generation=True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True, ("pdb",), True, has_generation=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", False),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
        "SelfSubjectAccessReview", False, verbs=_CREATE_ONLY,
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "subjectaccessreviews", "subjectaccessreview",
        "SubjectAccessReview", False, verbs=_CREATE_ONLY,
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "localsubjectaccessreviews", "localsubjectaccessreview",
        "LocalSubjectAccessReview", True, verbs=_CREATE_ONLY,
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectrulesreviews", "selfsubjectrulesreview",
        "SelfSubjectRulesReview", False, verbs=_CREATE_ONLY,
    ),
    ResourceType("authentication.k8s.io", "v1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", False, verbs=_CREATE_ONLY),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration", False, has_generation=True,
    ),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration", False, has_generation=True,
    ),
    ResourceType("events.k8s.io", "v1", "events", "event", "Event", True, ("ev",), storage=_CORE_EVENTS),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        ("crd", "crds"),
        True,
        has_generation=True,
    ),
)
"""The built-in types, in discovery order."""

REVIEW_TYPES = frozenset(
    rt.storage_key for rt in BUILTIN_TYPES if rt.verbs == _CREATE_ONLY
)
"""Create-only types whose objects are answered, never stored (access and identity reviews)."""


def _crd_invalid(name: str, field: str, message: str) -> RequestRejected:
    return RequestRejected(
        422,
        "Invalid",
        f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: {field}: {message}',
        details={
            "name": name,
            "group": "apiextensions.k8s.io",
            "kind": "CustomResourceDefinition",
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
        },
    )


def openapi_schema(version: dict[str, Any]) -> Any:
    """A CRD version's ``schema.openAPIV3Schema``, or ``None``."""
    schema = version.get("schema")
    return schema.get("openAPIV3Schema") if isinstance(schema, dict) else None


def resource_types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The served resource types a CustomResourceDefinition declares, storage version first.

    Raises :class:`RequestRejected` (422) when the definition breaks a rule the real server
    enforces: name ``<plural>.<group>``, a group with a dot, a known scope, at least one served
    version and exactly one storage version.
    """
    name = str(crd.get("metadata", {}).get("name", ""))
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        raise _crd_invalid(name, "spec", "Required value")
    group = spec.get("group")
    names = spec.get("names") or {}
    plural = names.get("plural")
    kind = names.get("kind")
    if not isinstance(group, str) or "." not in group:
        raise _crd_invalid(name, "spec.group", "should be a domain with at least one dot")
    if not isinstance(plural, str) or not plural:
        raise _crd_invalid(name, "spec.names.plural", "Required value")
    if not isinstance(kind, str) or not kind:
        raise _crd_invalid(name, "spec.names.kind", "Required value")
    if name != f"{plural}.{group}":
        raise _crd_invalid(name, "metadata.name", 'must be spec.names.plural+"."+spec.group')
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise _crd_invalid(name, "spec.scope", 'Unsupported value: must be "Namespaced" or "Cluster"')
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        raise _crd_invalid(name, "spec.versions", "must have at least one version")
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        raise _crd_invalid(name, "spec.versions", "must have exactly one version marked as storage version")
    ordered = storage + [v for v in versions if v is not storage[0]]
    types = []
    for version in ordered:
        if not isinstance(version, dict) or not isinstance(version.get("name"), str):
            raise _crd_invalid(name, "spec.versions[].name", "Required value")
        if not version.get("served", False):
            continue
        subresources = version.get("subresources") or {}
        types.append(
            ResourceType(
                group=group,
                version=version["name"],
                plural=plural,
                singular=names.get("singular") or kind.lower(),
                kind=kind,
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                has_status="status" in subresources,
                categories=tuple(names.get("categories") or ()),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                has_generation=True,
                field_shape=shape_from_schema(openapi_schema(version)),
                selectable_fields=tuple(
                    str(f["jsonPath"]).lstrip(".")
                    for f in version.get("selectableFields") or ()
                    if isinstance(f, dict) and isinstance(f.get("jsonPath"), str)
                ),
                schema=compile_schema(openapi_schema(version)),
            )
        )
    return types
