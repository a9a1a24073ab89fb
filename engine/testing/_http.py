"""A small HTTP/1.1 server on h11 that runs over any :class:`trio.abc.Stream`.

TCP sockets, TLS streams and in-memory streams share this one code path. Requests are read
whole; responses are either a byte string (sent with ``Content-Length``, keep-alive) or an
async iterator of chunks (sent with chunked encoding and ``Connection: close``, while a second
task watches for the client going away).
"""

from __future__ import annotations

import http
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import h11
import trio

__all__ = ["Request", "Response", "AbortStream", "serve_http"]

logger = logging.getLogger("engine.testing.http")

_MAX_BODY = 64 * 1024 * 1024


@attrs.frozen
class Request:
    """One HTTP request, read completely."""

    method: str
    """Upper-case method, such as ``"GET"``."""
    path: str
    """The percent-decoded path, without the query string."""
    query: dict[str, str]
    """Query parameters; the last value wins when a name repeats."""
    headers: dict[str, str]
    """Header names in lower case; repeated headers are joined with ``", "``."""
    body: bytes
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


class AbortStream(Exception):
    """Raised by a response stream to drop the connection without finishing the response."""


Handler = Callable[[Request], Awaitable[Response]]


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


async def _read_request(
    conn: h11.Connection, stream: trio.abc.Stream, identity: str | None
) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event: Any = conn.next_event()
        if event is h11.NEED_DATA:
            if conn.they_are_waiting_for_100_continue:
                await stream.send_all(
                    conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > _MAX_BODY:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = head.target.decode("latin-1")
            raw_path, _, raw_query = target.partition("?")
            query = dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True))
            headers: dict[str, str] = {}
            for name, value in head.headers:
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            return Request(
                method=head.method.decode("ascii").upper(),
                path=urllib.parse.unquote(raw_path),
                query=query,
                headers=headers,
                body=bytes(body),
                identity=identity,
            )
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # pragma: no cover - h11 yields nothing else for a server
            raise h11.RemoteProtocolError(f"unexpected event {type(event).__name__}")


async def _send_streaming(
    conn: h11.Connection, stream: trio.abc.Stream, response: Response
) -> None:
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
    stream: trio.abc.Stream, handler: Handler, *, identity: str | None = None
) -> None:
    """Serve HTTP/1.1 requests on ``stream`` until the client closes it; then close it.

    Cancellation closes the stream forcefully and propagates; the handler's own work is
    cancelled with it. Protocol errors answer ``400`` (when a response can still be sent) and
    close the connection; a client that goes away mid-response is not an error.
    """
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            try:
                request = await _read_request(conn, stream, identity)
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    status = exc.error_status_hint
                    body = f"malformed HTTP request: {exc}".encode()
                    await stream.send_all(
                        conn.send(
                            h11.Response(
                                status_code=status,
                                headers=[
                                    ("content-type", "text/plain"),
                                    ("content-length", str(len(body))),
                                    ("connection", "close"),
                                ],
                            )
                        )
                    )
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
            await stream.send_all(
                conn.send(
                    h11.Response(
                        status_code=response.status, headers=headers, reason=_reason(response.status)
                    )
                )
            )
            if response.stream is None:
                if response.body and request.method != "HEAD":
                    await stream.send_all(conn.send(h11.Data(data=response.body)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
            else:
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
