"""One entry point that turns on metrics, health probes and the live stream for a manager."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from prometheus_client import CollectorRegistry

from .._http import BindAddress, HTTPServer, Request, Response, parse_bind_address
from ._live import LiveStream
from ._metrics import EngineMetrics
from ._probes import Check, Probes

if TYPE_CHECKING:
    from .._manager import Manager, ShutdownReport

__all__ = ["Observability"]

logger = logging.getLogger("engine.observability")


class Observability:
    """Metrics (``/metrics``), probes (``/healthz``, ``/readyz``) and the live stream of a manager.

    Construct it before :meth:`Manager.run`; it registers a run observer, the queue observers,
    the event sink ``"live"`` and one service that serves the endpoints in the manager's
    services nursery (so they answer during start-up and until sinks are flushed at shutdown).

    Bind addresses take controller-runtime's form: ``"0"`` disables (the default for each),
    ``":8080"`` or ``"8080"`` binds **loopback** (``127.0.0.1``), ``"0.0.0.0:8080"`` every
    interface, port 0 an ephemeral port (read it back from :attr:`metrics_address` and friends
    once the manager started). When metrics and probes are given the same address (not port 0)
    they share one server. Metrics are collected whether or not they are served; read them
    from :attr:`registry`. ``live_token`` is what the live stream and dashboard require
    (``Authorization: Bearer <token>`` or ``?token=``); without it a random one is made
    (``obs.live.token``), so the stream never serves anyone without credentials. Metrics and
    probes carry no object data and are served without credentials, as controller-runtime
    serves them; bind them to loopback (the default for ``":port"``) or protect them in front.
    ``live_client_buffer`` is each live client's buffer, in
    messages (beyond it messages to that client are skipped and counted). ``process_metrics``
    adds prometheus-client's ``process_*`` and ``python_*`` collectors.

    Starting the endpoints is part of the manager's start-up: a bind error (port in use) makes
    :meth:`Manager.run` raise ``OSError`` naming the endpoint and address.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        metrics_bind_address: str = "0",
        health_probe_bind_address: str = "0",
        live_bind_address: str = "0",
        live_token: str | None = None,
        live_client_buffer: int = 256,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = True,
    ) -> None:
        self._metrics_bind = parse_bind_address(metrics_bind_address)
        self._probe_bind = parse_bind_address(health_probe_bind_address)
        self._live_bind = parse_bind_address(live_bind_address)
        self.manager = manager
        self.metrics = EngineMetrics(manager, registry=registry, process_metrics=process_metrics)
        self.probes = Probes(manager)
        self.live: LiveStream | None = None
        if self._live_bind is not None:
            self.live = LiveStream(manager, token=live_token, client_buffer=live_client_buffer)
            self.metrics.registry.register(self.live)
        self._metrics_server: HTTPServer | None = None
        self._probe_server: HTTPServer | None = None
        manager.add_service(self._serve)

    @property
    def registry(self) -> CollectorRegistry:
        """The manager's own Prometheus registry."""
        return self.metrics.registry

    def add_readiness_check(self, name: str, check: Check) -> None:
        """Add a named readiness check (``/readyz/<name>``); see :class:`Probes`."""
        self.probes.add_readiness_check(name, check)

    def add_health_check(self, name: str, check: Check) -> None:
        """Add a named liveness check (``/healthz/<name>``); see :class:`Probes`."""
        self.probes.add_health_check(name, check)

    def record_shutdown(self, report: ShutdownReport) -> None:
        """Record a finished shutdown (``engine_shutdown_drain_seconds``)."""
        self.metrics.record_shutdown(report.drain_seconds)

    @property
    def metrics_address(self) -> BindAddress | None:
        """Where ``/metrics`` is served, once the manager started; ``None`` if disabled."""
        return self._metrics_server.address if self._metrics_server is not None else None

    @property
    def health_probe_address(self) -> BindAddress | None:
        """Where ``/healthz`` and ``/readyz`` are served, once started; ``None`` if disabled."""
        return self._probe_server.address if self._probe_server is not None else None

    @property
    def live_address(self) -> BindAddress | None:
        """Where the live stream is served, once started; ``None`` if disabled."""
        return self.live.address if self.live is not None else None

    @property
    def live_url(self) -> str | None:
        """``ws://host:port/live`` once started, else ``None``."""
        return self.live.url if self.live is not None else None

    @property
    def dashboard_url(self) -> str | None:
        """``http://host:port/``, the live dashboard, once started, else ``None``."""
        return self.live.dashboard_url if self.live is not None else None

    async def _metrics(self, request: Request) -> Response:
        body, content_type = self.metrics.generate(request.headers.get("accept"))
        return Response.text(200, body, content_type)

    async def _serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every enabled endpoint, report started, and serve until cancelled."""
        metric_routes = {"/metrics": self._metrics}
        probe_routes = {
            "/healthz": self.probes.handler("healthz"),
            "/healthz/": self.probes.handler("healthz"),
            "/readyz": self.probes.handler("readyz"),
            "/readyz/": self.probes.handler("readyz"),
        }
        servers: list[tuple[HTTPServer | LiveStream, list[trio.SocketListener]]] = []
        shared = self._metrics_bind is not None and self._metrics_bind == self._probe_bind and self._metrics_bind[1] != 0
        try:
            if shared:
                assert self._metrics_bind is not None
                server = HTTPServer({**metric_routes, **probe_routes}, name="metrics and probes")
                self._metrics_server = self._probe_server = server
                servers.append((server, await server.bind(*self._metrics_bind)))
            else:
                if self._metrics_bind is not None:
                    self._metrics_server = HTTPServer(metric_routes, name="metrics")
                    servers.append((self._metrics_server, await self._metrics_server.bind(*self._metrics_bind)))
                if self._probe_bind is not None:
                    self._probe_server = HTTPServer(probe_routes, name="health probe")
                    servers.append((self._probe_server, await self._probe_server.bind(*self._probe_bind)))
            if self.live is not None and self._live_bind is not None:
                servers.append((self.live, await self.live.bind(*self._live_bind)))
        except BaseException:
            with trio.CancelScope(shield=True):
                for _, listeners in servers:
                    for listener in listeners:
                        await listener.aclose()
            raise
        async with trio.open_nursery() as nursery:
            for endpoint, listeners in servers:
                await nursery.start(endpoint.serve, listeners)
            task_status.started()
