"""Status conditions (``Ready``, ``Reconciling``, ``Stalled``) and patching the status subresource.

Conditions follow the Kubernetes API conventions (``metav1.Condition``): ``type``, ``status``
(``"True"``/``"False"``/``"Unknown"``), ``reason``, ``message``, ``observedGeneration`` and
``lastTransitionTime``, which changes only when ``status`` changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, MutableSequence
from typing import Any

from engine._text import redact, truncate

from .._client._client import Client, PatchType
from .._client._resource import Resource

__all__ = [
    "READY",
    "RECONCILING",
    "STALLED",
    "set_condition",
    "get_condition",
    "is_ready",
    "patch_status",
]

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"

_MESSAGE_LIMIT = 32768
"""The longest condition message the API server accepts (``metav1.Condition``), in bytes."""


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_condition(obj: Mapping[str, Any], type: str) -> dict[str, Any] | None:
    """The condition of ``type`` in ``obj["status"]["conditions"]``, or ``None``."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == type:
            return dict(condition)
    return None


def set_condition(
    conditions: MutableSequence[dict[str, Any]],
    type: str,
    status: bool | str,
    *,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: str | None = None,
) -> bool:
    """Set a condition in place. ``lastTransitionTime`` changes only if ``status`` changes.

    Secrets in ``message`` are masked (:func:`engine._text.redact`: tokens, passwords, keys)
    and it is cut to the API server's limit of 32768 bytes. Returns ``True`` if anything
    changed.
    """
    value = status if isinstance(status, str) else ("True" if status else "False")
    if value not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True, False or Unknown, not {value!r}")
    message = truncate(redact(message), _MESSAGE_LIMIT)
    new: dict[str, Any] = {"type": type, "status": value, "reason": reason, "message": message}
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    for i, existing in enumerate(conditions):
        if existing.get("type") == type:
            if existing.get("status") == value and existing.get("lastTransitionTime"):
                new["lastTransitionTime"] = existing["lastTransitionTime"]
            else:
                new["lastTransitionTime"] = now or _now()
            changed = existing != new
            conditions[i] = new
            return changed
    new["lastTransitionTime"] = now or _now()
    conditions.append(new)
    return True


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is ``Ready`` for its current generation.

    True when the ``Ready`` condition is ``"True"`` and, if the condition (or the status)
    reports an ``observedGeneration``, it equals ``metadata.generation``.
    """
    condition = get_condition(obj, READY)
    if condition is None or condition.get("status") != "True":
        return False
    generation = (obj.get("metadata") or {}).get("generation")
    if generation is None:
        return True
    observed = condition.get("observedGeneration")
    if observed is None:
        observed = (obj.get("status") or {}).get("observedGeneration")
    if observed is None:
        return True
    return bool(observed == generation)


async def patch_status(
    client: Client,
    resource: Resource,
    obj: Mapping[str, Any],
    status: Mapping[str, Any],
    *,
    field_manager: str | None = None,
) -> dict[str, Any]:
    """Merge-patch ``status`` into the status subresource of ``obj``; returns the new object.

    Conditions are sent whole (a merge patch replaces lists).

    Cancellation: if cancelled, the request may or may not have reached the server; wrap the
    call in ``ctx.shield(seconds)`` to let a final status write finish while the run is being
    cancelled.
    """
    meta = obj["metadata"]
    return await client.patch_status(
        resource,
        meta["name"],
        {"status": dict(status)},
        namespace=meta.get("namespace"),
        patch_type=PatchType.MERGE,
        field_manager=field_manager,
    )
