"""Label and field selectors, parsed the way the API server parses them.

Label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` (exists) and ``!key``.
Field selectors support ``=``, ``==`` and ``!=`` on the fields each type supports, as the real
server: ``metadata.name`` and ``metadata.namespace`` for every type, a few more for some built-in
types (:data:`SELECTABLE_FIELDS`), a custom resource's ``selectableFields``; any other field is
400 BadRequest. Values compare as strings (booleans as ``true``/``false``); a path that does
not exist compares as ``""``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._errors import RequestRejected
from ._resources import ResourceType

__all__ = ["LabelSelector", "FieldSelector", "parse_label_selector", "parse_field_selector", "SELECTABLE_FIELDS"]

_META = ("metadata.name", "metadata.namespace")
_INVOLVED = tuple(
    f"involvedObject.{f}" for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
)

SELECTABLE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "namespaces"): ("metadata.name", "status.phase"),
    ("", "secrets"): (*_META, "type"),
    ("", "events"): (*_META, *_INVOLVED, "reason", "reportingComponent", "source", "type"),
    ("events.k8s.io", "events"): (
        *_META,
        *(f"regarding.{f.split('.', 1)[1]}" for f in _INVOLVED),
        "reason",
        "reportingController",
        "type",
    ),
    ("", "pods"): (
        *_META,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ),
    ("", "nodes"): (*_META, "spec.unschedulable"),
    ("", "replicationcontrollers"): (*_META, "status.replicas"),
    ("apps", "replicasets"): (*_META, "status.replicas"),
    ("batch", "jobs"): (*_META, "status.successful"),
    ("certificates.k8s.io", "certificatesigningrequests"): (*_META, "spec.signerName"),
}
"""Field selectors of built-in types beyond ``metadata.name`` and ``metadata.namespace``, by
``(group, plural)`` (the real server's field label conversions)."""


def _check_fields(rt: ResourceType, requirements: tuple[tuple[str, str, str], ...]) -> None:
    listed = SELECTABLE_FIELDS.get((rt.group, rt.plural))
    allowed = listed or (*_META, *rt.selectable_fields)
    for path, _, _ in requirements:
        if path in allowed:
            continue
        if listed is None and rt.field_shape is None:
            message = f'"{path}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        else:
            message = f"field label not supported: {path}"
        raise RequestRejected(400, "BadRequest", message)

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@attrs.frozen
class _Requirement:
    key: str
    op: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


@attrs.frozen
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether every requirement holds for ``labels``."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


@attrs.frozen
class FieldSelector:
    """A parsed field selector; the empty selector matches everything."""

    requirements: tuple[tuple[str, str, str], ...] = ()
    getters: Mapping[str, Callable[[Mapping[str, Any]], Any]] = attrs.field(factory=dict, eq=False)
    """Fields whose value is computed rather than found at their path (an Event's ``source``)."""

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether every requirement holds for ``obj``."""
        for path, op, value in self.requirements:
            current: Any = obj
            getter = self.getters.get(path)
            if getter is not None:
                current = getter(obj)
            else:
                for part in path.split("."):
                    current = current.get(part) if isinstance(current, Mapping) else None
            text = "" if current is None else ("true" if current else "false") if isinstance(current, bool) else str(current)
            if (text == value) != (op != "!="):
                return False
        return True


def _bad(kind: str, selector: str, why: str) -> RequestRejected:
    return RequestRejected(400, "BadRequest", f"unable to parse requirement: {kind} {selector!r}: {why}")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


_SET = re.compile(r"^(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")


def parse_label_selector(selector: str | None) -> LabelSelector:
    """Parse ``labelSelector``; raises :class:`RequestRejected` (400) when malformed."""
    if not selector:
        return LabelSelector()
    requirements = []
    for part in _split_top_level(selector):
        if m := _SET.match(part):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            key, op = m["key"], m["op"]
        elif m := _EQ.match(part):
            key, op, values = m["key"], m["op"], frozenset([m["value"]])
        elif part.startswith("!"):
            key, op, values = part[1:].strip(), "!exists", frozenset()
        else:
            key, op, values = part, "exists", frozenset()
        if not _LABEL_KEY.match(key):
            raise _bad("label", selector, f"{key!r} is not a valid label key")
        for value in values:
            if not _LABEL_VALUE.match(value):
                raise _bad("label", selector, f"{value!r} is not a valid label value")
        requirements.append(_Requirement(key, op, values))
    return LabelSelector(tuple(requirements))


_FIELD = re.compile(r"^(?P<path>[A-Za-z0-9_.\-]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$")


def parse_field_selector(selector: str | None, rt: ResourceType | None = None) -> FieldSelector:
    """Parse ``fieldSelector``; raises :class:`RequestRejected` (400) when malformed or, given the
    type ``rt``, when it selects on a field ``rt`` does not support."""
    if not selector:
        return FieldSelector()
    requirements = []
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        m = _FIELD.match(part)
        if m is None:
            raise _bad("field", selector, "a field requirement must be path=value, path==value or path!=value")
        requirements.append((m["path"], m["op"], m["value"].strip()))
    if rt is not None:
        _check_fields(rt, tuple(requirements))
    return FieldSelector(tuple(requirements))
