"""Values in the API's own wire formats: ``MicroTime`` and ``Time`` timestamps, resourceVersions.

A ``resourceVersion`` is opaque to clients by the API conventions; every server this engine
talks to (kube-apiserver on etcd, the embedded server) writes etcd's revision, a decimal
integer, and the engine compares two only to notice that the server's history went back (an
etcd restore). :func:`resource_version_number` is the one place that reads one as a number.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

__all__ = ["format_microtime", "parse_microtime", "resource_version_of", "resource_version_number"]

_MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_microtime(when: dt.datetime) -> str:
    """Format an aware datetime as a Kubernetes ``MicroTime`` (UTC, microseconds)."""
    if when.tzinfo is None:
        raise ValueError("MicroTime values must be timezone-aware datetimes")
    return when.astimezone(dt.UTC).strftime(_MICROTIME)


def parse_microtime(value: Any) -> dt.datetime | None:
    """Parse a Kubernetes ``MicroTime`` or ``Time`` string; ``None`` for absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def resource_version_of(obj: Mapping[str, Any]) -> str | None:
    """``metadata.resourceVersion`` of ``obj`` when it is a non-empty string, else ``None``."""
    meta = obj.get("metadata")
    # A decoded object's metadata is a dict: the exact type check spares the ABC's.
    rv = meta.get("resourceVersion") if type(meta) is dict or isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) and rv else None


def resource_version_number(rv: str | None) -> int | None:
    """The revision a ``resourceVersion`` holds, or ``None`` for none or one that is not a
    decimal integer (an opaque value some other server wrote)."""
    if rv is None or not rv.isascii() or not rv.isdigit():
        return None
    return int(rv)
