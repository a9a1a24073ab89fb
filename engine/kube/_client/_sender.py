"""How a request reaches the server: one :class:`Sender` per client, chosen when it opens.

A sender has one method, ``send(method, path, options)``, which returns the server's answer
whatever its status (the client turns 4xx and 5xx into errors and retries). :func:`open_sender`
is the one place that picks the implementation:

* :class:`DirectSender`: the engine's own transport (``_transport``), given each request as
  its parts (target and raw headers, no ``httpx.Request``); the usual case.
* :class:`TransportSender`: any ``httpx`` transport (one given to the client, such as
  ``ApiServer.memory_transport()`` or an ``httpx.MockTransport``, or the engine's own when the
  credentials need httpx's auth flow), with an ``httpx.Request`` and that auth flow.
* :class:`PoolSender`: ``httpx.AsyncClient`` and its own transports, for a proxy or a TLS
  context of a class that wraps sockets its own way.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import httpx

from ..._tracing import trace_headers
from ._auth import BearerTokenAuth, TokenFileAuth
from ._config import wraps_sockets_as_standard
from ._request import RequestOptions
from ._transport import Transport

__all__ = ["DirectSender", "PoolSender", "RequestDefaults", "Sender", "TransportSender", "open_sender"]


class Sender(Protocol):
    """Sends a client's requests to its server."""

    async def send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
        """Send ``method`` to ``path`` (below the server's URL) with ``options``; the answer
        whatever its status, its body read unless ``options.stream``. Raises httpx's transport
        exceptions.

        Cancellation: a checkpoint; a cancelled exchange closes its connection.
        """
        ...

    async def aclose(self) -> None:
        """Close the connections. Cancellation: callers shield it."""
        ...


@attrs.frozen
class RequestDefaults:
    """What every request of one client carries: the server's URL, the client's headers and
    the timeouts (``read`` unbounded for a streamed answer)."""

    server: str
    """The server's URL without a trailing ``/``; a request's path goes after it."""
    headers: list[tuple[str, str]]
    """The client's headers (``User-Agent``, ``Accept``, ...), in order."""
    timeouts: dict[str, float | None]
    """httpx's ``timeout`` extension of a request whose answer is read whole."""
    stream_timeouts: dict[str, float | None]
    """The same for a streamed answer."""

    @classmethod
    def of(cls, base: httpx.URL, headers: httpx.Headers, timeout: float) -> RequestDefaults:
        """For a server at ``base``, with ``timeout`` seconds for each network operation."""
        return cls(
            str(base).rstrip("/"),
            list(headers.items()),
            httpx.Timeout(timeout).as_dict(),
            httpx.Timeout(timeout, read=None).as_dict(),
        )

    def url(self, path: str, query: str | None) -> httpx.URL:
        """``server + path [+ "?" + query]`` as an ``httpx.URL`` (parsed, and escaped, by httpx);
        an empty ``query`` is none."""
        return httpx.URL(self.server + path + ("?" + query if query else ""))

    def request(self, method: str, path: str, options: RequestOptions) -> httpx.Request:
        """The ``httpx.Request`` for ``method`` on ``path`` with ``options``."""
        headers = self.headers
        content = options.content
        if content is not None:
            headers = [*headers, ("Content-Type", options.content_type)]
        if (traced := trace_headers()) is not None:
            headers = [*headers, *traced]
        return httpx.Request(
            method,
            self.url(path, options.query),
            headers=headers,
            content=content,
            extensions={"timeout": self.stream_timeouts if options.stream else self.timeouts},
        )


async def _read_unless_streamed(response: httpx.Response, stream: bool) -> httpx.Response:
    if not stream:
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
    return response


@attrs.define(eq=False)
class TransportSender:
    """Sends an ``httpx.Request`` through ``transport`` with ``auth``'s flow, as
    ``httpx.AsyncClient.send`` does, without its per-request cookie, redirect and hook
    handling, which the client does not use."""

    transport: httpx.AsyncBaseTransport
    """Where requests go (``handle_async_request``)."""
    auth: httpx.Auth | None
    """The credentials' flow (``None``: none)."""
    defaults: RequestDefaults
    """What every request carries."""

    async def send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
        """See :meth:`Sender.send`. Cancellation: a checkpoint; a cancelled exchange closes its connection."""
        request = self.defaults.request(method, path, options)
        transport = self.transport
        auth = self.auth
        if auth is None:
            response = await transport.handle_async_request(request)
            response.request = request
            return await _read_unless_streamed(response, options.stream)
        flow = auth.async_auth_flow(request)
        try:
            request = await flow.__anext__()
            while True:
                response = await transport.handle_async_request(request)
                response.request = request
                try:
                    next_request = await flow.asend(response)
                except StopAsyncIteration:
                    break
                except BaseException:
                    await response.aclose()
                    raise
                await response.aclose()
                request = next_request
        finally:
            await flow.aclose()
        return await _read_unless_streamed(response, options.stream)

    async def aclose(self) -> None:
        """Close the transport. Cancellation: not shielded here (the client shields it)."""
        await self.transport.aclose()


@attrs.define(eq=False)
class PoolSender:
    """Sends an ``httpx.Request`` through ``httpx.AsyncClient`` (its pool, its proxies, its
    transports, its auth)."""

    client: httpx.AsyncClient
    """The pool, configured with the client's settings."""
    defaults: RequestDefaults
    """What every request carries."""

    async def send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
        """See :meth:`Sender.send`. Cancellation: a checkpoint, as ``httpx.AsyncClient.send``."""
        return await self.client.send(self.defaults.request(method, path, options), stream=options.stream)

    async def aclose(self) -> None:
        """Close the pool. Cancellation: not shielded here (the client shields it)."""
        await self.client.aclose()


_PLAIN_PATH = re.compile(r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9\-._~]*)*").fullmatch
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9\-._~=&+]*(?:%[0-9A-F]{2}[A-Za-z0-9\-._~=&+]*)*").fullmatch


@attrs.define(eq=False)
class DirectSender:
    """Sends a request to the engine's own :class:`Transport` as its parts, the bytes an
    ``httpx.Request`` would give: the same target and headers (``Host`` first, then the
    client's, for a body ``Content-Type`` and ``Content-Length``, then ``Authorization``).

    A path or query that httpx would escape or normalize (not plain ASCII, a ``.`` segment)
    goes through ``fallback``, the same transport with an ``httpx.Request``.
    """

    transport: Transport
    """The engine's transport to the server's origin."""
    base_path: str
    """The path of the server's URL, without a trailing ``/``."""
    headers: tuple[tuple[bytes, bytes], ...]
    """``Host`` and the client's headers, encoded: the transport's ``fixed_headers``."""
    authorization: Callable[[], str] | None
    """The ``Authorization`` header's value for the next request, if the credentials send one."""
    fallback: TransportSender
    """The same transport and credentials, for what is not plain."""
    timeouts: dict[str, float | None]
    """As :attr:`RequestDefaults.timeouts`."""
    stream_timeouts: dict[str, float | None]
    """As :attr:`RequestDefaults.stream_timeouts`."""
    _content_types: dict[str, bytes] = attrs.field(factory=dict, init=False)

    async def send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
        """See :meth:`Sender.send`. Cancellation: a checkpoint; a cancelled exchange closes its connection."""
        query = options.query
        if not _PLAIN_PATH(path) or (query and not _PLAIN_QUERY(query)):
            return await self.fallback.send(method, path, options)
        target = (f"{self.base_path}{path}?{query}" if query else f"{self.base_path}{path}").encode("ascii")
        # After the fixed headers (Host and the client's): the request's own.
        headers: list[tuple[bytes, bytes]] = []
        content = options.content
        if content is not None:
            kind = self._content_types.get(options.content_type)
            if kind is None:
                kind = self._content_types[options.content_type] = options.content_type.encode("latin-1")
            headers.append((b"Content-Type", kind))
        if content is not None or method in ("POST", "PUT", "PATCH"):
            headers.append((b"Content-Length", b"%d" % len(content or b"")))
        if (authorization := self.authorization) is not None:
            headers.append((b"Authorization", authorization().encode("latin-1")))
        if (traced := trace_headers()) is not None:
            headers += ((name.encode("latin-1"), value.encode("latin-1")) for name, value in traced)
        stream = options.stream
        return await self.transport.request(
            method.encode("ascii"),
            target,
            headers,
            content or b"",
            self.stream_timeouts if stream else self.timeouts,
            stream=stream,
            load=options.load,
            fixed_headers=self.headers,
        )

    async def aclose(self) -> None:
        """Close the transport. Cancellation: not shielded here (the client shields it)."""
        await self.transport.aclose()


_HTTPX_POOL_ONLY = frozenset({"proxy", "mounts", "cert", "http1", "http2", "limits", "trust_env", "transport"})


def _needs_httpx_pool(kwargs: Mapping[str, Any], base: httpx.URL) -> bool:
    """Whether requests must go through ``httpx.AsyncClient`` and its own transports: a proxy
    (configured, or from ``HTTPS_PROXY`` and friends, which httpx honours), another setting
    only httpx's transports implement, or a TLS context of a class that wraps sockets its own
    way (``truststore.SSLContext`` verifies in ``wrap_socket``, before the handshake the
    engine's transport drives; httpx's transports go through ``wrap_bio``)."""
    if _HTTPX_POOL_ONLY & kwargs.keys() or base.scheme not in ("http", "https"):
        return True
    verify = kwargs.get("verify")
    if isinstance(verify, ssl.SSLContext) and not wraps_sockets_as_standard(verify):
        return True
    proxies = urllib.request.getproxies()
    return bool(proxies.get(base.scheme) or proxies.get("all"))


def open_sender(
    kwargs: Mapping[str, Any],
    headers: httpx.Headers,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Sender:
    """The sender of a client configured by ``kwargs`` (``httpx.AsyncClient``'s keyword
    arguments, ``headers`` apart), each network operation bounded by ``timeout`` seconds.

    With ``transport``, requests go through it (the config's proxy and TLS settings are
    unused). Else, when a proxy or a setting only httpx implements applies, through an
    ``httpx.AsyncClient``; else through the engine's own transport. Requests to an engine
    transport go as their parts (:class:`DirectSender`) when the server's URL has no query or
    fragment and the credentials add at most an ``Authorization`` header (a bearer token,
    given or read from a file); other credentials take httpx's auth flow. Synchronous.
    """
    base = httpx.URL(kwargs.get("base_url") or "")
    defaults = RequestDefaults.of(base, headers, timeout)
    if transport is None:
        if _needs_httpx_pool(kwargs, base):
            return PoolSender(httpx.AsyncClient(timeout=httpx.Timeout(timeout), **kwargs), defaults)
        verify = kwargs.get("verify", True)
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        transport = Transport(base, ssl_context=context)
    auth = kwargs.get("auth")
    sender = TransportSender(transport, auth, defaults)
    if not isinstance(transport, Transport) or base.query or base.fragment:
        return sender
    if auth is None:
        authorization = None
    elif isinstance(auth, BearerTokenAuth | TokenFileAuth):
        authorization = auth.authorization
    else:
        return sender
    host = httpx.Request("GET", base).headers["Host"]
    raw_headers = ((b"Host", host.encode("ascii")), *(
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in defaults.headers
    ))
    return DirectSender(
        transport,
        base.raw_path.decode("ascii").rstrip("/"),
        raw_headers,
        authorization,
        sender,
        defaults.timeouts,
        defaults.stream_timeouts,
    )
