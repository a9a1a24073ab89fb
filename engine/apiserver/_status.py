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

_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Invalid value", "FieldValueInvalid"),
    ("Forbidden", "FieldValueForbidden"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
)
__all__ = [
    "not_found",
    "already_exists",
    "invalid",
    "conflict",
    "CauseSpec",
    "invalid_causes",
    "details",
    "cause_reason",
    "precondition_failed",
    "namespace_terminating",
]


def _resource(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def details(group: str, kind: str, name: str | None = None, **more: Any) -> dict[str, Any]:
    """``Status.details`` as the real server writes them: ``group`` absent for the core group,
    ``name`` absent when empty."""
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = kind
    out.update(more)
    return out


def cause_reason(message: str) -> str:
    """The ``reason`` of a field error from its message (``"Required value: ..."`` is
    ``FieldValueRequired``), as the real server's field errors word them."""
    return next((reason for prefix, reason in _REASONS if message.startswith(prefix)), "FieldValueInvalid")


def not_found(rt: ResourceType, name: str) -> RequestRejected:
    """404 NotFound for the object ``name`` of ``rt``."""
    return RequestRejected(
        404,
        "NotFound",
        f'{_resource(rt)} "{name}" not found',
        details=details(rt.group, rt.plural, name),
    )


def already_exists(rt: ResourceType, name: str) -> RequestRejected:
    """409 AlreadyExists for a create of an existing ``name``."""
    return RequestRejected(
        409,
        "AlreadyExists",
        f'{_resource(rt)} "{name}" already exists',
        details=details(rt.group, rt.plural, name),
    )


def namespace_terminating(rt: ResourceType, name: str, namespace: str) -> RequestRejected:
    """403 Forbidden for a create of ``name`` in ``namespace``, which is being deleted."""
    cause = {
        "reason": "NamespaceTerminating",
        "message": f"namespace {namespace} is being terminated",
        "field": "metadata.namespace",
    }
    return RequestRejected(
        403,
        "Forbidden",
        f'{rt.plural} "{name}" is forbidden: unable to create new content in namespace {namespace} '
        "because it is being terminated",
        details=details(rt.group, rt.plural, name, causes=[cause]),
    )


def _as_field_error(cause: tuple[str, str] | FieldError) -> FieldError:
    if isinstance(cause, FieldError):
        return cause
    field, message = cause
    return FieldError(cause_reason(message), field, message)


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
        details=details(
            rt.group,
            kind,
            name,
            causes=[{"reason": e.reason, "message": e.message, "field": e.field} for e in errors],
        ),
    )


def conflict(
    rt: ResourceType, name: str, message: str, causes: list[dict[str, str]] | None = None
) -> RequestRejected:
    """409 Conflict on the object ``name``: ``Operation cannot be fulfilled ...: message``."""
    more: dict[str, Any] = {"causes": causes} if causes else {}
    return RequestRejected(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(rt)} "{name}": {message}',
        details=details(rt.group, rt.plural, name, **more),
    )


def precondition_failed(rt: ResourceType, name: str, message: str) -> RequestRejected:
    """409 Conflict for a failed delete precondition: the real server names the kind, not the
    resource, in this one."""
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return RequestRejected(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {message}',
        details=details(rt.group, rt.kind, name),
    )


CauseSpec = tuple[str, str, str]
"""``(reason, field, message)`` of one cause: ``("FieldValueRequired", "spec.x", "Required value")``."""


def invalid_causes(rt: ResourceType, name: str, causes: list[CauseSpec]) -> RequestRejected:
    """422 Invalid with causes of any reason; ``details.group`` is absent for the core group."""
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    text = ", ".join(f"{field}: {message}" for _, field, message in causes)
    more = {"causes": [{"reason": reason, "message": message, "field": field} for reason, field, message in causes]}
    message = f'{qualified} "{name}" is invalid: {text}' if len(causes) == 1 else f'{qualified} "{name}" is invalid: [{text}]'
    return RequestRejected(422, "Invalid", message, details=details(rt.group, rt.kind, name, **more))
