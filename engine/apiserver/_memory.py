"""An in-memory transport: httpx speaks real HTTP/1.1 bytes to the server over trio memory
streams, through an httpcore connection pool, without sockets or threads."""

from __future__ import annotations

import contextlib
import functools
import ssl
import typing
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator

import httpcore
import httpx
import trio
import trio.testing

from .._http import AbortStream, Handler, Request, Response
from ._errors import ApiServerError

__all__ = ["MemoryTransport", "MemoryBackend", "DirectTransport"]

Connector = Callable[[trio.abc.Stream], None]


@contextlib.contextmanager
def _mapped(timeout_exc: type[Exception], error_exc: type[Exception], timeout: float | None) -> Iterator[None]:
    try:
        with trio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
            yield
    except trio.TooSlowError as exc:
        raise timeout_exc(str(exc) or "timed out") from exc
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise error_exc(str(exc) or "the in-memory connection is closed") from exc


class _MemoryStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError, timeout):
            return bytes(await self._stream.receive_some(max_bytes))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError, timeout):
            await self._stream.send_all(buffer)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self._stream)

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the in-memory transport speaks plain HTTP only")

    def get_extra_info(self, info: str) -> typing.Any:
        return None


class MemoryBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend whose every connection is a fresh memory stream pair; the
    server half is handed to ``connect``, which raises :class:`ApiServerError` when the server
    cannot take it (the connection then fails with ``httpcore.ConnectError``)."""

    def __init__(self, connect: Connector) -> None:
        self._connect = connect

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        client, server = trio.testing.memory_stream_pair()
        try:
            self._connect(server)
        except ApiServerError as exc:
            raise httpcore.ConnectError(f"the embedded API server is not running: {exc}") from exc
        await trio.lowlevel.checkpoint()
        return _MemoryStream(client)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: typing.Iterable[typing.Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the in-memory transport has no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


_EXCEPTIONS: list[tuple[type[Exception], type[httpx.TransportError]]] = [
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


@contextlib.contextmanager
def _map_exceptions() -> Iterator[None]:
    try:
        yield
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except Exception as exc:
        for source, target in _EXCEPTIONS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _map_exceptions():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class MemoryTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` joined to one embedded server by memory streams.

    Requests travel as HTTP/1.1 bytes over an ``httpcore.AsyncConnectionPool`` (keep-alive and
    chunked encoding included); the URL's host and port are ignored and the scheme is always
    plain HTTP. Timeouts use trio's clock, so the transport works under ``MockClock``.
    Cancelling a request closes its connection; ``aclose()`` closes every connection.
    """

    def __init__(self, connect: Connector, *, max_connections: int | None = 100) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            network_backend=MemoryBackend(connect), max_connections=max_connections
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to the server over a pooled memory connection; return its response.

        Cancellation: cancelling closes the request's connection; the server sees a client
        that went away, as over a socket.
        """
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=b"http",
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _map_exceptions():
            response = await self._pool.handle_async_request(core_request)
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close every connection.

        Cancellation: connections are closed forcefully even if cancelled.
        """
        await self._pool.aclose()


Spawner = Callable[[Callable[[], typing.Awaitable[None]]], None]
_END = object()
_ABORT = object()


class _Call:
    """One request handed to the server's handler by a :class:`DirectTransport`."""

    def __init__(self) -> None:
        self.response: Response | None = None
        self.ready = trio.Event()
        self.scope = trio.CancelScope()
        """Around the streaming of a response body: cancelled when the client goes away."""
        self.send, self.receive = trio.open_memory_channel[typing.Any](float("inf"))


class _DirectStream(httpx.AsyncByteStream):
    def __init__(self, call: _Call) -> None:
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for item in self._call.receive:
                if item is _END:
                    return
                if item is _ABORT:
                    break
                yield item
        except trio.ClosedResourceError:
            pass
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    async def aclose(self) -> None:
        self._call.scope.cancel()
        self._call.receive.close()
        await trio.lowlevel.checkpoint()


class DirectTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` that hands each request to the server's handler as a
    :class:`~engine._http.Request` and its answer back as an ``httpx.Response``,
    with no HTTP/1.1 bytes in between: the in-memory transport's behaviour at a fraction of
    its cost, for the simulator.

    As over a connection, the server's handling of a request is a task of the server's own
    (``spawn``), so a client that gives up (cancelled, or its read timeout) leaves the request
    to be answered anyway; a streamed answer stops when the client closes it, and one the
    server cuts (``AbortStream``, or the server stopping) reaches the client as
    ``httpx.RemoteProtocolError``, as an unfinished chunked body does. ``spawn`` raises
    :class:`ApiServerError` when the server cannot take a request (``httpx.ConnectError``).
    """

    def __init__(self, handler: Handler, spawn: Spawner, *, identity: str | None = None) -> None:
        self._handler = handler
        self._spawn = spawn
        self._identity = identity

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request``. Cancellation: the server still answers it; a streamed answer
        is closed at once."""
        body = await request.aread()
        raw_path, _, raw_query = request.url.raw_path.decode("latin-1").partition("?")
        pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True)
        values: dict[str, list[str]] = {}
        for name, value in pairs:
            values.setdefault(name, []).append(value)
        headers: dict[str, str] = {}
        for raw_name, raw_value in request.headers.raw:
            key = raw_name.decode("latin-1").lower()
            text = raw_value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        served = Request(
            method=request.method.upper(),
            path=urllib.parse.unquote(raw_path) or "/",
            query=dict(pairs),
            query_values=values,
            headers=headers,
            body=bytes(body),
            identity=self._identity,
        )
        call = _Call()
        try:
            self._spawn(functools.partial(self._serve, served, call))
        except ApiServerError as exc:
            raise httpx.ConnectError(f"the embedded API server is not running: {exc}") from exc
        timeout = (request.extensions.get("timeout") or {}).get("read")
        try:
            with trio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                await call.ready.wait()
        except trio.TooSlowError as exc:
            call.scope.cancel()
            raise httpx.ReadTimeout("timed out") from exc
        except BaseException:
            call.scope.cancel()
            raise
        response = call.response
        if response is None:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        out_headers = list(response.headers)
        if response.stream is None:
            out_headers.append(("content-length", str(len(response.body))))
            content = response.body if served.method != "HEAD" else b""
            return httpx.Response(response.status, headers=out_headers, content=content)
        out_headers += [("connection", "close"), ("transfer-encoding", "chunked")]
        return httpx.Response(response.status, headers=out_headers, stream=_DirectStream(call))

    async def _serve(self, request: Request, call: _Call) -> None:
        try:
            call.response = await self._handler(request)
        finally:
            call.ready.set()
        stream = call.response.stream
        if stream is None:
            return
        ended = False
        try:
            with call.scope:
                try:
                    async for chunk in stream:
                        if chunk:
                            call.send.send_nowait(chunk)
                    ended = True
                except AbortStream:
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                call.send.send_nowait(_END if ended else _ABORT)
            call.send.close()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
