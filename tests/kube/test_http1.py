"""The transport's HTTP/1.1 messages (engine.kube._client._http1): request heads, response heads and
bodies by their framing, fed whole and one byte at a time."""

from __future__ import annotations

import pytest

from engine.kube._client._http1 import ProtocolError, ResponseHead, header_lines, parse_head, request_head


def read_all(raw: bytes, method: bytes = b"GET", *, step: int | None = None, eof: bool = False) -> tuple[ResponseHead, bytes, bytearray]:
    """Parse ``raw`` fed ``step`` bytes at a time (all at once if None); the head, the body,
    and what is left in the buffer."""
    buffer = bytearray()
    pieces = [raw] if step is None else [raw[i : i + step] for i in range(0, len(raw), step)]
    head = None
    body = b""
    for i, piece in enumerate(pieces):
        buffer += piece
        last = i == len(pieces) - 1
        if head is None:
            head = parse_head(buffer, method)
            if head is None:
                continue
        while (data := head.body.read(buffer, eof and last)) is not None and data:
            body += data
        if head.body.done:
            break
    assert head is not None and head.body.done
    return head, body, buffer


def test_a_request_head_is_one_message() -> None:
    head = request_head(b"PATCH", b"/apis/x/v1/w/a/status?fieldManager=me", [(b"Host", b"k:6443"), (b"Content-Length", b"2")])
    assert head == b"PATCH /apis/x/v1/w/a/status?fieldManager=me HTTP/1.1\r\nHost: k:6443\r\nContent-Length: 2\r\n\r\n"


def test_header_lines_written_once_go_before_the_requests_own() -> None:
    lines = header_lines([(b"Host", b"k:6443"), (b"User-Agent", b"me")])
    assert lines == b"Host: k:6443\r\nUser-Agent: me\r\n"
    head = request_head(b"PATCH", b"/a", [(b"Content-Length", b"2")], lines)
    assert head == b"PATCH /a HTTP/1.1\r\nHost: k:6443\r\nUser-Agent: me\r\nContent-Length: 2\r\n\r\n"
    assert header_lines([]) == b""


@pytest.mark.parametrize(
    "header",
    [(b"X", b"a\r\nInjected: 1"), (b"Bad Name", b"v"), (b"Host", b"a\rb"), (b"User-Agent", b"a\nb"), (b"Host:", b"v")],
)
def test_header_lines_that_would_break_the_message_are_refused(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(ProtocolError, match="^the request header .* must have a valid name and value$"):
        header_lines([(b"Host", b"h"), header])


@pytest.mark.parametrize(
    ("method", "target", "headers"),
    [
        (b"GET", b"/a b", []),
        (b"GET", b"/a\r\nX: y", []),
        (b"G T", b"/", []),
        (b"GET", b"/", [(b"X", b"a\r\nInjected: 1")]),
        (b"GET", b"/", [(b"Bad Name", b"v")]),
        (b"GET", b"/a\x00", []),
        (b"GET", b"/a\n", []),
        (b"GET", b"/", [(b"Host", b"a\rb")]),
        (b"GET", b"/", [(b"User-Agent", b"a\nb")]),
        (b"GET", b"/", [(b"Authorization", b"Bearer a\x00")]),
        (b"GET", b"/", [(b"Host:", b"v")]),
    ],
)
def test_a_request_head_that_would_break_the_message_is_refused(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(ProtocolError, match="must"):
        request_head(method, target, headers)


@pytest.mark.parametrize("step", [None, 1, 3])
def test_content_length_body(step: int | None) -> None:
    head, body, rest = read_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}", step=step)
    assert (head.status, head.reason, head.keep_alive, body, rest) == (200, b"OK", True, b'{"ok":true}', bytearray())
    assert head.headers == [(b"Content-Type", b"application/json"), (b"Content-Length", b"11")]


@pytest.mark.parametrize("step", [None, 1, 2, 5])
def test_chunked_body_with_extensions_and_trailers(step: int | None) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    head, body, rest = read_all(raw, step=step)
    assert (head.keep_alive, head.body.delimited, body, rest) == (True, True, b"hello world", bytearray())


def test_interim_responses_are_skipped_and_bodiless_statuses_have_no_body() -> None:
    head, body, _ = read_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert (head.status, body) == (204, b"")
    head, body, _ = read_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", method=b"HEAD")
    assert (head.status, body) == (200, b"")


def test_a_body_without_length_ends_with_the_connection_and_is_not_reusable() -> None:
    head, body, _ = read_all(b"HTTP/1.1 200 OK\r\n\r\nuntil close", step=4, eof=True)
    assert (body, head.body.delimited) == (b"until close", False)


@pytest.mark.parametrize(
    ("raw", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", True),
    ],
)
def test_keep_alive(raw: bytes, keep_alive: bool) -> None:
    assert read_all(raw)[0].keep_alive is keep_alive


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"HTTP/2 200 OK\r\n\r\n", "status line"),
        (b"ICY 200 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "name: value"),
        (b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "must not start with whitespace"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "several Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "must be a number"),
    ],
)
def test_malformed_heads_raise(raw: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_head(bytearray(raw), b"GET")


def test_a_head_too_long_raises_and_an_incomplete_one_waits() -> None:
    buffer = bytearray(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000)
    with pytest.raises(ProtocolError, match="at most 65536 bytes"):
        parse_head(buffer, b"GET")
    partial = bytearray(b"HTTP/1.1 200 OK\r\nContent-Len")
    assert parse_head(partial, b"GET") is None
    assert partial == bytearray(b"HTTP/1.1 200 OK\r\nContent-Len")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "before the end"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "middle of a chunked"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "size in hex"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY", "end with CRLF"),
    ],
)
def test_malformed_or_cut_bodies_raise(raw: bytes, match: str) -> None:
    buffer = bytearray(raw)
    head = parse_head(buffer, b"GET")
    assert head is not None
    with pytest.raises(ProtocolError, match=match):
        while head.body.read(buffer, True):
            pass


# --- found by the h11 oracle (tests/kube/test_http1_h11.py) ---


def test_a_folded_header_line_is_unfolded_into_one_space() -> None:
    raw = b"HTTP/1.1 200 OK\r\nX-A: one \t\r\n \t two\r\nConnection: keep-alive,\r\n close\r\nContent-Length: 0\r\n\r\n"
    head, _, _ = read_all(raw)
    assert head.headers == [(b"X-A", b"one two"), (b"Connection", b"keep-alive, close"), (b"Content-Length", b"0")]
    assert head.keep_alive is False


@pytest.mark.parametrize(
    ("raw", "keep_alive"),
    [
        (b"HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", True),  # a later 1.x minor version is read as 1.1
        (b"HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n", True),  # an option, not a substring
        (b"HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", False),
    ],
)
def test_keep_alive_by_version_connection_options_and_framing(raw: bytes, keep_alive: bool) -> None:
    assert read_all(raw)[0].keep_alive is keep_alive


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n", "must not contain NUL, or CR or LF"),
        (b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "must not contain NUL, or CR or LF"),
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "must not contain NUL, or CR or LF"),
        (b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "must not contain NUL, or CR or LF"),
        (b"HTTP/1.1 099 Early\r\n\r\n", "must be from 100 to 999, not 099"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "must not switch protocols"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "must be chunked alone"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n", "must be chunked alone"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "must be chunked alone"),
        (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0 response must not have a Transfer-Encoding"),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", "must be a number"),
        (b"HTTP/1.1 100 Continue\r\nno colon\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", "name: value"),
    ],
)
def test_malformed_heads_found_by_the_oracle_raise(raw: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_head(bytearray(raw), b"GET")


def test_a_chunk_size_may_have_leading_zeros_past_16_digits() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000000005\r\nhello\r\n0000\r\n\r\n"
    assert read_all(raw, step=3)[1] == b"hello"


@pytest.mark.parametrize("step", [None, 1])
def test_trailers_are_checked_as_field_lines_folded_ones_too(step: int | None) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n folded\r\n\r\n"
    assert read_all(raw, step=step)[1] == b"a"


@pytest.mark.parametrize(
    ("trailers", "match"),
    [
        (b"bad\r\n", "trailer line must be 'name: value'"),
        (b" lead: x\r\n", "trailer line must be 'name: value'"),
        (b"X: a\x00\r\n", "must not contain NUL, or CR or LF"),
        (b"X: a\rb\r\n", "must not contain NUL, or CR or LF"),
        (b"X: " + b"t" * 4000 + b"\r\n" * 1 + (b"X: " + b"t" * 4000 + b"\r\n") * 16, "trailers must be at most 65536 bytes"),
    ],
)
def test_malformed_or_endless_trailers_raise(trailers: bytes, match: str) -> None:
    buffer = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailers + b"\r\n")
    head = parse_head(buffer, b"GET")
    assert head is not None
    with pytest.raises(ProtocolError, match=match):
        head.body.read(buffer, False)
