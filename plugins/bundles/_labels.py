"""Label values derived from object names."""

from __future__ import annotations

import hashlib

__all__ = ["LABEL_VALUE_MAX", "label_value"]

LABEL_VALUE_MAX = 63
"""The longest label value Kubernetes accepts."""

_HASH_CHARS = 10


def label_value(name: str) -> str:
    """``name`` as a label value: itself when it fits in 63 characters, else its first
    characters, ``-`` and 10 hex digits of its SHA-256 (stable across processes and releases,
    so a selector written today finds what an earlier run labelled).

    Any object name (a DNS subdomain, up to 253 characters) gives a valid label value.
    """
    if len(name) <= LABEL_VALUE_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    prefix = name[: LABEL_VALUE_MAX - _HASH_CHARS - 1].rstrip("-.")
    return f"{prefix}-{digest}"
