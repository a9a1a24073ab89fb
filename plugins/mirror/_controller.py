"""The mirror reconciler and the plugin declaration."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from engine import Controller, ObjectRef, RunContext, TerminalError
from engine.kube import (
    Client,
    Informer,
    NotFoundError,
    Plugin,
    PluginContext,
    Resource,
    hold_finalizer,
    join_selectors,
    ref_for,
    set_finalizer,
)

__all__ = ["plugin", "MirrorReconciler", "parse_selector"]

logger = logging.getLogger("engine.plugins.mirror")

ENABLED_LABEL = "mirror.engine.dev/enabled"
SOURCE_LABEL = "mirror.engine.dev/source"
SELECTOR_ANNOTATION = "mirror.engine.dev/namespace-selector"
FINALIZER = "mirror.engine.dev/cleanup"
FIELD_MANAGER = "mirror.engine.dev"
SOURCE_INDEX = "mirror.engine.dev/source"
COPY_WRITE_TIMEOUT = 10.0
"""Seconds a copy's write may take, shielded from a cancellation of its run; past it, the run
fails (and is retried) unless it was cancelled."""


def parse_selector(text: str) -> dict[str, str]:
    """Parse an equality-based label selector (``a=b,c==d``) into a mapping."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.replace("==", "=").partition("=")
        if not sep or not key.strip() or "!" in key:
            raise ValueError(f"invalid namespace selector {text!r}: use key=value[,key=value]")
        out[key.strip()] = value.strip()
    return out


def _source_id(namespace: str | None, name: str) -> str:
    """The value of a copy's source label: which source it was copied from."""
    return f"{namespace}.{name}"


class MirrorReconciler:
    def __init__(self, client: Client, configmaps: Resource, sources: Informer, copies: Informer, namespaces: Informer) -> None:
        self.client = client
        self.configmaps = configmaps
        self.sources = sources
        self.copies = copies
        self.namespaces = namespaces

    async def reconcile(self, ctx: RunContext) -> None:
        source = self.sources.store.get(ctx.ref.namespace, ctx.ref.name)
        mine = _source_id(ctx.ref.namespace, ctx.ref.name)
        if source is None or (source["metadata"].get("labels") or {}).get(ENABLED_LABEL) != "true":
            # Disabled, no longer labelled for mirroring, or gone: if it still carries our
            # finalizer, clean up as for a deletion; copies of a source that is gone or
            # holds no finalizer (written by a request that was still in flight, or brought
            # back by a restore of the cluster's storage) are deleted too.
            if source is None:
                try:
                    source = await self.client.get(self.configmaps, ctx.ref.name, namespace=ctx.ref.namespace)
                except NotFoundError:
                    await self._delete_stray_copies(mine)
                    return
                live_meta = source["metadata"]
                if (live_meta.get("labels") or {}).get(ENABLED_LABEL) == "true" and not live_meta.get("deletionTimestamp"):
                    # Not in the cache but live and mirrored: a source the watch has not
                    # brought yet (it triggers again when it does), or, on a scale-out replica,
                    # an object re-created under this name that another replica owns. Either
                    # way not one to clean up.
                    return
            if FINALIZER not in (source["metadata"].get("finalizers") or []):
                await self._delete_stray_copies(mine)
                return
            await self._clean_up(ctx, source)
            return
        meta = source["metadata"]
        if meta.get("deletionTimestamp"):
            await self._clean_up(ctx, source)
            return
        # The cache may show a source already gone, or a finalizer since removed: copy only a
        # source that holds the finalizer on the server.
        live = await hold_finalizer(self.client, self.configmaps, source, FINALIZER)
        if live is None:
            await self._delete_stray_copies(mine)
            return
        if live["metadata"].get("deletionTimestamp"):
            await self._clean_up(ctx, live)
            return
        try:
            selector = parse_selector((meta.get("annotations") or {}).get(SELECTOR_ANNOTATION, ""))
        except ValueError as exc:
            raise TerminalError(str(exc)) from None
        wanted = {
            ns["metadata"]["name"]
            for ns in self.namespaces.store.list()
            if selector
            and all((ns["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            and ns["metadata"]["name"] != meta.get("namespace")
            and not ns["metadata"].get("deletionTimestamp")
        }
        existing = {c["metadata"]["namespace"] for c in self.copies.store.by_index(SOURCE_INDEX, mine)}
        skipped = []
        for ns in sorted(wanted):
            if ns not in existing and not await self._free(ns, meta["name"], mine):
                skipped.append(ns)
                continue
            copy = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": meta["name"], "namespace": ns, "labels": {SOURCE_LABEL: mine}},
                "data": dict(source.get("data") or {}),
            }
            # Shielded: a superseded run finishes this write before it ends, so the write never
            # lands after the next run deleted the copies of a source that is going away.
            with ctx.shield(COPY_WRITE_TIMEOUT) as scope:
                await self.client.apply(self.configmaps, copy, field_manager=FIELD_MANAGER, force=True)
            if scope.cancelled_caught and ctx.cancel_cause is None:
                raise TimeoutError(f"the copy in {ns} was not written within {COPY_WRITE_TIMEOUT:g}s")
        for ns in sorted(existing - wanted):
            await self._delete_copy(ns, meta["name"])
        if skipped:
            ctx.events.warning(
                "MirrorConflict",
                f"not mirrored into {', '.join(skipped)}: a ConfigMap named {meta['name']} that is not this "
                "source's copy exists there",
            )
        ctx.log.info("mirrored into %d namespaces", len(wanted) - len(skipped))

    async def _free(self, namespace: str, name: str, mine: str) -> bool:
        """Whether a copy may be written there: nothing of that name, or our own copy."""
        try:
            current = await self.client.get(self.configmaps, name, namespace=namespace)
        except NotFoundError:
            return True
        return (current["metadata"].get("labels") or {}).get(SOURCE_LABEL) == mine

    async def _clean_up(self, ctx: RunContext, source: Mapping[str, Any]) -> None:
        meta = source["metadata"]
        copies = await self.client.list(self.configmaps, label_selector=f"{SOURCE_LABEL}={_source_id(meta.get('namespace'), meta['name'])}")
        for copy in copies.items:
            await self._delete_copy(copy["metadata"]["namespace"], copy["metadata"]["name"])
        await set_finalizer(self.client, self.configmaps, source, FINALIZER, present=False)
        ctx.events.normal("Cleaned", f"deleted {len(copies.items)} mirrored copies")

    async def _delete_stray_copies(self, mine: str) -> None:
        for copy in self.copies.store.by_index(SOURCE_INDEX, mine):
            await self._delete_copy(copy["metadata"]["namespace"], copy["metadata"]["name"])

    async def _delete_copy(self, namespace: str, name: str) -> None:
        try:
            await self.client.delete(self.configmaps, name, namespace=namespace)
        except NotFoundError:
            pass

async def setup(ctx: PluginContext) -> None:
    cluster = ctx.cluster
    sources = await cluster.informer("v1", "ConfigMap", label_selector=join_selectors(ENABLED_LABEL, cluster.label_selector))
    copies = await cluster.informer("v1", "ConfigMap", namespace=None, label_selector=SOURCE_LABEL)
    namespaces = await cluster.informer("v1", "Namespace")
    copies.store.add_index(SOURCE_INDEX, lambda obj: [(obj["metadata"].get("labels") or {}).get(SOURCE_LABEL, "")])
    reconciler = MirrorReconciler(ctx.client, sources.resource, sources, copies, namespaces)
    ctx.uses(sources.resource, "hold_finalizer", "set_finalizer")
    ctx.uses(sources.resource, "get", "list", "apply", "delete", cluster_wide=True)
    controller = ctx.manager.add_controller(Controller("mirror", reconciler, max_concurrent=2))
    cluster.watches(controller, sources)

    def source_of_copy(copy: Mapping[str, Any]) -> list[ObjectRef]:
        ns, _, name = ((copy["metadata"].get("labels") or {}).get(SOURCE_LABEL, "")).partition(".")
        return [ObjectRef("ConfigMap", name, ns)] if name else []

    def all_sources(_: Mapping[str, Any]) -> list[ObjectRef]:
        return [ref_for(sources.resource, s) for s in sources.store.list()]

    cluster.watches_mapped(controller, copies, source_of_copy, reason="mirrored copy changed")
    cluster.watches_mapped(controller, namespaces, all_sources, reason="namespace changed")


plugin = Plugin(
    name="mirror",
    setup=setup,
    description="Mirrors labelled ConfigMaps into the namespaces a label selects; cleans up with a finalizer.",
)
