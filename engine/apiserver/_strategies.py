"""Per-type strategies: what the server does to an object of one type before storing it.

The real API server gives every resource a strategy (prepare, validate, canonicalize). Here a
:class:`Strategy` holds the type's name rule, its validation beyond metadata and its
canonicalization (defaults and derived fields). Types without an entry use the default strategy:
metadata validation only. Custom resources use their definition's schema (:mod:`._schema`):
pruning, defaults, validation and CEL rules; definitions are checked for structural schemas.
"""

from __future__ import annotations

import base64
import binascii
import copy
from collections.abc import Callable
from typing import Any

import attrs

from . import _access, _services, _webhookconfigs, _workloads
from ._objects import Obj, meta
from ._resources import ResourceType, openapi_schema, resource_types_from_crd
from ._schema import FieldError, check_object, structural_errors
from ._status import CauseSpec, invalid, invalid_causes
from ._validation import NameRule, metadata_causes, validate_metadata

__all__ = ["Strategy", "strategy_for"]

Clock = Callable[[], str]


def _no_rules(rt: ResourceType, obj: Obj) -> None:
    pass


def _no_changes(rt: ResourceType, obj: Obj, now: Clock) -> None:
    pass


def _nothing_on_create(rt: ResourceType, obj: Obj) -> None:
    pass


def _no_check(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    pass


def _nothing_on_update(rt: ResourceType, obj: Obj, old: Obj, subresource: str | None) -> None:
    pass


@attrs.frozen
class Strategy:
    """How objects of one type are validated and canonicalized on every create and update."""

    name_rule: NameRule = "subdomain"
    """What ``metadata.name`` must be."""
    validate_type: Callable[[ResourceType, Obj], None] = _no_rules
    """Type-specific validation, run after metadata validation; raises ``RequestRejected``."""
    canonicalize: Callable[[ResourceType, Obj, Clock], None] = _no_changes
    """Fills defaults and derived fields in place; ``now()`` gives the current timestamp. May raise
    ``RequestRejected`` for values that cannot be canonicalized."""
    prepare_create: Callable[[ResourceType, Obj], None] = _nothing_on_create
    """Sets what the server owns on create (``PrepareForCreate``), in place; runs after field
    ownership is recorded, so what it sets is owned by no manager."""
    prepare_update: Callable[[ResourceType, Obj, Obj, str | None], None] = _nothing_on_update
    """``(rt, new, old, subresource)``: keeps what a write through this endpoint may not change
    (``PrepareForUpdate``), in place, before validation."""
    check: Callable[[ResourceType, Obj, Obj | None], None] = _no_check
    """``(rt, obj, old)``: validation that needs the defaults applied or the object an update
    replaces (``old``, ``None`` on create); raises ``RequestRejected``."""
    status_writer: str | None = None
    """The manager that owns the ``status`` fields ``canonicalize`` sets (on the real server a
    controller writes them through the status subresource: ``kube-apiserver`` for a
    CustomResourceDefinition's names and conditions); ``None``: nobody owns them."""

    def prepare(
        self, rt: ResourceType, obj: Obj, now: Clock, *, old: Obj | None = None, subresource: str | None = None
    ) -> list[str]:
        """Validate ``obj`` then canonicalize it in place; raises :class:`RequestRejected`.

        ``old`` is the stored object on updates, ``subresource`` the subresource written. Returns
        the paths of the unknown fields a custom resource's schema pruned (for warnings)."""
        if rt.schema is not None:
            return _prepare_custom(rt, obj, old, subresource)
        validate_metadata(rt, obj, self.name_rule)
        self.validate_type(rt, obj)
        self.canonicalize(rt, obj, now)
        return []


def _prepare_custom(rt: ResourceType, obj: Obj, old: Obj | None, subresource: str | None) -> list[str]:
    """Prune and default, then validate as the real server validates a custom resource: metadata
    and the schema, then the CEL rules unless a blocking error came first."""
    assert rt.schema is not None
    unknown = rt.schema.prune_and_default(obj)
    errors: list[FieldError | tuple[str, str]] = []
    errors.extend(metadata_causes(obj))
    errors.extend(check_object(rt.schema, obj, old, status_only=subresource == "status"))
    if errors:
        raise invalid(rt, str(meta(obj).get("name", "")), errors)
    return unknown


def _canonicalize_secret(rt: ResourceType, obj: Obj, now: Clock) -> None:
    if "stringData" in obj:
        string_data = obj.pop("stringData") or {}
        data = dict(obj.get("data") or {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data
    obj.setdefault("type", "Opaque")
    if isinstance(obj.get("data"), dict):
        for k, v in obj["data"].items():
            try:
                base64.b64decode(str(v), validate=True)
            except binascii.Error:
                raise invalid(rt, meta(obj).get("name", ""), [(f"data[{k}]", "Invalid value: must be base64")]) from None


def _default_namespace(rt: ResourceType, obj: Obj) -> None:
    labels = dict(meta(obj).get("labels") or {})
    labels["kubernetes.io/metadata.name"] = meta(obj)["name"]
    obj["metadata"]["labels"] = labels


def _canonicalize_namespace(rt: ResourceType, obj: Obj, now: Clock) -> None:
    _default_namespace(rt, obj)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _prepare_namespace_create(rt: ResourceType, obj: Obj) -> None:
    obj["status"] = {"phase": "Active"}
    spec = _mapping(obj.get("spec"))
    finalizers = list(spec.get("finalizers") or [])
    if "kubernetes" not in finalizers:
        finalizers.append("kubernetes")
    obj["spec"] = {**spec, "finalizers": finalizers}


def _prepare_namespace_update(rt: ResourceType, obj: Obj, old: Obj, subresource: str | None) -> None:
    old_spec = _mapping(old.get("spec"))
    if subresource == "finalize":
        new_spec = _mapping(obj.get("spec"))
        finalizers = new_spec.get("finalizers")
        obj.clear()
        obj.update(copy.deepcopy(old))
        spec = dict(old_spec)
        if finalizers:
            spec["finalizers"] = list(finalizers)
        else:
            spec.pop("finalizers", None)
        obj["spec"] = spec
        return
    if subresource is not None:
        return
    if "status" in old:
        obj["status"] = copy.deepcopy(old["status"])
    if old_spec.get("finalizers"):
        obj["spec"] = {**_mapping(obj.get("spec")), "finalizers": list(old_spec["finalizers"])}
    elif isinstance(obj.get("spec"), dict):
        obj["spec"].pop("finalizers", None)


def _validate_crd(rt: ResourceType, obj: Obj) -> None:
    resource_types_from_crd(obj)
    errors: list[FieldError] = []
    for i, version in enumerate(obj["spec"]["versions"]):
        errors.extend(structural_errors(openapi_schema(version), f"spec.versions[{i}].schema.openAPIV3Schema"))
    if errors:
        raise invalid(rt, str(meta(obj).get("name", "")), errors)
    causes = _webhookconfigs.conversion_causes(obj["spec"])
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)


def _default_crd(rt: ResourceType, obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    if not isinstance(spec.get("conversion"), dict):
        spec["conversion"] = {"strategy": "None"}


def _canonicalize_crd(rt: ResourceType, obj: Obj, now: Clock) -> None:
    _default_crd(rt, obj)
    spec = obj["spec"]
    status = dict(obj.get("status") or {})
    timestamp = now()
    since = {
        c.get("type"): c.get("lastTransitionTime")
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("status") == "True"
    }
    status["acceptedNames"] = {k: v for k, v in spec["names"].items()}
    status["acceptedNames"].setdefault("singular", spec["names"]["kind"].lower())
    status["acceptedNames"].setdefault("listKind", spec["names"]["kind"] + "List")
    status["conditions"] = [
        {
            "type": "NamesAccepted",
            "status": "True",
            "reason": "NoConflicts",
            "message": "no conflicts found",
            "lastTransitionTime": since.get("NamesAccepted") or timestamp,
        },
        {
            "type": "Established",
            "status": "True",
            "reason": "InitialNamesAccepted",
            "message": "the initial names have been accepted",
            "lastTransitionTime": since.get("Established") or timestamp,
        },
    ]
    obj["status"] = status


def _stored_versions(obj: Obj, previous: list[Any]) -> None:
    status = obj.setdefault("status", {})
    stored = list(previous)
    for version in obj["spec"].get("versions") or []:
        if isinstance(version, dict) and version.get("storage") and version.get("name") not in stored:
            stored.append(version.get("name"))
    status["storedVersions"] = stored


def _prepare_crd_create(rt: ResourceType, obj: Obj) -> None:
    _stored_versions(obj, [])


def _prepare_crd_update(rt: ResourceType, obj: Obj, old: Obj, subresource: str | None) -> None:
    if isinstance(obj.get("spec"), dict):
        _stored_versions(obj, list(_mapping(old.get("status")).get("storedVersions") or []))


def _workload_defaults(rt: ResourceType, obj: Obj, now: Clock) -> None:
    _workloads.canonicalize(rt, obj)


def _service_defaults(rt: ResourceType, obj: Obj, now: Clock) -> None:
    _services.canonicalize(obj)


def _load_balancer_status(rt: ResourceType, obj: Obj) -> None:
    obj["status"] = {"loadBalancer": {}}


def _check_rbac(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    causes = _access.validate_rbac(rt, obj, old)
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)


_MAX_DATA = 1024 * 1024


def _check_data_size(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    total = 0
    for field in ("data", "binaryData"):
        for key, value in _mapping(obj.get(field)).items():
            total += len(str(key)) + len(str(value).encode())
    if rt.plural == "secrets":
        total = 0
        for key, value in _mapping(obj.get("data")).items():
            total += len(str(key)) + len(str(value)) * 3 // 4
    if total > _MAX_DATA:
        raise invalid_causes(
            rt, str(meta(obj).get("name", "")), [("FieldValueTooLong", "data", f"Too long: must have at most {_MAX_DATA} bytes")]
        )


def _check_ingress(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    causes: list[CauseSpec] = []
    spec = _mapping(obj.get("spec"))
    for i, rule in enumerate(spec.get("rules") or []):
        for j, path in enumerate(_mapping(_mapping(rule).get("http")).get("paths") or []):
            where = f"spec.rules[{i}].http.paths[{j}]"
            kind = _mapping(path).get("pathType")
            if kind is None:
                causes.append(("FieldValueRequired", f"{where}.pathType", "Required value: pathType must be specified"))
            elif kind not in ("Exact", "Prefix", "ImplementationSpecific"):
                causes.append(
                    (
                        "FieldValueNotSupported",
                        f"{where}.pathType",
                        f'Unsupported value: "{kind}": supported values: "Exact", "ImplementationSpecific", "Prefix"',
                    )
                )
            if not _mapping(path).get("backend"):
                causes.append(("FieldValueRequired", f"{where}.backend", "Required value"))
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)


def _check_lease(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    spec = _mapping(obj.get("spec"))
    causes: list[CauseSpec] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        causes.append(("FieldValueInvalid", "spec.leaseDurationSeconds", f"Invalid value: {duration}: must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        causes.append(
            ("FieldValueInvalid", "spec.leaseTransitions", f"Invalid value: {transitions}: must be greater than or equal to 0")
        )
    strategy = spec.get("strategy")
    if strategy not in (None, "", "OldestEmulationVersion"):
        causes.append(
            ("FieldValueNotSupported", "spec.strategy", f'Unsupported value: "{strategy}": supported values: "OldestEmulationVersion"')
        )
    if spec.get("preferredHolder") and not strategy:
        causes.append(("FieldValueForbidden", "spec.preferredHolder", "Forbidden: may only be specified if `strategy` is defined"))
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)


_WORKLOAD = Strategy(
    canonicalize=_workload_defaults, prepare_create=_workloads.prepare_create, check=_workloads.check
)
_RBAC = Strategy(check=_check_rbac)

_DEFAULT = Strategy()
_STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "secrets"): Strategy(canonicalize=_canonicalize_secret, check=_check_data_size),
    ("", "configmaps"): Strategy(check=_check_data_size),
    ("coordination.k8s.io", "leases"): Strategy(check=_check_lease),
    **{
        key: Strategy(validate_type=_webhookconfigs.validate_configuration, canonicalize=_webhookconfigs.default_configuration)
        for key in (_webhookconfigs.MUTATING, _webhookconfigs.VALIDATING)
    },
    ("", "services"): Strategy(canonicalize=_service_defaults, prepare_create=_load_balancer_status, check=_services.check),
    ("networking.k8s.io", "ingresses"): Strategy(prepare_create=_load_balancer_status, check=_check_ingress),
    **{key: _WORKLOAD for key in _workloads.WORKLOADS},
    **{("rbac.authorization.k8s.io", plural): _RBAC for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")},
    ("", "namespaces"): Strategy(
        name_rule="label",
        canonicalize=_canonicalize_namespace,
        prepare_create=_prepare_namespace_create,
        prepare_update=_prepare_namespace_update,
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): Strategy(
        validate_type=_validate_crd,
        canonicalize=_canonicalize_crd,
        prepare_create=_prepare_crd_create,
        prepare_update=_prepare_crd_update,
        status_writer="kube-apiserver",
    ),
}


def strategy_for(rt: ResourceType) -> Strategy:
    """The strategy for ``rt``'s objects (keyed by group and plural, whatever the version)."""
    return _STRATEGIES.get(rt.storage_key, _DEFAULT)
