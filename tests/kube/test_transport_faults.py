"""The client's transport (engine.kube._client._transport) against a misbehaving loopback server, over
plain TCP and TLS: slow bytes, a reset mid-body, a TLS close without close_notify, a server that never
answers, answers past the transport's limits. Each ends within its timeout (on trio's MockClock)
with one line from the engine's error types; and thousands of requests, some failing, leak no
socket or file descriptor."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trustme

from engine.kube import Client, Config, RetryPolicy, TransportError
from engine.kube._client import _transport
from engine.kube._client._transport import Transport

_CA = trustme.CA()
_CERT = _CA.issue_cert("127.0.0.1")

Handler = Callable[[trio.abc.Stream, trio.SocketStream], Awaitable[None]]
"""Serves one connection: the stream to talk on (TLS or not) and the TCP stream under it."""


@pytest.fixture(params=[False, True], ids=["tcp", "tls"])
def tls(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _CERT.configure_cert(context)
    return context


async def read_request(stream: trio.abc.Stream) -> bytes:
    """The request's head (the requests here have no body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise trio.BrokenResourceError("the client closed the connection")
        data += chunk
    return data


@contextlib.asynccontextmanager
async def serving(handler: Handler, *, tls: bool, handshake: bool = True) -> AsyncIterator[str]:
    """A loopback server whose connections ``handler`` serves; its URL. With ``handshake=False``
    a TLS server never answers the client's hello."""
    context = _server_context() if tls else None

    async def serve(tcp: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp
        try:
            if context is not None:
                if not handshake:
                    await trio.sleep_forever()
                stream = trio.SSLStream(tcp, context, server_side=True, https_compatible=True)
                await stream.do_handshake()
            await handler(stream, tcp)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(tcp)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


def client(url: str, tmp_path: Path, timeout: float) -> Client:
    cluster: dict[str, object] = {"server": url}
    if url.startswith("https:"):
        cluster["certificate-authority-data"] = base64.b64encode(_CA.cert_pem.bytes()).decode()
    doc = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "abc.def"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return Client(Config.from_dict(doc, path=tmp_path / "kubeconfig"), retry=RetryPolicy(max_attempts=1), timeout=timeout)


async def get(url: str, tmp_path: Path, timeout: float = 2.0) -> tuple[object, float]:
    """``GET /x`` with a client whose network operations time out after ``timeout`` seconds:
    the decoded answer or the error raised, and how long it took (on trio's clock)."""
    start = trio.current_time()
    result: object
    async with client(url, tmp_path, timeout) as kube:
        try:
            result = await kube._request_json("GET", "/x")
        except TransportError as exc:
            result = exc
    return result, trio.current_time() - start


TIMEOUTS: dict[str, float | None] = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}


def transport(url: str, **kwargs: Any) -> Transport:
    """The engine's transport to the loopback server at ``url`` (trusting its CA over TLS)."""
    context = ssl.create_default_context()
    _CA.configure_trust(context)
    return Transport(url, ssl_context=context if url.startswith("https:") else None, **kwargs)


def one_line(error: object) -> str:
    assert isinstance(error, TransportError), error
    text = str(error)
    assert "\n" not in text
    return text


# --- slow bytes ---


async def test_a_drip_fed_answer_with_gaps_shorter_than_the_read_timeout_within_the_timeout_is_read_whole(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path
) -> None:
    answer = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'

    async def drip(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        for i in range(0, len(answer), 3):
            await stream.send_all(answer[i : i + 3])
            await trio.sleep(1.5)
        await trio.sleep_forever()

    async with serving(drip, tls=tls) as url:
        result, took = await get(url, tmp_path, timeout=60.0)
    assert result == {"ok": True}
    assert 1.5 * (len(answer) // 3) <= took < 1.5 * (len(answer) // 3 + 1)


@pytest.mark.parametrize("where", ["head", "body"])
async def test_a_drip_fed_answer_that_stops_for_longer_than_the_read_timeout_times_out(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path, where: str
) -> None:
    sent = b"HTTP/1.1 200 OK\r\nContent-Le" if where == "head" else b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\""

    async def stall(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        for i in range(len(sent)):
            await stream.send_all(sent[i : i + 1])
            await trio.sleep(0.5)
        await trio.sleep_forever()

    async with serving(stall, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == (
        f"GET /x: the connection to the API server at {url} failed: timed out: the answer did not arrive whole within 2 s"
    )
    assert took == pytest.approx(2.0), "the whole answer's deadline, before any read's 2 s"


async def test_an_endless_drip_fed_head_ends_at_the_head_limit(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path
) -> None:
    async def endless(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\n")
        while True:
            await stream.send_all(b"X-Drip: " + b"d" * 1000 + b"\r\n")
            await trio.sleep(1.0)

    async with serving(endless, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=100.0)
    assert one_line(error) == (
        f"GET /x: the connection to the API server at {url} failed: a response head must be at most 65536 bytes"
    )
    assert took <= 67.0  # 1010 bytes a second: the limit, not a timeout, ends it


# --- a connection cut mid-body ---


def _reset(tcp: trio.SocketStream) -> None:
    """Close ``tcp`` with a TCP reset (SO_LINGER 0): no FIN, no TLS close_notify."""
    tcp.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    tcp.socket.close()


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_reset_mid_body_is_a_broken_connection(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path, framing: str
) -> None:
    head = b"Content-Length: 100\r\n\r\n{\"a\"" if framing == "length" else b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n"

    async def reset(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\n" + head)
        await trio.sleep(0.5)
        _reset(tcp)

    async with serving(reset, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    # Over TLS, OpenSSL (3.x) reports the reset as an end of the stream without close_notify.
    cut = "before the end of the response body" if framing == "length" else "in the middle of a chunked response body"
    reason = f"the server closed the connection {cut}" if tls else "connection reset by peer"
    assert one_line(error) == f"GET /x: the connection to the API server at {url} failed: {reason}"
    assert took == pytest.approx(0.5)


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_tls_close_without_close_notify_mid_body_is_a_cut_answer(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, framing: str
) -> None:
    head = b"Content-Length: 100\r\n\r\n{\"a\"" if framing == "length" else b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n"
    cut = "before the end of the response body" if framing == "length" else "in the middle of a chunked response body"

    async def ragged(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\n" + head)
        await trio.sleep(0.5)
        await tcp.aclose()  # the TCP connection closes (FIN) without the TLS close_notify

    async with serving(ragged, tls=True) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == f"GET /x: the connection to the API server at {url} failed: the server closed the connection {cut}"
    assert took == pytest.approx(0.5)


# --- a server that never answers ---


async def test_a_server_that_never_answers_times_out(autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path) -> None:
    async def silent(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await trio.sleep_forever()

    async with serving(silent, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == f"GET /x: the connection to the API server at {url} failed: timed out waiting for the answer"
    assert took == pytest.approx(2.0)


async def test_a_tls_server_that_never_answers_the_handshake_times_out_connecting(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async def unused(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        raise AssertionError("the handshake never completes")

    async with serving(unused, tls=True, handshake=False) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == f"cannot reach the API server at {url}: timed out connecting"
    assert took == pytest.approx(2.0)


async def test_a_server_that_closes_without_answering(autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path) -> None:
    async def hang_up(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.aclose()

    async with serving(hang_up, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == (
        f"GET /x: the connection to the API server at {url} failed: the server closed the connection without answering"
    )
    assert took < 2.0


# --- answers past the transport's limits ---


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", "a response head must be at most 65536 bytes"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + b"X-T: " + b"t" * 4000 + b"\r\n" * 1
            + (b"X-T: " + b"t" * 4000 + b"\r\n") * 20 + b"\r\n",
            "a response's trailers must be at most 65536 bytes",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;" + b"e" * 5000 + b"\r\n{}\r\n0\r\n\r\n",
            "a chunk size or trailer line must be at most 4096 bytes",
        ),
    ],
    ids=["head", "trailers", "chunk-line"],
)
async def test_an_answer_past_the_limits_is_refused(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path, answer: bytes, reason: str
) -> None:
    async def big(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(answer)
        await trio.sleep_forever()

    async with serving(big, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == f"GET /x: the connection to the API server at {url} failed: {reason}"
    assert took < 2.0


# --- answers that never end: interim responses, bodies, drips ---


@pytest.mark.parametrize("interim", [3, 6])
async def test_at_most_five_interim_responses_may_come_before_the_answer(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path, interim: int
) -> None:
    async def continues(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        for _ in range(interim):
            await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            await trio.sleep(0.1)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await trio.sleep_forever()

    async with serving(continues, tls=tls) as url:
        result, took = await get(url, tmp_path, timeout=2.0)
    if interim <= 5:
        assert result == {}
    else:
        assert one_line(result) == (
            f"GET /x: the connection to the API server at {url} failed: "
            "a response must follow at most 5 interim (1xx) responses"
        )
    assert took < 1.0


async def test_endless_interim_responses_end_at_the_limit_not_the_timeout(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path
) -> None:
    async def endless(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        while True:
            await stream.send_all(b"HTTP/1.1 102 Processing\r\n\r\n")

    async with serving(endless, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error).endswith("failed: a response must follow at most 5 interim (1xx) responses")
    assert took < 2.0


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_an_answer_body_past_the_limit_is_refused_but_a_watch_is_not_bounded(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path, framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_transport, "MAX_ANSWER", 100_000)
    heads = {
        "length": b"Content-Length: 1000000000000\r\n\r\n",
        "chunked": b"Transfer-Encoding: chunked\r\n\r\n",
        "close": b"Connection: close\r\n\r\n",
    }

    async def endless(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\n" + heads[framing])
        piece = b"x" * 16384
        while True:
            await stream.send_all(b"%x\r\n%b\r\n" % (len(piece), piece) if framing == "chunked" else piece)

    async with serving(endless, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
        assert one_line(error) == (
            f"GET /x: the connection to the API server at {url} failed: "
            "an answer (other than a watch) must be at most 100000 bytes"
        )
        assert took < 2.0
        async with transport(url) as raw:
            watch = await raw.request(b"GET", b"/w", [(b"Host", b"h")], b"", dict(TIMEOUTS, read=None))
            seen = 0
            async for chunk in watch.aiter_raw():
                seen += len(chunk)
                if seen > 300_000:
                    break
            await watch.aclose()
    assert seen > 300_000


async def test_an_answer_dripping_forever_ends_at_the_requests_timeout_in_one_line(
    autojump_clock: trio.testing.MockClock, tls: bool, tmp_path: Path
) -> None:
    """A byte every 1.5 s never trips the 2 s read timeout; the whole answer's deadline ends it."""

    async def drip(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        while True:
            await trio.sleep(1.5)
            await stream.send_all(b" ")

    async with serving(drip, tls=tls) as url:
        error, took = await get(url, tmp_path, timeout=2.0)
    assert one_line(error) == (
        f"GET /x: the connection to the API server at {url} failed: "
        "timed out: the answer did not arrive whole within 2 s"
    )
    assert took == pytest.approx(2.0)


# --- no leak over many requests ---


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def fd_check(requests: int, tls: bool) -> None:
    """``requests`` requests from 8 workers through one transport (at most 4 connections kept
    idle), one in five failing (the server resets, hangs up, answers garbage, or answers late);
    then no file descriptor is open that was not before."""
    handlers_open = 0

    async def answer(stream: trio.abc.Stream, tcp: trio.SocketStream) -> None:
        nonlocal handlers_open
        handlers_open += 1
        try:
            while True:
                path = (await read_request(stream)).split(b" ", 2)[1]
                if path == b"/reset":
                    _reset(tcp)
                    return
                if path == b"/hangup":
                    return
                if path == b"/garbage":
                    await stream.send_all(b"HTTP/1.1 2OO OK\r\n\r\n")
                    return
                if path == b"/late":
                    await trio.sleep(1)
                close = path == b"/close"
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n%s\r\n{}" % (b"Connection: close\r\n" if close else b"")
                )
                if close:
                    return
        finally:
            handlers_open -= 1

    paths = [b"/ok"] * 15 + [b"/close", b"/reset", b"/hangup", b"/garbage", b"/late"]
    failures = 0
    async with serving(answer, tls=tls) as url:
        before = open_fds()
        context = ssl.create_default_context()
        _CA.configure_trust(context)
        transport = Transport(url, ssl_context=context if tls else None, max_idle=4)
        headers = [(b"Host", url.split("//")[1].encode())]
        timeouts: dict[str, float | None] = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
        late = dict(timeouts, read=0.001)

        async def worker(first: int) -> None:
            nonlocal failures
            for i in range(first, requests, 8):
                path = paths[i % len(paths)]
                try:
                    response = await transport.request(
                        b"GET", path, headers, b"", late if path == b"/late" else timeouts, stream=i % 3 == 0
                    )
                    await response.aread()
                    await response.aclose()
                    assert response.content == b"{}"
                except httpx.TransportError:
                    failures += 1

        async with trio.open_nursery() as nursery:
            for first in range(8):
                nursery.start_soon(worker, first)
        await transport.aclose()
        assert transport._open == 0
        with trio.move_on_after(5):
            while handlers_open:  # the server's side of each connection sees it closed
                await trio.sleep(0.01)
        assert (open_fds(), handlers_open) == (before, 0)
    assert failures == requests * 4 // 20


@pytest.mark.parametrize(("tls", "requests"), [(False, 2000), (True, 500)], ids=["tcp", "tls"])
async def test_requests_that_succeed_and_fail_leak_no_file_descriptor(tls: bool, requests: int) -> None:
    await fd_check(requests, tls)


@pytest.mark.soak
@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_ten_thousand_requests_leak_no_file_descriptor(tls: bool) -> None:
    await fd_check(10_000, tls)
