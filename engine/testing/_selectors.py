"""Label and field selectors, parsed the way the API server parses them.

Label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` (exists) and ``!key``.
Field selectors support ``=``, ``==`` and ``!=`` on any dotted path into the object
(``metadata.name``, ``metadata.namespace``, ``spec.nodeName``, ...), compared as strings; a path
that does not exist compares as ``""``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._errors import RequestRejected

__all__ = ["LabelSelector", "FieldSelector", "parse_label_selector", "parse_field_selector"]

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
            text = "" if current is None else str(current)
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


def parse_field_selector(selector: str | None) -> FieldSelector:
    """Parse ``fieldSelector``; raises :class:`RequestRejected` (400) when malformed."""
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
    return FieldSelector(tuple(requirements))
