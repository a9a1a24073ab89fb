"""Conversion of custom resources between versions through the CRD's conversion webhook
(``spec.conversion.strategy: Webhook``), as the real server's webhook converter does it.

Objects of such a CRD are stored in the storage version: a write through another version is
converted before it is stored, and a get, list or watch event is converted to the version asked
for, one ``apiextensions.k8s.io/v1`` ``ConversionReview`` per request (a list's objects in one
review), sent with a 30 second timeout. The webhook may change only ``labels`` and
``annotations`` of an object's metadata (the rest is restored; a changed name, namespace or
uid is an error). A failed call or a bad answer is a 500 ``Status`` without a reason, worded as
the real converter words it (``conversion webhook for GROUP/VERSION, Kind=KIND failed: ...``);
a watch whose event cannot be converted ends, as the real server's does. CRDs with
``strategy: None`` are not touched here.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import attrs

from ._errors import RequestRejected
from ._objects import Obj, meta
from ._resources import BUILTIN_TYPES, ResourceType
from ._storage import ObjectStorage
from ._webhooks import WebhookCallError, WebhookClient

__all__ = ["Conversions", "CONVERSION_TIMEOUT"]

CONVERSION_TIMEOUT = 30.0
"""Seconds a conversion webhook has to answer (fixed on the real server)."""

_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
_REVIEW_VERSION = "apiextensions.k8s.io/v1"
_BUILTIN_KEYS = frozenset(rt.storage_key for rt in BUILTIN_TYPES)


@attrs.define(eq=False)
class Conversions:
    """Converts the objects of ``store``'s webhook-converted CRDs."""

    store: ObjectStorage
    client: WebhookClient

    def _webhook(self, rt: ResourceType) -> dict[str, Any] | None:
        if rt.storage_key in _BUILTIN_KEYS:
            return None
        crd = self.store.stored(_CRDS, ("", f"{rt.plural}.{rt.group}"))
        conversion = ((crd or {}).get("spec") or {}).get("conversion") or {}
        if conversion.get("strategy") != "Webhook":
            return None
        webhook = conversion.get("webhook")
        return webhook if isinstance(webhook, dict) else None

    def storage_type(self, rt: ResourceType) -> ResourceType | None:
        """The storage version's type when ``rt``'s objects are converted by a webhook and
        ``rt`` is another version; ``None`` otherwise."""
        if self._webhook(rt) is None:
            return None
        stored = self.store.storage_type(rt.storage_key)
        return stored if stored is not None and stored.version != rt.version else None

    async def convert(self, rt: ResourceType, objects: list[Obj], *, listed: bool = False) -> list[Obj]:
        """``objects`` in ``rt``'s version (those already in it, or of a CRD without a
        conversion webhook, as they are); ``listed``: they are a list's items (one review,
        errors worded for a list). Raises :class:`RequestRejected` (500) when the webhook fails.
        Cancellation propagates."""
        webhook = self._webhook(rt)
        if webhook is None:
            return objects
        todo = [i for i, obj in enumerate(objects) if obj.get("apiVersion") != rt.api_version]
        if not todo:
            return objects
        first = objects[todo[0]]
        group, _, version = str(first.get("apiVersion") or "").rpartition("/")
        kind = str(first.get("kind") or rt.kind)
        gvk = f"{group}/{version}, Kind={kind}{'List' if listed else ''}"
        uid = str(uuid.uuid4())
        review = {
            "kind": "ConversionReview",
            "apiVersion": _REVIEW_VERSION,
            "request": {"uid": uid, "desiredAPIVersion": rt.api_version, "objects": [objects[i] for i in todo]},
        }
        try:
            answer = await self.client.post(webhook.get("clientConfig") or {}, CONVERSION_TIMEOUT, review)
        except WebhookCallError as exc:
            raise _failure(f"conversion webhook for {gvk} failed: {str(exc).removeprefix('failed to call webhook: ')}") from None
        converted = _converted(answer, uid, gvk)
        if len(converted) != len(todo):
            raise _failure(f"conversion webhook for {gvk} returned {len(converted)} objects, expected {len(todo)}")
        out = list(objects)
        for index, (i, obj) in enumerate(zip(todo, converted, strict=True)):
            # The real converter counts a list's items from 1 in these messages, a single object's from 0.
            where = f"invalid converted object at index {index + 1}" if listed else "invalid object at index 0"
            out[i] = _checked(objects[i], obj, rt, f"conversion webhook for {gvk} returned", where, listed)
        return out


def _failure(message: str) -> RequestRejected:
    """A conversion failure as the real server answers it: a 500 ``Status`` without a reason
    (the converter's error is not an API status)."""
    return RequestRejected(500, "", message)


def _converted(answer: dict[str, Any], uid: str, gvk: str) -> list[Any]:
    def failed(why: str) -> RequestRejected:
        return _failure(f"conversion webhook for {gvk} failed: {why}")

    if (answer.get("apiVersion"), answer.get("kind")) != (_REVIEW_VERSION, "ConversionReview"):
        group, _, version = str(answer.get("apiVersion") or "").rpartition("/")
        raise failed(f"expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {group}/{version}, Kind={answer.get('kind') or ''}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise failed("no response provided")
    if response.get("uid") != uid:
        raise failed(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    result = response.get("result")
    if not isinstance(result, dict):
        result = {}
    if result.get("status") != "Success":
        raise failed(str(result.get("message") or f"response.result.status was '{result.get('status') or ''}', not 'Success'"))
    objects = response.get("convertedObjects")
    return objects if isinstance(objects, list) else []


def _checked(original: Obj, converted: Any, rt: ResourceType, returned: str, where: str, listed: bool) -> Obj:
    """A converted object, checked as the real converter checks it (same kind, name, namespace
    and uid), with every field of its metadata but ``labels`` and ``annotations`` restored."""
    if not isinstance(converted, dict):
        raise _failure(f"{returned} {where}: not an object")
    if converted.get("apiVersion") != rt.api_version:
        raise _failure(f"{returned} {where}: invalid groupVersion (expected {rt.api_version}, received {converted.get('apiVersion')})")
    if converted.get("kind") != original.get("kind"):
        raise _failure(f"{returned} {where}: invalid kind (expected {original.get('kind')}, received {converted.get('kind')})")
    got: dict[str, Any] = converted["metadata"] if isinstance(converted.get("metadata"), dict) else {}
    for field, label in (("name", "name"), ("namespace", "namespace"), ("uid", "UID")):
        if (meta(original).get(field) or "") != (got.get(field) or ""):
            invalid = where if listed else "invalid object"
            raise _failure(f"{returned} {invalid}: must have the same {label}: {meta(original).get(field) or ''} != {got.get(field) or ''}")
    out = copy.deepcopy(converted)
    restored = copy.deepcopy(meta(original))
    for field in ("labels", "annotations"):
        value = got.get(field)
        if value:
            restored[field] = value
        else:
            restored.pop(field, None)
    out["metadata"] = restored
    return out
