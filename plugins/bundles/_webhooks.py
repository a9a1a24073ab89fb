"""The bundles plugin's admission webhooks: ``dependsOn`` cycles are refused, ``interval`` defaulted.

A CEL rule in the CRD sees one object; a cycle runs through several Bundles. The validating
webhook follows ``dependsOn`` from the Bundle being written through the other Bundles of its
namespace (the informer's cache once synced, when the plugin watches every Bundle; otherwise
a list from the API server) and refuses a Bundle that closes a cycle, naming it:
``dependency cycle: a -> b -> a``. A Bundle that depends on itself is always refused; when the
other Bundles cannot be read (the API server failing, or too slow to answer within the
handler's deadline), the Bundle is allowed with a warning saying the cycle was not checked, rather than refusing every Bundle while the server is
unwell. Two Bundles written at the same moment can still close a cycle the other did not see
yet. The reconciler reports such cycles (``DependencyCycle``) either way. An update that
leaves ``dependsOn`` as it was, and any write of a Bundle being deleted, is let through: a
Bundle stored in a cycle (before the webhook, or by two such writes) can still get and lose
its finalizer and its labels.

The mutating webhook writes ``spec.interval: 10m`` into a Bundle that has none, so what is
stored says what the reconciler uses (:data:`DEFAULT_INTERVAL`, which the spec parser also
takes for a missing interval).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import trio

from engine._text import summarize
from engine.kube import (
    AdmissionDenied,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionRule,
    AdmissionWebhook,
    KubeError,
    WebhookContext,
)

from ._crds import API_VERSION, DEFAULT_INTERVAL, GROUP
from ._spec import dependency_names, find_cycle, mapping

__all__ = ["WEBHOOKS", "validate_bundle", "default_bundle"]

READ_MARGIN = 1.0
"""Seconds before the handler's deadline by which reading the other Bundles must be done;
past it the Bundle is allowed with a warning rather than refused for the time it took."""

_RULES = [AdmissionRule(API_VERSION, "bundles", ("CREATE", "UPDATE"), scope="Namespaced")]


async def _dependencies_in(namespace: str | None, ctx: WebhookContext) -> dict[str, list[str]]:
    """``dependsOn`` of every Bundle in ``namespace``: from the cache when it holds them all."""
    cluster = ctx.cluster
    if cluster is not None and cluster.label_selector is None:
        for informer in cluster.informers:
            resource = informer.resource
            if (resource.group, resource.plural) == (GROUP, "bundles") and informer.synced and informer.key_ranges is None:
                if informer.namespace is None or informer.namespace == namespace:
                    return {
                        str(b["metadata"]["name"]): dependency_names(b)
                        for b in informer.store.list() if b["metadata"].get("namespace") == namespace
                    }
    client = ctx.client if ctx.client is not None else (cluster.client if cluster is not None else None)
    if client is None:
        return {}
    resource = await client.resource(API_VERSION, "Bundle")
    listed = await client.list_all(resource, namespace=namespace)
    return {str(b["metadata"]["name"]): dependency_names(b) for b in listed.items}


async def validate_bundle(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    """Refuse a Bundle whose ``dependsOn`` closes a cycle (through other Bundles too)."""
    bundle = request.object or {}
    name = request.name or str(mapping(bundle.get("metadata")).get("name") or "")
    own = dependency_names(bundle)
    if not name or not own or mapping(bundle.get("metadata")).get("deletionTimestamp"):
        return None
    if request.old_object is not None and dependency_names(request.old_object) == own:
        return None
    if name in own:
        raise AdmissionDenied(f"dependency cycle: {name} -> {name} (a Bundle cannot depend on itself)")
    others: dict[str, list[str]] | None = None
    try:
        with trio.move_on_at(ctx.deadline - READ_MARGIN):
            others = await _dependencies_in(request.namespace, ctx)
    except KubeError as exc:
        return AdmissionResponse.allow(warnings=[
            f"dependency cycles through other Bundles were not checked: {summarize(exc)}"])
    if others is None:
        return AdmissionResponse.allow(warnings=[
            "dependency cycles through other Bundles were not checked: they could not be read in time"])

    def depends_on(other: str) -> list[str]:
        return own if other == name else others.get(other, [])

    cycle = find_cycle(name, depends_on)
    if cycle is not None:
        raise AdmissionDenied("dependency cycle: " + " -> ".join(cycle))
    return None


async def default_bundle(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
    """Write ``spec.interval: 10m`` into a Bundle that has none."""
    bundle: dict[str, Any] = copy.deepcopy(dict(request.object or {}))
    spec = bundle.get("spec")
    if not isinstance(spec, Mapping) or spec.get("interval") is not None:
        return None
    bundle["spec"] = {**spec, "interval": DEFAULT_INTERVAL}
    return AdmissionResponse.patched(request, bundle)


WEBHOOKS = (
    AdmissionWebhook("default.bundles.engine.dev", default_bundle, _RULES, mutating=True, timeout_seconds=5),
    AdmissionWebhook("validate.bundles.engine.dev", validate_bundle, _RULES, timeout_seconds=5),
)
"""The mutating and validating webhook of Bundles (failure policy Fail, 5 s)."""
