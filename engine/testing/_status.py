"""The failures the embedded server answers with, built the way the real API server words them.

Each function returns a :class:`RequestRejected` carrying the complete ``Status`` body; callers
raise it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import RequestRejected
from ._resources import ResourceType
from ._schema import FieldError

__all__ = ["not_found", "already_exists", "invalid", "conflict", "CauseSpec", "invalid_causes"]


def _resource(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def not_found(rt: ResourceType, name: str) -> RequestRejected:
    """404 NotFound for the object ``name`` of ``rt``."""
    return RequestRejected(
        404,
        "NotFound",
        f'{_resource(rt)} "{name}" not found',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def already_exists(rt: ResourceType, name: str) -> RequestRejected:
    """409 AlreadyExists for a create of an existing ``name``."""
    return RequestRejected(
        409,
        "AlreadyExists",
        f'{_resource(rt)} "{name}" already exists',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
)


def _as_field_error(cause: tuple[str, str] | FieldError) -> FieldError:
    if isinstance(cause, FieldError):
        return cause
    field, message = cause
    reason = next((r for prefix, r in _REASONS if message.startswith(prefix)), "FieldValueInvalid")
    return FieldError(reason, field, message)


def invalid(
    rt: ResourceType, name: str, causes: Sequence[tuple[str, str] | FieldError], *, kind: str | None = None
) -> RequestRejected:
    """422 Invalid; ``causes`` are :class:`FieldError` values or ``(field, message)`` pairs
    (whose reason follows from the message: ``Required value`` is ``FieldValueRequired``...).

    The message lists the distinct errors as the real server's aggregate does: one alone, or
    several in brackets. ``kind`` overrides the type's kind (the real server names the kind the
    request body gave)."""
    kind = kind or rt.kind
    qualified = f"{kind}.{rt.group}" if rt.group else kind
    errors = [_as_field_error(c) for c in causes]
    texts = list(dict.fromkeys(str(e) for e in errors))
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return RequestRejected(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {text}',
        details={
            "name": name,
            "group": rt.group,
            "kind": kind,
            "causes": [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors],
        },
    )


def conflict(
    rt: ResourceType, name: str, message: str, causes: list[dict[str, str]] | None = None
) -> RequestRejected:
    """409 Conflict on the object ``name``: ``Operation cannot be fulfilled ...: message``."""
    details: dict[str, Any] = {"name": name, "group": rt.group, "kind": rt.plural}
    if causes:
        details["causes"] = causes
    return RequestRejected(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(rt)} "{name}": {message}',
        details=details,
    )


CauseSpec = tuple[str, str, str]
"""``(reason, field, message)`` of one cause: ``("FieldValueRequired", "spec.x", "Required value")``."""


def invalid_causes(rt: ResourceType, name: str, causes: list[CauseSpec]) -> RequestRejected:
    """422 Invalid with causes of any reason; ``details.group`` is absent for the core group."""
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    text = ", ".join(f"{field}: {message}" for _, field, message in causes)
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [{"reason": reason, "message": message, "field": field} for reason, field, message in causes]
    message = f'{qualified} "{name}" is invalid: {text}' if len(causes) == 1 else f'{qualified} "{name}" is invalid: [{text}]'
    return RequestRejected(422, "Invalid", message, details=details)
