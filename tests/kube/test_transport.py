"""The client's default transport (engine.kube._client._transport) over real loopback sockets: reuse,
streaming, early close, cancellation, expiry, limits, timeouts and TLS."""

from __future__ import annotations

import contextlib
import gzip
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest
import trio
import trio.testing
import trustme

from engine.kube import Client, Config, NotFoundError, RetryPolicy, TLSVerificationError
from engine.kube._client._sender import DirectSender, PoolSender
from engine.kube._client._transport import Transport


class Server:
    """A loopback HTTP/1.1 server on h11. Every response names its connection (``x-conn``).

    Paths: ``/json`` answers at once; ``/big`` answers 250 KiB in one write (over TLS: many
    records in one segment); ``/gzip`` answers ``{"ok":true}`` gzip-encoded; ``/chunked`` sends three chunks, yielding between them;
    ``/stream`` sends one chunk and then waits for ``release`` (a watch); ``/records`` too, then
    sends three chunks in three writes (over TLS: three records) and sets ``records_sent``; ``/close`` answers
    with ``Connection: close``; ``/hang`` never answers; ``/drop`` answers, then closes the
    connection without saying so (a server's idle timeout).
    """

    def __init__(self) -> None:
        self.connections = 0
        self.closed = 0
        self.requests: list[tuple[int, str, bytes]] = []
        self.heads: list[list[tuple[bytes, bytes]]] = []
        """Each request's headers as received (names lower-cased by h11)."""
        self.release = trio.Event()
        self.records_sent = trio.Event()
        self.ssl: ssl.SSLContext | None = None
        self.peer_certs: list[dict[str, Any] | None] = []
        self.port = 0

    async def start(self, nursery: trio.Nursery) -> str:
        listeners = await nursery.start(partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{self.port}"

    async def _handle(self, tcp: trio.SocketStream) -> None:
        self.connections += 1
        conn_id = self.connections
        stream: trio.abc.Stream = tcp
        try:
            if self.ssl is not None:
                tls = trio.SSLStream(tcp, self.ssl, server_side=True, https_compatible=True)
                await tls.do_handshake()
                self.peer_certs.append(tls.getpeercert())
                stream = tls
            await self._serve(stream, conn_id)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            await trio.aclose_forcefully(stream)
            self.closed += 1

    async def _serve(self, stream: trio.abc.Stream, conn_id: int) -> None:
        conn = h11.Connection(h11.SERVER)

        async def next_event() -> Any:
            while True:
                event = conn.next_event()
                if event is not h11.NEED_DATA:
                    return event
                data = await stream.receive_some(65536)
                conn.receive_data(data)

        async def send(*events: Any) -> None:
            await stream.send_all(b"".join(conn.send(e) or b"" for e in events))

        while True:
            event = await next_event()
            if isinstance(event, h11.ConnectionClosed):
                return
            assert isinstance(event, h11.Request)
            body = b""
            while not isinstance(part := await next_event(), h11.EndOfMessage):
                body += part.data
            path = event.target.decode()
            self.requests.append((conn_id, path, body))
            self.heads.append(list(event.headers))
            headers = [("x-conn", str(conn_id))]
            if path == "/json":
                payload = b'{"ok":true}'
                await send(h11.Response(status_code=200, headers=[*headers, ("content-length", str(len(payload)))]),
                           h11.Data(data=payload), h11.EndOfMessage())
            elif path == "/chunked":
                await send(h11.Response(status_code=200, headers=[*headers, ("transfer-encoding", "chunked")]))
                for part in (b"a", b"b", b"c"):
                    await trio.testing.wait_all_tasks_blocked()
                    await send(h11.Data(data=part))
                await send(h11.EndOfMessage())
            elif path == "/stream":
                await send(h11.Response(status_code=200, headers=[*headers, ("transfer-encoding", "chunked")]),
                           h11.Data(data=b"first\n"))
                await until(self.release.wait, stream)
                await send(h11.Data(data=b"last\n"), h11.EndOfMessage())
            elif path == "/records":
                await send(h11.Response(status_code=200, headers=[*headers, ("transfer-encoding", "chunked")]),
                           h11.Data(data=b"first\n"))
                await until(self.release.wait, stream)
                for part in (b"a\n", b"b\n", b"c\n"):
                    await send(h11.Data(data=part))
                self.records_sent.set()
                await send(h11.EndOfMessage())
            elif path == "/gzip":
                payload = gzip.compress(b'{"ok":true}')
                await send(h11.Response(status_code=200, headers=[
                    *headers, ("content-encoding", "gzip"), ("content-length", str(len(payload)))]),
                    h11.Data(data=payload), h11.EndOfMessage())
            elif path == "/big":
                payload = bytes(range(256)) * 1000
                await send(h11.Response(status_code=200, headers=[*headers, ("content-length", str(len(payload)))]),
                           h11.Data(data=payload), h11.EndOfMessage())
            elif path == "/close":
                await send(h11.Response(status_code=200, headers=[*headers, ("connection", "close"), ("content-length", "0")]),
                           h11.EndOfMessage())
                return
            elif path == "/drop":
                await send(h11.Response(status_code=200, headers=[*headers, ("content-length", "0")]), h11.EndOfMessage())
                return
            elif path == "/hang":
                await until(trio.sleep_forever, stream)
            else:
                await send(h11.Response(status_code=404, headers=[*headers, ("content-length", "0")]), h11.EndOfMessage())
            conn.start_next_cycle()


async def until(wait: Any, stream: trio.abc.Stream) -> None:
    """Return when ``wait()`` does; raise ``ClosedResourceError`` if the client closes first."""
    closed = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal closed
            while await stream.receive_some(65536):
                pass
            closed = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await wait()
        nursery.cancel_scope.cancel()
    if closed:
        raise trio.ClosedResourceError("the client closed the connection")


_CA = trustme.CA()


@pytest.fixture(params=[False, True], ids=["tcp", "tls"])
def tls(request: pytest.FixtureRequest) -> bool:
    """Whether the test runs over TLS (the transport's ``ssl.SSLSocket``) or plain TCP."""
    return bool(request.param)


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    _CA.configure_trust(context)
    return context


@contextlib.asynccontextmanager
async def serving(
    server: Server | None = None, *, tls: bool = False, **transport_options: Any
) -> AsyncIterator[tuple[Server, httpx.AsyncClient, Transport]]:
    """A server, and an httpx client on a :class:`Transport` to it (over TLS with ``tls``)."""
    if tls:
        server = server or tls_server(_CA.issue_cert("127.0.0.1"))
        transport_options.setdefault("ssl_context", client_context())
    server = server or Server()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = Transport(url, ssl_context=transport_options.pop("ssl_context", None), **transport_options)
        async with httpx.AsyncClient(base_url=url, transport=transport, timeout=None) as client:
            yield server, client, transport
        nursery.cancel_scope.cancel()


async def wait_closed(server: Server, count: int) -> None:
    with trio.fail_after(30):
        while server.closed < count:
            await trio.sleep(0)


async def test_sequential_requests_reuse_one_connection(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        for _ in range(5):
            response = await client.get("/json")
            assert response.json() == {"ok": True}
            assert response.headers["x-conn"] == "1"
        response = await client.post("/json", content=b"x" * 100_000)
        assert response.headers["x-conn"] == "1"
        assert server.requests[-1] == (1, "/json", b"x" * 100_000)
        assert server.connections == 1


async def test_concurrent_requests_open_connections_and_the_newest_idle_one_is_reused_first(tls: bool) -> None:
    async with serving(max_idle=3, tls=tls) as (server, client, transport):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(client.get, "/chunked")
        assert server.connections == 5
        await wait_closed(server, 2)  # the idle list keeps 3; the other two were closed
        first = (await client.get("/json")).headers["x-conn"]
        second = (await client.get("/json")).headers["x-conn"]
        assert first == second
        assert server.connections == 5


async def test_a_streamed_body_read_to_the_end_gives_its_connection_back(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        async with client.stream("GET", "/chunked") as response:
            assert [chunk async for chunk in response.aiter_bytes()] == [b"a", b"b", b"c"]
        assert (await client.get("/json")).headers["x-conn"] == "1"
        assert server.connections == 1


async def test_a_body_closed_before_its_end_closes_its_connection(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        async with client.stream("GET", "/stream") as response:
            assert await response.aiter_bytes().__anext__() == b"first\n"
        await wait_closed(server, 1)
        assert (await client.get("/json")).headers["x-conn"] == "2"


async def test_a_watch_like_stream_delivers_chunks_as_they_come_and_ends(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        async with client.stream("GET", "/stream") as response:
            lines = response.aiter_lines()
            assert await lines.__anext__() == "first"
            server.release.set()
            assert [line async for line in lines] == ["last"]
        assert (await client.get("/json")).headers["x-conn"] == "1"


async def test_a_whole_answer_is_loaded_and_an_encoded_one_decoded() -> None:
    async with serving() as (server, client, transport):
        for stream in (False, True):
            for load in (False, True):
                timeouts = {"read": 5.0}
                plain = await transport.request(b"GET", b"/json", [(b"Host", b"x")], b"", timeouts, stream=stream, load=load)
                assert plain.read() == plain.content == await plain.aread() == b'{"ok":true}'
                assert plain.json() == {"ok": True} and plain.headers["x-conn"] == "1"
                encoded = await transport.request(b"GET", b"/gzip", [(b"Host", b"x")], b"", timeouts, stream=stream, load=load)
                assert encoded.read() == encoded.content == b'{"ok":true}'
                assert encoded.headers["content-encoding"] == "gzip"
        assert (await client.get("/gzip")).json() == {"ok": True}


async def test_fixed_headers_are_written_once_per_tuple_and_checked_until_they_pass() -> None:
    async with serving() as (server, client, transport):
        timeouts = {"read": 5.0}
        broken = ((b"Host", b"x"), (b"X-Fixed", b"a\r\nInjected: 1"))
        for _ in range(2):
            with pytest.raises(httpx.RemoteProtocolError, match="^the request header b'X-Fixed' must have a valid name and value$"):
                await transport.request(b"GET", b"/json", [], b"", timeouts, stream=False, fixed_headers=broken)
        first = ((b"Host", b"x"), (b"X-Fixed", b"1"))
        second = ((b"Host", b"x"), (b"X-Fixed", b"2"))
        for fixed in (first, first, second, first):
            await transport.request(b"GET", b"/json", [(b"X-Own", b"o")], b"", timeouts, stream=False, fixed_headers=fixed)
        assert [head[:3] for head in server.heads] == [
            [(b"host", b"x"), (b"x-fixed", value), (b"x-own", b"o")] for value in (b"1", b"1", b"2", b"1")
        ]


async def test_a_stream_takes_the_records_already_waiting_in_one_read(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        async with client.stream("GET", "/records") as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__() == b"first\n"
            server.release.set()
            await server.records_sent.wait()
            assert await chunks.__anext__() == b"a\nb\nc\n"
            assert [chunk async for chunk in chunks] == []
        assert (await client.get("/json")).headers["x-conn"] == "1"


async def test_a_read_timeout_is_left_to_an_enclosing_deadline_that_comes_first(
    autojump_clock: trio.testing.MockClock, tls: bool
) -> None:
    async with serving(tls=tls) as (server, client, transport):
        await client.get("/json")
        with trio.move_on_after(2) as scope:
            await client.get("/hang", timeout=httpx.Timeout(None, read=3))
        assert scope.cancelled_caught
        with trio.move_on_after(5) as scope, pytest.raises(httpx.ReadTimeout):
            await client.get("/hang", timeout=httpx.Timeout(None, read=3))
        assert not scope.cancelled_caught
        await wait_closed(server, 2)
        assert transport._open == 0


async def test_a_cancelled_request_closes_its_connection(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        with trio.move_on_after(5) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.get, "/hang")
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        await wait_closed(server, 1)
        assert transport._open == 0
        assert (await client.get("/json")).headers["x-conn"] == "2"


async def test_a_cancelled_stream_read_closes_its_connection(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        async with client.stream("GET", "/stream") as response:
            chunks = response.aiter_bytes()
            await chunks.__anext__()
            with trio.move_on_after(5) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(chunks.__anext__)
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
        await wait_closed(server, 1)
        assert transport._open == 0


async def test_connection_close_and_a_server_that_dropped_an_idle_connection_get_a_new_one(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        assert (await client.get("/close")).headers["x-conn"] == "1"
        assert (await client.get("/drop")).headers["x-conn"] == "2"
        await wait_closed(server, 2)
        response = await client.post("/json", content=b"{}")
        assert response.headers["x-conn"] == "3"


async def test_idle_connections_expire_on_trios_clock(mock_clock: trio.testing.MockClock, tls: bool) -> None:
    async with serving(keepalive_expiry=5.0, tls=tls) as (server, client, transport):
        assert (await client.get("/json")).headers["x-conn"] == "1"
        mock_clock.jump(4)
        assert (await client.get("/json")).headers["x-conn"] == "1"
        mock_clock.jump(6)
        assert (await client.get("/json")).headers["x-conn"] == "2"
        await wait_closed(server, 1)


async def test_the_connection_limit_makes_a_request_wait_and_the_pool_timeout_bounds_it(tls: bool) -> None:
    async with serving(max_connections=1, tls=tls) as (server, client, transport):
        async with client.stream("GET", "/stream") as response:
            with pytest.raises(httpx.PoolTimeout):
                await client.get("/json", timeout=httpx.Timeout(None, pool=0))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.get, "/json")
                await trio.testing.wait_all_tasks_blocked()
                assert server.connections == 1
                server.release.set()
                await response.aread()
        assert server.connections == 1
        assert [path for _, path, _ in server.requests] == ["/stream", "/json"]


async def test_a_read_timeout_raises_and_closes_the_connection(autojump_clock: trio.testing.MockClock, tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        await client.get("/json")
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/hang", timeout=httpx.Timeout(None, read=3))
        await wait_closed(server, 1)
        assert transport._open == 0


async def test_a_body_larger_than_the_socket_takes_at_once_is_sent_whole(tls: bool) -> None:
    body = bytes(range(256)) * (32 * 1024)
    async with serving(tls=tls) as (server, client, transport):
        response = await client.post("/json", content=body, timeout=httpx.Timeout(30))
        assert response.json() == {"ok": True}
        assert server.requests == [(1, "/json", body)]
        assert (await client.get("/json")).headers["x-conn"] == "1"


async def test_an_answer_of_many_records_in_one_write_is_read_whole(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        for _ in range(3):
            response = await client.get("/big")
            assert response.content == bytes(range(256)) * 1000
        assert server.connections == 1


@pytest.mark.parametrize("close_notify", [True, False], ids=["close-notify", "ragged-eof"])
async def test_a_tls_body_read_until_the_servers_close_ends_with_or_without_close_notify(close_notify: bool) -> None:
    context = tls_server(_CA.issue_cert("127.0.0.1")).ssl
    assert context is not None

    async def handle(tcp: trio.SocketStream) -> None:
        tls = trio.SSLStream(tcp, context, server_side=True, https_compatible=not close_notify)
        request = b""
        while b"\r\n\r\n" not in request:
            request += await tls.receive_some(65536)
        await tls.send_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello, ")
        await tls.send_all(b"until the end")
        await tls.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        url = f"https://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=url, transport=Transport(url, ssl_context=client_context())) as client:
            response = await client.get("/")
        assert response.content == b"hello, until the end"
        nursery.cancel_scope.cancel()


async def test_a_write_timeout_raises_and_closes_the_connection(autojump_clock: trio.testing.MockClock, tls: bool) -> None:
    accepted: list[trio.SocketStream] = []
    server = tls_server(_CA.issue_cert("127.0.0.1")).ssl if tls else None
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _never_reads(accepted, server), 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        scheme = "https" if tls else "http"
        transport = Transport(f"{scheme}://127.0.0.1:{port}", ssl_context=client_context() if tls else None)
        request = httpx.Request(
            "POST", f"{scheme}://127.0.0.1:{port}/", content=b"x" * (64 * 1024 * 1024),
            extensions={"timeout": {"write": 3.0}},
        )
        with pytest.raises(httpx.WriteTimeout, match="^timed out sending the request$"):
            await transport.handle_async_request(request)
        assert transport._open == 0
        nursery.cancel_scope.cancel()


def _never_reads(accepted: list[trio.SocketStream], context: ssl.SSLContext | None = None) -> Any:
    """A connection handler that reads nothing (after the TLS handshake, with ``context``)."""

    async def handle(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        if context is not None:
            await trio.SSLStream(stream, context, server_side=True).do_handshake()
        await trio.sleep_forever()

    return handle


async def test_a_request_cancelled_before_it_is_sent_sends_nothing(tls: bool) -> None:
    async with serving(tls=tls) as (server, client, transport):
        await client.get("/json")
        with trio.CancelScope() as scope:
            scope.cancel()
            await client.get("/json")
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert [path for _, path, _ in server.requests] == ["/json"]
        assert transport._open == 0
        assert (await client.get("/json")).headers["x-conn"] == "2"


async def test_an_unreachable_server_and_another_origin_are_transport_errors() -> None:
    with socket_bound() as port:
        transport = Transport(f"http://127.0.0.1:{port}")
        with pytest.raises(httpx.ConnectError, match="all attempts to connect"):
            await transport.handle_async_request(httpx.Request("GET", f"http://127.0.0.1:{port}/"))
        with pytest.raises(httpx.UnsupportedProtocol):
            await transport.handle_async_request(httpx.Request("GET", "http://example.com/"))
    with pytest.raises(ValueError, match="http or https"):
        Transport("ftp://example.com")


@contextlib.contextmanager
def socket_bound() -> Any:
    """A loopback port that is bound but not listening (connections are refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# --- TLS, through Config.ssl_context and the Client ---


def tls_server(cert: trustme.LeafCert, client_ca: trustme.CA | None = None) -> Server:
    server = Server()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
    server.ssl = context
    return server


def kubeconfig(server: str, tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None) -> Config:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user or {"token": "abc.def"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return Config.from_dict(doc, path=tmp_path / "kubeconfig")


async def serve_and_get(
    tmp_path: Path, server: Server, cluster: dict[str, Any], user: dict[str, Any] | None = None
) -> dict[str, Any] | Exception:
    """``GET /json`` with a Client configured by ``cluster`` and ``user``: the answer, or the
    exception the client raised."""
    result: dict[str, Any] | Exception
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        async with Client(kubeconfig(url, tmp_path, cluster, user), retry=RetryPolicy(max_attempts=1)) as client:
            assert isinstance(client._sender, DirectSender)
            try:
                result = await client._request_json("GET", "/json")
            except Exception as exc:
                result = exc
        nursery.cancel_scope.cancel()
    return result


def pem(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


async def test_tls_verified_against_the_kubeconfig_ca_data_and_file(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    assert await serve_and_get(tmp_path, tls_server(cert), {"certificate-authority-data": pem(ca.cert_pem.bytes())}) == {"ok": True}
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    assert await serve_and_get(tmp_path, tls_server(cert), {"certificate-authority": str(tmp_path / "ca.pem")}) == {"ok": True}


async def test_tls_client_certificate_is_presented(tmp_path: Path) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    server = tls_server(ca.issue_cert("127.0.0.1"), client_ca=client_ca)
    client_cert = client_ca.issue_cert("alice")
    user = {
        "client-certificate-data": pem(client_cert.cert_chain_pems[0].bytes()),
        "client-key-data": pem(client_cert.private_key_pem.bytes()),
    }
    assert await serve_and_get(tmp_path, server, {"certificate-authority-data": pem(ca.cert_pem.bytes())}, user) == {"ok": True}
    assert server.peer_certs[0], "the server required a client certificate and got one"


async def test_tls_server_name_and_insecure_skip_tls_verify(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("kube.internal")
    cluster = {"certificate-authority-data": pem(ca.cert_pem.bytes()), "tls-server-name": "kube.internal"}
    assert await serve_and_get(tmp_path, tls_server(cert), cluster) == {"ok": True}
    untrusted = trustme.CA().issue_cert("elsewhere.example")
    assert await serve_and_get(tmp_path, tls_server(untrusted), {"insecure-skip-tls-verify": True}) == {"ok": True}


async def test_tls_verification_is_on_by_default_and_failures_are_classified(tmp_path: Path) -> None:
    cert = trustme.CA().issue_cert("127.0.0.1")
    server = tls_server(cert)
    error = await serve_and_get(tmp_path, server, {})
    assert isinstance(error, TLSVerificationError)
    assert str(error) == (
        f"cannot verify the certificate of the API server at https://127.0.0.1:{server.port}: "
        "x509: certificate signed by unknown authority (trusted authorities: the system trust store)"
    )
    ca = trustme.CA()
    server = tls_server(ca.issue_cert("kube.internal"))
    error = await serve_and_get(tmp_path, server, {"certificate-authority-data": pem(ca.cert_pem.bytes())})
    assert isinstance(error, TLSVerificationError)
    assert "x509: certificate is not valid for 127.0.0.1" in str(error)


class _VerifiesInWrapSocket(ssl.SSLContext):
    """A context that checks the peer in ``wrap_socket``, as ``truststore.SSLContext`` does on
    macOS and Windows: it works only when the handshake is done there (``wrap_bio`` paths,
    as httpx's transports take, are not checked here)."""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        wrapped = super().wrap_socket(sock, *args, **kwargs)
        if not wrapped.getpeercert(binary_form=True):
            wrapped.close()
            raise ssl.SSLError("the peer sent no certificates to verify")
        return wrapped


class _WithVerify:
    """A client configuration that is a :class:`Config` but for its TLS context."""

    def __init__(self, config: Config, verify: ssl.SSLContext) -> None:
        self._config, self._verify = config, verify

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)

    def httpx_client_kwargs(self, **options: Any) -> dict[str, Any]:
        return {**self._config.httpx_client_kwargs(**options), "verify": self._verify}


async def test_a_tls_context_of_a_class_that_wraps_sockets_its_own_way_goes_through_httpxs_pool(tmp_path: Path) -> None:
    verify = _VerifiesInWrapSocket(ssl.PROTOCOL_TLS_CLIENT)
    _CA.configure_trust(verify)
    server = tls_server(_CA.issue_cert("127.0.0.1"))
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        config = _WithVerify(kubeconfig(url, tmp_path, {}), verify)
        async with Client(config, retry=RetryPolicy(max_attempts=1)) as client:  # type: ignore[arg-type]
            assert isinstance(client._sender, PoolSender)
            assert await client._request_json("GET", "/json") == {"ok": True}
        nursery.cancel_scope.cancel()


# --- the client's request URLs ---


@pytest.mark.parametrize("server", ["https://10.0.0.1:6443", "http://127.0.0.1:8080/", "https://rancher.example/k8s/clusters/c-1"])
@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/namespaces/default/configmaps/cm-1", None),
        ("/apis/bench.example.com/v1/namespaces/n/widgets/w/status", "fieldManager=me&force=true"),
        ("/api/v1/pods", "labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=true"),
        ("/api/v1/namespaces/default/configmaps/a%2Fb", None),
        ("/api/v1/namespaces/default/configmaps/..", None),
        ("/api/v1/namespaces/default/configmaps/caf\u00e9 x", "q=100%"),
    ],
)
async def test_request_urls_are_the_ones_httpx_would_parse(server: str, path: str, query: str | None, tmp_path: Path) -> None:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    async with Client(Config.from_dict(doc), transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        url = client._sender.defaults.url(path, query)
    expected = httpx.URL(server.rstrip("/") + path + ("" if query is None else "?" + query))
    assert url == expected
    assert (url.raw_path, url.host, url.port, url.scheme) == (expected.raw_path, expected.host, expected.port, expected.scheme)


async def test_a_proxy_url_sends_requests_through_httpxs_pool_to_the_proxy(tmp_path: Path) -> None:
    proxy = Server()
    async with trio.open_nursery() as nursery:
        proxy_url = await proxy.start(nursery)
        config = kubeconfig("http://kube.invalid:6443", tmp_path, {"proxy-url": proxy_url})
        async with Client(config, retry=RetryPolicy(max_attempts=1)) as client:
            assert isinstance(client._sender, PoolSender)
            with pytest.raises(NotFoundError):
                await client._request_json("GET", "/json")
        nursery.cancel_scope.cancel()
    assert [path for _, path, _ in proxy.requests] == ["http://kube.invalid:6443/json"]


async def test_a_proxy_from_the_environment_is_honoured_by_httpxs_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    async with Client(kubeconfig("https://kube.invalid:6443", tmp_path, {})) as client:
        assert isinstance(client._sender, PoolSender)
    monkeypatch.delenv("HTTPS_PROXY")
    async with Client(kubeconfig("https://kube.invalid:6443", tmp_path, {})) as client:
        assert isinstance(client._sender, DirectSender) and isinstance(client._sender.transport, Transport)
