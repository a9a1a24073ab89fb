"""The webhook server: HTTPS with the project's HTTP server, its certificates, an in-process transport.

:class:`WebhookServer` serves a :class:`WebhookDispatcher` with
:func:`~engine._http.serve_http` over a :class:`trio.SSLStream` on one address
(controller-runtime's port 9443, loopback unless told otherwise). Its certificate comes from a
directory holding ``tls.crt`` and ``tls.key`` (cert-manager's Secret layout), re-read when the
files change, or from a CA and certificate it makes itself (:meth:`WebhookCertificates.generate`),
whose CA is the ``caBundle`` of the configurations it registers. :meth:`WebhookServer.transport`
answers an API server in the same process without sockets.
"""

from __future__ import annotations

import logging
import ssl
import urllib.parse
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import trio

from ..._http import BindAddress, Request, Response, open_listeners, serve_http
from ..._tracing import global_provider, served_span
from .._client._errors import KubeError
from ._review import Webhook, WebhookDispatcher

if TYPE_CHECKING:
    from .._client._client import Client
    from .._runtime._cluster import Cluster

__all__ = ["WebhookCertificates", "WebhookError", "WebhookServer", "WebhookTransport", "MAX_REVIEW_BYTES",
           "DEFAULT_WEBHOOK_PORT"]

logger = logging.getLogger("engine.kube.webhooks")

DEFAULT_WEBHOOK_PORT = 9443
"""controller-runtime's webhook port."""
MAX_REVIEW_BYTES = 7 * 1024 * 1024
"""The largest request body answered: two objects of the API server's 3 MiB limit and the
review around them. Larger bodies get 413."""


class WebhookError(KubeError):
    """The webhook server cannot start: its certificate cannot be read, its address not bound."""


def server_context() -> ssl.SSLContext:
    """TLS 1.2 or later, HTTP/1.1 offered by ALPN (the API server speaks HTTP/2 only when asked)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


def load_server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A :func:`server_context` holding the certificate chain and key read from these files."""
    context = server_context()
    context.load_cert_chain(cert, key)
    return context


def _fingerprint(paths: Sequence[Path]) -> tuple[tuple[int, int, int], ...]:
    found = []
    for path in paths:
        stat = path.stat()
        found.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(found)


@attrs.define(eq=False)
class WebhookCertificates:
    """The server's TLS context, from files (re-read when they change) or generated."""

    context: ssl.SSLContext
    """The context new connections use."""
    ca_bundle: bytes | None = None
    """PEM of the CA that signed the certificate, when known (generated, or ``ca.crt`` in the
    directory): the ``caBundle`` of the configurations."""
    directory: Path | None = None
    reloads: int = 0
    """How many times changed files were loaded."""
    _seen: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def from_dir(cls, directory: str | Path) -> WebhookCertificates:
        """Load ``tls.crt`` and ``tls.key`` from ``directory`` (and ``ca.crt`` if present); raises
        :class:`WebhookError` in one line naming the file and the reason."""
        path = Path(directory)
        cert, key = path / "tls.crt", path / "tls.key"
        try:
            seen = _fingerprint([cert, key])
            context = load_server_context(cert, key)
            ca = (path / "ca.crt").read_bytes() if (path / "ca.crt").exists() else None
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise WebhookError(f"cannot read the webhook certificate {cert} and key {key}: {reason}") from None
        return cls(context, ca, path, seen=seen)

    @classmethod
    def generate(cls, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> WebhookCertificates:
        """A new CA (kept only in memory) and a certificate for ``hosts`` signed by it."""
        import trustme

        ca = trustme.CA(organization_name="engine webhooks")
        server = ca.issue_cert(*hosts)
        context = server_context()
        server.configure_cert(context)
        return cls(context, ca.cert_pem.bytes())

    async def reload_if_changed(self) -> bool:
        """Load the files again if they changed since last loaded; whether they were. A file
        that cannot be read (as while cert-manager swaps them) keeps the current context and
        is logged. Cancellation: a checkpoint; nothing changes if cancelled."""
        if self.directory is None:
            await trio.lowlevel.checkpoint()
            return False
        await trio.lowlevel.checkpoint()
        cert, key = self.directory / "tls.crt", self.directory / "tls.key"
        try:
            seen = _fingerprint([cert, key])
            if seen == self._seen:
                return False
            context = load_server_context(cert, key)
        except (OSError, ssl.SSLError) as exc:
            logger.error("cannot reload the webhook certificate from %s: %s", self.directory, exc)
            return False
        self.context, self._seen = context, seen
        self.reloads += 1
        logger.info("webhook certificate reloaded from %s", self.directory)
        return True

    async def watch(self, interval: float = 10.0) -> None:
        """Re-read the files every ``interval`` seconds until cancelled (controller-runtime's
        certificate watcher polls as well).

        Cancellation: the only way it ends; the context in use stays as it is."""
        while True:
            await trio.sleep(interval)
            await self.reload_if_changed()


class WebhookTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` transport that hands each request to a webhook server in the same process:
    no sockets, no TLS, trio's clock. The URL's scheme, host and port are ignored; the path
    selects the webhook. Bodies over the server's limit get 413, as over HTTPS."""

    def __init__(self, server: WebhookServer) -> None:
        self._server = server
        self.requests = 0
        """Requests answered."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request``. Cancellation: the handler is cancelled and ``Cancelled`` propagates."""
        body = await request.aread()
        self.requests += 1
        if len(body) > self._server.max_body:
            return httpx.Response(413, text="request body too large")
        query = urllib.parse.parse_qsl(request.url.query.decode(), keep_blank_values=True)
        values: dict[str, list[str]] = {}
        for name, value in query:
            values.setdefault(name, []).append(value)
        answer = await self._server._handle(Request(
            method=request.method.upper(), path=urllib.parse.unquote(request.url.path) or "/", query=dict(query),
            query_values=values, headers={k.lower(): v for k, v in request.headers.items()}, body=body,
        ))
        return httpx.Response(answer.status, headers=answer.headers, content=answer.body)


class WebhookServer:
    """Serves ``webhooks`` on ``host:port`` over HTTPS with ``certificates`` (generated for
    loopback when first needed, if not given). Handlers get ``cluster`` and ``client`` in their
    context. When OpenTelemetry's global tracer provider was set before the server was made,
    each call is a ``SERVER`` span under the caller's ``traceparent`` (see :mod:`engine._tracing`)."""

    idle_timeout = 90.0

    def __init__(
        self,
        webhooks: Sequence[Webhook],
        *,
        certificates: WebhookCertificates | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_WEBHOOK_PORT,
        cluster: Cluster | None = None,
        client: Client | None = None,
        max_body: int = MAX_REVIEW_BYTES,
        reload_interval: float = 10.0,
    ) -> None:
        self.dispatcher = WebhookDispatcher(webhooks, cluster=cluster, client=client)
        self._certificates = certificates
        self.host, self.port = host, port
        self.max_body = max_body
        self.reload_interval = reload_interval
        self.address: BindAddress | None = None
        """The bound ``(host, port)`` once serving."""
        self._tracer_provider = global_provider()

    @property
    def certificates(self) -> WebhookCertificates:
        """The server's certificates: those given, or a CA and certificate for loopback made
        the first time they are needed (never, when only :meth:`transport` is used)."""
        if self._certificates is None:
            self._certificates = WebhookCertificates.generate()
        return self._certificates

    @property
    def webhooks(self) -> list[Webhook]:
        """The webhooks served."""
        return list(self.dispatcher.webhooks.values())

    @property
    def url(self) -> str:
        """``https://host:port`` of the bound address (of the configured one before binding)."""
        host, port = self.address or (self.host, self.port)
        host = f"[{host}]" if ":" in host else host
        return f"https://{host}:{port}"

    def transport(self) -> WebhookTransport:
        """An in-process transport to this server (it need not be listening)."""
        return WebhookTransport(self)

    async def serve(self, *, task_status: trio.TaskStatus[BindAddress] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; ``task_status.started`` gets the bound address.
        Raises :class:`WebhookError` when the address cannot be bound.

        Cancellation: the listeners and every connection are closed (answers in progress are
        cut, their handlers cancelled).
        """
        try:
            listeners, self.address = await open_listeners("webhooks", self.host, self.port)
        except OSError as exc:
            raise WebhookError(str(exc.strerror or exc)) from None
        async with trio.open_nursery() as nursery:
            if self.certificates.directory is not None:
                nursery.start_soon(self.certificates.watch, self.reload_interval)
            await nursery.start(partial(trio.serve_listeners, self.handle_connection, listeners))
            logger.info("webhook server listening", extra={"address": f"{self.address[0]}:{self.address[1]}"})
            task_status.started(self.address)

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """TLS handshake with the current certificate, then HTTP/1.1 until the peer closes or
        idles; a failed handshake just closes. Cancellation: the connection is closed."""
        tls = trio.SSLStream(stream, self.certificates.context, server_side=True)
        await serve_http(tls, self._handle, idle_timeout=self.idle_timeout, read_timeout=self.idle_timeout,
                         max_body=self.max_body)

    async def _handle(self, request: Request) -> Response:
        provider = self._tracer_provider
        if provider is None:
            return await self.dispatcher.handle(request)
        with served_span(provider, request.method, request.path, request.headers) as span:
            response = await self.dispatcher.handle(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    def summary(self) -> list[str]:
        """One line per webhook with its counts, as the dashboard's header shows them
        (``webhook /validate/x.example.com: 12 requests, 3 denied, 0 errors, 0 timeouts``)."""
        lines = []
        for path, stats in self.dispatcher.items():
            total = sum(stats.requests.values())
            lines.append(f"webhook {path}: {total} request{'' if total == 1 else 's'}, {stats.denied} denied, "
                         f"{stats.errors} errors, {stats.timeouts} timeouts")
        return lines

    def problems(self) -> list[str]:
        """One line per webhook that failed to answer (errors or timeouts), as the dashboard's
        warnings show them (``webhook /validate/x.example.com failed 2 of 12 requests: 1 error,
        1 timeout``); denials are the webhook doing its job, not problems."""
        lines = []
        for path, stats in self.dispatcher.items():
            failed = stats.errors + stats.timeouts
            if failed:
                total = sum(stats.requests.values())
                lines.append(f"webhook {path} failed {failed} of {total} request{'' if total == 1 else 's'}: "
                             f"{stats.errors} error{'' if stats.errors == 1 else 's'}, "
                             f"{stats.timeouts} timeout{'' if stats.timeouts == 1 else 's'}")
        return lines

    def statistics(self) -> dict[str, Any]:
        """Per webhook path: requests by code, denials, errors, timeouts, in flight."""
        return {path: {"requests": dict(s.requests), "denied": s.denied, "errors": s.errors, "timeouts": s.timeouts,
                       "in_flight": s.in_flight} for path, s in self.dispatcher.items()}
