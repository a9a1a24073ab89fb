"""``python -m engine run``: run plugins against a cluster from a kubeconfig, or embedded.

Flags follow controller-runtime based managers (``--kubeconfig``, ``--leader-elect``,
``--metrics-bind-address``, ``--health-probe-bind-address``...). ``--embedded`` starts the
embedded API server (HTTPS with a generated CA unless ``--apiserver-plain-http``; its
kubeconfig's client certificate is the only way in besides tokens it issues: a request without
credentials is ``system:anonymous``), installs the plugins' CRDs, applies their example
manifests, writes a kubeconfig for ``kubectl``, and runs until Ctrl-C. The live stream and
dashboard (``--live-bind-address``) always need a token: ``--live-token`` or
``$ENGINE_LIVE_TOKEN``, else a random one, printed in the dashboard's URL on stdout (never
logged).

Every flag is checked before anything is written to the cluster: the values themselves (exit
code 2, usage errors), then the plugins are loaded and the metrics, probe and live-stream
addresses are bound once (exit code 1). Against a cluster, the credentials are checked
(``SelfSubjectAccessReview``) for every permission the plugins need before any controller
runs; a missing one is exit code 1 with one line naming the identity, what is missing and
the ``manifests`` command that generates the right Role. Every failure is one ``error: ...`` line on stderr;
``--log-level debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import math
import os
import signal
import socket
import sys
import traceback
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio
import yaml

from .._errors import EngineError
from .._logging import JSONFormatter, configure_logging
from .._manager import DEFAULT_EVENT_FLUSH_TIMEOUT, DEFAULT_GRACE_PERIOD, Manager, ShutdownReport
from .._ownership import OwnershipGate
from .._sinks import WebhookSink
from .._text import summarize
from ._args import ArgumentParser
from ._live import TOKEN_ENV
from ._progress import TerminalProgress, counted
from ._tracing import configure_tracing

if TYPE_CHECKING:
    from ..kube import Client, Plugin, PluginHost, WebhookServing
    from ..observability import Observability

__all__ = ["main", "first_cause", "describe"]

logger = logging.getLogger("engine.runner")

PROGRESS_ENV = "ENGINE_PROGRESS"
"""``always`` or ``never`` overrides ``--progress auto`` (tests force terminal output with it)."""

_DESCRIPTION = """\
Run plugins against a cluster (--kubeconfig, as controller-runtime managers do) or against
the embedded API server (--embedded), until SIGTERM or Ctrl-C; a second signal forces the
stop. --embedded serves the API over HTTPS with a generated CA, installs the plugins' CRDs,
applies their example objects and writes a kubeconfig for kubectl (a client certificate;
requests without credentials are system:anonymous, which may read /healthz, /livez, /readyz and
/version only). The live stream and dashboard need a token; without --live-token a random one
is made and printed in their URLs. Plugins' admission and conversion webhooks are served over HTTPS
(--webhook-bind-address, --webhook-cert-dir); --embedded registers them with the server.

Exit codes: 0 after a graceful stop, 1 when start-up or the run fails (one "error:" line
says why), 2 for a bad flag, 130 when a second signal forced the stop.
"""


class _UsageError(Exception):
    """A flag has a value the runner cannot use: exit code 2."""


class _StartupError(Exception):
    """Start-up cannot go on (a plugin, a file, an address): exit code 1."""


def default_kubeconfig_path() -> Path:
    """Where ``--embedded`` writes its kubeconfig unless told: the user's cache directory,
    never the working directory (which is often a source tree)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache) / "engine" / "embedded.kubeconfig"


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m engine run", description=_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_argument_group("cluster")
    target.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
    target.add_argument("--context", help="kubeconfig context to use (default: current-context)")
    target.add_argument("--embedded", action="store_true", help="start the embedded API server and run against it")
    target.add_argument("--apiserver-port", type=int, default=0, help="--embedded: API server port (default: a free one)")
    target.add_argument("--apiserver-plain-http", action="store_true",
                        help="--embedded: serve plain HTTP instead of HTTPS; the kubeconfig then carries an admin "
                             "bearer token, which the runner sends but kubectl does not send over HTTP")
    target.add_argument("--write-kubeconfig", metavar="PATH", default=None,
                        help="--embedded: where to write the kubeconfig "
                             "(default: $XDG_CACHE_HOME/engine/embedded.kubeconfig, else ~/.cache/engine/...)")
    target.add_argument("--no-examples", action="store_true", help="--embedded: do not apply the plugins' example manifests")
    run = p.add_argument_group("controllers")
    run.add_argument("--plugin", action="append", default=[], metavar="NAME|module:attr",
                     help="a plugin to run (repeatable): a bundled name, an entry point, or module:attr")
    run.add_argument("--plugin-config", metavar="FILE", help="YAML mapping of plugin name to its configuration")
    run.add_argument("--strict-plugins", action=argparse.BooleanOptionalAction, default=True,
                     help="exit if any plugin fails to load or set up (the default); with --no-strict-plugins, "
                          "report such plugins and run the others")
    run.add_argument("--skip-crd-install", action="store_true", help="only check that the plugins' CRDs exist")
    run.add_argument("--namespace", help="watch only this namespace (default: all)")
    run.add_argument("--shard", help="watch only objects labelled sharding.engine.dev/key=SHARD")
    run.add_argument("--watch-label-selector", help="watch only objects matching this label selector")
    run.add_argument("--grace-period", type=float, default=DEFAULT_GRACE_PERIOD, metavar="SECONDS",
                     help=f"how long running reconciles get to finish after SIGTERM before they are cancelled "
                          f"(default {DEFAULT_GRACE_PERIOD:g}; with the {DEFAULT_EVENT_FLUSH_TIMEOUT:g} s event flush "
                          f"and shielded status writes this fits a pod's default 30 s terminationGracePeriodSeconds)")
    run.add_argument("--startup-timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT, metavar="SECONDS",
                     help=f"how long start-up (the first answer, the access check, the CRDs, the webhook "
                          f"registration) waits out an API server that does not answer, answers 5xx or 429, "
                          f"retrying with backoff, before it gives up with exit code 1 "
                          f"(default {DEFAULT_STARTUP_TIMEOUT:g})")
    run.add_argument("--event-webhook", metavar="URL", help="also POST every event to this URL")
    run.add_argument("--no-cluster-events", action="store_true", help="do not record events in the cluster")
    le = p.add_argument_group("leader election")
    le.add_argument("--leader-elect", action="store_true", help="run only while holding a coordination.k8s.io Lease")
    le.add_argument("--leader-election-id", help="the Lease name (default: engine-<plugins>[-<shard>])")
    le.add_argument("--leader-election-namespace", help="the Lease namespace (default: the kubeconfig's namespace)")
    le.add_argument("--leader-elect-lease-duration", type=float, default=15.0, metavar="SECONDS",
                    help="how long standbys wait after the last renewal before taking the Lease over (default 15)")
    le.add_argument("--leader-elect-renew-deadline", type=float, default=10.0, metavar="SECONDS",
                    help="how long the leader keeps trying to renew before it gives up leading; "
                         "must be below the lease duration (default 10)")
    le.add_argument("--leader-elect-retry-period", type=float, default=2.0, metavar="SECONDS",
                    help="time between attempts to acquire or renew the Lease; "
                         "must be below the renew deadline (default 2)")
    le.add_argument("--warm-standby", action=argparse.BooleanOptionalAction, default=True,
                    help="with --leader-elect, a standby lists and watches (fills its caches) while it waits, "
                         "running and writing nothing, so that on taking the Lease it runs at once from synced "
                         "caches (the default); --no-warm-standby lists only once it leads, saving a standby's "
                         "cache memory; scale-out replicas cache the ranges assigned to them either way")
    so = p.add_argument_group("scale-out")
    so.add_argument("--scale-out", action="store_true",
                    help="run as one replica of a ring: replicas divide the objects by hash of their uid, "
                         "each holding a member Lease (named from --leader-election-id, in "
                         "--leader-election-namespace, with the --leader-elect-* timings); "
                         "not combinable with --leader-elect")
    so.add_argument("--scale-out-handover-grace", type=float, default=10.0, metavar="SECONDS",
                    help="how long running reconciles of a key range handed to another replica get to finish "
                         "before they are cancelled (default 10)")
    ops = p.add_argument_group("operations")
    ops.add_argument("--metrics-bind-address", default="0", metavar="ADDRESS",
                     help='metrics address, e.g. ":8080" (loopback) or "0.0.0.0:8080"; "0" disables (default)')
    ops.add_argument("--health-probe-bind-address", default="0", metavar="ADDRESS",
                     help='health probes address (/healthz, /readyz), e.g. ":8081"; "0" disables (default)')
    ops.add_argument("--live-bind-address", default="0", metavar="ADDRESS",
                     help='live stream and dashboard address, e.g. ":8082"; "0" disables (default)')
    ops.add_argument("--live-token", metavar="TOKEN", default=None,
                     help=f"bearer token the live stream and dashboard require (default: ${TOKEN_ENV}; when unset, "
                          "a random one, printed in the dashboard and live-stream URLs)")
    hooks = p.add_argument_group("webhooks")
    hooks.add_argument("--webhook-bind-address", default=None, metavar="ADDRESS",
                       help="serve the plugins' admission and conversion webhooks over HTTPS here "
                            "(default when a plugin declares webhooks: :9443, loopback; with --embedded a free "
                            "loopback port, registered with the embedded server; 0 disables)")
    hooks.add_argument("--webhook-cert-dir", metavar="DIR", default=None,
                       help="directory with tls.crt and tls.key (re-read when they change, as cert-manager "
                            "rotates them) and, for --embedded to register, ca.crt; default: a CA and certificate "
                            "made at start")
    hooks.add_argument("--webhook-service", metavar="NAMESPACE/NAME", default=None,
                       help="provision the serving certificate for the webhooks behind this Service: a CA and "
                            "certificate kept (issued, renewed) in the Secret NAME-cert of NAMESPACE and the CA "
                            "written into the caBundle of the webhook configurations (--webhook-configuration) and "
                            "CRD conversions that call the Service, as cert-controller does; not with "
                            "--webhook-cert-dir")
    hooks.add_argument("--webhook-configuration", metavar="NAME", default=None,
                       help="with --webhook-service: the name of the Mutating/ValidatingWebhookConfiguration "
                            "(default: the name `manifests` gives them, engine-<plugins>)")
    ops.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                     help=f"print each object's progress (ready, failed, rollouts, shutdown) on stdout: "
                          f"auto does so when stdout is a terminal (default auto; ${PROGRESS_ENV} overrides auto)")
    ops.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                     help="log level (default: warning while progress is printed, else info); "
                          "debug also logs every HTTP request and prints tracebacks")
    ops.add_argument("--log-format", choices=["json", "text"], help="log format (default: json unless stderr is a terminal)")
    return p


# -- validation before anything runs -----------------------------------------------------------


def _check(args: argparse.Namespace) -> None:
    """Raise :class:`_UsageError` for the first flag whose value cannot work."""
    from ..observability import parse_bind_address

    if args.embedded and (args.kubeconfig or args.context):
        raise _UsageError("--embedded and --kubeconfig/--context are exclusive")
    if not args.plugin:
        raise _UsageError("no plugin to run (give --plugin NAME, e.g. --plugin bundles)")
    if not 0 <= args.apiserver_port <= 65535:
        raise _UsageError(f"--apiserver-port must be between 0 and 65535, got {args.apiserver_port}")
    if args.scale_out and args.leader_elect:
        raise _UsageError("--scale-out and --leader-elect are exclusive: the replicas of a ring all run")
    if not (math.isfinite(args.scale_out_handover_grace) and args.scale_out_handover_grace >= 0):
        raise _UsageError(
            f"--scale-out-handover-grace must be a number of seconds >= 0, got {args.scale_out_handover_grace:g}"
        )
    if not (math.isfinite(args.startup_timeout) and args.startup_timeout >= 0):
        raise _UsageError(f"--startup-timeout must be a number of seconds >= 0, got {args.startup_timeout:g}")
    if not (math.isfinite(args.grace_period) and args.grace_period >= 0):
        raise _UsageError(f"--grace-period must be a number of seconds >= 0, got {args.grace_period:g}")
    lease, renew, retry = (args.leader_elect_lease_duration, args.leader_elect_renew_deadline,
                           args.leader_elect_retry_period)
    if not all(math.isfinite(v) for v in (lease, renew, retry)):
        raise _UsageError("the --leader-elect-* durations must be finite numbers of seconds")
    if not retry > 0:
        raise _UsageError(f"--leader-elect-retry-period must be > 0, got {retry:g}")
    if not renew > retry:
        raise _UsageError(f"--leader-elect-renew-deadline ({renew:g}) must be greater than "
                          f"--leader-elect-retry-period ({retry:g})")
    if not lease > renew:
        raise _UsageError(f"--leader-elect-lease-duration ({lease:g}) must be greater than "
                          f"--leader-elect-renew-deadline ({renew:g})")
    if args.webhook_bind_address is not None:
        try:
            parse_bind_address(args.webhook_bind_address)
        except ValueError as exc:
            raise _UsageError(f"--webhook-bind-address: {exc}") from None
    if args.webhook_service is not None:
        namespace, _, name = args.webhook_service.partition("/")
        if not (namespace and name and "/" not in name):
            raise _UsageError(f"--webhook-service must be NAMESPACE/NAME, got {args.webhook_service!r}")
        if args.webhook_cert_dir:
            raise _UsageError("--webhook-service provisions the certificate: not with --webhook-cert-dir")
        if args.embedded:
            raise _UsageError("--webhook-service is for a cluster's Service: not with --embedded")
    elif args.webhook_configuration is not None:
        raise _UsageError("--webhook-configuration needs --webhook-service")
    seen: dict[tuple[str, int], str] = {}
    for flag, address in _addresses(args):
        try:
            bind = parse_bind_address(address)
        except ValueError as exc:
            raise _UsageError(f"{flag}: {exc}") from None
        if bind is None or bind[1] == 0:
            continue
        other = seen.get(bind)
        shared = {flag, other} == {"--metrics-bind-address", "--health-probe-bind-address"}
        if other is not None and not shared:
            raise _UsageError(f"{flag} and {other} both ask for {bind[0]}:{bind[1]}")
        seen[bind] = flag


def _addresses(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [
        ("--metrics-bind-address", args.metrics_bind_address),
        ("--health-probe-bind-address", args.health_probe_bind_address),
        ("--live-bind-address", args.live_bind_address),
    ]


async def _check_listeners(args: argparse.Namespace) -> None:
    """Bind each enabled address once and let it go, so that a port in use or a host that does
    not resolve stops the start-up before the cluster is touched."""
    from ..observability import parse_bind_address

    done: set[tuple[str, int]] = set()
    for flag, address in _addresses(args):
        bind = parse_bind_address(address)
        if bind is None or bind in done:
            continue
        done.add(bind)
        await _try_listen(flag, address, *bind)


async def _try_listen(flag: str, address: str, host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go; a failure is a start-up error naming ``flag``,
    with a hint when another process holds the port."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise _StartupError(f"{flag} {address}: cannot listen on {host}:{port}: {_listen_failure(exc, flag)}") from exc
    for listener in listeners:
        await listener.aclose()


def _listen_failure(exc: OSError, flag: str) -> str:
    reason = _os_reason(exc)
    if exc.errno != errno.EADDRINUSE:
        return reason
    if flag == "--apiserver-port":
        return f"{reason} (another process listens there: give another --apiserver-port, or 0 for a free one)"
    return f"{reason} (another process listens there, another replica on this host perhaps: give each its own {flag})"


async def _webhook_serving(args: argparse.Namespace, plugins: list[Plugin]) -> WebhookServing | None:
    """How to serve the plugins' webhooks (``None``: not at all), the address bound once and
    the certificate read, so that neither fails once the cluster is touched."""
    from ..kube import DEFAULT_WEBHOOK_PORT, CertProvisioning, WebhookCertificates, WebhookError, WebhookServing
    from ..observability import parse_bind_address

    if not any(plugin.webhooks for plugin in plugins):
        return None
    address = args.webhook_bind_address or ("127.0.0.1:0" if args.embedded else f":{DEFAULT_WEBHOOK_PORT}")
    bind = parse_bind_address(address)
    if bind is None:
        return None
    host, port = bind
    await _try_listen("--webhook-bind-address", address, host, port)
    if args.webhook_service is not None:
        namespace, _, service = args.webhook_service.partition("/")
        configuration = args.webhook_configuration or default_lease_name([p.name for p in plugins])
        return WebhookServing((host, port), provision=CertProvisioning(service, namespace, configuration))
    try:
        if args.webhook_cert_dir:
            certificates = WebhookCertificates.from_dir(args.webhook_cert_dir)
        else:
            names = dict.fromkeys([host, "127.0.0.1", "localhost"]) if host not in ("0.0.0.0", "::") else {
                "127.0.0.1": None, "localhost": None, socket.gethostname(): None}
            certificates = WebhookCertificates.generate(list(names))
    except WebhookError as exc:
        raise _StartupError(f"--webhook-cert-dir: {exc}") from exc
    return WebhookServing((host, port), certificates, register=args.embedded)


def _os_reason(exc: OSError) -> str:
    return str(exc.strerror) if exc.strerror else str(exc)


def _plugin_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise _StartupError(f"--plugin-config {path}: {_os_reason(exc)}") from exc
    except yaml.YAMLError as exc:
        raise _StartupError(f"--plugin-config {path}: not valid YAML: {exc}".splitlines()[0]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _StartupError(f"--plugin-config {path}: must be a mapping of plugin name to its settings")
    return data


# -- errors --------------------------------------------------------------------------------------


def first_cause(exc: BaseException) -> BaseException:
    """The exception that says what went wrong: inside (nested) exception groups, the first
    one that is not a ``trio.Cancelled``."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            cause = first_cause(sub)
            if not isinstance(cause, trio.Cancelled):
                return cause
        return first_cause(exc.exceptions[0])
    return exc


def describe(exc: BaseException) -> str:
    """One line for ``exc``: the engine's own errors and OS errors say it themselves; anything
    else is named by its type."""
    if isinstance(exc, (_UsageError, _StartupError, EngineError)):
        text = str(exc) or type(exc).__name__
    elif isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc.strerror)
    else:
        text = summarize(exc)
    return " ".join(text.split())


# -- running -------------------------------------------------------------------------------------


DEFAULT_STARTUP_TIMEOUT = 120.0
"""Seconds start-up waits for the API server (controller-runtime's default cache sync timeout)."""


async def wait_for_server(client: Client, *, within: float) -> None:
    """Return once the API server answers ``GET /version``.

    What may pass (no connection, a 5xx, a 429) is retried, by the client's own retries and
    then with backoff here, each failed round logged as one warning; past ``within`` seconds,
    or at once for anything else (a certificate that fails verification, 401, 403), raises
    :class:`_StartupError` or the client's error, naming the cause.

    Cancellation: a checkpoint; nothing to undo.
    """
    from ..kube import ServerError, TLSVerificationError, TooManyRequestsError, TransportError

    deadline = trio.current_time() + within
    delay = 0.5
    cause = "no answer yet"
    while True:
        with trio.move_on_at(deadline):
            try:
                await client.server_version()
                return
            except TLSVerificationError:
                raise
            except (TransportError, ServerError, TooManyRequestsError) as exc:
                cause = describe(exc)
                wait = min(delay, deadline - trio.current_time())
                if wait > 0:
                    logger.warning("the API server does not answer yet (%s); retrying in %.1fs", cause, wait)
                    await trio.sleep(wait)
                    delay = min(delay * 2, 8.0)
                    continue
        raise _StartupError(f"no answer from the API server within --startup-timeout {within:g}s: {cause}")


@attrs.define(eq=False)
class _Running:
    """What a signal acts on once the manager exists."""

    manager: Manager
    progress: TerminalProgress | None
    nursery: trio.Nursery
    report_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    def stop(self, name: str) -> None:
        self.manager.stop(name)
        if self.progress is not None:
            self.nursery.start_soon(self._report, self.progress, name)

    async def _report(self, progress: TerminalProgress, name: str) -> None:
        with self.report_scope:
            await progress.report_shutdown(name)


async def _run(args: argparse.Namespace, progress: bool) -> int:
    """Start-up and run under one signal handler: a signal during start-up ends it cleanly,
    once running the first signal is a graceful shutdown and the second forces it."""
    box: list[_Running] = []
    code = 0
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            async def forward() -> None:
                count = 0
                async for signum in signals:
                    count += 1
                    name = signal.Signals(signum).name
                    if not box:
                        logger.info("received %s during start-up; exiting", name)
                        nursery.cancel_scope.cancel()
                        return
                    if count == 1:
                        box[0].stop(name)
                    else:
                        box[0].manager.force_stop(f"second signal ({name})")

            async def main() -> None:
                nonlocal code
                code = await _start_and_run(args, box, progress)
                nursery.cancel_scope.cancel()

            nursery.start_soon(forward)
            nursery.start_soon(main)
    return code


async def _start_and_run(args: argparse.Namespace, box: list[_Running], progress: bool) -> int:
    from ..kube import Client, Config, PluginError, load_plugins, run_plugins

    try:
        plugins, errors = load_plugins(args.plugin, strict=args.strict_plugins)
    except PluginError as exc:
        others = " (--no-strict-plugins runs the other plugins)" if len(args.plugin) > 1 else ""
        raise _StartupError(f"{exc}{others}") from exc
    for err in errors:
        print(f"skipped: {err}", flush=True)
    if not plugins:
        raise _StartupError("no plugin could be loaded")
    plugin_config = _plugin_config(args.plugin_config)
    await _check_listeners(args)
    webhooks = await _webhook_serving(args, plugins)

    async with contextlib.AsyncExitStack() as stack:
        kubeconfig: Path | None = None
        if args.embedded:
            from ..apiserver import ApiServer

            try:
                api = await stack.enter_async_context(
                    ApiServer(port=args.apiserver_port, tls=not args.apiserver_plain_http)
                )
            except OSError as exc:
                raise _StartupError(f"--apiserver-port {args.apiserver_port}: cannot listen on 127.0.0.1:"
                                    f"{args.apiserver_port}: {_listen_failure(exc, '--apiserver-port')}") from exc
            kubeconfig = Path(args.write_kubeconfig).resolve() if args.write_kubeconfig else default_kubeconfig_path()
            kubeconfig.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            api.write_kubeconfig(kubeconfig)
            print(f"embedded API server listening on {api.url}", flush=True)
            print(f"kubeconfig written to {kubeconfig}", flush=True)
            config = Config.from_kubeconfig(kubeconfig)
        elif args.kubeconfig or args.context or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
            config = Config.from_kubeconfig(args.kubeconfig, context=args.context)
        else:
            config = Config.incluster()
        identity = f"{socket.gethostname()}_{os.getpid()}"
        client = await stack.enter_async_context(Client(config, user_agent=f"engine-runner/{identity}"))
        startup_deadline = None
        if not args.embedded:
            startup_deadline = trio.current_time() + args.startup_timeout
            await wait_for_server(client, within=args.startup_timeout)

        leader = None
        if args.leader_elect:
            from ..kube import LeaderElector

            lease_name = args.leader_election_id or default_lease_name([p.name for p in plugins], args.shard)
            leader = LeaderElector(
                client,
                name=lease_name,
                namespace=args.leader_election_namespace or config.namespace or "default",
                identity=identity,
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period,
            )
        ring = None
        if args.scale_out:
            from ..kube import HashRing

            gate = OwnershipGate(lambda ref: None)
            ring = HashRing(
                client,
                gate,
                name=args.leader_election_id or default_lease_name([p.name for p in plugins], args.shard),
                namespace=args.leader_election_namespace or config.namespace or "default",
                plugins=[p.name for p in plugins],
                identity=identity,
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period,
                handover_grace=args.scale_out_handover_grace,
            )
        manager = Manager(
            grace_period=args.grace_period, leader_election=leader, handle_signals=False,
            ownership=ring.gate if ring is not None else None, enable_warmup=args.warm_standby,
        )
        if not args.no_cluster_events:
            from ..kube import KubernetesEventSink

            manager.add_sink(KubernetesEventSink(client, reporting_controller="engine", reporting_instance=identity))
        if args.event_webhook:
            manager.add_sink(WebhookSink(args.event_webhook))
        obs = _observability(manager, args)
        if obs is not None and obs.live is not None:
            obs.live.add_notices(client.forbidden.notices)
            if ring is not None:
                obs.live.add_info(partial(_ring_notice, ring))
        printer = TerminalProgress(manager, sys.stdout) if progress else None
        if printer is not None:
            manager.add_observer(printer)
            if ring is not None:
                ring.on_change.append(_RingShare(ring, sys.stdout))

        async with trio.open_nursery() as ui:
            if printer is not None:
                ui.start_soon(printer.run)
            running = _Running(manager, printer, ui)

            async def starting(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                box.append(running)
                if leader is not None:
                    print("waiting for leadership" + (" (warm standby: filling caches)" if args.warm_standby else ""),
                          flush=True)
                task_status.started()

            manager.add_service(starting)
            try:
                report = await _host(args, client, plugins, manager, plugin_config, obs, kubeconfig, run_plugins,
                                     webhooks, ring, startup_deadline)
            finally:
                running.report_scope.cancel()
                if printer is not None:
                    printer.close()
        if printer is not None:
            print(_stopped(report), flush=True)
        if obs is not None:
            obs.record_shutdown(report)
    if manager.leadership_lost:
        logger.error("exiting: leadership lost (%s)", manager.leadership_lost)
        return 1
    return 130 if report.forced else 0


async def _host(
    args: argparse.Namespace,
    client: Any,
    plugins: list[Plugin],
    manager: Manager,
    plugin_config: dict[str, Any],
    obs: Observability | None,
    kubeconfig: Path | None,
    run_plugins: Any,
    webhooks: WebhookServing | None,
    ring: Any = None,
    startup_deadline: float | None = None,
) -> ShutdownReport:
    from ..kube import ServerError, TooManyRequestsError, TransportError

    reports: list[ShutdownReport] = []
    async with trio.open_nursery() as nursery:
        async def host_plugins(*, task_status: trio.TaskStatus[PluginHost] = trio.TASK_STATUS_IGNORED) -> None:
            reports.append(await run_plugins(
                client, plugins, manager=manager, config=plugin_config, namespace=args.namespace,
                shard=args.shard, label_selector=args.watch_label_selector, install=not args.skip_crd_install,
                strict=args.strict_plugins, apply_examples=args.embedded and not args.no_examples,
                observability=obs, check_access=not args.embedded, scale_out=ring, webhooks=webhooks,
                startup_timeout=None if startup_deadline is None else max(0.0, startup_deadline - trio.current_time()),
                task_status=task_status,
            ))

        try:
            host: PluginHost = await nursery.start(host_plugins)
        except (TransportError, ServerError, TooManyRequestsError) as exc:
            if startup_deadline is None or trio.current_time() < startup_deadline:
                raise
            raise _StartupError(f"no answer from the API server within --startup-timeout {args.startup_timeout:g}s: "
                                f"{describe(exc)}") from exc
        for err in host.errors:
            print(f"skipped: {err}", flush=True)
        if host.examples_applied:
            print(f"applied {counted(host.examples_applied, 'example object')}", flush=True)
        if kubeconfig is not None:
            hint = _hint(host, kubeconfig)
            if hint:
                print(hint, flush=True)
        _print_addresses(obs)
        if host.webhook_server is not None:
            if obs is not None and obs.live is not None:
                obs.live.add_info(host.webhook_server.summary)
                obs.live.add_notices(host.webhook_server.problems)
            registered = " (registered with the API server)" if host.webhooks_registered else ""
            print(f"webhooks on {host.webhook_server.url}{registered}", flush=True)
            rotator = host.cert_rotator
            if rotator is not None:
                issued = "issued into" if rotator.issued else "read from"
                bundles = (f"its CA written into {counted(rotator.injected, 'caBundle')}" if rotator.injected
                           else "the caBundles already held its CA")
                print(f"webhook certificate for {rotator.hosts[0]} {issued} Secret {rotator.namespace}/{rotator.secret}"
                      f"; {bundles}", flush=True)
        print("running; press Ctrl-C to stop", flush=True)
    return reports[0]


def _hint(host: PluginHost, kubeconfig: Path) -> str | None:
    """A kubectl command listing what the running plugins manage: their custom resources, or
    for plugins without CRDs the resources they watch."""
    names: list[str] = []
    for plugin in host.plugins:
        names.extend(crd["spec"]["names"]["plural"] for crd in plugin.crds)
    if not names:
        names.extend(informer.resource.plural for informer in host.cluster.informers)
    names = list(dict.fromkeys(names))
    if not names:
        return None
    return f"try: kubectl --kubeconfig {kubeconfig} get {','.join(names)} -A"


def _stopped(report: ShutdownReport) -> str:
    parts = [f"runs drained in {report.drain_seconds:.1f} s"]
    if report.cancelled_runs:
        parts.append(f"{report.cancelled_runs} cancelled at the end of the grace period")
    parts.append("events flushed" if report.events_flushed else "events not all flushed")
    forced = "; forced" if report.forced else ""
    return f"stopped ({report.reason}{forced}): " + ", ".join(parts)


class _RingShare:
    """On a terminal, a line each time this replica's share of the ring's keys changed (the
    logs, at warning there, do not show the ring's info lines)."""

    def __init__(self, ring: Any, out: Any) -> None:
        self._ring = ring
        self._out = out
        self._shown: str | None = None

    def __call__(self) -> None:
        (line,) = _ring_notice(self._ring)
        if line != self._shown:
            self._shown = line
            print(line, file=self._out, flush=True)


def _ring_notice(ring: Any) -> list[str]:
    stats = ring.statistics()
    return [
        f"scale-out ring {stats.ring}: {len(stats.members)} member(s); this replica ({stats.member}) owns "
        f"{stats.owned.share:.1%} of the keys in {len(stats.owned.ranges)} range(s)"
    ]


def default_lease_name(plugins: list[str], shard: str | None = None) -> str:
    """The leader-election Lease name ``run`` uses without ``--leader-election-id``:
    ``engine-<plugins, sorted>[-<shard>]``; ``manifests`` names its objects the same way."""
    return "-".join(["engine", *sorted(plugins), *([shard] if shard else [])])


def _observability(manager: Manager, args: argparse.Namespace) -> Observability | None:
    if all(address == "0" for _, address in _addresses(args)):
        return None
    from ..observability import Observability

    return Observability(
        manager,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        live_bind_address=args.live_bind_address,
        live_token=args.live_token or os.environ.get(TOKEN_ENV) or None,
    )


def _print_addresses(obs: Observability | None) -> None:
    """Print where the endpoints listen. A live token the user gave is never printed; one
    the stream made up (no ``--live-token``) is, in the URLs, since nobody else knows it."""
    if obs is None:
        return
    for what, address in (("metrics", obs.metrics_address), ("health probes", obs.health_probe_address)):
        if address is not None:
            print(f"{what} on http://{address[0]}:{address[1]}", flush=True)
    live = obs.live
    if live is None or live.url is None or live.dashboard_url is None:
        return
    if live.token_generated:
        print(f"live stream on {live.url} (python -m engine live {live.url} --token {live.token})", flush=True)
        print(f"dashboard at {live.dashboard_url}?token={live.token}", flush=True)
    else:
        print(f"live stream on {live.url} (python -m engine live {live.url} --token <the live token>)", flush=True)
        print(f"dashboard at {live.dashboard_url} (add ?token=<the live token>)", flush=True)


def _progress_enabled(args: argparse.Namespace) -> bool:
    choice = args.progress
    if choice == "auto":
        choice = os.environ.get(PROGRESS_ENV, "auto")
    if choice == "always":
        return True
    if choice == "never":
        return False
    return sys.stdout.isatty()


def _fatal(text: str, error: BaseException | None, *, json_logs: bool) -> None:
    """Say why the run ends, in the format of the logs on stderr: a JSON record (level
    ``error``, the traceback of ``error`` as its ``stacktrace``) among JSON logs, else the
    traceback and one ``error:`` line."""
    if json_logs:
        logging.getLogger("engine.cli").error(text, exc_info=error)
        return
    if error is not None:
        traceback.print_exception(error, file=sys.stderr)
    print(f"error: {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """Run the ``run`` command; returns the exit code (see the description above)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        _check(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    progress = _progress_enabled(args)
    level = args.log_level or ("warning" if progress else "info")
    handler = configure_logging(level.upper(), json_lines=None if args.log_format is None else args.log_format == "json")
    json_logs = isinstance(handler.formatter, JSONFormatter)
    debug = level == "debug"
    if not debug:
        # stdout already says where the embedded server listens
        logging.getLogger("engine.apiserver.server").setLevel(logging.WARNING)
    end_tracing = configure_tracing(os.environ)
    try:
        return trio.run(_run, args, progress)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        cause = first_cause(exc)
        hint = ""
        if not debug and not isinstance(cause, (_UsageError, _StartupError, EngineError, OSError)):
            hint = " (--log-level debug shows the traceback)"
        _fatal(f"{describe(cause)}{hint}", exc if debug else None, json_logs=json_logs)
        return 2 if isinstance(cause, _UsageError) else 1
    finally:
        if end_tracing is not None:
            end_tracing()
