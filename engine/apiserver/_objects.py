"""Small helpers on objects as the embedded server stores them."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Obj", "Key", "SYSTEM_METADATA", "meta", "format_time"]

Obj = dict[str, Any]
"""An object as stored: plain JSON data."""

Key = tuple[str, str]
"""``(namespace, name)`` of an object within its resource; ``namespace`` is ``""`` for
cluster-scoped objects."""

SYSTEM_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
"""Metadata fields the server sets or checks itself: never owned by a field manager."""


def meta(obj: Obj) -> dict[str, Any]:
    """``obj["metadata"]``, or an empty dict when it is missing or not an object."""
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def format_time(seconds: float) -> str:
    """A Kubernetes timestamp (``2006-01-02T15:04:05Z``) for seconds since the epoch."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
