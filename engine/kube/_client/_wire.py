"""Values in the API's own wire formats: ``MicroTime`` and ``Time`` timestamps."""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["format_microtime", "parse_microtime"]

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
