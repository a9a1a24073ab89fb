"""Plugins: a named set of controllers with the CRDs they need and their configuration.

A plugin module exposes a :class:`Plugin` (conventionally as ``plugin``). The runner finds
plugins three ways: ``module:attr``, an entry point in the ``engine.plugins`` group (where an
installed engine lists its bundled plugins), or a bundled plugin in the ``engine.plugins``
package by name (so a checkout finds them without installed metadata). :func:`run_plugins` hosts plugins: it
installs their CRDs, sets them up on one manager and cluster, and runs the manager.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from ..._backoff import jittered_backoff
from ..._errors import EngineError
from ..._manager import Manager, ShutdownReport
from ..._text import summarize
from .._access._rbac import PolicyRule, crd_rules, merge_rules, rules_for
from .._access._review import MissingPermissionsError, check_permissions, whoami
from .._client._client import Client
from .._client._errors import (
    ConfigError,
    NotFoundError,
    ResourceNotFoundError,
    ServerError,
    TLSVerificationError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
)
from .._client._resource import Resource
from .._coordination._leader import LeaderElector
from .._coordination._ring import HashRing
from .._runtime._cluster import SHARD_LABEL, Cluster
from .._runtime._event_sink import KubernetesEventSink
from .._webhooks._certificates import CertProvisioning, CertRotator
from .._webhooks._configuration import register_webhooks, url_client_config
from .._webhooks._review import AdmissionWebhook, ConversionWebhook, Webhook
from .._webhooks._server import DEFAULT_WEBHOOK_PORT, WebhookCertificates, WebhookServer, server_context
from ._metrics import WebhookCollector

if TYPE_CHECKING:
    from ...observability import Observability

__all__ = [
    "Plugin",
    "PluginContext",
    "PluginError",
    "PluginHost",
    "WebhookServing",
    "load_plugin",
    "check_plugin_config",
    "load_plugins",
    "install_crds",
    "plugin_rules",
    "run_plugins",
    "ENTRY_POINT_GROUP",
]

logger = logging.getLogger("engine.kube.plugins")

ENTRY_POINT_GROUP = "engine.plugins"

_CRD_RESOURCE_ARGS = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")

_CLUSTER_PROBLEMS = (TransportError, ConfigError, UnauthorizedError)
"""Errors of the cluster connection, not of a plugin: raised as they are, never as PluginError."""

_PASSING = (TransportError, ServerError, TooManyRequestsError)
"""What a start-up step waits out: no connection or no answer, a 5xx, a 429."""

T = TypeVar("T")


class PluginError(EngineError):
    """A plugin could not be found, imported, validated or set up."""


@attrs.define(eq=False)
class PluginContext:
    """What a plugin's ``setup`` receives."""

    name: str
    manager: Manager
    cluster: Cluster
    client: Client
    config: dict[str, Any]
    """The plugin's configuration: its defaults updated with what the user gave."""
    namespace: str | None = None
    """The namespace to watch, or ``None`` for all."""
    shard: str | None = None

    def uses(
        self, resource: Resource, *operations: str, namespace: str | None = None, cluster_wide: bool = False
    ) -> None:
        """Declare that the plugin calls ``operations`` (:data:`~engine.kube.OPERATION_VERBS`:
        ``"get"``, ``"apply"``, ``"patch_status"``, ``"set_finalizer"``...) on ``resource``,
        in ``namespace`` (``None``: the namespace it runs for) or, with ``cluster_wide``, in
        every namespace. Informers need no declaration: :meth:`Cluster.informer` records
        their rules. Raises :class:`ValueError` for an unknown operation."""
        self.cluster.require(*rules_for(resource, *operations, namespace=namespace, cluster_wide=cluster_wide))

    def require(self, *rules: PolicyRule) -> None:
        """Declare rules the plugin needs beyond its informers and :meth:`uses`."""
        self.cluster.require(*rules)


def _check_crd(plugin: str, crd: Mapping[str, Any]) -> None:
    if crd.get("apiVersion") != "apiextensions.k8s.io/v1" or crd.get("kind") != "CustomResourceDefinition":
        raise PluginError(f"plugin {plugin!r}: crds must be apiextensions.k8s.io/v1 CustomResourceDefinition objects")
    name = (crd.get("metadata") or {}).get("name")
    spec = crd.get("spec") or {}
    plural = (spec.get("names") or {}).get("plural")
    if not name or name != f"{plural}.{spec.get('group')}":
        raise PluginError(f"plugin {plugin!r}: CRD metadata.name must be '<plural>.<group>', got {name!r}")


def _manifests(items: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(items)


def _rules(items: Iterable[PolicyRule]) -> tuple[PolicyRule, ...]:
    return tuple(items)


def _webhooks(items: Iterable[Webhook]) -> tuple[Webhook, ...]:
    return tuple(items)


@attrs.frozen
class Plugin:
    """A plugin: ``setup(ctx)`` registers its controllers and watches on ``ctx.manager`` and
    ``ctx.cluster``; ``crds`` are installed (or checked) before it; ``config`` holds defaults;
    ``examples`` are manifests the embedded run applies; ``rules`` are RBAC rules the plugin
    needs beyond what its ``setup`` records (see :func:`plugin_rules`), for what it does
    through the raw client."""

    name: str
    setup: Callable[[PluginContext], Awaitable[None]]
    crds: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_manifests)
    config: Mapping[str, Any] = attrs.field(factory=dict)
    """The plugin's settings and their defaults: a user's configuration may set these keys and
    no others (:func:`check_plugin_config`)."""
    examples: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_manifests)
    description: str = ""
    rules: tuple[PolicyRule, ...] = attrs.field(default=(), converter=_rules)
    """RBAC rules the plugin needs whatever its setup does (a rule without a namespace is for
    the namespace it runs for)."""
    webhooks: tuple[Webhook, ...] = attrs.field(default=(), converter=_webhooks)
    """Admission (:class:`AdmissionWebhook`) and conversion (:class:`ConversionWebhook`)
    webhooks: the runner serves them (:class:`WebhookServer`) and ``manifests`` emits their
    configurations. A conversion webhook must name one of :attr:`crds`."""

    def __attrs_post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise PluginError(f"plugin name must be a non-empty identifier, got {self.name!r}")
        if not callable(self.setup):
            raise PluginError(f"plugin {self.name!r}: setup must be an async function")
        for crd in self.crds:
            _check_crd(self.name, crd)
        for rule in self.rules:
            if not isinstance(rule, PolicyRule):
                raise PluginError(f"plugin {self.name!r}: rules must be PolicyRule values, got {type(rule).__name__}")
        crds = {crd["metadata"]["name"] for crd in self.crds}
        paths: set[str] = set()
        for webhook in self.webhooks:
            if not isinstance(webhook, (AdmissionWebhook, ConversionWebhook)):
                raise PluginError(f"plugin {self.name!r}: webhooks must be AdmissionWebhook or ConversionWebhook "
                                  f"values, got {type(webhook).__name__}")
            if isinstance(webhook, ConversionWebhook) and webhook.crd not in crds:
                raise PluginError(f"plugin {self.name!r}: conversion webhook for {webhook.crd!r}, "
                                  f"which is not one of its CRDs")
            if webhook.path in paths:
                raise PluginError(f"plugin {self.name!r}: two webhooks answer on {webhook.path}")
            paths.add(webhook.path)


def load_plugin(spec: str) -> Plugin:
    """Find a plugin by ``module:attr``, entry point name, or bundled name (``engine.plugins.<name>``)."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        obj = _import(spec, module_name)
        try:
            found = getattr(obj, attr)
        except AttributeError:
            raise PluginError(f"plugin {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    else:
        found = None
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == spec:
                try:
                    found = ep.load()
                except Exception as exc:
                    raise PluginError(f"plugin {spec!r} (entry point {ep.value}) failed to import: {_brief(exc)}") from exc
                break
        if found is None:
            module = _import(spec, f"engine.plugins.{spec}", bundled=True)
            found = getattr(module, "plugin", None)
            if found is None:
                raise PluginError(f"plugin {spec!r}: bundled module engine.plugins.{spec} has no 'plugin' attribute")
    if callable(found) and not isinstance(found, Plugin):
        found = _call_factory(spec, found)
    if not isinstance(found, Plugin):
        raise PluginError(f"plugin {spec!r}: expected an engine.kube.Plugin, got {type(found).__name__}")
    return found


def _call_factory(spec: str, factory: Callable[..., Any]) -> Any:
    """What a plugin factory (a function that takes no arguments) returns; a function that
    cannot be one, such as the plugin's own ``setup``, is named as the mistake it is."""
    if inspect.iscoroutinefunction(factory):
        raise PluginError(
            f"plugin {spec!r} is an async function, not a Plugin: name the Plugin that holds it "
            f"(Plugin(name=..., setup=...)) or a function that returns that Plugin"
        )
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise PluginError(
            f"plugin {spec!r} is a function that takes arguments {inspect.signature(factory)}: a plugin "
            f"factory takes none and returns a Plugin"
        ) from None
    except ValueError:
        pass
    try:
        made = factory()
    except Exception as exc:
        raise PluginError(f"plugin {spec!r}: its factory raised: {_brief(exc)}") from exc
    if inspect.isawaitable(made):
        close = getattr(made, "close", None)
        if callable(close):
            close()
        raise PluginError(f"plugin {spec!r}: its factory returned an awaitable; a factory is a plain function")
    if not isinstance(made, Plugin):
        raise PluginError(f"plugin {spec!r}: its factory returned {type(made).__name__}, not an engine.kube.Plugin")
    return made


def check_plugin_config(
    plugins: Iterable[Plugin], config: Mapping[str, Any], *, skipped: bool = False
) -> None:
    """Refuse a configuration that names no loaded plugin or a setting a plugin does not have.

    ``config`` maps a plugin's name to its settings; a plugin's settings are the keys of its
    :attr:`Plugin.config` defaults. With ``skipped`` (a plugin failed to load and was skipped),
    a name of no loaded plugin is logged rather than refused, since it may be the skipped
    one's. Raises :class:`PluginError` naming the unknown key and the valid ones.
    """
    by_name = {plugin.name: plugin for plugin in plugins}
    for name, settings in config.items():
        plugin = by_name.get(name)
        if plugin is None:
            known = ", ".join(sorted(by_name)) or "none"
            if skipped:
                logger.warning("the configuration of %r is not used: no loaded plugin has that name", name)
                continue
            raise PluginError(f"configuration for {name!r}, which is not a plugin of this run (plugins: {known})")
        if settings is None:
            continue
        if not isinstance(settings, Mapping):
            raise PluginError(f"plugin {name!r}: its configuration must be a mapping, got {type(settings).__name__}")
        unknown = sorted(str(key) for key in settings if key not in plugin.config)
        if unknown:
            valid = ", ".join(sorted(plugin.config)) or "none"
            raise PluginError(
                f"plugin {name!r} has no setting {', '.join(map(repr, unknown))} (its settings: {valid})"
            )


def plugin_settings(plugin: Plugin, config: Mapping[str, Any]) -> dict[str, Any]:
    """``plugin``'s configuration: its defaults updated with ``config[plugin.name]``."""
    return {**plugin.config, **(config.get(plugin.name) or {})}


def _import(spec: str, module_name: str, *, bundled: bool = False) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name in (module_name, module_name.split(".")[0]):
            if bundled:
                raise PluginError(
                    f"plugin {spec!r} not found (no module {module_name!r}, no entry point in {ENTRY_POINT_GROUP!r})"
                ) from None
            raise PluginError(f"plugin {spec!r} not found: no module named {module_name!r}") from None
        raise PluginError(f"plugin {spec!r} failed to import: {_brief(exc)}") from exc
    except PluginError as exc:
        raise PluginError(f"plugin {spec!r} is invalid: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"plugin {spec!r} failed to import: {_brief(exc)}") from exc


def _brief(exc: BaseException) -> str:
    return summarize(exc)


def load_plugins(specs: Iterable[str], *, strict: bool = False) -> tuple[list[Plugin], list[PluginError]]:
    """Load every plugin; a bad one is reported and skipped unless ``strict`` (then raised)."""
    plugins: list[Plugin] = []
    errors: list[PluginError] = []
    names: set[str] = set()
    for spec in specs:
        try:
            plugin = load_plugin(spec)
            if plugin.name in names:
                raise PluginError(f"plugin {plugin.name!r} given twice")
        except PluginError as exc:
            if strict:
                raise
            logger.error("skipping plugin: %s", exc)
            errors.append(exc)
            continue
        names.add(plugin.name)
        plugins.append(plugin)
    return plugins, errors


async def install_crds(
    client: Client, crds: Sequence[Mapping[str, Any]], *, install: bool = True, timeout: float = 30.0
) -> None:
    """Install (server-side apply) or, with ``install=False``, check the CRDs, then wait until
    the API server serves each of them, for up to ``timeout`` seconds. While waiting, an answer
    that may pass (no connection or no answer, a 5xx, a 429) counts as not served yet. Raises
    :class:`PluginError` on a missing CRD or when the API server answered but does not serve
    them in time, and the last such failure when it did not answer at all.

    Cancellation: if cancelled, CRDs already applied stay applied.
    """
    crd_resource = await client.resource(*_CRD_RESOURCE_ARGS)
    for crd in crds:
        name = crd["metadata"]["name"]
        if install:
            await client.apply(crd_resource, crd, field_manager="engine-plugins", force=True)
        else:
            try:
                await client.get(crd_resource, name)
            except NotFoundError:
                raise PluginError(f"CRD {name} is not installed (run with CRD installation enabled)") from None
    failure: Exception | None = None
    with trio.move_on_after(timeout) as scope:
        for crd in crds:
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("served", True))
            while True:
                try:
                    await client.resource(f"{spec['group']}/{version}", spec["names"]["kind"])
                    break
                except ResourceNotFoundError:
                    failure = None
                    await trio.sleep(0.05)
                except TLSVerificationError:
                    raise
                except _PASSING as exc:
                    failure = exc
                    await trio.sleep(0.5)
    if scope.cancelled_caught:
        if failure is not None:
            raise failure
        raise PluginError(f"CRDs not served by the API server within {timeout:g}s")


async def _patiently(step: Callable[[], Awaitable[T]], *, deadline: float | None, what: str) -> T:
    """``step()``'s result, where a start-up step waits out an outage of the API server.

    Until ``deadline`` (trio's clock; ``None``: not at all), a failure that may pass (no
    connection or no answer, a 5xx, a 429; never a certificate that fails verification) is
    logged as one warning and ``step`` is awaited again after a jittered backoff; past it, the
    last failure is raised. ``step`` must be safe to repeat (a read, a server-side apply, an
    access review).

    Cancellation: a checkpoint; cancelled while waiting, the step is not repeated.
    """
    rng = random.Random()
    retry = 0
    while True:
        try:
            return await step()
        except TLSVerificationError:
            raise
        except _PASSING as exc:
            left = -1.0 if deadline is None else deadline - trio.current_time()
            wait = min(jittered_backoff(retry, base=0.5, cap=8.0, rng=rng), left)
            if wait <= 0:
                raise
            logger.warning("start-up: %s failed (%s); retrying in %.1fs", what, summarize(exc), wait)
            await trio.sleep(wait)
            retry += 1


async def _require_access(
    client: Client, rules: Iterable[PolicyRule], plugins: Iterable[Plugin], namespace: str | None
) -> None:
    missing = await check_permissions(client, rules, namespace=namespace)
    if not missing:
        return
    command = " ".join(["python -m engine manifests", *(f"--plugin {p.name}" for p in plugins),
                        *([f"--namespace {namespace}"] if namespace else [])])
    raise MissingPermissionsError(await whoami(client), missing, f"{command} generates the Role they need")


def _manager_rules(manager: Manager) -> list[PolicyRule]:
    rules: list[PolicyRule] = []
    if isinstance(manager.leader_election, LeaderElector):
        rules.extend(manager.leader_election.rules)
    for sink in manager.events.sinks:
        if isinstance(sink, KubernetesEventSink):
            rules.extend(sink.rules)
    return rules


async def plugin_rules(
    client: Client,
    plugins: Iterable[Plugin],
    *,
    config: Mapping[str, Mapping[str, Any] | None] | None = None,
    namespace: str | None = None,
    install: bool = False,
) -> tuple[PolicyRule, ...]:
    """The RBAC rules ``plugins`` need for a run for ``namespace`` (``None``: every
    namespace), merged and sorted: each plugin is set up, with its configuration as
    :func:`run_plugins` gives it, on a :class:`Cluster` whose manager never runs, and what
    the cluster recorded (its informers, :meth:`PluginContext.uses`,
    :meth:`PluginContext.require`) is merged with the plugin's own ``rules`` and what the CRD
    check (or, with ``install``, installation) at start needs. Leases and Events are the
    runner's: add :func:`leader_election_rules` and :data:`EVENT_RULES`.

    ``client`` is only used for discovery, so the plugins' CRDs must be served by its server
    (the ``manifests`` command uses an embedded server where it installed them). Raises
    :class:`PluginError` if a plugin's setup fails.

    Cancellation: if cancelled, nothing is left running (the manager never started).
    """
    config = config or {}
    manager = Manager(handle_signals=False)
    cluster = Cluster(client, manager, namespace=namespace)
    rules: list[PolicyRule] = []
    for plugin in plugins:
        try:
            await plugin.setup(PluginContext(
                name=plugin.name, manager=manager, cluster=cluster, client=client,
                config=plugin_settings(plugin, config), namespace=namespace,
            ))
        except _CLUSTER_PROBLEMS:
            raise
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {plugin.name!r} failed to set up: {_brief(exc)}") from exc
        rules.extend([*plugin.rules, *crd_rules(plugin.crds, install=install)])
    return merge_rules([*cluster.rules, *rules])


@attrs.define(eq=False)
class PluginHost:
    """What :func:`run_plugins` built, reported once the manager runs."""

    client: Client
    manager: Manager
    cluster: Cluster
    plugins: list[Plugin]
    """The plugins that were set up, in the order given."""
    errors: list[PluginError]
    """The plugins skipped because they failed to load or to set up (only without ``strict``)."""
    examples_applied: int = 0
    """How many example manifests were applied (``apply_examples=True``)."""
    rules: tuple[PolicyRule, ...] = ()
    """Every RBAC rule the run needs, merged and sorted (:func:`merge_rules`): what the
    set-up plugins recorded and declared, the CRD check or installation, and the manager's
    :class:`LeaderElector` Lease and :class:`KubernetesEventSink` Events when it has them."""
    webhook_server: WebhookServer | None = None
    """The server of the plugins' webhooks, when :func:`run_plugins` serves them."""
    webhooks_registered: bool = False
    """Whether their configurations were registered with the API server."""
    cert_rotator: CertRotator | None = None
    """What keeps the webhook server's certificate, with :attr:`WebhookServing.provision`."""


@attrs.frozen
class WebhookServing:
    """How :func:`run_plugins` serves the plugins' webhooks."""

    address: tuple[str, int] = ("127.0.0.1", DEFAULT_WEBHOOK_PORT)
    """Where to listen (port 0: any free port)."""
    certificates: WebhookCertificates | None = None
    """The server's certificates; ``None``: a CA and certificate for loopback made at start."""
    register: bool = False
    """Register the configurations with a ``url`` clientConfig and the CA bundle (the embedded
    server, development); in a cluster ``manifests`` installs them."""
    provision: CertProvisioning | None = None
    """Issue and renew the serving certificate in a Secret and write its CA into the
    configurations (:class:`CertRotator`) instead of reading it from ``certificates``' files
    or cert-manager's Secret."""


async def run_plugins(
    client: Client,
    plugins: Iterable[Plugin | str],
    *,
    manager: Manager | None = None,
    config: Mapping[str, Mapping[str, Any] | None] | None = None,
    namespace: str | None = None,
    shard: str | None = None,
    label_selector: str | None = None,
    install: bool = True,
    strict: bool = True,
    apply_examples: bool = False,
    observability: Observability | None = None,
    check_access: bool = False,
    scale_out: HashRing | None = None,
    webhooks: WebhookServing | None = None,
    startup_timeout: float | None = None,
    task_status: trio.TaskStatus[PluginHost] = trio.TASK_STATUS_IGNORED,
) -> ShutdownReport:
    """Host ``plugins`` on one manager and cluster, run the manager, return its shutdown report.

    In order: plugins given by name are loaded (:func:`load_plugin`); one :class:`Cluster`
    is built on ``client`` and ``manager`` (a new ``Manager()``, which handles SIGTERM and
    SIGINT, when not given) watching ``namespace`` (``None``: all) and the objects matching
    ``label_selector`` and, with ``shard``, the label ``sharding.engine.dev/key=<shard>``;
    for each plugin its CRDs are installed (with ``install=False`` only checked, see
    :func:`install_crds`) and its ``setup`` is called with its default configuration
    updated by ``config[plugin.name]``; with ``apply_examples`` the set-up plugins' example
    manifests are applied (server-side apply); then the manager runs until it is stopped
    (:meth:`Manager.stop`, a signal, leadership lost).

    Everything that can be checked without the cluster is checked before anything is written
    to it: every plugin is loaded and every plugin's configuration must be a mapping. With
    ``strict`` (the default) the first plugin that fails to load or set up raises its
    :class:`PluginError`; with ``strict=False`` it is logged and skipped (listed in
    :attr:`PluginHost.errors`), and :class:`PluginError` is raised only when no plugin could be
    set up. A cluster problem met while setting a plugin up (the server cannot be reached, the
    credentials cannot be obtained or are rejected) is not the plugin's fault: that
    :class:`TransportError`, :class:`ConfigError` or :class:`UnauthorizedError` propagates as
    it is, strict or not. With
    ``observability``, the readiness checks ``informers`` (every informer synced; always
    passing on a standby without warm-up, ``Manager(enable_warmup=False)``, whose informers
    start only once it leads, so a warm standby is ready once its caches synced) and, when
    the manager's leader election is a :class:`LeaderElector`, ``leader-election`` (the
    lease state is known) are added, and the client's 403 answers are counted
    (:class:`ForbiddenCollector`). ``task_status.started(host)`` is called once the manager
    started its controllers.

    With ``scale_out`` (a :class:`HashRing` whose gate is ``manager``'s ownership gate) this
    process is one replica of a scale-out ring: the ring places keys by the cluster's
    informers (:meth:`Cluster.key_of`), joins before the controllers start, and hands its
    ranges over when the manager stops; with ``observability`` its ``engine_ring_*``
    metrics are registered (a member that owns nothing is still ready).

    With ``check_access``, the credentials are checked before they are used
    (:func:`check_permissions`): the CRD rules before the CRDs are installed or checked, every
    other rule of :attr:`PluginHost.rules` once the plugins are set up, before the manager
    runs. If any is missing, :class:`MissingPermissionsError` is raised, naming the identity
    (:func:`whoami`), what is missing and the ``python -m engine manifests`` command that
    generates the Role the run needs.

    With ``webhooks`` and set-up plugins that declare webhooks (:attr:`Plugin.webhooks`), a
    :class:`WebhookServer` serves them (:attr:`PluginHost.webhook_server`) from before the
    examples are applied until the manager stopped; with :attr:`WebhookServing.register`
    their configurations are registered with the server's URL and CA bundle
    (:func:`register_webhooks`), and with ``observability`` controller-runtime's webhook
    metrics are collected (:class:`WebhookCollector`).

    With ``startup_timeout``, set-up waits out an outage of the API server for up to that many
    seconds from the call: the access checks, the CRDs' installation or check and the wait for
    them to be served, the webhook registration and the examples are repeated with backoff
    while the server does not answer, answers 5xx or 429, each failed attempt logged as one
    warning; past it, the last failure is raised. Without it (the default) such a failure
    ends set-up at once, except for the client's own retries of reads
    (:class:`RetryPolicy`) and the CRD wait's 30 seconds. Plugins' ``setup`` is not repeated.

    Cancellation: during set-up, CRDs already applied stay applied and the manager never
    runs; once the manager runs, cancelling cancels its runs at once, without the grace
    period (as :meth:`Manager.run`), and ``Cancelled`` propagates. For a graceful stop call
    ``host.manager.stop()``.
    """
    manager = manager if manager is not None else Manager()
    config = config or {}
    deadline = None if startup_timeout is None else trio.current_time() + startup_timeout
    loaded: list[Plugin] = []
    errors: list[PluginError] = []
    for item in plugins:
        if isinstance(item, Plugin):
            loaded.append(item)
            continue
        try:
            loaded.append(load_plugin(item))
        except PluginError as exc:
            if strict:
                raise
            logger.error("skipping plugin: %s", exc)
            errors.append(exc)
    check_plugin_config(loaded, config, skipped=bool(errors))
    selector = ",".join([*([f"{SHARD_LABEL}={shard}"] if shard else []), *([label_selector] if label_selector else [])])
    cluster = Cluster(client, manager, namespace=namespace, label_selector=selector or None)
    if scale_out is not None:
        scale_out.attach(manager, cluster)
    host = PluginHost(client=client, manager=manager, cluster=cluster, plugins=[], errors=errors)
    needed: list[PolicyRule] = []
    checked: tuple[PolicyRule, ...] = ()
    if check_access:
        checked = merge_rules(rule for plugin in loaded for rule in crd_rules(plugin.crds, install=install))
        await _patiently(partial(_require_access, client, checked, loaded, namespace),
                         deadline=deadline, what="the access check")
    for plugin in loaded:
        recorded = len(cluster.rules)
        try:
            crd_wait = 30.0 if deadline is None else max(30.0, deadline - trio.current_time())
            await _patiently(partial(install_crds, client, plugin.crds, install=install, timeout=crd_wait),
                             deadline=deadline, what=f"installing plugin {plugin.name}'s CRDs")
            await plugin.setup(PluginContext(
                name=plugin.name, manager=manager, cluster=cluster, client=client,
                config=plugin_settings(plugin, config), namespace=namespace, shard=shard,
            ))
        except _CLUSTER_PROBLEMS:
            raise
        except Exception as exc:
            err = exc if isinstance(exc, PluginError) else PluginError(
                f"plugin {plugin.name!r} failed to set up: {_brief(exc)}"
            )
            if strict:
                if err is exc:
                    raise
                raise err from exc
            logger.error("plugin setup failed", exc_info=exc, extra={"plugin": plugin.name})
            errors.append(err)
            continue
        host.plugins.append(plugin)
        needed.extend([*cluster.rules[recorded:], *plugin.rules, *crd_rules(plugin.crds, install=install)])
        logger.info("plugin %s set up", plugin.name)
    if not host.plugins:
        reasons = "; ".join(str(e) for e in errors)
        raise PluginError("no plugin could be set up" + (f": {reasons}" if reasons else ""))
    declared = [webhook for plugin in host.plugins for webhook in plugin.webhooks]
    provision = webhooks.provision if webhooks is not None and declared else None
    host.rules = merge_rules([*needed, *_manager_rules(manager), *(scale_out.rules if scale_out else ()),
                              *(provision.rules(declared) if provision else ())])
    if check_access:
        await _patiently(partial(_require_access, client, [r for r in host.rules if r not in checked], host.plugins,
                                 namespace), deadline=deadline, what="the access check")
    async with trio.open_nursery() as services:
        if webhooks is not None and declared:
            certificates = webhooks.certificates
            if provision is not None:
                certificates = certificates or WebhookCertificates(server_context())
                host.cert_rotator = provision.rotator(client, declared, certificates)
                await services.start(host.cert_rotator.run)
            server = host.webhook_server = WebhookServer(
                declared, certificates=certificates, host=webhooks.address[0], port=webhooks.address[1],
                cluster=cluster, client=client,
            )
            await services.start(server.serve)
            if webhooks.register:
                name = "engine-" + "-".join(sorted(p.name for p in host.plugins))
                host.webhooks_registered = await _patiently(partial(
                    register_webhooks, client, declared, name=name,
                    client_config=url_client_config(server.url, server.certificates.ca_bundle), namespace=namespace,
                ), deadline=deadline, what="registering the webhooks")
            if observability is not None:
                observability.metrics.registry.register(WebhookCollector(server))
        if apply_examples:
            for plugin in host.plugins:
                for manifest in plugin.examples:
                    await _patiently(partial(_apply_example, client, manifest), deadline=deadline,
                                     what="applying the examples")
                    host.examples_applied += 1
        report = await _run_manager(host, observability, task_status, scale_out)
        services.cancel_scope.cancel(reason="the manager stopped")
    return report


async def _apply_example(client: Client, manifest: Mapping[str, Any]) -> None:
    resource = await client.resource(manifest["apiVersion"], manifest["kind"])
    await client.apply(resource, dict(manifest), field_manager="engine-examples", force=True)


def _informers_ready(manager: Manager, cluster: Cluster) -> bool:
    """The ``informers`` readiness check: every informer synced, except on a cold standby
    (``enable_warmup=False``), whose informers start only once it leads. A warm standby is
    thus ready once its caches synced, as controller-runtime's warm replicas are."""
    return (manager.standby and not manager.enable_warmup) or cluster.synced


async def _run_manager(
    host: PluginHost,
    observability: Observability | None,
    task_status: trio.TaskStatus[PluginHost],
    scale_out: HashRing | None = None,
) -> ShutdownReport:
    cluster, client, manager = host.cluster, host.client, host.manager
    if observability is not None:
        from ._metrics import ForbiddenCollector, InformerCollector

        observability.metrics.registry.register(InformerCollector(cluster))
        observability.metrics.registry.register(ForbiddenCollector(client))
        observability.add_readiness_check("informers", partial(_informers_ready, manager, cluster))
        if scale_out is not None:
            from ._metrics import RingCollector

            observability.metrics.registry.register(RingCollector(scale_out, cluster))
        leader = manager.leader_election
        if isinstance(leader, LeaderElector):
            elector = leader
            observability.add_readiness_check("leader-election", lambda: elector.statistics().state_known)

    reports: list[ShutdownReport] = []

    async def run_manager(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        reports.append(await manager.run(task_status=task_status))

    async with trio.open_nursery() as nursery:
        await nursery.start(run_manager)
        task_status.started(host)
    return reports[0]
