"""A plugin whose Queues have a mutating, a validating and a conversion webhook (docs/webhooks.md).

    python -m engine run --embedded --plugin examples.webhook_plugin:plugin
    python -m engine manifests --plugin examples.webhook_plugin:plugin

A Queue (``queues.example.dev``) is served as ``v1``, the stored version (``spec.maxMessages``),
and as ``v2`` (``spec.limits.messages``); the conversion webhook turns one into the other. The
mutating webhook writes ``maxMessages: 1000`` into a Queue that has none. The validating
webhook refuses a Queue whose ``deadLetter`` names itself or a Queue its namespace does not
hold: it looks in the informer's cache first and asks the API server before refusing, since
the cache may not hold a Queue written a moment ago. When it cannot find out in time it lets
the Queue through with a warning. The webhooks' rules name ``v1`` only: the API server
converts a ``v2`` write to ``v1`` for them (``matchPolicy: Equivalent``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import trio

from engine.kube import (
    AdmissionDenied,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionRule,
    AdmissionWebhook,
    ConversionWebhook,
    KubeError,
    NotFoundError,
    Plugin,
    PluginContext,
    WebhookContext,
)

GROUP = "example.dev"
DEFAULT_MAX_MESSAGES = 1000
READ_MARGIN = 0.5
"""Seconds before the handler's deadline by which the lookup of the dead-letter Queue must be done."""


def _version(name: str, spec: Mapping[str, Any], *, storage: bool) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": spec}}
    return {"name": name, "served": True, "storage": storage, "schema": {"openAPIV3Schema": schema}}


_MESSAGES = {"type": "integer", "minimum": 1}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"queues.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"kind": "Queue", "plural": "queues", "singular": "queue", "listKind": "QueueList"},
        "versions": [
            _version("v1", {"type": "object", "properties": {
                "maxMessages": _MESSAGES, "deadLetter": {"type": "string"}}}, storage=True),
            _version("v2", {"type": "object", "properties": {
                "limits": {"type": "object", "properties": {"messages": _MESSAGES}},
                "deadLetter": {"type": "string"}}}, storage=False),
        ],
    },
}


async def default_queue(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    """Write ``spec.maxMessages: 1000`` into a Queue that has none."""
    queue: dict[str, Any] = copy.deepcopy(dict(request.object or {}))
    spec = queue.setdefault("spec", {})
    if spec.get("maxMessages") is not None:
        return None
    spec["maxMessages"] = DEFAULT_MAX_MESSAGES
    return AdmissionResponse.patched(request, queue)


async def _queue_exists(namespace: str | None, name: str, ctx: WebhookContext) -> bool:
    """Whether ``namespace`` holds the Queue ``name``: a synced cache holding it says yes at
    once; a miss is asked of the API server."""
    if ctx.cluster is not None:
        for informer in ctx.cluster.informers:
            if (informer.resource.group, informer.resource.plural) == (GROUP, "queues") and informer.synced:
                if informer.store.get(namespace, name) is not None:
                    return True
    if ctx.client is None:
        raise KubeError("no client to read Queues with")
    queues = await ctx.client.resource(f"{GROUP}/v1", "Queue")
    try:
        await ctx.client.get(queues, name, namespace=namespace)
    except NotFoundError:
        return False
    return True


async def validate_queue(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    """Refuse a Queue whose ``deadLetter`` is itself or a Queue its namespace does not hold."""
    target = dict((request.object or {}).get("spec") or {}).get("deadLetter")
    if not target:
        return None
    if request.old_object is not None and dict(request.old_object.get("spec") or {}).get("deadLetter") == target:
        return None
    if target == request.name:
        raise AdmissionDenied(f"deadLetter {target!r} is this Queue itself")
    found: bool | None = None
    try:
        with trio.move_on_at(ctx.deadline - READ_MARGIN):
            found = await _queue_exists(request.namespace, target, ctx)
    except KubeError as exc:
        return AdmissionResponse.allow(warnings=[f"deadLetter {target!r} was not checked: {exc}"])
    if found is None:
        return AdmissionResponse.allow(warnings=[f"deadLetter {target!r} was not checked: no answer in time"])
    if not found:
        raise AdmissionDenied(f"deadLetter {target!r}: no Queue of that name in namespace {request.namespace}",
                              code=422)
    return None


async def convert_queue(obj: Mapping[str, Any], api_version: str, ctx: WebhookContext) -> Mapping[str, Any]:
    """``obj`` as ``api_version``: ``spec.maxMessages`` (v1) is ``spec.limits.messages`` (v2)."""
    spec = dict(obj.get("spec") or {})
    if api_version == f"{GROUP}/v2":
        if "maxMessages" in spec:
            spec["limits"] = {"messages": spec.pop("maxMessages")}
    elif api_version == f"{GROUP}/v1":
        limits = dict(spec.pop("limits", None) or {})
        if "messages" in limits:
            spec["maxMessages"] = limits["messages"]
    else:
        raise ValueError(f"a Queue has no version {api_version}")
    return {**obj, "apiVersion": api_version, "spec": spec}


async def setup(ctx: PluginContext) -> None:
    """Cache the Queues the validating webhook looks dead-letter Queues up in."""
    await ctx.cluster.informer(f"{GROUP}/v1", "Queue")


RULES = [AdmissionRule(f"{GROUP}/v1", "queues", ("CREATE", "UPDATE"), scope="Namespaced")]

plugin = Plugin(
    "queues", setup, crds=[CRD],
    webhooks=[
        AdmissionWebhook("default.queues.example.dev", default_queue, RULES, mutating=True, timeout_seconds=5),
        AdmissionWebhook("validate.queues.example.dev", validate_queue, RULES, timeout_seconds=5),
        ConversionWebhook(f"queues.{GROUP}", convert_queue),
    ],
    examples=[
        {"apiVersion": f"{GROUP}/v1", "kind": "Queue", "metadata": {"name": "orders-dead", "namespace": "default"},
         "spec": {}},
        {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": "orders", "namespace": "default"},
         "spec": {"limits": {"messages": 50}, "deadLetter": "orders-dead"}},
    ],
    description="Queues with a dead-letter Queue: defaulted, validated and converted by webhooks",
)
