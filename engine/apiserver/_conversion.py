"""Conversion of custom resources between versions through the CRD's conversion webhook
(``spec.conversion.strategy: Webhook``), as the real server's webhook converter does it.

Objects of such a CRD are stored in the storage version: a write through another version is
converted before it is stored, and a get, list or watch event is converted to the version asked
for, one ``apiextensions.k8s.io/v1`` ``ConversionReview`` per request (a list's objects in one
review), sent with a 30 second timeout. The webhook may change only ``labels`` and
``annotations`` of an object's metadata; the rest is restored. A failed call or a bad answer is
a 500 ``Internal error occurred: conversion webhook for GROUP/VERSION, Kind=KIND failed: ...``
(or ``returned invalid response: ...``). CRDs with ``strategy: None`` are not touched here.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import attrs

from ._admission import internal_error
from ._objects import Obj, meta
from ._resources import BUILTIN_TYPES, ResourceType
from ._storage import ObjectStorage
from ._webhooks import WebhookCallError, WebhookClient

__all__ = ["Conversions", "CONVERSION_TIMEOUT"]

CONVERSION_TIMEOUT = 30.0
"""Seconds a conversion webhook has to answer (fixed on the real server)."""

_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
_REVIEW_VERSION = "apiextensions.k8s.io/v1"


@attrs.define(eq=False)
class Conversions:
    """Converts the objects of ``store``'s webhook-converted CRDs."""

    store: ObjectStorage
    client: WebhookClient

    def _webhook(self, rt: ResourceType) -> dict[str, Any] | None:
        if rt in BUILTIN_TYPES:
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

    async def convert(self, rt: ResourceType, objects: list[Obj]) -> list[Obj]:
        """``objects`` in ``rt``'s version (those already in it, or of a CRD without a
        conversion webhook, as they are). Raises :class:`RequestRejected` (500) when the webhook
        fails. Cancellation propagates."""
        webhook = self._webhook(rt)
        if webhook is None:
            return objects
        todo = [i for i, obj in enumerate(objects) if obj.get("apiVersion") != rt.api_version]
        if not todo:
            return objects
        first = objects[todo[0]]
        source = str(first.get("apiVersion") or "")
        group, _, version = source.rpartition("/")
        gvk = f"{group}/{version}, Kind={first.get('kind', rt.kind)}"
        uid = str(uuid.uuid4())
        review = {
            "kind": "ConversionReview",
            "apiVersion": _REVIEW_VERSION,
            "request": {"uid": uid, "desiredAPIVersion": rt.api_version, "objects": [objects[i] for i in todo]},
        }
        try:
            answer = await self.client.post(webhook.get("clientConfig") or {}, CONVERSION_TIMEOUT, review)
        except WebhookCallError as exc:
            raise internal_error(f"conversion webhook for {gvk} failed: {str(exc).removeprefix('failed to call webhook: ')}") from None
        converted = _converted(answer, uid, gvk)
        if len(converted) != len(todo):
            raise internal_error(f"conversion webhook for {gvk} returned {len(converted)} objects, expected {len(todo)}")
        out = list(objects)
        for index, (i, obj) in enumerate(zip(todo, converted, strict=True)):
            out[i] = _checked(objects[i], obj, rt, gvk, index)
        return out


def _converted(answer: dict[str, Any], uid: str, gvk: str) -> list[Any]:
    def invalid(why: str) -> Exception:
        return internal_error(f"conversion webhook for {gvk} returned invalid response: {why}")

    if (answer.get("apiVersion"), answer.get("kind")) != (_REVIEW_VERSION, "ConversionReview"):
        raise invalid(f"expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {answer.get('apiVersion')}, Kind={answer.get('kind')}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise invalid("no response provided")
    if response.get("uid") != uid:
        raise invalid(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    result = response.get("result")
    if not isinstance(result, dict):
        result = {}
    if result.get("status") != "Success":
        if result.get("message"):
            raise internal_error(f"conversion webhook for {gvk} failed: {result['message']}")
        raise invalid(f"response.result.status was '{result.get('status') or ''}', not 'Success'")
    objects = response.get("convertedObjects")
    return objects if isinstance(objects, list) else []


def _checked(original: Obj, converted: Any, rt: ResourceType, gvk: str, index: int) -> Obj:
    """A converted object, checked and with the metadata the webhook may not change restored."""
    where = f"conversion webhook for {gvk} returned invalid converted object at index {index}"
    if not isinstance(converted, dict):
        raise internal_error(f"{where}: not an object")
    if converted.get("apiVersion") != rt.api_version:
        raise internal_error(f"{where}: invalid groupVersion (expected {rt.api_version}, received {converted.get('apiVersion')})")
    if converted.get("kind") != original.get("kind", rt.kind):
        raise internal_error(f"{where}: invalid kind (expected {original.get('kind')}, received {converted.get('kind')})")
    out = copy.deepcopy(converted)
    restored = copy.deepcopy(meta(original))
    for field in ("labels", "annotations"):
        value = (converted.get("metadata") or {}).get(field)
        if value:
            restored[field] = value
        else:
            restored.pop(field, None)
    out["metadata"] = restored
    return out
