"""``python -m engine run``: run plugins against a cluster from a kubeconfig, or embedded.

Flags follow controller-runtime based managers (``--kubeconfig``, ``--leader-elect``,
``--metrics-bind-address``, ``--health-probe-bind-address``...). ``--embedded`` starts the
embedded API server, installs the plugins' CRDs, applies their example manifests, writes a
kubeconfig for ``kubectl``, and runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import yaml

from .._logging import configure_logging
from .._manager import Manager, ShutdownReport
from .._sinks import WebhookSink

if TYPE_CHECKING:
    from ..kube import PluginHost
    from ..observability import Observability

__all__ = ["main"]

logger = logging.getLogger("engine.runner")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_argument_group("cluster")
    target.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
    target.add_argument("--context", help="kubeconfig context to use (default: current-context)")
    target.add_argument("--embedded", action="store_true", help="start the embedded API server and run against it")
    target.add_argument("--apiserver-port", type=int, default=0, help="--embedded: API server port (default: a free one)")
    target.add_argument("--write-kubeconfig", metavar="PATH", default=None,
                        help="--embedded: where to write the kubeconfig (default: ./embedded.kubeconfig)")
    target.add_argument("--no-examples", action="store_true", help="--embedded: do not apply the plugins' example manifests")
    run = p.add_argument_group("controllers")
    run.add_argument("--plugin", action="append", default=[], metavar="NAME|module:attr",
                     help="a plugin to run (repeatable): a bundled name, an entry point, or module:attr")
    run.add_argument("--plugin-config", metavar="FILE", help="YAML mapping of plugin name to its configuration")
    run.add_argument("--strict-plugins", action="store_true", help="exit if any plugin fails to load or set up")
    run.add_argument("--skip-crd-install", action="store_true", help="only check that the plugins' CRDs exist")
    run.add_argument("--namespace", help="watch only this namespace (default: all)")
    run.add_argument("--shard", help="watch only objects labelled sharding.engine.dev/key=SHARD")
    run.add_argument("--watch-label-selector", help="watch only objects matching this label selector")
    run.add_argument("--grace-period", type=float, default=30.0, help="graceful shutdown timeout in seconds (default 30)")
    run.add_argument("--event-webhook", metavar="URL", help="also POST every event to this URL")
    run.add_argument("--no-cluster-events", action="store_true", help="do not record events in the cluster")
    le = p.add_argument_group("leader election")
    le.add_argument("--leader-elect", action="store_true", help="run only while holding a coordination.k8s.io Lease")
    le.add_argument("--leader-election-id", help="the Lease name (default: engine-<plugins>[-<shard>])")
    le.add_argument("--leader-election-namespace", help="the Lease namespace (default: the kubeconfig's namespace)")
    le.add_argument("--leader-elect-lease-duration", type=float, default=15.0)
    le.add_argument("--leader-elect-renew-deadline", type=float, default=10.0)
    le.add_argument("--leader-elect-retry-period", type=float, default=2.0)
    ops = p.add_argument_group("operations")
    ops.add_argument("--metrics-bind-address", default="0", help='metrics address, e.g. ":8080"; "0" disables (default)')
    ops.add_argument("--health-probe-bind-address", default="0", help='probes address, e.g. ":8081"; "0" disables (default)')
    ops.add_argument("--live-bind-address", default="0", help='live run stream address; "0" disables (default)')
    ops.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    ops.add_argument("--log-format", choices=["json", "text"], help="default: json unless stderr is a terminal")
    return p


def _plugin_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    data = yaml.safe_load(Path(path).read_text())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the plugin configuration must be a mapping of plugin name to settings")
    return data


async def _run(args: argparse.Namespace) -> int:
    """Start-up and run under one signal handler: a signal during start-up ends it cleanly,
    once running the first signal is a graceful shutdown and the second forces it."""
    box: list[Manager] = []
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
                        box[0].force_stop(f"second signal ({name})")

            async def main() -> None:
                nonlocal code
                code = await _start_and_run(args, box)
                nursery.cancel_scope.cancel()

            nursery.start_soon(forward)
            nursery.start_soon(main)
    return code


async def _start_and_run(args: argparse.Namespace, box: list[Manager]) -> int:
    from ..kube import Client, Config, ConfigError, PluginError, load_plugins, run_plugins

    plugins, errors = load_plugins(args.plugin, strict=False)
    if errors and args.strict_plugins:
        print(f"error: {errors[0]}", file=sys.stderr)
        return 1
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    if not plugins:
        print("error: no plugin to run (give --plugin NAME, e.g. --plugin bundles)", file=sys.stderr)
        return 1
    try:
        plugin_config = _plugin_config(args.plugin_config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    async with contextlib.AsyncExitStack() as stack:
        if args.embedded:
            from ..testing import ApiServer

            api = await stack.enter_async_context(ApiServer(port=args.apiserver_port))
            kubeconfig = Path(args.write_kubeconfig or "embedded.kubeconfig").resolve()
            api.write_kubeconfig(kubeconfig)
            print(f"embedded API server listening on {api.url}", flush=True)
            print(f"kubeconfig written to {kubeconfig}", flush=True)
            print(f"try: kubectl --kubeconfig {kubeconfig} get bundles -A -w", flush=True)
            config = Config.from_kubeconfig(kubeconfig)
        else:
            try:
                if args.kubeconfig or args.context or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
                    config = Config.from_kubeconfig(args.kubeconfig, context=args.context)
                else:
                    config = Config.incluster()
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
        identity = f"{socket.gethostname()}_{os.getpid()}"
        client = await stack.enter_async_context(Client(config, user_agent=f"engine-runner/{identity}"))

        leader = None
        if args.leader_elect:
            from ..kube import LeaderElector

            lease_name = args.leader_election_id or "-".join(["engine", *sorted(p.name for p in plugins)]
                                                               + ([args.shard] if args.shard else []))
            leader = LeaderElector(
                client,
                name=lease_name,
                namespace=args.leader_election_namespace or config.namespace or "default",
                identity=identity,
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period,
            )
        manager = Manager(grace_period=args.grace_period, leader_election=leader, handle_signals=False)
        if not args.no_cluster_events:
            from ..kube import KubernetesEventSink

            manager.add_sink(KubernetesEventSink(client, reporting_controller="engine", reporting_instance=identity))
        if args.event_webhook:
            manager.add_sink(WebhookSink(args.event_webhook))
        obs = _observability(manager, args)

        async def starting(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            box.append(manager)
            if leader is not None:
                print("waiting for leadership", flush=True)
            task_status.started()

        manager.add_service(starting)
        async with trio.open_nursery() as nursery:
            reports: list[ShutdownReport] = []

            async def host_plugins(*, task_status: trio.TaskStatus[PluginHost] = trio.TASK_STATUS_IGNORED) -> None:
                reports.append(await run_plugins(
                    client, plugins, manager=manager, config=plugin_config, namespace=args.namespace,
                    shard=args.shard, label_selector=args.watch_label_selector, install=not args.skip_crd_install,
                    strict=args.strict_plugins, apply_examples=args.embedded and not args.no_examples,
                    observability=obs, task_status=task_status,
                ))

            try:
                host: PluginHost = await nursery.start(host_plugins)
            except PluginError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            for err in host.errors:
                print(f"error: {err}", file=sys.stderr)
            if host.examples_applied:
                print(f"applied {host.examples_applied} example objects", flush=True)
            _print_addresses(obs)
            print("running; press Ctrl-C to stop", flush=True)
        report = reports[0]
        if obs is not None:
            obs.record_shutdown(report)
    if manager.leadership_lost:
        logger.error("exiting: leadership lost (%s)", manager.leadership_lost)
        return 1
    return 130 if report.forced else 0


def _observability(manager: Manager, args: argparse.Namespace) -> Observability | None:
    if args.metrics_bind_address == "0" and args.health_probe_bind_address == "0" and args.live_bind_address == "0":
        return None
    from ..observability import Observability

    return Observability(
        manager,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        live_bind_address=args.live_bind_address,
    )


def _print_addresses(obs: Observability | None) -> None:
    if obs is None:
        return
    for what, address in (("metrics", obs.metrics_address), ("health probes", obs.health_probe_address)):
        if address is not None:
            print(f"{what} on http://{address[0]}:{address[1]}", flush=True)
    if obs.live_url is not None:
        print(f"live stream on {obs.live_url} (python -m engine live {obs.live_url})", flush=True)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.embedded and (args.kubeconfig or args.context):
        print("error: --embedded and --kubeconfig/--context are exclusive", file=sys.stderr)
        return 2
    configure_logging(args.log_level.upper(), json_lines=None if args.log_format is None else args.log_format == "json")
    if args.log_level != "debug":
        for noisy in ("httpx", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return trio.run(_run, args)
    except KeyboardInterrupt:
        return 130
