"""Validation every object gets, whatever its type: names and metadata.

Type-specific rules live in :mod:`._strategies`; this module only knows the shape of
``metadata``. Failures are 422 Invalid with one cause per broken rule.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from ._objects import Obj, meta
from ._resources import ResourceType
from ._status import invalid

__all__ = ["NameRule", "metadata_causes", "validate_metadata"]

NameRule = Literal["subdomain", "label"]
"""What a name must be: an RFC 1123 subdomain (most types) or label (namespaces)."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_NAME_RULES = {"subdomain": (_DNS_SUBDOMAIN, 253), "label": (_DNS_LABEL, 63)}
_NAME_TEXT = {
    "subdomain": "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    "label": "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
}


def metadata_causes(obj: Obj, name_rule: NameRule = "subdomain") -> list[tuple[str, str]]:
    """The ``(field, message)`` causes for everything wrong in ``obj``'s metadata."""
    metadata = meta(obj)
    name = metadata.get("name", "")
    causes: list[tuple[str, str]] = []
    pattern, limit = _NAME_RULES[name_rule]
    if not isinstance(name, str) or not pattern.match(name):
        causes.append(("metadata.name", f"Invalid value: {json.dumps(name)}: {_NAME_TEXT[name_rule]}"))
    elif len(name) > limit:
        causes.append(("metadata.name", f"Invalid value: {json.dumps(name)}: must be no more than {limit} characters"))
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(("metadata.labels", "Invalid value: labels must be a map of strings"))
    else:
        for key, value in labels.items():
            if not isinstance(key, str) or not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
                causes.append(("metadata.labels", f'Invalid value: "{key}": name part must be a valid label key'))
            elif not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
                causes.append(
                    (
                        "metadata.labels",
                        f'Invalid value: "{value}": a valid label must be an empty string or consist of '
                        "alphanumeric characters, '-', '_' or '.'",
                    )
                )
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        causes.append(("metadata.annotations", "Invalid value: annotations must be a map of strings"))
    finalizers = metadata.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        causes.append(("metadata.finalizers", "Invalid value: finalizers must be a list of strings"))
    return causes


def validate_metadata(rt: ResourceType, obj: Obj, name_rule: NameRule = "subdomain") -> None:
    """Raise :class:`RequestRejected` (422 Invalid) when ``obj``'s metadata breaks a rule."""
    causes = metadata_causes(obj, name_rule)
    if causes:
        raise invalid(rt, str(meta(obj).get("name", "")), causes)
