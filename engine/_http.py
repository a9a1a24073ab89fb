"""A small HTTP/1.1 server on trio and h11, for ``/metrics`` and the health probes.

Only ``GET`` and ``HEAD``, no request bodies, keep-alive per h11; each route is an async
function of a :class:`Request` returning a :class:`Response`. Also parses bind addresses in
controller-runtime's form (``":8080"``, ``"127.0.0.1:8080"``, ``"0"`` to disable).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from urllib.parse import parse_qs, urlsplit

import attrs
import h11
import trio

__all__ = [
    "Request", "Response", "HTTPServer", "parse_bind_address", "BindAddress", "open_listeners",
    "PrefixedStream", "read_request_head", "is_websocket_upgrade",
]

logger = logging.getLogger("engine.http")

BindAddress = tuple[str, int]

_MAX_HEADER_BYTES = 16 * 1024
_IDLE_TIMEOUT = 30.0
_REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found", 405: b"Method Not Allowed",
            500: b"Internal Server Error", 503: b"Service Unavailable"}


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
    """One parsed request."""

    method: str
    path: str
    """The path without the query string."""
    query: Mapping[str, list[str]]
    """Query parameters; a bare ``?verbose`` gives ``{"verbose": [""]}``."""
    headers: Mapping[str, str]
    """Header names lower-cased; repeated headers joined with ``", "``."""


@attrs.frozen
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[Request], Awaitable[Response]]


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


class HTTPServer:
    """Serves ``routes`` (path -> handler) on one TCP address.

    A path ending in ``/`` in ``routes`` also serves every path under it (``/readyz/`` serves
    ``/readyz/informers``). Unknown paths get 404, other methods 405, malformed requests 400;
    a handler that raises gives 500 (logged).
    """

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

        Cancellation closes the connection (a response in progress is cut).
        """
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEADER_BYTES)
        try:
            while True:
                with trio.move_on_after(_IDLE_TIMEOUT) as idle:
                    request = await self._read_request(conn, stream)
                if idle.cancelled_caught or request is None:
                    return
                if isinstance(request, Response):
                    await self._send(conn, stream, request, head=False)
                    return
                response = await self._dispatch(request)
                await self._send(conn, stream, response, head=request.method == "HEAD")
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()

    async def _read_request(self, conn: h11.Connection, stream: trio.abc.Stream) -> Request | Response | None:
        request: h11.Request | None = None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return Response(exc.error_status_hint or 400, b"bad request\n")
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data and conn.their_state is h11.IDLE:
                    return None
                conn.receive_data(bytes(data))
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                break
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None
        target = urlsplit(request.target.decode("latin-1"))
        headers: dict[str, str] = {}
        for name, value in request.headers:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return Request(
            method=request.method.decode("ascii", "replace"),
            path=target.path or "/",
            query=parse_qs(target.query, keep_blank_values=True),
            headers=headers,
        )

    async def _dispatch(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            for prefix, candidate in self._routes.items():
                if prefix.endswith("/") and request.path.startswith(prefix):
                    handler = candidate
                    break
        if handler is None:
            return Response(404, b"not found\n")
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"method not allowed\n")
        try:
            return await handler(request)
        except trio.Cancelled:
            raise
        except Exception:
            logger.exception("%s handler for %s failed", self.name, request.path)
            return Response(500, b"internal error\n")

    async def _send(self, conn: h11.Connection, stream: trio.abc.Stream, response: Response, *, head: bool) -> None:
        headers = [
            (b"content-type", response.content_type.encode("latin-1")),
            (b"content-length", str(len(response.body)).encode("ascii")),
            (b"cache-control", b"no-store"),
        ]
        if response.status >= 400 and conn.their_state is h11.ERROR:
            headers.append((b"connection", b"close"))
        reason = _REASONS.get(response.status, b"")
        try:
            data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
            if not head and response.body:
                data = (data or b"") + (conn.send(h11.Data(data=response.body)) or b"")
            data = (data or b"") + (conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:
            return
        await stream.send_all(data)


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
    if the peer closed first or the head exceeds ``limit`` bytes. Cancellation loses what was
    read; the caller closes the stream.
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
