"""HTTP/1.1 on trio and h11: one server for the observability endpoints and the embedded API server.

:func:`serve_http` serves one connection over any :class:`trio.abc.Stream` (TCP, TLS or in
memory). Requests are read whole; a response is either a byte string (sent with
``Content-Length``, keep-alive) or an async iterator of chunks (sent chunked with
``Connection: close``, while a second task watches for the client going away).
:class:`HTTPServer` routes paths to handlers on one TCP address (``/metrics``, the probes).
:func:`parse_bind_address` reads controller-runtime's bind addresses (``":8080"``,
``"127.0.0.1:8080"``, ``"0"`` to disable).
"""

from __future__ import annotations

import http
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import attrs
import h11
import trio

from ._errors import EngineError

__all__ = [
    "PrefixedStream",
    "read_request_head",
    "is_websocket_upgrade",
    "Request",
    "Response",
    "AbortStream",
    "Handler",
    "serve_http",
    "API_SERVER_MAX_HEADER_BYTES",
    "HTTPServer",
    "parse_bind_address",
    "BindAddress",
    "open_listeners",
]

logger = logging.getLogger("engine.http")

BindAddress = tuple[str, int]

_MAX_HEADER_BYTES = 16 * 1024
API_SERVER_MAX_HEADER_BYTES = 1024 * 1024
"""How long a request head to the embedded API server may be: Go's ``http.Server`` default,
which kube-apiserver keeps (a scale-out replica's ``shardSelector`` can run to tens of
kilobytes). Other servers keep 16 KiB."""
_MAX_BODY = 64 * 1024 * 1024


def parse_bind_address(address: str) -> BindAddress | None:
    """Parse a controller-runtime style bind address; ``None`` means disabled.

    ``"0"`` disables the server. ``":8080"`` or ``"8080"`` bind **loopback only**
    (``127.0.0.1``), unlike controller-runtime which binds every interface: say
    ``"0.0.0.0:8080"`` (or ``"[::]:8080"``) to be reachable from outside the pod or host. Port
    0 asks for an ephemeral port; the server reports the bound one.
    """
    text = address.strip()
    if text == "0":
        return None
    error = ValueError(f"bind address must be 'host:port', ':port' or '0' to disable, got {address!r}")
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep or not host:
            raise error
    elif text.count(":") > 1:
        raise error
    else:
        host, _, port_text = text.rpartition(":")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise error
    return (host or "127.0.0.1", int(port_text))


@attrs.frozen
class Request:
    """One HTTP request, read completely."""

    method: str
    """Upper-case method, such as ``"GET"``."""
    path: str
    """The percent-decoded path, without the query string."""
    query: dict[str, str]
    """Query parameters; the last value wins when a name repeats; a bare ``?verbose`` gives
    ``{"verbose": ""}``."""
    query_values: dict[str, list[str]]
    """Every value of each query parameter, in order."""
    headers: dict[str, str]
    """Header names in lower case; repeated headers are joined with ``", "``."""
    body: bytes = b""
    """The request body."""
    identity: str | None = None
    """The authenticated client (the common name of its TLS certificate), if any."""

    @property
    def user_agent(self) -> str:
        """The ``User-Agent`` header, or ``""``."""
        return self.headers.get("user-agent", "")


@attrs.define
class Response:
    """What a handler answers: a whole body, or a stream of chunks."""

    status: int
    headers: list[tuple[str, str]] = attrs.Factory(list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    @classmethod
    def text(cls, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> Response:
        """A whole-body response of ``content_type``."""
        return cls(status, [("content-type", content_type)], body)


class AbortStream(EngineError):
    """Raised by a response stream to drop the connection without finishing the response."""


Handler = Callable[[Request], Awaitable[Response]]


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


@attrs.frozen
class _Timeouts:
    idle: float | None
    header: float | None
    read: float | None

    def deadline(self, begun: float, *, head_read: bool) -> float:
        """When the request begun at ``begun`` must be in (its head, or the whole of it)."""
        limits = [self.read] if head_read else [self.header, self.read]
        return begun + min((limit for limit in limits if limit is not None), default=float("inf"))


async def _read_request(
    conn: h11.Connection, stream: trio.abc.Stream, identity: str | None, max_body: int,
    timeouts: _Timeouts, scope: trio.CancelScope, opened: float | None,
) -> Request | None:
    """Read one request under ``scope``, whose deadline follows ``timeouts``: the wait for its
    first byte by ``idle``; its head and its whole by ``header`` and ``read`` from that byte, or
    from ``opened`` (a new connection's start) for a connection's first request."""
    head: h11.Request | None = None
    body = bytearray()
    waiting_since = trio.current_time()
    arrived = bool(conn.trailing_data[0])
    begun = opened if opened is not None else waiting_since if arrived else None

    def follow_timeouts() -> None:
        limit = float("inf") if begun is None else timeouts.deadline(begun, head_read=head is not None)
        if not arrived and timeouts.idle is not None:
            limit = min(limit, waiting_since + timeouts.idle)
        scope.deadline = limit

    follow_timeouts()
    while True:
        event: Any = conn.next_event()
        if event is h11.NEED_DATA:
            if conn.they_are_waiting_for_100_continue:
                await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            data = bytes(await stream.receive_some(65536))
            if data and not arrived:
                arrived = True
                begun = trio.current_time() if begun is None else begun
                follow_timeouts()
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
            follow_timeouts()
            length = next((int(value) for name, value in event.headers if name == b"content-length"), 0)
            if length > max_body:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = head.target.decode("latin-1")
            raw_path, _, raw_query = target.partition("?")
            pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True)
            values: dict[str, list[str]] = {}
            for name, value in pairs:
                values.setdefault(name, []).append(value)
            headers: dict[str, str] = {}
            for raw_name, raw_value in head.headers:
                key = raw_name.decode("latin-1").lower()
                text = raw_value.decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            return Request(
                method=head.method.decode("ascii").upper(),
                path=urllib.parse.unquote(raw_path) or "/",
                query=dict(pairs),
                query_values=values,
                headers=headers,
                body=bytes(body),
                identity=identity,
            )
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # pragma: no cover - h11 yields nothing else for a server
            raise h11.RemoteProtocolError(f"unexpected event {type(event).__name__}")


async def _send_streaming(conn: h11.Connection, stream: trio.abc.Stream, response: Response) -> None:
    assert response.stream is not None
    chunks = response.stream
    async with trio.open_nursery() as nursery:

        async def wait_for_eof() -> None:
            try:
                while await stream.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel(reason="client closed the connection")

        nursery.start_soon(wait_for_eof)
        try:
            async for chunk in chunks:
                if chunk:
                    await stream.send_all(conn.send(h11.Data(data=chunk)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
        except (AbortStream, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
            nursery.cancel_scope.cancel()


async def serve_http(
    stream: trio.abc.Stream,
    handler: Handler,
    *,
    identity: str | None = None,
    idle_timeout: float | None = None,
    header_timeout: float | None = None,
    read_timeout: float | None = None,
    max_body: int = _MAX_BODY,
    max_header: int = _MAX_HEADER_BYTES,
) -> None:
    """Serve HTTP/1.1 requests on ``stream`` until the client closes it; then close it.

    ``identity`` is passed on in each :class:`Request`. The connection is closed without an
    answer (as Go's ``net/http`` closes it) when a kept-alive connection waits longer than
    ``idle_timeout`` seconds for the first byte of its next request, when a request's head
    takes longer than ``header_timeout``, or the whole request (head and body) longer than
    ``read_timeout``; both counted from that first byte, or from the start of the connection
    for its first request. ``None`` leaves that wait unbounded. A request body larger
    than ``max_body`` bytes is answered ``413`` (at once when its ``Content-Length`` says so), a request head larger than ``max_header`` bytes
    (16 KiB by default) ``431``. Other protocol errors answer ``400`` (when a
    response can still be sent) and close the connection; a client that goes away
    mid-response is not an error. Exceptions from ``handler`` propagate (after the stream is
    closed).

    Cancellation: the stream is closed forcefully and ``Cancelled`` propagates; the handler's
    own work is cancelled with it.
    """
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header)
    timeouts = _Timeouts(idle_timeout, header_timeout, read_timeout)
    opened: float | None = trio.current_time()
    try:
        while True:
            try:
                with trio.CancelScope() as waiting:
                    request = await _read_request(conn, stream, identity, max_body, timeouts, waiting, opened)
                opened = None
                if waiting.cancelled_caught:
                    return
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    body = f"malformed HTTP request: {exc}".encode()
                    await stream.send_all(conn.send(h11.Response(
                        status_code=exc.error_status_hint,
                        headers=[("content-type", "text/plain"), ("content-length", str(len(body))),
                                 ("connection", "close")],
                        reason=_reason(exc.error_status_hint),
                    )))
                    await stream.send_all(conn.send(h11.Data(data=body)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                return
            if request is None:
                return
            response = await handler(request)
            headers = list(response.headers)
            if response.stream is None:
                headers.append(("content-length", str(len(response.body))))
            else:
                headers.append(("connection", "close"))
                headers.append(("transfer-encoding", "chunked"))
            head = conn.send(h11.Response(status_code=response.status, headers=headers, reason=_reason(response.status)))
            if response.stream is None:
                # Head, body and end in one write, as Go's net/http sends a small answer: a
                # client reads the whole answer at once.
                parts = [head or b""]
                try:
                    if response.body and request.method != "HEAD":
                        parts.append(conn.send(h11.Data(data=response.body)) or b"")
                    parts.append(conn.send(h11.EndOfMessage()) or b"")
                finally:
                    await stream.send_all(b"".join(parts))
            else:
                await stream.send_all(head or b"")
                await _send_streaming(conn, stream, response)
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        logger.debug("connection ended: %s", exc)
    except h11.LocalProtocolError as exc:  # pragma: no cover - a bug in a handler
        logger.warning("protocol error while answering: %s", exc)
    finally:
        await trio.aclose_forcefully(stream)


async def open_listeners(what: str, host: str, port: int) -> tuple[list[trio.SocketListener], BindAddress]:
    """Open listening sockets for ``what``; returns them and the bound ``(host, port)``.

    Raises ``OSError`` naming ``what`` and the address. If cancelled, nothing is left open.
    """
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen for {what} on {host}:{port}: {exc.strerror}") from exc
    sockname = listeners[0].socket.getsockname()
    return listeners, (str(sockname[0]), int(sockname[1]))


class PrefixedStream(trio.abc.Stream):
    """``stream`` with ``prefix`` (bytes already read from it) put back in front.

    Lets one listener serve plain HTTP and websockets: the request head is read, looked at,
    and the stream handed on as if nothing had been read. ``repr`` is the peer's address.
    """

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix
        try:
            host, port, *_ = stream.socket.getpeername()
            self._peer = f"{host}:{port}"
        except (OSError, ValueError):
            self._peer = "unknown"

    def __repr__(self) -> str:
        return self._peer

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            if max_bytes is None:
                max_bytes = len(self._prefix)
            data, self._prefix = self._prefix[:max_bytes], self._prefix[max_bytes:]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def read_request_head(stream: trio.abc.Stream, *, limit: int = _MAX_HEADER_BYTES) -> bytes | None:
    """Read from ``stream`` until the end of an HTTP request head (``\\r\\n\\r\\n``).

    Returns everything read (the head and whatever followed it in the same reads), or ``None``
    if the peer closed first or the head exceeds ``limit`` bytes.

    Cancellation: what was read is lost; the caller closes the stream.
    """
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > limit:
            return None
        chunk = bytes(await stream.receive_some(4096))
        if not chunk:
            return None
        data += chunk
    return data


def is_websocket_upgrade(head: bytes) -> bool:
    """Whether a request head asks for ``Upgrade: websocket``."""
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


class HTTPServer:
    """Serves ``routes`` (path -> handler) with :func:`serve_http` on one TCP address.

    A path ending in ``/`` in ``routes`` also serves every path under it (``/readyz/`` serves
    ``/readyz/informers``). Only ``GET`` and ``HEAD``: unknown paths get 404, other methods
    405, malformed requests 400, bodies over 64 KiB 413; a handler that raises gives 500
    (logged). Every response says ``Cache-Control: no-store``; a connection is closed after
    30 s without a request, or when a request takes longer than 30 s to arrive.
    """

    idle_timeout = 30.0
    max_body = 64 * 1024

    def __init__(self, routes: Mapping[str, Handler], *, name: str = "http") -> None:
        self._routes = dict(routes)
        self.name = name
        self.address: BindAddress | None = None
        """The bound ``(host, port)``, once :meth:`serve` started."""

    async def bind(self, host: str, port: int) -> list[trio.SocketListener]:
        """Open the listening sockets and set :attr:`address`; raises ``OSError`` naming it.

        If cancelled, nothing is left open.
        """
        listeners, self.address = await open_listeners(f"the {self.name} server", host, port)
        return listeners

    async def serve(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[BindAddress] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve on ``listeners`` (from :meth:`bind`) until cancelled.

        ``task_status.started`` receives the bound address. Cancellation closes the listeners
        and every open connection (responses in progress are cut).
        """
        assert self.address is not None
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(trio.serve_listeners, self.handle_connection, listeners))
            logger.info("%s server listening", self.name, extra={"address": f"{self.address[0]}:{self.address[1]}"})
            task_status.started(self.address)

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """Serve requests on one accepted connection until it closes or idles; closes it.

        Cancellation: the connection is closed (a response in progress is cut).
        """
        await serve_http(stream, self._dispatch, idle_timeout=self.idle_timeout, read_timeout=self.idle_timeout,
                         max_body=self.max_body)

    async def _dispatch(self, request: Request) -> Response:
        response = await self._route(request)
        response.headers.append(("cache-control", "no-store"))
        return response

    async def _route(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            for prefix, candidate in self._routes.items():
                if prefix.endswith("/") and request.path.startswith(prefix):
                    handler = candidate
                    break
        if handler is None:
            return Response.text(404, b"not found\n")
        if request.method not in ("GET", "HEAD"):
            return Response.text(405, b"method not allowed\n")
        try:
            return await handler(request)
        except trio.Cancelled:
            raise
        except Exception:
            logger.exception("%s handler for %s failed", self.name, request.path)
            return Response.text(500, b"internal error\n")
