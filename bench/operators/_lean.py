"""A lean ``httpx`` transport for the benchmark: HTTP/1.1 on h11 and trio, a LIFO stack of idle
connections to one origin, nothing else.

Built to measure what httpcore's connection pool costs (it scans every connection, twice
per request, and the scan is quadratic in the pool size). Taking a connection is a
``list.pop()``; a response whose body was read to the end puts its connection back; a
cancelled or failed exchange, or a body closed early, closes the connection.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import h11
import httpx
import trio

_READ = 65536


class _Connection:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await self.stream.receive_some(_READ))


class _Body(httpx.AsyncByteStream):
    def __init__(self, transport: LeanTransport, conn: _Connection) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        try:
            while True:
                event = await conn.next_event()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    raise httpx.RemoteProtocolError(f"unexpected {event!r}")
        except BaseException:
            self._conn = None
            await self._transport._discard(conn)
            raise
        self._conn = None
        self._transport._release(conn)

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._transport._discard(conn)


class LeanTransport(httpx.AsyncBaseTransport):
    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        url = httpx.URL(base_url)
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl_context if url.scheme == "https" else None
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        stream: trio.abc.Stream = await trio.open_tcp_stream(self._host, self._port)
        if self._ssl is not None:
            tls = trio.SSLStream(stream, self._ssl, server_hostname=self._host)
            await tls.do_handshake()
            stream = tls
        return _Connection(stream)

    def _release(self, conn: _Connection) -> None:
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            self._idle.append(conn)
        else:
            trio.lowlevel.spawn_system_task(trio.aclose_forcefully, conn.stream)

    async def _discard(self, conn: _Connection) -> None:
        await trio.aclose_forcefully(conn.stream)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        conn = self._idle.pop() if self._idle else await self._connect()
        try:
            body = await request.aread()
            data = conn.h11.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
            )
            if body:
                data = (data or b"") + (conn.h11.send(h11.Data(data=body)) or b"")
            data = (data or b"") + (conn.h11.send(h11.EndOfMessage()) or b"")
            await conn.stream.send_all(data)
            while True:
                event = await conn.next_event()
                if isinstance(event, h11.Response):
                    break
                if not isinstance(event, h11.InformationalResponse):
                    raise httpx.RemoteProtocolError(f"unexpected {event!r}")
        except BaseException as exc:
            await self._discard(conn)
            if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | h11.RemoteProtocolError):
                raise httpx.ReadError(str(exc)) from exc
            raise
        return httpx.Response(
            status_code=event.status_code,
            headers=event.headers.raw_items(),
            stream=_Body(self, conn),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await trio.aclose_forcefully(conn.stream)
