"""Events: one storage, two views (core ``v1`` and ``events.k8s.io/v1``), and their validation.

The real API server stores one internal Event and converts it to whichever version a client
asks for. Here the stored form is the core ``v1`` Event (which has every internal field) and
``events.k8s.io/v1`` is a view of it: ``note`` is ``message``, ``regarding`` is
``involvedObject``, ``reportingController`` is ``reportingComponent``, ``deprecatedSource``,
``deprecatedFirstTimestamp``, ``deprecatedLastTimestamp`` and ``deprecatedCount`` are
``source``, ``firstTimestamp``, ``lastTimestamp`` and ``count``. ``managedFields`` are kept as
written (in the field names of the version that wrote them), as the real server keeps them.

Validation follows ``ValidateEventCreate``/``ValidateEventUpdate``: every Event passes the
legacy rules (namespaces agree; a new-style Event with ``eventTime`` names its reporting
controller, instance, action and reason); Events written through ``events.k8s.io/v1`` must also
have ``eventTime``, a ``Normal`` or ``Warning`` type, none of the deprecated fields, a valid
series, and after creation only ``series`` (and metadata) may change. Causes name the internal
(core) fields, as the real server's do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._objects import Obj, meta
from ._resources import ResourceType
from ._selectors import FieldSelector
from ._status import CauseSpec

__all__ = [
    "EVENTS_GROUP",
    "is_event",
    "is_new_view",
    "to_storage",
    "from_storage",
    "canonicalize_core",
    "validate",
    "FIELD_LABELS",
    "field_selector",
]

EVENTS_GROUP = "events.k8s.io"

_RENAMES = (
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
_TO_CORE = dict(_RENAMES)
_TO_NEW = {core: new for new, core in _RENAMES}

# Fields each view always answers (Go structs and non-omitempty fields), with their zero value.
_CORE_ALWAYS: tuple[tuple[str, Any], ...] = (
    ("involvedObject", {}),
    ("source", {}),
    ("firstTimestamp", None),
    ("lastTimestamp", None),
    ("eventTime", None),
    ("reportingComponent", ""),
    ("reportingInstance", ""),
)
_NEW_ALWAYS: tuple[tuple[str, Any], ...] = (
    ("eventTime", None),
    ("regarding", {}),
    ("deprecatedSource", {}),
    ("deprecatedFirstTimestamp", None),
    ("deprecatedLastTimestamp", None),
)
# omitempty scalars of events.k8s.io/v1 that the core form may hold as zero values.
_NEW_OMIT_EMPTY = ("reportingController", "reportingInstance", "action", "reason", "note", "type", "deprecatedCount")

_IMMUTABLE = (
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)
# The internal field names of the immutable fields, as causes name them.
_CAUSE_NAMES = {"reportingComponent": "reportingController"}

_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_event(rt: ResourceType) -> bool:
    """Whether ``rt`` is one of the two Event views."""
    return rt.storage_key == ("", "events")


def is_new_view(rt: ResourceType) -> bool:
    """Whether ``rt`` is the ``events.k8s.io`` view."""
    return is_event(rt) and rt.group == EVENTS_GROUP


def to_storage(rt: ResourceType, obj: Obj) -> Obj:
    """``obj`` as written through ``rt``, in the stored (core ``v1``) form; a new dict."""
    if not is_new_view(rt):
        return dict(obj)
    out: Obj = {}
    for key, value in obj.items():
        out[_TO_CORE.get(key, key)] = value
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def from_storage(rt: ResourceType, obj: Obj) -> Obj:
    """The stored ``obj`` as ``rt`` answers it; a new dict (``obj`` itself is not changed)."""
    if not is_event(rt):
        return obj
    if not is_new_view(rt):
        out = dict(obj)
        for key, zero in _CORE_ALWAYS:
            out.setdefault(key, zero)
        return out
    out = {"apiVersion": rt.api_version, "kind": rt.kind} if "apiVersion" in obj else {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        name = _TO_NEW.get(key, key)
        if name == "reportingComponent":
            continue
        if name in _NEW_OMIT_EMPTY and value in ("", 0, None):
            continue
        out[name] = value
    for key, zero in _NEW_ALWAYS:
        out.setdefault(key, zero)
    return out


def canonicalize_core(obj: Obj) -> None:
    """Give a stored Event the core fields that are always present, in place."""
    for key, zero in _CORE_ALWAYS:
        if obj.get(key) is None and zero is not None:
            obj[key] = zero
        else:
            obj.setdefault(key, zero)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _empty(value: Any) -> bool:
    return value in (None, "", 0, {})


def _legacy(obj: Obj, causes: list[CauseSpec]) -> None:
    namespace = meta(obj).get("namespace", "") or ""
    involved = _mapping(obj.get("involvedObject"))
    involved_ns = str(involved.get("namespace") or "")
    if _empty(obj.get("eventTime")):
        if not involved_ns:
            if namespace not in ("", "default"):
                causes.append(("FieldValueInvalid", "involvedObject.namespace", f'Invalid value: "{involved_ns}": does not match event.namespace'))
        elif namespace != involved_ns:
            causes.append(("FieldValueInvalid", "involvedObject.namespace", f'Invalid value: "{involved_ns}": does not match event.namespace'))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            causes.append(("FieldValueInvalid", "involvedObject.namespace", f'Invalid value: "{involved_ns}": does not match event.namespace'))
        controller = str(obj.get("reportingComponent") or "")
        if not controller:
            causes.append(("FieldValueRequired", "reportingController", "Required value"))
        elif not _QUALIFIED_NAME.match(controller) or len(controller.split("/")[-1]) > 63:
            causes.append(("FieldValueInvalid", "reportingController", f'Invalid value: "{controller}": must be a qualified name'))
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = str(obj.get(field) or "")
            if not value:
                causes.append(("FieldValueRequired", field, "Required value"))
            elif len(value) > limit:
                causes.append(("FieldValueInvalid", field, f'Invalid value: "": can have at most {limit} characters'))
        if len(str(obj.get("message") or "")) > 1024:
            causes.append(("FieldValueInvalid", "message", 'Invalid value: "": can have at most 1024 characters'))
    if namespace and not _DNS_SUBDOMAIN.match(namespace):
        causes.append(("FieldValueInvalid", "namespace", f'Invalid value: "{namespace}": must be a DNS subdomain'))


def _series(obj: Obj, causes: list[CauseSpec]) -> None:
    series = obj.get("series")
    if not isinstance(series, dict):
        return
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        causes.append(("FieldValueInvalid", "series.count", 'Invalid value: "": should be at least 2'))
    if _empty(series.get("lastObservedTime")):
        causes.append(("FieldValueRequired", "series.lastObservedTime", "Required value"))


def validate(rt: ResourceType, obj: Obj, old: Obj | None) -> list[CauseSpec]:
    """The causes for what is wrong with the stored-form Event ``obj`` written through ``rt``
    (``old`` is the stored Event an update replaces)."""
    causes: list[CauseSpec] = []
    _legacy(obj, causes)
    if not is_new_view(rt):
        return causes
    if old is None:
        _series(obj, causes)
        if _empty(obj.get("eventTime")):
            causes.append(("FieldValueRequired", "eventTime", "Required value"))
        if obj.get("type") not in ("Normal", "Warning"):
            causes.append(("FieldValueInvalid", "type", f'Invalid value: "": has invalid value: {obj.get("type") or ""}'))
        for field in ("firstTimestamp", "lastTimestamp", "count", "source"):
            if not _empty(obj.get(field)):
                causes.append(("FieldValueInvalid", field, 'Invalid value: "": needs to be unset'))
        return causes
    if obj.get("series") != old.get("series"):
        _series(obj, causes)
    for field in _IMMUTABLE:
        new_value, old_value = obj.get(field), old.get(field)
        if _empty(new_value) and _empty(old_value):
            continue
        if new_value != old_value:
            shown = new_value if isinstance(new_value, str) else ""
            causes.append(("FieldValueInvalid", _CAUSE_NAMES.get(field, field), f'Invalid value: "{shown}": field is immutable'))
    return causes


FIELD_LABELS: Mapping[str, str] = {
    "reason": "reason",
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "source": "source",
    "type": "type",
    "metadata.namespace": "metadata.namespace",
    "metadata.name": "metadata.name",
}
"""``events.k8s.io/v1`` field selector labels -> the core labels they select on."""


def _source(obj: Mapping[str, Any]) -> str:
    source = _mapping(obj.get("source"))
    return str(source.get("component") or obj.get("reportingComponent") or "")


def field_selector(rt: ResourceType, selector: FieldSelector) -> FieldSelector:
    """``selector`` as it applies to the stored form of ``rt``'s objects: the
    ``events.k8s.io`` labels become the core ones, and ``source`` is the reporting component
    when the Event has no ``source.component``. Other types' selectors are returned as is."""
    if not is_event(rt):
        return selector
    requirements = selector.requirements
    if is_new_view(rt):
        requirements = tuple((FIELD_LABELS.get(path, path), op, value) for path, op, value in requirements)
    getters: dict[str, Callable[[Mapping[str, Any]], Any]] = {"source": _source}
    return attrs.evolve(selector, requirements=requirements, getters=getters)
