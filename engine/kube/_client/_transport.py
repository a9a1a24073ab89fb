"""The client's default network transport: HTTP/1.1 over trio sockets, to one origin.

An ``httpx.AsyncBaseTransport`` built for the client's traffic pattern (many small requests
from a fixed set of workers, plus long watch streams): idle connections are a LIFO stack, so
taking one and putting it back cost O(1) whatever the pool size; the request head and body go
out in one write; a response whose body already arrived with its head is returned complete,
and a longer one (a watch) is streamed and gives its connection back when read to the end.
An exchange that fails, is cancelled, or whose body is closed before its end closes its
connection. Timeouts and keep-alive expiry run on trio's clock. Messages are written and parsed
by :mod:`engine.kube._client._http1` (a request head in one join, a response parsed off one buffer).
Every connection is read and written on its socket directly (a send that the socket takes at
once, then one wait for readability per read): a plain TCP socket, or the standard library's
non-blocking ``ssl.SSLSocket`` for TLS, whose records OpenSSL encrypts and decrypts in place.
"""

from __future__ import annotations

import collections
import math
import select
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx
import trio

from ._errors import AnswerTimeout
from ._http1 import Body, ProtocolError, header_lines, parse_head, request_head

__all__ = ["Transport"]

_READ_SIZE = 65536
MAX_ANSWER = 256 * 1024 * 1024
"""The most bytes the body of an answer other than a watch may have, by default: more than any
list a client asks for at once (an object is at most 1.5 MiB in etcd)."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


class _Connection:
    """One HTTP/1.1 connection: its non-blocking socket (an ``ssl.SSLSocket`` for TLS), what
    was received and not yet parsed, and whether it may carry another request."""

    __slots__ = ("socket", "tls", "buffer", "eof", "reusable", "expires_at", "closed", "poll")

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.poll: select.poll | None = None
        """The socket registered for input, made on the first reuse check (POSIX only)."""
        self.buffer = bytearray()
        self.eof = False
        self.reusable = False
        self.expires_at = math.inf
        self.closed = False


def _drain_tls(conn: _Connection) -> None:
    """Append to ``conn``'s buffer the TLS records that are already waiting in its socket, up
    to :data:`_READ_SIZE` bytes in all (``eof`` at the peer's close), without waiting: OpenSSL
    decrypts one record per read, and a watch sends each event as a record of its own, so a
    stream that fell behind would otherwise take one wait for readability per event. A record
    not yet whole stays with OpenSSL for the next read. Synchronous (not a checkpoint)."""
    sock = conn.socket
    buffer = conn.buffer
    while len(buffer) < _READ_SIZE and _readable(conn):
        try:
            data = sock.recv(_READ_SIZE)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        if not data:
            conn.eof = True
            return
        buffer += data


def _has_input(conn: _Connection) -> bool:
    """Whether ``conn``'s socket has bytes (or the peer's close) waiting to be read, as trio's
    ``is_readable`` tells; for TLS also bytes already decrypted and not read. Not a checkpoint."""
    if conn.tls and conn.socket.pending():  # type: ignore[attr-defined]
        return True
    return _readable(conn)


def _readable(conn: _Connection) -> bool:
    """Whether ``conn``'s socket has bytes (or the peer's close) waiting in the kernel. Not a
    checkpoint."""
    if sys.platform == "win32":
        return bool(select.select([conn.socket], [], [], 0)[0])
    poll = conn.poll
    if poll is None:
        poll = conn.poll = select.poll()
        poll.register(conn.socket, select.POLLIN)
    return bool(poll.poll(0))


class _WholeResponse(httpx.Response):
    """A response whose whole body came with it and needs no decoding (no ``Content-Encoding``):
    its ``content`` is those bytes as they are, loaded without httpx's byte iterators (which
    cost more than the rest of a small answer's parsing), and its ``headers`` are made into
    ``httpx.Headers`` when first read (a successful answer's rarely are). Otherwise an
    ``httpx.Response``."""

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], content: bytes, extensions: dict[str, Any]
    ) -> None:
        super().__init__(status, stream=httpx.ByteStream(content), extensions=extensions)
        self._raw_headers: list[tuple[bytes, bytes]] | None = headers
        self._whole = content

    @property
    def headers(self) -> httpx.Headers:
        raw = self._raw_headers
        if raw is not None:
            self._headers = httpx.Headers(raw)
            self._raw_headers = None
        return self._headers

    @headers.setter
    def headers(self, value: httpx.Headers) -> None:
        self._headers = value
        self._raw_headers = None

    @property
    def content(self) -> bytes:
        return self._whole

    def read(self) -> bytes:
        """The body. Cancellation: not a checkpoint (synchronous)."""
        return self._whole

    async def aread(self) -> bytes:
        """The body. Cancellation: not a checkpoint."""
        return self._whole


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeouts: dict[str, float | None] | None = request.extensions.get("timeout")
    return timeouts if timeouts is not None else {}


class ResponseStream(httpx.AsyncByteStream):
    """The body of a response that did not arrive with its head (chunked or long: watches).

    Iterating yields the body's bytes as they arrive; at the body's end the connection goes
    back to the transport. A watch reads it directly, without httpx's iterators over it.
    """

    def __init__(
        self,
        transport: Transport,
        conn: _Connection,
        body: Body,
        keep_alive: bool,
        read_timeout: float | None,
        answer_by: float,
        first: list[bytes],
        left: float,
    ) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._body = body
        self._keep_alive = keep_alive
        self._read_timeout = read_timeout
        self._answer_by = answer_by
        self._first = first[::-1]
        self._left = left

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._first:
            return self._first.pop()
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        try:
            while True:
                data = self._body.read(conn.buffer, conn.eof)
                if data is None:
                    await self._transport._receive(conn, self._read_timeout, self._answer_by)
                    if conn.tls and not conn.eof:
                        _drain_tls(conn)
                    continue
                if data:
                    self._left -= len(data)
                    if self._left < 0:
                        raise _too_long(self._transport._max_answer)
                    return data
                self._conn = None
                conn.reusable = self._keep_alive and self._body.delimited
                self._transport._release(conn)
                raise StopAsyncIteration
        except StopAsyncIteration:
            raise
        except BaseException as exc:
            self._conn = None
            self._transport._discard(conn)
            _raise_mapped(exc, httpx.ReadError)
            raise

    async def aclose(self) -> None:
        """Close the body; a connection whose body was not read to its end is closed.

        Cancellation: not a checkpoint.
        """
        conn, self._conn = self._conn, None
        self._first.clear()
        if conn is not None:
            self._transport._discard(conn)


async def _wait_recv(sock: socket.socket) -> bytes:
    """Wait until ``sock`` is readable, then read it (``b""`` at its close).

    Cancellation: a checkpoint; nothing is read if cancelled.
    """
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return sock.recv(_READ_SIZE)
        except BlockingIOError:
            pass


async def _tls_recv(sock: ssl.SSLSocket) -> bytes:
    """Read the next decrypted bytes of ``sock`` (``b""`` at its close, with or without the
    peer's ``close_notify``, as ``https_compatible`` streams do).

    OpenSSL reads no further than the record it decrypts (its read-ahead is off), so whatever
    it has not yet decrypted is still in the socket, and a wait for readability is enough
    unless decrypted bytes are pending. A record that is not whole yet, or one that carries no
    data (a TLS 1.3 session ticket), waits again.

    Cancellation: a checkpoint; no data is returned if cancelled, but OpenSSL may have taken
    part of a record already, so the connection must not be used again (callers close it).
    """
    if sock.pending():
        await trio.lowlevel.checkpoint()
    else:
        await trio.lowlevel.wait_readable(sock)
    while True:
        try:
            return sock.recv(_READ_SIZE)
        except ssl.SSLWantReadError:
            await trio.lowlevel.wait_readable(sock)
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


async def _handshake(sock: ssl.SSLSocket) -> None:
    """Complete the TLS handshake of ``sock`` (certificates are checked as its context says).

    Cancellation: a checkpoint; a cancelled handshake leaves ``sock`` unusable.
    """
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            await trio.lowlevel.wait_readable(sock)
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


def _close(sock: socket.socket | None) -> None:
    """Close ``sock`` at once (no TLS ``close_notify``), telling trio first. Synchronous."""
    if sock is not None:
        trio.lowlevel.notify_closing(sock)
        sock.close()


def _too_long(limit: int) -> ProtocolError:
    return ProtocolError(f"an answer (other than a watch) must be at most {limit} bytes")


def _raise_mapped(exc: BaseException, error: type[httpx.TransportError]) -> None:
    """Raise the ``httpx`` exception for a failure of the network or of the peer's protocol
    (``error`` for I/O failures); return for anything else (cancellation, httpx's own)."""
    if isinstance(exc, httpx.HTTPError):
        return
    if isinstance(exc, ProtocolError):
        raise httpx.RemoteProtocolError(str(exc) or "the server broke the HTTP/1.1 protocol") from exc
    if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | OSError):
        raise error(str(exc) or type(exc).__name__) from exc


class Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to the origin of ``url`` (``http`` or ``https``), over trio.

    ``ssl_context`` is used for ``https`` (it decides verification, trusted CAs, client
    certificates and the server name); without one, httpx's default context verifies against
    the system roots. At most ``max_connections`` connections are open (``None``: no limit);
    a request that finds none free waits, up to the request's ``pool`` timeout. Up to
    ``max_idle`` connections are kept for reuse, each for ``keepalive_expiry`` seconds (30 by
    default: a third of the 90 s kube-apiserver and client-go keep an idle connection, and
    below the 60 s of common load balancers, so a connection is given up before the other
    side closes it).
    The request's ``connect``, ``read`` and ``write`` timeouts (httpx's ``timeout``
    extension) bound each network operation; the ``read`` timeout also bounds the whole answer,
    counted from the request's end (an answer dripped byte by byte fails with
    ``AnswerTimeout``, a ``ReadTimeout``, saying so). The body of an answer to a request with a
    ``read`` timeout (any but a watch, whose reads are not timed) may be at most
    ``max_answer`` bytes (default :data:`MAX_ANSWER`; ``httpx.RemoteProtocolError`` past it,
    as soon as its ``Content-Length`` or its bytes say so). A request for another origin raises
    ``httpx.UnsupportedProtocol``. Failures are raised as httpx's transport exceptions
    (``ConnectError``, ``ReadTimeout``, ...), with the original error as their cause.
    """

    def __init__(
        self,
        url: str | httpx.URL,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int | None = 100,
        max_idle: int = 20,
        keepalive_expiry: float = 30.0,
        max_answer: int | None = None,
    ) -> None:
        origin = httpx.URL(url)
        if origin.scheme not in _DEFAULT_PORTS or not origin.host:
            raise ValueError(f"the transport needs an http or https URL with a host, not {str(origin)!r}")
        if max_connections is not None and max_connections < 1:
            raise ValueError("max_connections must be >= 1 or None")
        self._scheme = origin.scheme
        self._host = origin.host
        self._url_port = origin.port
        self._port = origin.port or _DEFAULT_PORTS[origin.scheme]
        self._ssl: ssl.SSLContext | None = None
        if origin.scheme == "https":
            self._ssl = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._max_connections = max_connections if max_connections is not None else math.inf
        self._max_idle = max_idle
        self._keepalive_expiry = keepalive_expiry
        self._max_answer = MAX_ANSWER if max_answer is None else max_answer
        self._idle: collections.deque[_Connection] = collections.deque()
        self._open = 0
        self._waiting = trio.lowlevel.ParkingLot()
        self._closed = False
        self._fixed: tuple[tuple[bytes, bytes], ...] = ()
        self._fixed_lines = b""

    # -- the pool ------------------------------------------------------------------------------

    async def _acquire(self, timeouts: dict[str, float | None]) -> _Connection:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.expires_at <= trio.current_time():
                # The newest idle connection expired, so did every older one.
                self._discard(conn)
                while idle:
                    self._discard(idle.pop())
                break
            if _has_input(conn):
                # The server closed it (or sent something unasked): not reusable.
                self._discard(conn)
                continue
            return conn
        if self._open >= self._max_connections:
            await self._wait_for_room(timeouts.get("pool"))
            if idle:
                return await self._acquire(timeouts)
        self._open += 1
        try:
            return await self._connect(timeouts.get("connect"))
        except BaseException:
            self._open -= 1
            if self._waiting:
                self._waiting.unpark()
            raise

    async def _wait_for_room(self, timeout: float | None) -> None:
        with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
            while self._open >= self._max_connections and not self._idle:
                await self._waiting.park()
        if scope.cancelled_caught:
            raise httpx.PoolTimeout("timed out waiting for a free connection")

    async def _connect(self, timeout: float | None) -> _Connection:
        if self._closed:
            raise httpx.ConnectError("the transport is closed")
        sock: socket.socket | None = None
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                tcp = await trio.open_tcp_stream(self._host, self._port)
                # The socket is taken out of trio's stream (its options, TCP_NODELAY among
                # them, stay set) and read and written here directly; see _send and _receive.
                sock = socket.socket(fileno=tcp.socket.detach())
                sock.setblocking(False)
                if self._ssl is not None:
                    sock = self._ssl.wrap_socket(
                        sock, server_hostname=self._host, do_handshake_on_connect=False, suppress_ragged_eofs=True
                    )
                    await _handshake(sock)
        except trio.TooSlowError as exc:
            _close(sock)
            raise httpx.ConnectTimeout("timed out connecting") from exc
        except BaseException as exc:
            _close(sock)
            _raise_mapped(exc, httpx.ConnectError)
            raise
        return _Connection(sock)

    def _release(self, conn: _Connection) -> None:
        """Put ``conn`` back for reuse if its exchange completed cleanly; else close it."""
        if conn.reusable and not conn.buffer and not conn.eof and not self._closed and len(self._idle) < self._max_idle:
            conn.reusable = False
            now = trio.current_time()
            conn.expires_at = now + self._keepalive_expiry
            idle = self._idle
            idle.append(conn)
            while idle and idle[0].expires_at <= now:
                self._discard(idle.popleft())
            if self._waiting:
                self._waiting.unpark()
        else:
            self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        """Close ``conn`` at once (its socket; no TLS close_notify). Synchronous; idempotent."""
        if conn.closed:
            return
        conn.closed = True
        _close(conn.socket)
        self._open -= 1
        if self._waiting:
            self._waiting.unpark()

    # -- I/O -----------------------------------------------------------------------------------

    async def _receive(self, conn: _Connection, timeout: float | None, answer_by: float = math.inf) -> None:
        """Receive what the server sent next into ``conn``'s buffer (``eof`` at its close).

        The socket is read once trio says it is readable (an answer, or a watch's next event,
        is rarely there already when asked for). Raises ``httpx.ReadTimeout`` if nothing came
        within ``timeout`` seconds, :class:`AnswerTimeout` if the answer's deadline
        ``answer_by`` (trio time) came first. When the caller's own effective deadline (a run's
        ``ctx.shield``, a controller timeout) comes at or before both, the read gets no cancel
        scope of its own: that deadline would cancel the wait first, so the read's scope could
        never catch anything (a trio cancel scope costs more than the rest of a small answer's
        receive). An enclosing deadline moved later during the wait then bounds it instead.

        Cancellation: a checkpoint; a cancelled receive adds nothing to the buffer (over TLS
        it may leave part of a record taken, so callers close the connection).
        """
        recv = _tls_recv if conn.tls else _wait_recv
        read_by = math.inf if timeout is None else trio.current_time() + timeout
        deadline = min(read_by, answer_by)
        if trio.current_effective_deadline() > deadline:
            with trio.CancelScope(deadline=deadline) as scope:
                data = await recv(conn.socket)  # type: ignore[arg-type]
            if scope.cancelled_caught:
                if answer_by < read_by:
                    raise AnswerTimeout(f"timed out: the answer did not arrive whole within {timeout:g} s")
                raise httpx.ReadTimeout("timed out waiting for the answer")
        else:
            data = await recv(conn.socket)  # type: ignore[arg-type]
        if data:
            conn.buffer += data
        else:
            conn.eof = True

    async def _send(self, conn: _Connection, data: bytes, timeout: float | None) -> None:
        """Send ``data`` whole; ``httpx.WriteTimeout`` if the socket stayed full for ``timeout``.

        It is written on the socket: a write the socket takes at once does not yield to the
        scheduler (the answer's wait that follows does). A TLS write that OpenSSL could not
        finish is repeated with the same bytes once the socket can take them (or, if OpenSSL
        must read first, has something to read).

        Cancellation: a cancelled caller sends nothing; once sending, a cancellation can leave
        a part sent (the caller then discards the connection).
        """
        sock = conn.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        wait = trio.lowlevel.wait_writable
        try:
            sent = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError):
            sent = 0
        except ssl.SSLWantReadError:
            sent, wait = 0, trio.lowlevel.wait_readable
        if sent == len(data):
            return
        with trio.CancelScope(deadline=math.inf if timeout is None else trio.current_time() + timeout) as scope:
            rest = memoryview(data)[sent:]
            while rest:
                await wait(sock)
                wait = trio.lowlevel.wait_writable
                try:
                    rest = rest[sock.send(rest):]
                except (BlockingIOError, ssl.SSLWantWriteError):
                    pass
                except ssl.SSLWantReadError:
                    wait = trio.lowlevel.wait_readable
        if scope.cancelled_caught:
            raise httpx.WriteTimeout("timed out sending the request")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return its response (its body streamed if it is still coming).

        Cancellation: a checkpoint; a cancelled exchange closes its connection.
        """
        url = request.url
        if url.scheme != self._scheme or url.host != self._host or url.port != self._url_port:
            raise httpx.UnsupportedProtocol(
                f"this transport serves {self._scheme}://{self._host}:{self._port} only, not {url.scheme}://{url.netloc.decode()}"
            )
        timeouts = _timeouts(request)
        conn = await self._acquire(timeouts)
        try:
            method = request.method.encode("ascii")
            head = request_head(method, url.raw_path, request.headers.raw)
            try:
                body: bytes | None = request.content
            except httpx.RequestNotRead:
                body = None
            write_timeout = timeouts.get("write")
            if body is not None:
                await self._send(conn, head + body if body else head, write_timeout)
            else:
                await self._send(conn, head, write_timeout)
                chunked = any(
                    name.lower() == b"transfer-encoding" and b"chunked" in value.lower()
                    for name, value in request.headers.raw
                )
                async for chunk in request.stream:  # type: ignore[union-attr]
                    if chunk:
                        await self._send(conn, b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk, write_timeout)
                if chunked:
                    await self._send(conn, b"0\r\n\r\n", write_timeout)
            return await self._response(conn, method, timeouts)
        except BaseException as exc:
            self._discard(conn)
            _raise_mapped(exc, httpx.ReadError)
            raise

    async def request(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: dict[str, float | None],
        *,
        stream: bool = True,
        load: bool = True,
        fixed_headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> httpx.Response:
        """Send one request given as its parts and return its response, as
        :meth:`handle_async_request` does, without an ``httpx.Request``; with ``stream=False``
        the whole body is read before returning (the connection then goes back at once). A
        whole body without a ``Content-Encoding`` is loaded as it came (``content`` at once);
        an encoded one is decoded by httpx, and with ``load=False`` handed over as a stream
        not loaded yet: the caller calls ``read()`` before ``content`` if it wants the body.

        ``target`` is the request target (path and query, already escaped); ``fixed_headers``,
        then ``headers`` are sent as they are (the caller includes ``Host`` and, with a body,
        ``Content-Length``). ``fixed_headers`` are those every request of the caller carries,
        the same tuple each time: their lines are checked and written once and reused while
        the tuple given is that one. ``timeouts`` holds httpx's ``connect``, ``read``,
        ``write`` and ``pool`` keys. Raises httpx's transport exceptions, as
        :meth:`handle_async_request` does.

        Cancellation: a checkpoint; a cancelled exchange closes its connection.
        """
        conn = await self._acquire(timeouts)
        try:
            if fixed_headers is self._fixed:
                lines = self._fixed_lines
            else:
                lines = header_lines(fixed_headers)
                self._fixed, self._fixed_lines = fixed_headers, lines
            head = request_head(method, target, headers, lines)
            await self._send(conn, head + body if body else head, timeouts.get("write"))
            return await self._response(conn, method, timeouts, stream, load)
        except BaseException as exc:
            self._discard(conn)
            _raise_mapped(exc, httpx.ReadError)
            raise

    async def _response(
        self,
        conn: _Connection,
        method: bytes,
        timeouts: dict[str, float | None],
        stream: bool = True,
        load: bool = True,
    ) -> httpx.Response:
        read_timeout = timeouts.get("read")
        answer_by = math.inf if read_timeout is None else trio.current_time() + read_timeout
        # An empty buffer (the answer not received yet, as a rule) is not parsed.
        while not conn.buffer or (response := parse_head(conn.buffer, method)) is None:
            if conn.eof:
                raise ProtocolError("the server closed the connection without answering")
            await self._receive(conn, read_timeout, answer_by)
        left = math.inf if read_timeout is None else self._max_answer
        if response.body.expected > left:
            raise _too_long(self._max_answer)
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": response.reason}
        # A body that is already here (small answers come with their head), or any body when
        # the caller wants it whole, is returned whole, and the connection goes back at once.
        chunks: list[bytes] = []
        reader = response.body
        while True:
            data = reader.read(conn.buffer, conn.eof)
            if data is None:
                if stream:
                    break
                await self._receive(conn, read_timeout, answer_by)
                continue
            if not data:
                content = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                # As a stream: httpx adds no Content-Length the server did not send (with
                # ``content=`` it would, even to a chunked answer).
                if not response.encoded:
                    whole: httpx.Response = _WholeResponse(response.status, response.headers, content, extensions)
                else:
                    whole = httpx.Response(
                        response.status, headers=response.headers, stream=httpx.ByteStream(content),
                        extensions=extensions,
                    )
                    if load:
                        whole.read()
                conn.reusable = response.keep_alive and reader.delimited
                self._release(conn)
                return whole
            left -= len(data)
            if left < 0:
                raise _too_long(self._max_answer)
            chunks.append(data)
        rest = ResponseStream(self, conn, reader, response.keep_alive, read_timeout, answer_by, chunks, left)
        return httpx.Response(response.status, headers=response.headers, stream=rest, extensions=extensions)

    async def aclose(self) -> None:
        """Close the idle connections; connections in use close when their exchange ends.

        Cancellation: not a checkpoint.
        """
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

