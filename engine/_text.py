"""Shortening text for logs, events and error messages: one cap, one marker, one format."""

from __future__ import annotations

__all__ = ["SUMMARY_LIMIT", "summarize", "truncate"]

SUMMARY_LIMIT = 500
"""The longest summary :func:`summarize` returns, in UTF-8 bytes."""

_MARKER = "..."


def truncate(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` UTF-8 bytes, else its longest prefix that fits with
    ``"..."`` appended. A multi-byte character is never split.

    Raises ``ValueError`` if ``limit`` cannot hold the marker.
    """
    if limit < len(_MARKER):
        raise ValueError(f"limit must be >= {len(_MARKER)}")
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len(_MARKER)].decode(errors="ignore") + _MARKER


def summarize(error: BaseException, *, limit: int = SUMMARY_LIMIT) -> str:
    """A one-line description of ``error`` for a log line, an event or another error's message:
    ``"TypeName: message"`` (just ``"TypeName"`` when the message is empty), cut to ``limit``
    UTF-8 bytes by :func:`truncate`.
    """
    message = str(error)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return truncate(text, limit)
