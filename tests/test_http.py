"""The shared HTTP/1.1 server (engine._http), over in-memory streams."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
import trio.testing

from engine._http import AbortStream, HTTPServer, Request, Response, serve_http


async def _read_until(stream: trio.abc.Stream, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
    return data


async def test_keep_alive_requests_are_parsed_and_answered_in_turn() -> None:
    seen: list[Request] = []

    async def handler(request: Request) -> Response:
        seen.append(request)
        return Response.text(200, b"hello")

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_http, server, handler)
        await client.send_all(b"GET /a%20b?x=1&x=2&flag HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\n\r\n")
        first = await _read_until(client, b"hello")
        await client.send_all(b"head /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
        second = await _read_until(client, b"\r\n\r\n")
        await client.send_stream.aclose()
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 5\r\n" in first
    assert second.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"\r\n\r\n")
    assert [(r.method, r.path, r.query, r.query_values, r.body) for r in seen] == [
        ("GET", "/a b", {"x": "2", "flag": ""}, {"x": ["1", "2"], "flag": [""]}, b""),
        ("HEAD", "/b", {}, {}, b"hi"),
    ]
    assert seen[0].headers["x-a"] == "1, 2"


async def test_a_streamed_response_is_chunked_and_ends_when_the_client_goes_away() -> None:
    closed = trio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            await trio.sleep_forever()
        finally:
            closed.set()

    async def handler(request: Request) -> Response:
        return Response(200, [("content-type", "application/json")], stream=chunks())

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_http, server, handler)
        await client.send_all(b"GET /watch HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await _read_until(client, b"first")
        await client.send_stream.aclose()
        with trio.fail_after(5):
            await closed.wait()
    assert b"transfer-encoding: chunked\r\n" in head.lower() and b"connection: close\r\n" in head


async def test_abort_stream_drops_the_connection_without_the_final_chunk() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"partial"
        raise AbortStream("dropped")

    async def handler(request: Request) -> Response:
        return Response(200, stream=chunks())

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_http, server, handler)
        await client.send_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        data = await _read_until(client, b"\r\n0\r\n\r\n")
    assert b"partial" in data and not data.endswith(b"0\r\n\r\n")


async def test_protocol_errors_and_large_bodies_answer_then_close() -> None:
    async def handler(request: Request) -> Response:
        raise AssertionError("not reached")

    for raw, status in ((b"NOT HTTP\r\n\r\n", b"400 Bad Request"),
                        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n0123456789X", b"413 ")):
        client, server = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve_small_bodies, server, handler)
            await client.send_all(raw)
            data = await _read_until(client, b"malformed HTTP request")
            assert await client.receive_some(65536) == b""
        assert data.startswith(b"HTTP/1.1 " + status) and b"connection: close\r\n" in data


async def _serve_small_bodies(stream: trio.abc.Stream, handler: object) -> None:
    await serve_http(stream, handler, max_body=10)  # type: ignore[arg-type]


async def test_an_idle_connection_is_closed_after_the_idle_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def handler(request: Request) -> Response:
        return Response.text(200, b"ok")

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, handler, idle_timeout=30))
        start = trio.current_time()
        assert await client.receive_some(65536) == b""
    assert trio.current_time() - start >= 30


async def test_http_server_routes_by_prefix_and_says_no_store() -> None:
    async def ok(request: Request) -> Response:
        return Response.text(200, request.path.encode())

    async def broken(request: Request) -> Response:
        raise RuntimeError("boom")

    server = HTTPServer({"/readyz/": ok, "/boom": broken}, name="test")
    for path, status, body in (("/readyz/informers", 200, b"/readyz/informers"), ("/nope", 404, b"not found\n"),
                               ("/boom", 500, b"internal error\n")):
        response = await server._dispatch(Request("GET", path, {}, {}, {}))
        assert (response.status, response.body) == (status, body)
        assert ("cache-control", "no-store") in response.headers
    posted = await server._dispatch(Request("POST", "/readyz/x", {}, {}, {}))
    assert posted.status == 405


async def _closed_at(client: trio.abc.Stream) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed."""
    data = b""
    while chunk := await client.receive_some(65536):
        data += chunk
    return data, trio.current_time()


async def _ok(request: Request) -> Response:
    return Response.text(200, b"ok")


async def _serve_with_timeouts(server: trio.abc.Stream) -> None:
    await serve_http(server, _ok, idle_timeout=90, header_timeout=32, read_timeout=60)


async def test_a_head_dripping_forever_is_cut_at_the_header_timeout_from_the_connections_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, _ok, idle_timeout=90, header_timeout=32, read_timeout=60))
        start = trio.current_time()

        async def drip() -> None:
            await client.send_all(b"GET / HTTP/1.1\r\nHost: h\r\n")
            while True:
                await trio.sleep(5)
                await client.send_all(b"X")

        nursery.start_soon(drip)
        answer, closed = await _closed_at(client)
        nursery.cancel_scope.cancel()
    assert answer == b"", "closed without an answer, as Go's net/http does"
    assert 32 <= closed - start < 33


async def test_a_body_never_finished_is_cut_at_the_read_timeout(autojump_clock: trio.testing.MockClock) -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, _ok, idle_timeout=90, header_timeout=32, read_timeout=60))
        start = trio.current_time()
        await client.send_all(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n{")
        answer, closed = await _closed_at(client)
    assert answer == b""
    assert 60 <= closed - start < 61


async def test_a_kept_alive_connection_idles_out_and_a_later_heads_clock_starts_at_its_first_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    request = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    for second_head_after in (89.0, None):
        client, server = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve_with_timeouts, server)
            await client.send_all(request)
            assert (await _read_until(client, b"ok")).startswith(b"HTTP/1.1 200 OK")
            answered = trio.current_time()
            if second_head_after is not None:
                await trio.sleep(second_head_after)
                await client.send_all(b"GET /slow HTTP/1.1\r\n")
            answer, closed = await _closed_at(client)
        assert answer == b""
        if second_head_after is None:
            assert 90 <= closed - answered < 91, "idled out"
        else:
            assert 89 + 32 <= closed - answered < 89 + 33, "cut 32 s after the second head began"


async def test_a_slow_but_timely_request_is_answered(autojump_clock: trio.testing.MockClock) -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, _ok, idle_timeout=90, header_timeout=32, read_timeout=60))
        for piece in (b"POST / HTTP/1.1\r\n", b"Host: h\r\n", b"Content-Length: 2\r\n\r\n", b"h", b"i"):
            await client.send_all(piece)
            await trio.sleep(10)
        assert (await _read_until(client, b"ok")).startswith(b"HTTP/1.1 200 OK")
        nursery.cancel_scope.cancel()
