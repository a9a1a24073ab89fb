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
from collections.abc import Callable

import attrs

from ._objects import Obj, meta
from ._resources import ResourceType, openapi_schema, resource_types_from_crd
from ._schema import FieldError, check_object, structural_errors
from ._status import invalid
from ._validation import NameRule, metadata_causes, validate_metadata

__all__ = ["Strategy", "strategy_for"]

Clock = Callable[[], str]


def _no_rules(rt: ResourceType, obj: Obj) -> None:
    pass


def _no_changes(rt: ResourceType, obj: Obj, now: Clock) -> None:
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


def _canonicalize_namespace(rt: ResourceType, obj: Obj, now: Clock) -> None:
    status = dict(obj.get("status") or {})
    status.setdefault("phase", "Active")
    obj["status"] = status
    labels = dict(meta(obj).get("labels") or {})
    labels["kubernetes.io/metadata.name"] = meta(obj)["name"]
    obj["metadata"]["labels"] = labels


def _validate_crd(rt: ResourceType, obj: Obj) -> None:
    resource_types_from_crd(obj)
    errors: list[FieldError] = []
    for i, version in enumerate(obj["spec"]["versions"]):
        errors.extend(structural_errors(openapi_schema(version), f"spec.versions[{i}].schema.openAPIV3Schema"))
    if errors:
        raise invalid(rt, str(meta(obj).get("name", "")), errors)


def _canonicalize_crd(rt: ResourceType, obj: Obj, now: Clock) -> None:
    spec = obj["spec"]
    status = dict(obj.get("status") or {})
    timestamp = now()
    status["acceptedNames"] = {k: v for k, v in spec["names"].items()}
    status["acceptedNames"].setdefault("singular", spec["names"]["kind"].lower())
    status["acceptedNames"].setdefault("listKind", spec["names"]["kind"] + "List")
    status["storedVersions"] = [v["name"] for v in spec["versions"] if v.get("storage")]
    status["conditions"] = [
        {
            "type": "NamesAccepted",
            "status": "True",
            "reason": "NoConflicts",
            "message": "no conflicts found",
            "lastTransitionTime": timestamp,
        },
        {
            "type": "Established",
            "status": "True",
            "reason": "InitialNamesAccepted",
            "message": "the initial names have been accepted",
            "lastTransitionTime": timestamp,
        },
    ]
    obj["status"] = status


_DEFAULT = Strategy()
_STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "secrets"): Strategy(canonicalize=_canonicalize_secret),
    ("", "namespaces"): Strategy(name_rule="label", canonicalize=_canonicalize_namespace),
    ("apiextensions.k8s.io", "customresourcedefinitions"): Strategy(
        validate_type=_validate_crd, canonicalize=_canonicalize_crd
    ),
}


def strategy_for(rt: ResourceType) -> Strategy:
    """The strategy for ``rt``'s objects (keyed by group and plural, whatever the version)."""
    return _STRATEGIES.get(rt.storage_key, _DEFAULT)
