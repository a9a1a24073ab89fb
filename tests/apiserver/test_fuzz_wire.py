"""The embedded API server's socket under malformed bytes and slow clients (issue 36, item 3).

Garbage request lines, oversized heads, broken chunked bodies and lying lengths are answered
4xx (as Go's ``net/http`` answers them in front of kube-apiserver: plain text) or the
connection is closed, never 5xx; slow clients (a head dripping byte by byte, a body never
finished) hold only their own connection while well-formed requests keep being answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from engine.apiserver import ApiServer

from .conftest import CM, admin_headers, cm


@pytest.fixture
async def served() -> AsyncIterator[ApiServer]:
    async with ApiServer(seed=1) as server:
        yield server


async def _exchange(api: ApiServer, data: bytes, *, close: bool = False, until: bytes = b"\r\n") -> bytes:
    """Send ``data`` on a new connection and read until ``until`` arrives or the server closes
    the connection (10 s at most)."""
    stream = await trio.open_tcp_stream("127.0.0.1", int(api.url.rsplit(":", 1)[1]))
    answer = b""
    with trio.fail_after(10):
        try:
            await stream.send_all(data)
            if close:
                await stream.send_eof()
            while until not in answer and (chunk := await stream.receive_some(65536)):
                answer += chunk
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()
    return answer


def _status(answer: bytes) -> int | None:
    if not answer:
        return None
    line = answer.split(b"\r\n", 1)[0].split()
    return int(line[1])


async def _well_formed(client: httpx.AsyncClient, name: str) -> None:
    created = await client.post(CM, json=cm(name, data={"k": name}))
    assert created.status_code == 201, created.text
    got = await client.get(f"{CM}/{name}")
    assert got.status_code == 200 and got.json()["data"] == {"k": name}, got.text


HOST = b"Host: x\r\n"
CHUNKED = b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n"
LENGTH = b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n" + HOST

MALFORMED = {
    "garbage line": b"GARBAGE\r\n\r\n",
    "binary line": b"\x00\x01\x02\xff\r\n\r\n",
    "no version": b"GET /api\r\n\r\n",
    "unknown version": b"GET /api HTTP/9.9\r\n" + HOST + b"\r\n",
    "http/1.0 no host": b"GET /version HTTP/1.0\r\n\r\n",
    "header without colon": b"GET /api HTTP/1.1\r\n" + HOST + b"Bad Header\r\n\r\n",
    "space before colon": b"GET /api HTTP/1.1\r\n" + HOST + b"X-A : b\r\n\r\n",
    "control character in header": b"GET /api HTTP/1.1\r\n" + HOST + b"X-A: b\x00c\r\n\r\n",
    "bytes over 127 in target": b"GET /api/\xff\xfe HTTP/1.1\r\n" + HOST + b"\r\n",
    "no host": b"GET /api HTTP/1.1\r\n\r\n",
    "two hosts": b"GET /api HTTP/1.1\r\n" + HOST + HOST + b"\r\n",
    "obsolete line folding": b"GET /api HTTP/1.1\r\n" + HOST + b"X-A: b\r\n c\r\n\r\n",
    "oversized head": b"GET /api HTTP/1.1\r\n" + HOST + b"X-A: " + b"a" * (2 * 1024 * 1024) + b"\r\n\r\n",
    "chunk size not hex": CHUNKED + b"\r\nzz\r\n{}\r\n0\r\n\r\n",
    "chunk size overflow": CHUNKED + b"\r\nffffffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
    "chunk without its CRLF": CHUNKED + b"\r\n2\r\n{}XX0\r\n\r\n",
    "chunk extension garbage": CHUNKED + b"\r\n2;\x00=\"\r\n{}\r\n0\r\n\r\n",
    "chunked and a length": CHUNKED + b"Content-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "chunked twice": CHUNKED + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "unknown transfer coding": LENGTH + b"Transfer-Encoding: gzip\r\n\r\n{}",
    "negative length": LENGTH + b"Content-Length: -1\r\n\r\n{}",
    "length not a number": LENGTH + b"Content-Length: abc\r\n\r\n{}",
    "two different lengths": LENGTH + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
    "body over the limit": LENGTH + b"Content-Length: 99999999999\r\n\r\n{}",
}
TRUNCATED = {
    "chunked body cut": CHUNKED + b"\r\n10\r\n{\"a\":",
    "chunked body without its last chunk": CHUNKED + b"\r\n2\r\n{}\r\n",
    "length longer than the body": LENGTH + b"Content-Length: 100\r\n\r\n{}",
    "head cut": b"GET /api/v1/namespaces HTTP/1.1\r\nHo",
}


# Answers Go's net/http gives too (kube-apiserver never sees these requests): 501 for a
# transfer coding other than one "chunked", 505 for an HTTP version other than 1.x.
NOT_4XX = {
    "unknown transfer coding": {501},
    "chunked twice": {501},
    "unknown version": {505},
    "http/1.0 no host": {200},
    "chunked and a length": {201},
    "obsolete line folding": {403},
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
async def test_malformed_bytes_are_a_4xx(served: ApiServer, name: str) -> None:
    answer = await _exchange(served, MALFORMED[name])
    status = _status(answer)
    assert status is None or 400 <= status < 500 or status in NOT_4XX.get(name, ()), answer[:300]
    async with httpx.AsyncClient(base_url=served.url, headers=admin_headers(served), timeout=10) as client:
        await _well_formed(client, "after")


@pytest.mark.parametrize("name", sorted(TRUNCATED))
async def test_a_request_cut_short_gets_no_5xx(served: ApiServer, name: str) -> None:
    answer = await _exchange(served, TRUNCATED[name], close=True)
    status = _status(answer)
    assert status is None or 400 <= status < 500, answer[:300]
    async with httpx.AsyncClient(base_url=served.url, headers=admin_headers(served), timeout=10) as client:
        await _well_formed(client, "after")


async def test_garbage_pipelined_after_a_request_does_not_spoil_its_answer(served: ApiServer) -> None:
    token = served.admin_token.encode()
    request = b"GET /api/v1/namespaces/default HTTP/1.1\r\n" + HOST + b"Authorization: Bearer " + token + b"\r\n\r\n"
    answer = await _exchange(served, request + b"\x00GARBAGE\r\n\r\n", until=b"GARBAGE")
    first, _, rest = answer.partition(b"\r\n\r\n")
    assert _status(first) == 200
    assert b"HTTP/1.1 400" in rest


async def test_without_credentials_the_socket_answers_as_to_system_anonymous(served: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as anonymous:
        assert (await anonymous.get("/version")).status_code == 200
        for path in ("/api/v1/secrets", "/api", CM, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"):
            answer = await anonymous.get(path)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json()["reason"] == "Forbidden"
        answer = await anonymous.post(CM, content=b"{" * 10_000, headers={"content-type": "application/json"})
        assert answer.status_code == 403


async def test_slow_clients_do_not_hold_up_the_others(served: ApiServer) -> None:
    """Slowloris: heads dripping a byte at a time and bodies never finished, on 20 connections,
    while a client runs well-formed requests; each of those is answered promptly."""
    port = int(served.url.rsplit(":", 1)[1])
    head = b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    stuck_body = LENGTH + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"kind\":"
    stuck_chunks = CHUNKED + b"Content-Type: application/json\r\n\r\n400\r\n{\"kind\":"
    latencies: list[float] = []

    async def drip(stream: trio.SocketStream) -> None:
        for byte in head:
            await stream.send_all(bytes([byte]))
            await trio.sleep(0.02)
        await trio.sleep_forever()

    async def stall(stream: trio.SocketStream, start: bytes) -> None:
        await stream.send_all(start)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        streams = []
        for i in range(20):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            streams.append(stream)
            nursery.start_soon(drip if i % 2 else stall, *((stream,) if i % 2 else (stream, (stuck_body, stuck_chunks)[i % 4 // 2])))
        async with httpx.AsyncClient(base_url=served.url, headers=admin_headers(served), timeout=10) as client:
            for i in range(30):
                began = trio.current_time()
                await _well_formed(client, f"ok-{i}")
                latencies.append(trio.current_time() - began)
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    for stream in streams:
        await stream.aclose()
    assert max(latencies) < 5, latencies
    async with httpx.AsyncClient(base_url=served.url, headers=admin_headers(served), timeout=10) as client:
        await _well_formed(client, "after")


async def test_slow_clients_lose_their_connection_at_the_header_read_and_idle_timeouts() -> None:
    """A head never finished, a body never finished and a kept-alive connection left idle are
    each closed by the server (without an answer, as Go closes them) once their timeout
    passes, while well-formed requests are answered meanwhile; defaults are kube-apiserver's
    32 s for the head and 90 s idle (short ones here)."""
    assert (ApiServer().header_timeout, ApiServer().idle_timeout) == (32.0, 90.0)
    async with ApiServer(seed=1, header_timeout=0.5, read_timeout=1.0, idle_timeout=1.0) as server:
        port = int(server.url.rsplit(":", 1)[1])
        closed_after: dict[str, float] = {}

        async def hold(name: str, start: bytes) -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            began = trio.current_time()
            await stream.send_all(start)
            answer = b""
            with trio.fail_after(10):
                if name == "idle":
                    while b"\r\n\r\n" not in answer:
                        answer += await stream.receive_some(65536)
                    answer, began = b"", trio.current_time()
                while chunk := await stream.receive_some(65536):
                    answer += chunk
            closed_after[name] = trio.current_time() - began
            assert answer == b"", (name, answer)
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold, "head", b"GET /api HTTP/1.1\r\nHost: x\r\nX-Slow: a")
            nursery.start_soon(hold, "body", LENGTH + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
            nursery.start_soon(hold, "idle", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            async with httpx.AsyncClient(base_url=server.url, headers=admin_headers(server), timeout=10) as client:
                await _well_formed(client, "meanwhile")
    assert 0.5 <= closed_after["head"] < 3
    assert 1.0 <= closed_after["body"] < 3
    assert 0.9 <= closed_after["idle"] < 3, "from the answer the client read"
