"""Run a plugin (or a manager you built) against a test target, and drive it from the test.

::

    async with open_plugin_test(plugin, kube_target) as h:
        await h.apply(WIDGET_YAML)
        widget = await h.wait_for("Widget", "w1", condition="Ready", timeout=60)
        assert h.outcomes(name="w1")[-1] is OutcomeKind.REQUEUE_AFTER
        assert [e.reason for e in h.events] == ["Applied"]

On the embedded server without sockets the whole stack (server, informers, controllers,
requeues, leader election, event sinks) runs on trio's clock, so under
``MockClock(autojump_threshold=0)`` a test waits through hours of requeues in milliseconds.
Every ``timeout`` here is in seconds of trio time. Under ``MockClock`` the clock jumps whenever
every task waits, so anything that waits on real I/O (a webhook sink on a socket, a listening
server) does not mix with virtual time: against a listening or real server, use the real clock.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import httpx
import trio
import yaml

from engine import (
    Controller,
    Event,
    EventSink,
    LeaderElection,
    Manager,
    MemorySink,
    ObjectRef,
    OutcomeKind,
    OwnershipGate,
    Run,
    RunLog,
    RunObserver,
    RunRecord,
    ShutdownReport,
    Trigger,
)
from engine.kube import (
    EVENT_RULES,
    SHARD_LABEL,
    Client,
    Cluster,
    Config,
    ConversionWebhook,
    GoneError,
    HashRing,
    KubeError,
    KubernetesEventSink,
    LeaderElector,
    NotFoundError,
    Permissions,
    Plugin,
    PluginContext,
    PolicyRule,
    Resource,
    WatchEventType,
    WatchOptions,
    WebhookServer,
    check_permissions,
    check_plugin_config,
    crd_rules,
    get_condition,
    install_crds,
    merge_rules,
    register_webhooks,
    role_objects,
    url_client_config,
)

from .._text import truncate
from ..apiserver import ApiServer, Faults
from ._errors import HarnessError, WaitTimeout
from ._target import KubeTarget, ensure_namespace

__all__ = ["PluginHarness", "open_plugin_test", "ResourceSpec", "Condition"]

logger = logging.getLogger("engine.testing.harness")

ResourceSpec = Resource | str | tuple[str, str] | Mapping[str, Any]
"""A type: a :class:`~engine.kube.Resource`; ``(apiVersion, kind)``; a manifest (its
``apiVersion``, ``kind``, and name and namespace); or a string: ``"v1/ConfigMap"``,
``"group/version/Kind"``, or, looked up by discovery, a kind, plural or ``plural.group``
(``"Bundle"``, ``"bundles"``, ``"bundles.bundles.engine.dev"``)."""

Condition = str | Callable[[dict[str, Any] | None], bool]
"""A condition type that must be ``"True"`` for the object's current generation (``"Ready"``),
or a function of the object (``None`` while it does not exist)."""

_CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
DRIVER_USER_AGENT = "engine-test-driver/1.0"
_T = TypeVar("_T")


def parse_manifests(manifests: str | Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Objects from YAML (one or more documents), one object, or several; ``List`` kinds are
    flattened. Raises ``ValueError`` for anything that is not an object with apiVersion and kind."""
    if isinstance(manifests, str):
        docs: list[Any] = [d for d in yaml.safe_load_all(manifests) if d is not None]
    elif isinstance(manifests, Mapping):
        docs = [manifests]
    else:
        docs = list(manifests)
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            raise ValueError(f"a manifest must be a mapping, got {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            out.extend(parse_manifests(doc["items"]))
            continue
        if not doc.get("apiVersion") or not doc.get("kind") or not (doc.get("metadata") or {}).get("name"):
            raise ValueError("a manifest needs apiVersion, kind and metadata.name")
        out.append(dict(doc))
    return out


def _only(group: BaseExceptionGroup, error: BaseException) -> bool:
    """Whether ``error`` is all that ``group`` holds besides the cancellations it caused."""
    _, rest = group.split(lambda leaf: leaf is error or isinstance(leaf, trio.Cancelled))
    return rest is None


def _exists(obj: dict[str, Any] | None) -> bool:
    return obj is not None


def condition_check(condition: Condition) -> Callable[[dict[str, Any] | None], bool]:
    """The predicate for a :data:`Condition`."""
    if callable(condition):
        return condition
    name = condition

    def check(obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        found = get_condition(obj, name)
        if found is None or found.get("status") != "True":
            return False
        generation = (obj.get("metadata") or {}).get("generation")
        observed = found.get("observedGeneration", (obj.get("status") or {}).get("observedGeneration"))
        return generation is None or observed is None or observed == generation

    return check


class _Recorder(RunLog):
    """A :class:`~engine.RunLog` that also keeps triggers and wakes waiters on each change."""

    def __init__(self) -> None:
        super().__init__()
        self.triggers: list[tuple[str, Trigger, str | None]] = []
        self.changed = trio.Event()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        self.triggers.append((controller.name, trigger, superseded.id if superseded is not None else None))
        self._wake()

    def on_run_started(self, controller: Controller, run: Run) -> None:
        super().on_run_started(controller, run)
        self._wake()

    def on_run_finished(self, controller: Controller, run: Run, outcome: Any) -> None:
        super().on_run_finished(controller, run, outcome)
        self._wake()


def _summary(obj: Mapping[str, Any] | None) -> str:
    if obj is None:
        return "absent"
    text = yaml.safe_dump({"metadata": {k: v for k, v in (obj.get("metadata") or {}).items()
                                        if k in ("generation", "resourceVersion", "finalizers", "deletionTimestamp")},
                           "status": obj.get("status")}, sort_keys=False, width=200)
    return truncate(text, 2000)


@attrs.define(eq=False)
class PluginHarness:
    """A running plugin or manager and the handle a test drives it with.

    Built by :func:`open_plugin_test`. Reads (``runs``, ``outcomes``, ``events``) are plain
    lists of what happened so far; ``wait_*`` methods block until something happened, up to
    ``timeout`` seconds of trio time, then raise :class:`~engine.testing.WaitTimeout`.
    """

    target: KubeTarget
    client: Client
    """The test's own client (User-Agent ``engine-test-driver/1.0``): apply, get and waits use it,
    so faults scoped to the replica leave the test's requests alone."""
    replica_client: Client
    """The client the plugin, its informers, leader election and events sink use."""
    manager: Manager
    cluster: Cluster | None
    """The plugin's :class:`~engine.kube.Cluster` (``None`` for a manager you built)."""
    identity: str
    """This replica's identity (its Lease holder name and event reporting instance)."""
    namespace: str
    """Where namespaced manifests without a namespace go."""
    _recorder: _Recorder
    _sink: MemorySink
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _done: trio.Event = attrs.field(factory=trio.Event)
    report: ShutdownReport | None = None
    """The manager's report once it stopped gracefully."""
    crashed: bool = False
    """Whether :meth:`crash` ended it."""
    _discovered: list[Resource] | None = None
    permissions: Permissions | None = None
    """With ``rbac=True``: what the plugin's ServiceAccount was granted."""
    webhook_server: WebhookServer | None = None
    """The server of the plugin's webhooks, when they are registered (see
    :func:`open_plugin_test`'s ``webhooks``)."""
    ring: HashRing | None = None
    """With ``scale_out``: this replica's ring membership."""

    # ----- what happened -----

    @property
    def api(self) -> ApiServer:
        """The embedded server (:class:`~engine.testing.HarnessError` on a real one)."""
        return self.target.require_embedded("PluginHarness.api")

    @property
    def faults(self) -> Faults:
        """Fault injection on the embedded server (:class:`~engine.testing.HarnessError` on a
        real one); pass ``client=h.user_agent`` to aim at this replica alone."""
        return self.target.faults

    @property
    def user_agent(self) -> str:
        """The User-Agent prefix of this replica's requests (``<identity>/``), for ``client=``
        of :class:`~engine.testing.Faults`."""
        return f"{self.identity}/"

    @property
    def runs(self) -> list[RunRecord]:
        """Finished runs, in order (from a :class:`~engine.RunLog`)."""
        return list(self._recorder.records)

    @property
    def started_runs(self) -> list[tuple[str, ObjectRef, Trigger, float]]:
        """``(controller, key, trigger, trio time)`` for each run that started."""
        return list(self._recorder.started)

    @property
    def triggers(self) -> list[tuple[str, Trigger, str | None]]:
        """``(controller, trigger, id of the run it superseded or None)`` for each trigger."""
        return list(self._recorder.triggers)

    @property
    def events(self) -> list[Event]:
        """Events delivered to the sinks, in order (a :class:`~engine.MemorySink`)."""
        return list(self._sink.events)

    def runs_for(
        self, *, name: str | None = None, key: ObjectRef | None = None, controller: str | None = None
    ) -> list[RunRecord]:
        """Finished runs of one object (by name or key) and/or one controller."""
        return [
            r for r in self._recorder.records
            if (key is None or r.key == key) and (name is None or r.key.name == name)
            and (controller is None or r.controller == controller)
        ]

    def outcomes(
        self, *, name: str | None = None, key: ObjectRef | None = None, controller: str | None = None
    ) -> list[OutcomeKind]:
        """Outcome kinds of :meth:`runs_for`, in order."""
        return [r.kind for r in self.runs_for(name=name, key=key, controller=controller)]

    # ----- the cluster -----

    async def resource(self, spec: ResourceSpec) -> Resource:
        """Resolve a :data:`ResourceSpec` through discovery (refreshed once on a miss).

        Cancellation: a checkpoint on a cache miss; nothing to undo.
        """
        if isinstance(spec, Resource):
            return spec
        if isinstance(spec, tuple):
            return await self.client.resource(*spec)
        if isinstance(spec, Mapping):
            return await self.client.resource_for(spec)
        if "/" in spec:
            api_version, _, kind = spec.rpartition("/")
            return await self.client.resource(api_version, kind)
        for refresh in (False, True):
            if refresh or self._discovered is None:
                self._discovered = await self.client.discover()
            wanted = spec.lower()
            found = {
                (r.group, r.kind): r for r in reversed(self._discovered)
                if wanted in (r.kind.lower(), r.plural, f"{r.plural}.{r.group}", f"{r.kind.lower()}.{r.group}")
            }
            if len(found) > 1:
                names = ", ".join(sorted(f"{r.plural}.{r.group or 'core'}" for r in found.values()))
                raise HarnessError(f"{spec!r} names several types ({names}); say which with 'plural.group'")
            if found:
                return next(iter(found.values()))
        raise HarnessError(f"the API server serves no type named {spec!r}")

    async def _locate(
        self, spec: ResourceSpec, name: str | None, namespace: str | None
    ) -> tuple[Resource, str, str | None]:
        resource = await self.resource(spec)
        meta = (spec.get("metadata") or {}) if isinstance(spec, Mapping) else {}
        name = name or meta.get("name")
        if not name:
            raise HarnessError("give the object's name (or a manifest with metadata.name)")
        ns = namespace or meta.get("namespace") or self.namespace if resource.namespaced else None
        return resource, name, ns

    async def apply(
        self, manifests: str | Mapping[str, Any] | Iterable[Mapping[str, Any]], *, field_manager: str = "engine-test"
    ) -> list[dict[str, Any]]:
        """Server-side apply YAML (one or more documents), an object, or several, in order.

        Namespaced objects without a namespace go to :attr:`namespace`. A ``status`` in a
        manifest is applied to the status subresource too, where there is one. CRDs are
        installed and waited for until served. Returns the objects as the server stored them.

        Cancellation: a checkpoint between objects; those applied stay applied.
        """
        applied: list[dict[str, Any]] = []
        for manifest in parse_manifests(manifests):
            if (manifest["apiVersion"], manifest["kind"]) == _CRD:
                await install_crds(self.client, [manifest])
                self._discovered = None
                applied.append(await self.client.get(await self.client.resource(*_CRD), manifest["metadata"]["name"]))
                continue
            resource = await self.resource(manifest)
            meta = dict(manifest["metadata"])
            if resource.namespaced and not meta.get("namespace"):
                meta["namespace"] = self.namespace
            manifest = {**manifest, "metadata": meta}
            obj = await self.client.apply(resource, manifest, field_manager=field_manager, force=True)
            if "status" in manifest and "status" in resource.subresources:
                obj = await self.client.apply(
                    resource,
                    {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], "metadata": {
                        "name": meta["name"], **({"namespace": meta["namespace"]} if resource.namespaced else {})},
                     "status": manifest["status"]},
                    field_manager=field_manager, force=True, subresource="status",
                )
            applied.append(obj)
        return applied

    async def get(
        self, spec: ResourceSpec, name: str | None = None, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object as the server has it now, or ``None``. Cancellation: a checkpoint."""
        resource, name, ns = await self._locate(spec, name, namespace)
        try:
            return await self.client.get(resource, name, namespace=ns)
        except NotFoundError:
            return None

    async def list(
        self, spec: ResourceSpec, *, namespace: str | None = None, all_namespaces: bool = False,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Objects of a type in :attr:`namespace` (or ``namespace``, or all). Cancellation: a
        checkpoint."""
        resource = await self.resource(spec)
        ns = None if all_namespaces or not resource.namespaced else (namespace or self.namespace)
        return (await self.client.list_all(resource, namespace=ns, label_selector=label_selector)).items

    async def patch(
        self, spec: ResourceSpec, name: str | None, patch: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """JSON merge patch an object. Cancellation: a checkpoint; the patch may have been applied."""
        resource, name, ns = await self._locate(spec, name, namespace)
        return await self.client.patch(resource, name, patch, namespace=ns)

    async def delete(
        self, spec: ResourceSpec, name: str | None = None, *, namespace: str | None = None, missing_ok: bool = False
    ) -> None:
        """Delete an object (finalizers then run; use :meth:`wait_deleted` to see it gone).

        Cancellation: a checkpoint; the delete may have happened.
        """
        resource, name, ns = await self._locate(spec, name, namespace)
        try:
            await self.client.delete(resource, name, namespace=ns)
        except NotFoundError:
            if not missing_ok:
                raise

    async def wait_for(
        self,
        spec: ResourceSpec,
        name: str | None = None,
        *,
        namespace: str | None = None,
        condition: Condition | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any] | None:
        """Wait until an object meets ``condition``; return it as last seen.

        ``condition`` is a condition type that must be ``"True"`` for the object's current
        generation (``condition="Ready"``) or a function of the object (``None`` while it does
        not exist); without one, wait until the object exists.

        Reads the object, then watches it from that resourceVersion (re-reading after a dropped
        or expired watch), so no change is missed and nothing polls. Raises
        :class:`~engine.testing.WaitTimeout` with the last state seen after ``timeout``.

        Cancellation: a checkpoint; nothing to undo.
        """
        resource, name, ns = await self._locate(spec, name, namespace)
        check = _exists if condition is None else condition_check(condition)
        last: dict[str, Any] | None = None
        selector = {"metadata.name": name}
        with trio.move_on_after(timeout):
            while True:
                try:
                    page = await self.client.list(resource, namespace=ns, field_selector=selector)
                    last = page.items[0] if page.items else None
                    if check(last):
                        return last
                    async with self.client.watch(
                        resource, namespace=ns, field_selector=selector, resource_version=page.resource_version
                    ) as stream:
                        async for event in stream:
                            if event.type is WatchEventType.BOOKMARK:
                                continue
                            last = None if event.type is WatchEventType.DELETED else event.object
                            if check(last):
                                return last
                except GoneError:
                    continue
                except KubeError as exc:
                    logger.debug("wait_for: %s; reading again", exc)
                    await trio.sleep(0.1)
        where = f"{ns}/{name}" if ns else name
        if condition is None:
            raise WaitTimeout(f"{resource.kind} {where} did not exist within {timeout:g}s")
        what = condition if isinstance(condition, str) else getattr(condition, "__name__", "the condition")
        raise WaitTimeout(
            f"{resource.kind} {where} did not meet {what!r} within {timeout:g}s; last seen:\n{_summary(last)}"
        )

    async def wait_deleted(
        self, spec: ResourceSpec, name: str | None = None, *, namespace: str | None = None, timeout: float = 60.0
    ) -> None:
        """Wait until an object is gone (its finalizers ran). Cancellation: as :meth:`wait_for`."""
        await self.wait_for(spec, name, namespace=namespace, condition=lambda obj: obj is None, timeout=timeout)

    async def _wait(self, what: str, probe: Callable[[], _T | None], changed: Callable[[], trio.Event],
                    timeout: float) -> _T:
        with trio.move_on_after(timeout):
            while True:
                event = changed()
                found = probe()
                if found is not None:
                    return found
                await event.wait()
        raise WaitTimeout(f"{what} did not happen within {timeout:g}s")

    async def wait_runs(
        self,
        count: int = 1,
        *,
        name: str | None = None,
        key: ObjectRef | None = None,
        controller: str | None = None,
        kind: OutcomeKind | None = None,
        timeout: float = 60.0,
    ) -> builtins.list[RunRecord]:
        """Wait until ``count`` finished runs match (see :meth:`runs_for`; ``kind`` filters by
        outcome); return the matching runs. Cancellation: a checkpoint; nothing to undo."""

        def probe() -> builtins.list[RunRecord] | None:
            runs = [r for r in self.runs_for(name=name, key=key, controller=controller) if kind is None or r.kind is kind]
            return runs if len(runs) >= count else None

        return await self._wait(f"{count} run(s) of {name or key or controller or 'any key'}"
                                + (f" ending {kind.value}" if kind else ""), probe,
                                lambda: self._recorder.changed, timeout)

    async def wait_events(
        self, count: int = 1, *, reason: str | None = None, name: str | None = None, timeout: float = 60.0
    ) -> builtins.list[Event]:
        """Wait until ``count`` delivered events match ``reason`` and the involved object's
        ``name``; return them. Cancellation: a checkpoint; nothing to undo."""

        def matching() -> builtins.list[Event]:
            return [e for e in self._sink.events
                    if (reason is None or e.reason == reason) and (name is None or e.involved.name == name)]

        with trio.move_on_after(timeout):
            while len(matching()) < count:
                await self._sink.wait_for(len(self._sink.events) + 1)
            return matching()
        raise WaitTimeout(f"{count} event(s) {reason or ''} on {name or 'any object'} were not delivered within {timeout:g}s")

    async def wait_leading(self, timeout: float = 60.0) -> None:
        """Wait until this replica leads and its controllers started. Cancellation: a checkpoint."""
        with trio.move_on_after(timeout):
            await self.manager.wait_started()
            return
        raise WaitTimeout(f"{self.identity} did not start leading within {timeout:g}s")

    async def cluster_events(self, *, name: str | None = None, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """``events.k8s.io/v1`` Events recorded in the cluster (in :attr:`namespace`), about
        ``name`` if given. Cancellation: a checkpoint."""
        events = await self.client.resource("events.k8s.io/v1", "Event")
        items = (await self.client.list_all(events, namespace=namespace or self.namespace)).items
        return [e for e in items if name is None or (e.get("regarding") or {}).get("name") == name]

    # ----- ending -----

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    async def stop(self, reason: str = "test stop", *, timeout: float = 120.0) -> ShutdownReport | None:
        """Stop gracefully (drain, release the Lease, flush sinks) and return the report
        (``None`` after :meth:`crash`). Idempotent. Cancellation: a checkpoint; the stop, once
        requested, proceeds."""
        if self.running:
            self.manager.stop(reason)
            with trio.move_on_after(timeout):
                await self._done.wait()
            if self.running:
                raise WaitTimeout(f"the manager of {self.identity} did not stop within {timeout:g}s")
        return self.report

    async def wait_stopped(self) -> None:
        """Wait until the manager stopped, however it stopped (:meth:`stop`, :meth:`crash`,
        or on its own, as after a lost leadership). Cancellation: a checkpoint; nothing
        changes."""
        await self._done.wait()

    def crash(self) -> None:
        """End this replica at once, as ``kill -9`` would: runs are cancelled, nothing is
        drained or flushed, a held Lease is not released (others wait for it to expire). The
        handle stays usable for reads. Not a checkpoint."""
        if self.running:
            self.crashed = True
            self._scope.cancel(reason="crashed by the test")

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._scope:
                task_status.started()
                self.report = await self.manager.run()
        finally:
            self._done.set()


async def _service_account_token(driver: Client, name: str, namespace: str) -> str:
    accounts = await driver.resource("v1", "ServiceAccount")
    await driver.apply(accounts, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
                       namespace=namespace, field_manager="engine-test", force=True)
    token_requests = Resource("", "v1", "TokenRequest", f"serviceaccounts/{name}/token", True)
    answer = await driver.create(token_requests, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400},
    }, namespace=namespace)
    return str(answer["status"]["token"])


async def _grant(
    driver: Client, client: Client, plugin: Plugin, cluster: Cluster, manager: Manager, namespace: str,
    watch_namespace: str | None, ring: HashRing | None = None, *, wait: bool = False,
) -> Permissions:
    rules: list[PolicyRule] = [*cluster.rules, *plugin.rules, *crd_rules(plugin.crds, install=False)]
    if ring is not None:
        rules.extend(ring.rules)
    if isinstance(manager.leader_election, LeaderElector):
        rules.extend(manager.leader_election.rules)
    if any(isinstance(sink, KubernetesEventSink) for sink in manager.events.sinks):
        rules.extend(EVENT_RULES)
    permissions = Permissions.resolve(merge_rules(rules), namespace=watch_namespace)
    name = f"engine-{plugin.name}"
    for obj in role_objects(permissions, name=name, service_account=name, service_account_namespace=namespace,
                            cluster_name=f"{name}-{namespace}"):
        resource = await driver.resource(obj["apiVersion"], obj["kind"])
        await driver.apply(resource, obj, field_manager="engine-test", force=True)
    if wait:
        await _wait_granted(client, merge_rules(rules), watch_namespace)
    return permissions


async def _wait_granted(client: Client, rules: Sequence[PolicyRule], namespace: str | None,
                        timeout: float = 10.0) -> None:
    """Return once the server grants ``client`` every rule (its access reviews say so), or
    after ``timeout``: a real kube-apiserver authorizes from caches of the RBAC objects, which
    see a new Role or binding some milliseconds after it is written; a request before then is
    refused, and the plugin's test would fail for a permission it was given. (The embedded
    server authorizes from its storage: a written Role is in effect at once, and the
    simulator's seeds keep their schedules without these requests.)

    Cancellation: a checkpoint; nothing to undo."""
    with trio.move_on_after(timeout):
        while await check_permissions(client, rules, namespace=namespace):
            await trio.sleep(0.05)


def _forbidden(client: Client, runs_for: str | None) -> str | None:
    """What the plugin was refused that its rules do not grant, with the rule to declare for
    each (``None``: nothing)."""
    missing = client.forbidden.missing()
    if not missing:
        return None
    hints = "; ".join(f"{m} (declare {_declaration(m, runs_for)})" for m in missing)
    return f"the plugin was refused permissions its rules do not grant: {hints}"


def _require_no_forbidden(client: Client, runs_for: str | None) -> None:
    refused = _forbidden(client, runs_for)
    if refused is not None:
        raise HarnessError(refused)


def _note_forbidden(error: BaseException, client: Client, runs_for: str | None) -> None:
    """Tell what the plugin was refused beside a test that failed first (a wait that timed
    out because a run was refused, say): as a note of ``error`` and in the log."""
    refused = _forbidden(client, runs_for)
    if refused is None:
        return
    logger.error("%s", refused)
    if not isinstance(error, trio.Cancelled):
        error.add_note(refused)


def _declaration(missing: Any, runs_for: str | None) -> str:
    """The rule a plugin declares for ``missing``: without a namespace for the namespace it
    runs for (a rule without one is for that namespace), cluster-wide when the refusal was."""
    if missing.namespace is None:
        scope = ", cluster_wide=True"
    elif missing.namespace == runs_for:
        scope = ""
    else:
        scope = f", namespace={missing.namespace!r}"
    return f"PolicyRule({missing.group!r}, {missing.resource!r}, ({missing.verb!r},){scope})"


def _leader(
    leader_election: bool | Callable[[Client, str], LeaderElection], client: Client, name: str, namespace: str,
    identity: str,
) -> LeaderElection | None:
    if leader_election is False:
        return None
    if leader_election is True:
        return LeaderElector(
            client, name=f"engine-{name}", namespace=namespace, identity=identity, rng=random.Random(identity)
        )
    return leader_election(client, identity)


WEBHOOK_URL = "https://webhooks.engine-test.invalid"
"""The base URL the harness registers in-process webhooks under (never resolved, and no
``caBundle``: the embedded server sends them through its ``webhook_transport``)."""


def webhook_configuration_name(plugin: Plugin) -> str:
    """The name of the webhook configurations a test registers for ``plugin``."""
    return f"engine-test-{plugin.name}"


async def register_in_process(
    driver: Client, api: ApiServer, plugin: Plugin, transport: httpx.AsyncBaseTransport, *,
    namespace: str | None = None,
) -> bool:
    """Register ``plugin``'s webhooks on the embedded server ``api`` under :data:`WEBHOOK_URL`
    (configurations named :func:`webhook_configuration_name`) and send every webhook call of
    ``api`` through ``transport`` (a :class:`~engine.kube.WebhookServer`'s ``transport()``, or
    anything that answers as one: no sockets, trio's clock). Returns ``False``, registering
    nothing, when the server does not serve ``admissionregistration.k8s.io/v1``.

    Cancellation: what was written stays written; the transport is set only once registered.
    """
    config = url_client_config(WEBHOOK_URL, None)
    if not await register_webhooks(driver, plugin.webhooks, name=webhook_configuration_name(plugin),
                                   client_config=config, namespace=namespace):
        return False
    api.webhook_transport = transport
    return True


def _as_bearer(config: Config, token: str) -> Config:
    """``config`` authenticated by ``token`` alone: a client certificate, basic auth or exec
    plugin of its user would be tried first by the server and make the request the admin's."""
    return attrs.evolve(config, token=token, token_file=None, client_cert_file=None, client_cert_data=None,
                        client_key_file=None, client_key_data=None, username=None, password=None, exec=None)


async def _register_webhooks(
    stack: contextlib.AsyncExitStack, target: KubeTarget, driver: Client, plugin: Plugin, cluster: Cluster | None,
    client: Client, namespace: str | None,
) -> WebhookServer | None:
    name = webhook_configuration_name(plugin)
    if target.api is not None:
        server = WebhookServer(plugin.webhooks, cluster=cluster, client=client)
        if not await register_in_process(driver, target.api, plugin, server.transport(), namespace=namespace):
            return None
        return server
    server = WebhookServer(plugin.webhooks, cluster=cluster, client=client, port=0)
    nursery = await stack.enter_async_context(trio.open_nursery())
    stack.callback(nursery.cancel_scope.cancel)
    await nursery.start(server.serve)
    stack.push_async_callback(_unregister_webhooks, driver, name, plugin)
    config = url_client_config(server.url, server.certificates.ca_bundle)
    if not await register_webhooks(driver, plugin.webhooks, name=name, client_config=config,
                                     namespace=namespace):
        return None
    return server


async def _unregister_webhooks(driver: Client, name: str, plugin: Plugin) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(10):
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            resource = await driver.resource("admissionregistration.k8s.io/v1", kind)
            with contextlib.suppress(NotFoundError):
                await driver.delete(resource, name)
        crds = await driver.resource(*_CRD)
        for webhook in plugin.webhooks:
            if isinstance(webhook, ConversionWebhook):
                with contextlib.suppress(NotFoundError):
                    await driver.patch(crds, webhook.crd, {"spec": {"conversion": {"strategy": "None",
                                                                                   "webhook": None}}})


@contextlib.asynccontextmanager
async def open_plugin_test(
    subject: Plugin | Manager,
    target: KubeTarget | ApiServer,
    *,
    config: Mapping[str, Any] | None = None,
    namespace: str | None = None,
    watch_namespace: str | None = None,
    shard: str | None = None,
    manifests: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] = (),
    examples: bool = False,
    identity: str | None = None,
    leader_election: bool | Callable[[Client, str], LeaderElection] = False,
    enable_warmup: bool = True,
    scale_out: Callable[[Client, OwnershipGate, str], HashRing] | None = None,
    cluster_events: bool = True,
    sinks: Sequence[EventSink] = (),
    observers: Sequence[RunObserver] = (),
    grace_period: float = 5.0,
    watch_options: WatchOptions = WatchOptions(),
    start_timeout: float = 60.0,
    rbac: bool = False,
    webhooks: bool = True,
) -> AsyncIterator[PluginHarness]:
    """Run a plugin (or a manager you built) against ``target`` and yield a :class:`PluginHarness`.

    For a :class:`~engine.kube.Plugin`, as ``python -m engine run`` would: open a client
    (User-Agent ``<identity>/engine-test``; the test's own requests use another), install the plugin's CRDs, create ``namespace``
    (default: the target's), build a
    :class:`~engine.Manager` (``grace_period``; a :class:`~engine.kube.LeaderElector` on the
    Lease ``engine-<plugin>`` with client-go's timings when ``leader_election`` is true, or
    the one a given factory builds from the client and identity; ``enable_warmup``: a standby
    fills its caches before it leads, see :class:`~engine.Manager`), a Kubernetes events sink unless
    ``cluster_events`` is false, the given ``sinks``, and a :class:`~engine.kube.Cluster` (``watch_namespace``,
    ``shard``, ``watch_options``, seeded from ``identity`` unless they carry an ``rng``), then
    call ``plugin.setup`` with the plugin's config updated by ``config``, grant its permissions
    (with ``rbac``), and apply ``manifests`` (and the plugin's ``examples``) before the manager
    runs, so that the plugin's webhooks and credentials are what they are on a cluster when they
    are written. ``observers`` are added to the manager before it runs.

    For a :class:`~engine.Manager` (not yet run) whose controllers you added yourself, it is
    run as it is (``replica_client`` is then unused by it).

    With ``rbac`` (a Plugin only), the plugin runs as its own ServiceAccount under the Role
    ``python -m engine manifests`` would generate: the ServiceAccount ``engine-<plugin>`` is
    created in ``namespace`` and the plugin's client uses a token of it; once the plugin is
    set up, what it declared and recorded (:func:`~engine.kube.plugin_rules`' rules, the
    CRD check, Events, its Lease) is resolved for ``watch_namespace`` and granted by the
    Role(s) and a ClusterRole ``engine-<plugin>-<namespace>`` with their bindings
    (:func:`~engine.kube.role_objects`), before the manager runs; the result is
    :attr:`PluginHarness.permissions`. A request the server refuses with 403 fails the
    plugin's runs as it would in a cluster, and leaving the harness raises
    :class:`~engine.testing.HarnessError` naming each missing permission and the rule to
    declare for it.

    With ``webhooks`` (the default) a Plugin's :attr:`~engine.kube.Plugin.webhooks` are
    served and registered before ``manifests`` are applied, so what the test writes passes
    them as on a cluster (``h.apply(bad)`` raises the denial as an
    :class:`~engine.kube.ApiError`): on the embedded server in-process, through its
    ``webhook_transport`` (no sockets; trio's clock), on a real server over HTTPS on
    loopback with a generated CA (the configurations are deleted and the CRDs' conversion
    set back to ``None`` when leaving). A server
    that does not serve ``admissionregistration.k8s.io/v1`` gets none (logged).
    :attr:`PluginHarness.webhook_server` is the server then.

    Either way a run recorder and a memory sink are added, and the manager is started; unless
    it waits for leadership, entering returns once its controllers run (informers synced).
    Leaving stops it gracefully (unless the test stopped or crashed it) and closes the client.
    Several harnesses on one target are several replicas (give them one ``leader_election``).
    With ``scale_out`` (a Plugin only; exclusive with ``leader_election``), the replica is a
    member of a scale-out ring: the factory builds its :class:`~engine.kube.HashRing` from the
    client, a new :class:`~engine.OwnershipGate` and the identity, and the plugin is hosted
    as ``run_plugins(..., scale_out=ring)`` hosts it (the gate places keys by the cluster, the
    sharded informers follow the ring's interest); the ring is :attr:`PluginHarness.ring`.

    Cancellation: entering and leaving are checkpoints; if the body raises, the manager is
    cancelled without a graceful stop.
    """
    if not isinstance(target, KubeTarget):
        target = KubeTarget.embedded(target)
    identity = identity or target.next_identity()
    namespace = namespace or target.namespace
    recorder = _Recorder()
    sink = MemorySink(name="engine-test")
    if rbac and not isinstance(subject, Plugin):
        raise HarnessError("rbac=True runs a Plugin as its ServiceAccount; a Manager you built has its own client")
    async with contextlib.AsyncExitStack() as stack:
        driver = await stack.enter_async_context(target.client(user_agent=DRIVER_USER_AGENT))
        await ensure_namespace(driver, namespace)
        options: dict[str, Any] = {}
        if rbac:
            assert isinstance(subject, Plugin)
            token = await _service_account_token(driver, f"engine-{subject.name}", namespace)
            options["config"] = _as_bearer(target.config, token)
        client = await stack.enter_async_context(
            target.client(user_agent=f"{identity}/engine-test", rng=random.Random(identity), **options)
        )
        cluster: Cluster | None = None
        ring: HashRing | None = None
        if isinstance(subject, Manager):
            if leader_election is not False:
                raise HarnessError("a Manager you built gets its leader election when you build it")
            if subject.started or subject.stopping:
                raise HarnessError("open_plugin_test needs a Manager that has not run")
            manager = subject
        elif isinstance(subject, Plugin):
            if scale_out is not None and leader_election is not False:
                raise HarnessError("scale_out and leader_election are exclusive")
            await install_crds(driver, subject.crds)
            gate = OwnershipGate(lambda ref: None) if scale_out is not None else None
            manager = Manager(
                handle_signals=False,
                grace_period=grace_period,
                leader_election=_leader(leader_election, client, subject.name, namespace, identity),
                ownership=gate,
                enable_warmup=enable_warmup,
                name=identity,
            )
            for extra in sinks:
                manager.add_sink(extra)
            if cluster_events:
                manager.add_sink(KubernetesEventSink(
                    client, reporting_controller="engine", reporting_instance=identity, rng=random.Random(identity)))
            cluster = Cluster(
                client, manager, namespace=watch_namespace,
                label_selector=f"{SHARD_LABEL}={shard}" if shard else None,
                options=watch_options if watch_options.rng is not None
                else attrs.evolve(watch_options, rng=random.Random(identity)),
            )
            if scale_out is not None:
                assert gate is not None
                ring = scale_out(client, gate, identity)
                ring.attach(manager, cluster)
        else:
            raise HarnessError(f"open_plugin_test runs a Plugin or a Manager, got {type(subject).__name__}")
        manager.add_observer(recorder)
        for observer in observers:
            manager.add_observer(observer)
        manager.add_sink(sink)
        harness = PluginHarness(target, driver, client, manager, cluster, identity, namespace, recorder, sink)
        harness.ring = ring
        if webhooks and isinstance(subject, Plugin) and subject.webhooks:
            harness.webhook_server = await _register_webhooks(stack, target, driver, subject, cluster, client,
                                                            watch_namespace)
        if isinstance(subject, Plugin):
            assert cluster is not None
            check_plugin_config([subject], {subject.name: config})
            await subject.setup(PluginContext(
                name=subject.name, manager=manager, cluster=cluster, client=client,
                config={**subject.config, **(config or {})}, namespace=watch_namespace, shard=shard,
            ))
            if rbac:
                harness.permissions = await _grant(driver, client, subject, cluster, manager, namespace,
                                                   watch_namespace, ring, wait=target.api is None)
        await harness.apply(manifests)
        if isinstance(subject, Plugin) and examples:
            await harness.apply(list(subject.examples))
        body_error: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(harness._run)
                if manager.leader_election is None:
                    with trio.move_on_after(start_timeout):
                        await manager.wait_started()
                    if not manager.started:
                        raise HarnessError(
                            f"the manager did not start within {start_timeout:g}s (informers not synced?)")
                try:
                    yield harness
                except BaseException as exc:
                    body_error = exc
                    if rbac:
                        _note_forbidden(exc, client, watch_namespace)
                    raise
                await harness.stop("test finished")
        except BaseExceptionGroup as group:
            if body_error is not None and _only(group, body_error):
                raise body_error from None
            raise
        if rbac:
            _require_no_forbidden(client, watch_namespace)
