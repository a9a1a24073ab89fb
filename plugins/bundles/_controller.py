"""The Bundle reconciler and the plugin declaration."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio
import yaml

from engine import Controller, DependencyNotReady, ObjectRef, Result, RunContext, SupersedePolicy, TerminalError
from engine._text import summarize
from engine.kube import (
    Client,
    ConflictError,
    NotFoundError,
    Plugin,
    PluginContext,
    PolicyRule,
    Resource,
    ResourceNotFoundError,
    Store,
    any_of,
    generation_changed,
    hold_finalizer,
    is_ready,
    ref_for,
    requested_at_changed,
    set_condition,
    set_finalizer,
)

from ._crds import API_VERSION, BUNDLE_CRD, GROUP, SOURCE_CRD
from ._labels import label_value
from ._spec import (
    BundleSpec,
    InvalidSpec,
    dependency_names,
    find_cycle,
    mapping,
    parse_bundle_spec,
    parse_duration,
    parse_source_spec,
    source_name,
)
from ._webhooks import WEBHOOKS

__all__ = ["plugin", "parse_duration", "BundleReconciler", "SourceReconciler"]

logger = logging.getLogger("engine.plugins.bundles")

FIELD_MANAGER = "bundles.engine.dev"
OWNER_LABEL = "bundles.engine.dev/name"
FINALIZER = "bundles.engine.dev/finalizer"
SOURCE_INDEX = "bundles.engine.dev/sourceRef"
def _ready_generation(bundle: Mapping[str, Any]) -> Any:
    for condition in (bundle.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("observedGeneration")
    return None


def _source_key(bundle: Mapping[str, Any]) -> list[str]:
    """The index key of the Source a Bundle refers to; none for a Bundle that names none (a
    malformed one is reported by its reconcile, never by the watch path)."""
    name = source_name(bundle)
    return [f"{mapping(bundle.get('metadata')).get('namespace')}/{name}"] if name else []


def _entry(obj: Mapping[str, Any], namespace: str | None) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": namespace or "",
        "name": obj["metadata"]["name"],
    }


def _identity(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """What identifies an applied object across revisions: group, kind, namespace, name (not
    the version, so moving an object to another apiVersion does not prune it)."""
    group = str(entry.get("apiVersion", "")).rpartition("/")[0]
    return (group, str(entry.get("kind")), str(entry.get("namespace") or ""), str(entry.get("name")))


def _objects(n: int) -> str:
    return f"{n} object" if n == 1 else f"{n} objects"


STATUS_WRITE_TIMEOUT = 5.0
"""Seconds a status write may take, shielded from a cancellation of its run."""

APPLY_WRITE_TIMEOUT = 10.0
"""Seconds an apply of one manifest may take, shielded from a cancellation of its run."""


async def write_status(
    ctx: RunContext, client: Client, resource: Resource, obj: Mapping[str, Any], status: Mapping[str, Any]
) -> bool:
    """Write ``status`` as the status of ``obj`` (a patch of the status subresource); whether
    it was written (``False`` when the object is gone).

    The write runs in ``ctx.shield``: if the run is cancelled (superseded, shutdown), the write
    still gets :data:`STATUS_WRITE_TIMEOUT` seconds to land, and if it does not, returns
    ``False`` with the run's cause left to the engine. A write that does not finish within that
    time without a cancellation raises :class:`TimeoutError`, so the run fails and is retried
    with backoff instead of being taken for a success.
    """
    meta = obj["metadata"]
    with ctx.shield(STATUS_WRITE_TIMEOUT) as scope:
        try:
            await client.patch_status(
                resource, meta["name"], {"status": dict(status)}, namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, decode=False,
            )
        except NotFoundError:
            return False
    if scope.cancelled_caught:
        if ctx.cancel_cause is None:
            raise TimeoutError(f"status write did not finish within {STATUS_WRITE_TIMEOUT:g}s")
        return False
    return True


class BundleReconciler:
    """Reconciles Bundles against the cached Sources and Bundles."""

    def __init__(self, client: Client, bundles: Resource, bundle_store: Store, source_store: Store, config: Mapping[str, Any]) -> None:
        self.client = client
        self.bundles = bundles
        self.bundle_store = bundle_store
        self.source_store = source_store
        self.poll_interval = float(config.get("healthPollInterval", 0.2))
        self.dependency_retry = float(config.get("dependencyRetry", 30.0))
        self._written: dict[tuple[str | None, str], list[dict[str, Any]]] = {}
        """The inventory each bundle last wrote (the cache may not show it yet)."""

    async def reconcile(self, ctx: RunContext) -> Result | None:
        ns, name = ctx.ref.namespace, ctx.ref.name
        bundle = self.bundle_store.get(ns, name)
        if bundle is None:
            return None
        if mapping(bundle.get("metadata")).get("deletionTimestamp"):
            await self._finalize(ctx, bundle)
            return None
        try:
            spec = parse_bundle_spec(bundle)
        except InvalidSpec as exc:
            await self._status(ctx, bundle, False, "InvalidSpec", str(exc))
            raise TerminalError(f"invalid spec: {exc}") from None
        if spec.prune:
            # The cache may show a bundle already gone, or a finalizer since removed: applying
            # for it would leave objects no finalizer will ever prune. Only a bundle holding the
            # finalizer on the server gets objects.
            live = await hold_finalizer(self.client, self.bundles, bundle, FINALIZER)
            if live is None or live["metadata"].get("deletionTimestamp"):
                # The watch event that shows the cache the deletion triggers the next run. A
                # restore of the server's storage can undo the deletion before that event
                # arrives, and then none ever does: look again after the interval.
                return Result(requeue_after=spec.interval)

        await self._check_dependencies(ctx, bundle, spec)

        source = self.source_store.get(ns, spec.source)
        if source is None:
            await self._status(ctx, bundle, False, "SourceNotFound", f"Source {ns}/{spec.source} not found")
            return Result(requeue_after=spec.interval)
        try:
            artifact = parse_source_spec(source)
        except InvalidSpec as exc:
            message = f"Source {ns}/{spec.source} is invalid: {exc}"
            await self._status(ctx, bundle, False, "InvalidSource", message)
            raise TerminalError(message) from None
        revision, manifests, timeout = artifact.revision, artifact.artifact, spec.timeout

        try:
            previous = self._previous(bundle)
            # Recorded as each object is applied, before any status write that could fail:
            # a deletion must prune what was applied even if the inventory never reached the status.
            self._written[(ns, name)] = written = list(previous)
            inventory = await self._apply(ctx, name, ns, manifests, written)
            # Until the prune succeeded, what it must still delete stays in the inventory.
            applied = {_identity(e) for e in inventory}
            pending = inventory + [e for e in previous if _identity(e) not in applied]
            await self._status(
                ctx, bundle, False, "Progressing", f"Applied revision {revision}; checking health",
                extra={"inventory": pending}, reconciling=True,
            )
            self._written[(ns, name)] = pending
            if spec.prune:
                await self._prune(name, previous, inventory)
                self._written[(ns, name)] = inventory
            ctx.log.info("applied revision %s (%s); checking health", revision, _objects(len(inventory)))
            with ctx.interruptible():
                with trio.move_on_after(timeout) as health:
                    await self._wait_healthy(inventory, spec.health_check_wait)
            if health.cancelled_caught:
                raise TimeoutError(f"health check of revision {revision} timed out after {timeout:g}s")
        except Exception as exc:
            if ctx.cancel_cause is None:
                await self._status(ctx, bundle, False, "ReconciliationFailed", summarize(exc))
            raise
        await self._status(
            ctx, bundle, True, "ReconciliationSucceeded", f"Applied revision: {revision}",
            extra={"lastAppliedRevision": revision, "inventory": inventory},
        )
        ctx.events.normal(
            "ReconciliationSucceeded", f"Applied revision {revision}", metadata={"revision": revision}
        )
        return Result(requeue_after=spec.interval)

    async def _check_dependencies(self, ctx: RunContext, bundle: Mapping[str, Any], spec: BundleSpec) -> None:
        """Return if every dependency is Ready; else write why not and raise.

        A Bundle that depends on itself can never be Ready (``TerminalError``); one in a longer
        cycle waits (``DependencyNotReady``) with a ``DependencyCycle`` condition naming the
        cycle, since a change to another Bundle of the cycle can break it and wake this one.
        """
        ns, name = ctx.ref.namespace, ctx.ref.name
        if not spec.depends_on:
            return

        def depends_on(other: str) -> list[str]:
            if other == name:
                return list(spec.depends_on)
            return dependency_names(self.bundle_store.get(ns, other) or {})

        cycle = find_cycle(name, depends_on)
        waiting = [
            dep for dep in spec.depends_on if not is_ready(self.bundle_store.get(ns, dep) or {})
        ]
        if cycle is not None:
            message = "dependency cycle: " + " -> ".join(cycle)
            await self._status(ctx, bundle, False, "DependencyCycle", message)
            if len(cycle) == 2:
                raise TerminalError(message)
            raise DependencyNotReady(
                [ObjectRef("Bundle", dep, ns, GROUP) for dep in waiting or cycle[1:2]],
                retry_after=self.dependency_retry,
            )
        if waiting:
            described = [dep if self.bundle_store.get(ns, dep) else f"{dep} (not found)" for dep in waiting]
            message = "dependencies not ready: " + ", ".join(described)
            await self._status(ctx, bundle, False, "DependencyNotReady", message)
            raise DependencyNotReady(
                [ObjectRef("Bundle", dep, ns, GROUP) for dep in waiting], retry_after=self.dependency_retry
            )

    async def _apply(
        self,
        ctx: RunContext,
        bundle: str,
        ns: str | None,
        manifests: tuple[Mapping[str, Any], ...],
        written: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Apply ``manifests``; returns their inventory entries, each also added to
        ``written`` once its object is applied."""
        inventory = []
        known = {_identity(e) for e in written}
        for manifest in manifests:
            obj = copy.deepcopy(dict(manifest))
            resource = await self.client.resource(obj["apiVersion"], obj["kind"])
            meta = obj.setdefault("metadata", {})
            target_ns = (meta.get("namespace") or ns) if resource.namespaced else None
            if target_ns:
                meta["namespace"] = target_ns
            meta.setdefault("labels", {})[OWNER_LABEL] = label_value(bundle)
            # Shielded: a cancelled run (superseded, or its replica shutting down and handing
            # over) finishes this write before it ends, so the write never lands after the
            # next run, here or on the next leader, pruned what the bundle applied.
            with ctx.shield(APPLY_WRITE_TIMEOUT) as scope:
                await self.client.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
            if scope.cancelled_caught and ctx.cancel_cause is None:
                raise TimeoutError(f"{obj['kind']} {meta.get('name')} was not applied within {APPLY_WRITE_TIMEOUT:g}s")
            entry = _entry(obj, target_ns)
            inventory.append(entry)
            if _identity(entry) not in known:
                known.add(_identity(entry))
                written.append(entry)
        return inventory

    async def _finalize(self, ctx: RunContext, bundle: Mapping[str, Any]) -> None:
        """A deleted bundle with ``prune`` garbage-collects what it applied, then lets go."""
        if FINALIZER not in (bundle["metadata"].get("finalizers") or []):
            return
        meta = bundle["metadata"]
        if mapping(bundle.get("spec")).get("prune", True) is not False:
            previous = self._previous(bundle)
            await self._prune(meta["name"], previous + await self._labelled(bundle, previous), [])
        self._written.pop((meta.get("namespace"), meta["name"]), None)
        await set_finalizer(self.client, self.bundles, bundle, FINALIZER, present=False)
        ctx.log.info("deleted; garbage-collected the objects it applied")

    def _previous(self, bundle: Mapping[str, Any]) -> list[dict[str, Any]]:
        meta = bundle["metadata"]
        cached = list((bundle.get("status") or {}).get("inventory") or ())
        written = self._written.get((meta.get("namespace"), meta["name"]), [])
        seen = {_identity(e) for e in cached}
        return cached + [e for e in written if _identity(e) not in seen]

    async def _labelled(self, bundle: Mapping[str, Any], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Objects in the bundle's namespace that carry its label but are not in the inventory:
        applied just before a status write that never happened, written by a request still in
        flight when its run was cancelled, or undone from the inventory by a restore of the API
        server's storage. Looked for among the types the inventory holds and the types its
        Source's manifests have now."""
        meta = bundle["metadata"]
        ns = meta.get("namespace") or ""
        if not ns:
            return []
        known = {_identity(e) for e in previous}
        wanted = {(e["apiVersion"], e["kind"]) for e in previous if (e.get("namespace") or "") == ns}
        source = self.source_store.get(ns, name) if (name := source_name(bundle)) else None
        try:
            manifests = parse_source_spec(source).artifact if source is not None else ()
        except InvalidSpec:
            manifests = ()
        wanted |= {(str(m["apiVersion"]), str(m["kind"])) for m in manifests if m.get("apiVersion") and m.get("kind")}
        types = sorted(wanted)
        found = []
        for api_version, kind in types:
            try:
                resource = await self.client.resource(api_version, kind)
                if not resource.namespaced:
                    continue
                listed = await self.client.list_all(
                    resource, namespace=ns, label_selector=f"{OWNER_LABEL}={label_value(meta['name'])}"
                )
            except (ResourceNotFoundError, NotFoundError):
                continue
            for obj in listed.items:
                entry = _entry(obj, ns)
                if _identity(entry) not in known:
                    known.add(_identity(entry))
                    found.append(entry)
        return found

    async def _prune(self, bundle: str, previous: list[dict[str, Any]], inventory: list[dict[str, Any]]) -> None:
        """Delete what this bundle applied before and no longer has, if it still carries this
        bundle's label (an object another bundle took over is left alone)."""
        keep = {_identity(e) for e in inventory}
        for entry in previous:
            if _identity(entry) in keep:
                continue
            try:
                resource = await self.client.resource(entry["apiVersion"], entry["kind"])
            except ResourceNotFoundError:
                logger.info("not pruning %s %s: its type is no longer served", entry["kind"], entry.get("name"))
                continue
            namespace = entry.get("namespace") or None
            try:
                current = await self.client.get(resource, entry["name"], namespace=namespace)
                if (current["metadata"].get("labels") or {}).get(OWNER_LABEL) != label_value(bundle):
                    continue
                await self.client.delete(
                    resource, entry["name"], namespace=namespace,
                    precondition_uid=current["metadata"].get("uid"),
                )
                logger.info("pruned %s %s/%s", entry["kind"], entry.get("namespace"), entry["name"])
            except (NotFoundError, ConflictError):
                pass

    async def _healthy(self, entry: Mapping[str, Any]) -> bool:
        resource = await self.client.resource(entry["apiVersion"], entry["kind"])
        try:
            obj = await self.client.get(resource, entry["name"], namespace=entry.get("namespace") or None)
        except NotFoundError:
            return False
        conditions = (obj.get("status") or {}).get("conditions")
        if entry["kind"] in ("ConfigMap", "Secret") or not conditions:
            return True
        return is_ready(obj)

    async def _wait_healthy(self, inventory: list[dict[str, Any]], stay_for: float) -> None:
        healthy_since: float | None = None
        while True:
            if all([await self._healthy(e) for e in inventory]):
                now = trio.current_time()
                healthy_since = now if healthy_since is None else healthy_since
                if now - healthy_since >= stay_for:
                    return
            else:
                healthy_since = None
            await trio.sleep(self.poll_interval)

    async def _status(
        self,
        ctx: RunContext,
        bundle: Mapping[str, Any],
        ready: bool,
        reason: str,
        message: str,
        *,
        extra: Mapping[str, Any] | None = None,
        reconciling: bool = False,
    ) -> None:
        status = copy.deepcopy(dict(mapping(bundle.get("status"))))
        conditions: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or () if isinstance(c, Mapping)]
        generation = bundle["metadata"].get("generation")
        if reconciling:
            ready_value: bool | str = "Unknown" if not is_ready(bundle) else "True"
            set_condition(conditions, "Ready", ready_value, reason=reason, message=message,
                          observed_generation=(_ready_generation(bundle) if ready_value == "True" else generation))
        else:
            set_condition(conditions, "Ready", ready, reason=reason, message=message, observed_generation=generation)
        set_condition(
            conditions, "Reconciling", reconciling, reason=reason, message=message, observed_generation=generation
        )
        status["conditions"] = conditions
        if not reconciling:
            status["observedGeneration"] = generation
        status.update(extra or {})
        await write_status(ctx, self.client, self.bundles, bundle, status)


SOURCE_RESYNC = 60.0
"""Seconds between two looks at a Source whose status is written (a periodic resync)."""


class SourceReconciler:
    """Gives each Source a status: ``Ready`` with the revision and how many objects its
    artifact holds (``revision r1 with 3 objects``, also a Normal event ``ArtifactReady`` with
    the revision in its metadata), or ``Ready=False`` with reason ``InvalidSpec`` naming what
    is wrong (terminal until the Source changes); and ``observedGeneration``. A status that
    already says so is not written again, and then no event is emitted. The write is
    :func:`write_status`'s. Each Source is looked at again every :data:`SOURCE_RESYNC` seconds
    (a cache read, and no write when the status still holds), so a status that the server lost
    (an etcd restore that no watch event reports) is written again."""

    def __init__(self, client: Client, sources: Resource, store: Store) -> None:
        self.client = client
        self.sources = sources
        self.store = store

    async def reconcile(self, ctx: RunContext) -> Result | None:
        source = self.store.get(ctx.ref.namespace, ctx.ref.name)
        if source is None or mapping(source.get("metadata")).get("deletionTimestamp"):
            return None
        try:
            artifact = parse_source_spec(source)
        except InvalidSpec as exc:
            await self._status(ctx, source, False, "InvalidSpec", str(exc))
            raise TerminalError(f"invalid spec: {exc}") from None
        message = f"revision {artifact.revision} with {_objects(len(artifact.artifact))}"
        if await self._status(ctx, source, True, "ArtifactReady", message):
            ctx.events.normal("ArtifactReady", message, metadata={"revision": artifact.revision})
        return Result(requeue_after=SOURCE_RESYNC)

    async def _status(self, ctx: RunContext, source: Mapping[str, Any], ready: bool, reason: str, message: str) -> bool:
        """Write the status unless it already says so; whether it was written."""
        status = copy.deepcopy(dict(mapping(source.get("status"))))
        conditions: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or () if isinstance(c, Mapping)]
        generation = source["metadata"].get("generation")
        changed = set_condition(conditions, "Ready", ready, reason=reason, message=message,
                                observed_generation=generation)
        if not changed and status.get("observedGeneration") == generation:
            return False
        status["conditions"] = conditions
        status["observedGeneration"] = generation
        return await write_status(ctx, self.client, self.sources, source, status)


async def setup(ctx: PluginContext) -> None:
    cluster = ctx.cluster
    bundle_informer = await cluster.informer(API_VERSION, "Bundle", label_selector=cluster.label_selector)
    source_informer = await cluster.informer(API_VERSION, "Source", label_selector=cluster.label_selector)
    bundle_informer.store.add_index(SOURCE_INDEX, _source_key)
    reconciler = BundleReconciler(
        ctx.client, bundle_informer.resource, bundle_informer.store, source_informer.store, ctx.config
    )
    controller = ctx.manager.add_controller(
        Controller(
            "bundles",
            reconciler,
            max_concurrent=int(ctx.config.get("concurrency", 4)),
            supersede=SupersedePolicy.INTERRUPTIBLE,
        )
    )
    cluster.watches(controller, bundle_informer, predicates=[any_of(generation_changed, requested_at_changed)])
    cluster.reports_readiness(bundle_informer)
    resource = bundle_informer.resource
    ctx.uses(resource, "patch_status", "hold_finalizer", "set_finalizer")

    def bundles_of(source: Mapping[str, Any]) -> list[ObjectRef]:
        meta = mapping(source.get("metadata"))
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        return [ref_for(resource, b) for b in bundle_informer.store.by_index(SOURCE_INDEX, key)]

    cluster.watches_mapped(
        controller, source_informer, bundles_of, predicates=[generation_changed], reason="source revision changed"
    )
    sources = ctx.manager.add_controller(
        Controller("sources", SourceReconciler(ctx.client, source_informer.resource, source_informer.store))
    )
    cluster.watches(sources, source_informer, predicates=[generation_changed])
    cluster.reports_readiness(source_informer)
    ctx.uses(source_informer.resource, "patch_status")


def _examples() -> tuple[dict[str, Any], ...]:
    path = Path(__file__).resolve().parents[2] / "examples" / "bundles.yaml"
    if not path.exists():
        return ()
    return tuple(doc for doc in yaml.safe_load_all(path.read_text()) if doc)


APPLIED_RULES = (PolicyRule("", "configmaps", ("create", "delete", "get", "list", "patch")),)
"""What applying, health-checking and pruning a Source's manifests needs for the kinds the
examples apply (ConfigMaps) in the namespace the plugin runs for; Sources with other kinds
need their own rules added to the generated Role."""

plugin = Plugin(
    name="bundles",
    setup=setup,
    crds=(SOURCE_CRD, BUNDLE_CRD),
    config={"concurrency": 4, "healthPollInterval": 0.2, "dependencyRetry": 30.0},
    examples=_examples(),
    rules=APPLIED_RULES,
    webhooks=WEBHOOKS,
    description="A small GitOps controller: Sources with inline artifacts, Bundles that apply them.",
)
