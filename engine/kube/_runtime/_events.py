"""Kubernetes Events about an object: build the body, create it, patch its series count.

Both ``events.k8s.io/v1`` (the default) and core ``v1`` Events are supported. Aggregation
follows client-go: the first occurrence is created; repeats patch the same Event's series count
and last-observed time rather than creating new ones.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any, Literal

from engine._text import truncate

from .._client._client import Client, PatchType
from .._client._resource import Resource
from .._client._wire import format_microtime

__all__ = [
    "EVENTS_RESOURCE",
    "CORE_EVENTS_RESOURCE",
    "build_event",
    "create_event",
    "patch_event_series",
]

log = logging.getLogger("engine.kube.events")

EVENTS_RESOURCE = Resource(
    group="events.k8s.io",
    version="v1",
    kind="Event",
    plural="events",
    namespaced=True,
    verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
)
"""The ``events.k8s.io/v1`` ``events`` resource."""
CORE_EVENTS_RESOURCE = Resource(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    namespaced=True,
    verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
)
"""The core ``v1`` ``events`` resource."""

EventType = Literal["Normal", "Warning"]

_NOTE_LIMIT = 1024
_REASON_LIMIT = 128


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if not ref["kind"] or not ref["name"]:
        raise ValueError("an event's regarding object must have kind and metadata.name")
    return {k: v for k, v in ref.items() if v}


def _resource_of(event: Mapping[str, Any]) -> Resource:
    api_version = event.get("apiVersion")
    if api_version == EVENTS_RESOURCE.api_version:
        return EVENTS_RESOURCE
    if api_version == CORE_EVENTS_RESOURCE.api_version:
        return CORE_EVENTS_RESOURCE
    raise ValueError("an Event's apiVersion must be 'events.k8s.io/v1' or 'v1'")


def build_event(
    regarding: Mapping[str, Any],
    *,
    reason: str,
    note: str,
    action: str,
    reporting_controller: str,
    reporting_instance: str,
    type: EventType = "Normal",
    related: Mapping[str, Any] | None = None,
    api_version: Literal["events.k8s.io/v1", "v1"] = "events.k8s.io/v1",
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Build an Event about ``regarding`` (an object with ``apiVersion``, ``kind``, ``metadata``).

    ``reason`` is a short CamelCase machine-readable cause, ``note`` the human message
    (truncated to 1 KiB), ``action`` what was done or failed (``"Reconcile"``). The event lives
    in the object's namespace (``default`` for cluster-scoped objects) and is named like
    client-go's (``<object name>.<hex nanoseconds>``, the name cut to fit 253 characters). ``api_version="v1"`` builds a core Event
    (``involvedObject``, ``message``, ``source``, ``count``) instead of an ``events.k8s.io`` one.
    """
    if type not in ("Normal", "Warning"):
        raise ValueError("an event's type must be 'Normal' or 'Warning'")
    if not reason:
        raise ValueError("an event must have a reason")
    when = now or _utcnow()
    ref = _reference(regarding)
    namespace = ref.get("namespace") or "default"
    stamp = int(when.timestamp() * 1_000_000) * 1000
    suffix = f".{stamp:x}"
    prefix = ref["name"] if len(ref["name"]) + len(suffix) <= 253 else ref["name"][: 253 - len(suffix)].rstrip(".-")
    meta = {"name": prefix + suffix, "namespace": namespace}
    reason = truncate(reason, _REASON_LIMIT)
    note = truncate(note, _NOTE_LIMIT)
    if api_version == "v1":
        core: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": meta,
            "involvedObject": ref,
            "reason": reason,
            "message": note,
            "type": type,
            "action": action,
            "source": {"component": reporting_controller},
            "reportingComponent": reporting_controller,
            "reportingInstance": reporting_instance,
            "firstTimestamp": _time(when),
            "lastTimestamp": _time(when),
            "eventTime": format_microtime(when),
            "count": 1,
        }
        if related is not None:
            core["related"] = _reference(related)
        return core
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": meta,
        "eventTime": format_microtime(when),
        "regarding": ref,
        "reason": reason,
        "note": note,
        "type": type,
        "action": action,
        "reportingController": reporting_controller,
        "reportingInstance": reporting_instance,
    }
    if related is not None:
        event["related"] = _reference(related)
    return event


async def create_event(client: Client, event: Mapping[str, Any]) -> dict[str, Any]:
    """Create an Event built by :func:`build_event` (either API version) and return it.

    Cancellation: a checkpoint; if cancelled after sending, the Event may exist.
    """
    return await client.create(_resource_of(event), event)


async def patch_event_series(
    client: Client,
    event: Mapping[str, Any],
    *,
    count: int,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Record that an existing Event happened again: ``count`` occurrences so far, the last now.

    For ``events.k8s.io/v1`` this merge-patches ``series.count``/``series.lastObservedTime``;
    for core Events ``count``/``lastTimestamp``. Raises :class:`NotFoundError` if the Event has
    expired (create a new one then).
    Cancellation: a checkpoint; if cancelled after sending, the patch may have been applied.
    """
    if count < 2:
        raise ValueError("a series count must be >= 2 (the first occurrence is the Event itself)")
    resource = _resource_of(event)
    meta = event.get("metadata") or {}
    when = now or _utcnow()
    patch: dict[str, Any]
    if resource is EVENTS_RESOURCE:
        patch = {"series": {"count": count, "lastObservedTime": format_microtime(when)}}
    else:
        patch = {"count": count, "lastTimestamp": _time(when)}
    return await client.patch(
        resource,
        str(meta.get("name", "")),
        patch,
        namespace=meta.get("namespace"),
        patch_type=PatchType.MERGE,
    )
