"""The transport's response parsing (engine.kube._client._http1, driven by the transport's own read
loop) fuzzed against h11 as the oracle: the same bytes, split at the same points, give the same
response (status, reason, headers, body, whether the connection may be reused, what is left after
it) or an error from both. Where the engine differs from h11 by design, the difference is stated
below (:func:`engine_may_reject`, :func:`engine_may_accept`, :func:`comparable`) with its reason.
A mutation test plants bugs in the parser and checks that this oracle catches each one.
"""

from __future__ import annotations

import inspect
import re
import socket
import types
from typing import Any

import attrs
import h11
import h11._readers
import pytest
import trio
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from engine.kube._client import _http1, _transport
from engine.kube._client._http1 import MAX_HEAD, ProtocolError
from engine.kube._client._transport import Transport, _Connection

EXAMPLES = 300
"""The fixed budget of the default run (derandomized: the same examples every run)."""

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@attrs.frozen
class Example:
    raw: bytes
    """What the server sends, then closes the connection."""
    cuts: tuple[int, ...]
    """Where the bytes are split into the pieces that arrive one receive at a time."""
    method: bytes
    oversized: bool
    """Built to pass one of the engine's limits (head, chunk line, trailers): it must be refused."""

    def pieces(self) -> list[bytes]:
        bounds = [0, *self.cuts, len(self.raw)]
        return [self.raw[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@attrs.frozen
class Outcome:
    error: str | None = None
    status: int = 0
    reason: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    reusable: bool = False
    """Whether the connection may carry the next request (the engine: it went back to the pool)."""
    leftover: bytes = b""
    """What was received (or was still to come) after the response's end."""
    heads: tuple[tuple[bytes, tuple[tuple[bytes, bytes], ...]], ...] = ()
    """h11 only: the version and headers of each head it parsed (interim ones too)."""


# --- the two parsers ---


def engine_parse(example: Example) -> Outcome:
    """The answer as the transport reads it (``_response``, the whole body), the pieces coming
    one per receive and then the server's close."""
    pieces = iter(example.pieces())

    async def run() -> Outcome:
        transport = Transport("http://127.0.0.1:9")
        conn = _Connection(socket.socket())
        transport._open = 1

        async def receive(conn: _Connection, timeout: float | None, answer_by: float = 0.0) -> None:
            piece = next(pieces, None)
            if piece is None:
                conn.eof = True
            else:
                conn.buffer += piece

        transport._receive = receive  # type: ignore[method-assign]
        try:
            response = await transport._response(conn, example.method, {}, stream=False)
        except ProtocolError as exc:
            transport._discard(conn)
            return Outcome(error=str(exc))
        reusable = conn in transport._idle
        leftover = bytes(conn.buffer) + b"".join(pieces)
        await transport.aclose()
        assert conn.closed
        return Outcome(
            status=response.status_code,
            reason=response.extensions["reason_phrase"],
            headers=tuple(response.headers.raw),
            body=response.content,
            reusable=reusable,
            leftover=leftover,
        )

    return trio.run(run)


_CHUNK_HEADER = re.compile(rb"(?P<chunk_size>[0-9A-Fa-f]{1,20})(?:[ \t]*(?P<chunk_ext>;[^\r\n]*))?[ \t]*\r\n")
"""h11's chunk size line, amended where the engine follows RFC 9112 and h11 does not: section
7.1.1 allows whitespace (BWS) before a chunk extension's ``;`` (h11 refuses it), and section 2.2
makes a bare CR invalid (h11's extension pattern ``;.*`` takes one). Extensions are otherwise
ignored by both, as section 7.1.1 asks."""


def h11_parse(example: Example) -> Outcome:
    """The answer as h11 reads it, fed the same pieces as they are asked for, then the close."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 24)
    conn.send(h11.Request(method=example.method, target="/", headers=[("Host", "k")]))
    conn.send(h11.EndOfMessage())
    pieces = iter(example.pieces())
    eof = False
    heads: list[tuple[bytes, tuple[tuple[bytes, bytes], ...]]] = []
    response: h11.Response | None = None
    body: list[bytes] = []
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                piece = next(pieces, None)
                eof = piece is None
                conn.receive_data(piece or b"")
            elif isinstance(event, h11.InformationalResponse | h11.Response):
                heads.append((event.http_version, tuple(event.headers.raw_items())))
                if isinstance(event, h11.Response):
                    response = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise AssertionError(f"h11 gave {event!r} before the end of the response")
    except h11.RemoteProtocolError as exc:
        return Outcome(error=str(exc), heads=tuple(heads))
    assert response is not None
    rest = conn.trailing_data[0]
    return Outcome(
        status=response.status_code,
        reason=response.reason,
        headers=tuple(response.headers.raw_items()),
        body=b"".join(body),
        reusable=not eof and conn.their_state is h11.DONE and not rest,
        leftover=rest + b"".join(pieces),
        heads=tuple(heads),
    )


@pytest.fixture(autouse=True)
def _amended_h11(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h11._readers, "chunk_header_re", _CHUNK_HEADER)


# --- where the engine differs from h11 by design ---


def _framing_has_bare_lf(example: Example) -> bool:
    """Whether h11, reading ``example`` byte by byte, took a bare LF (one not after a CR) as a
    line end of a head or of the trailers: any LF it consumed that is not body data."""
    raw = example.raw
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 24)
    conn.send(h11.Request(method=example.method, target="/", headers=[("Host", "k")]))
    conn.send(h11.EndOfMessage())
    data: set[int] = set()
    end = len(raw)
    for i in range(len(raw)):
        conn.receive_data(raw[i : i + 1])
        while (event := conn.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.Data):
                data.add(i)
            elif isinstance(event, h11.EndOfMessage):
                end = i + 1
                break
        if end == i + 1:
            break
    return any(raw[i] == 10 and (i == 0 or raw[i - 1] != 13) and i not in data for i in range(end))


def engine_may_reject(example: Example, oracle: Outcome) -> str | None:
    """Why the engine may refuse what h11 accepted, if it may."""
    for version, headers in oracle.heads:
        if not version.startswith(b"1."):
            # RFC 9112 section 2.3: an HTTP/1.1 client talks HTTP/1.x; h11 takes any d.d.
            return "not an HTTP/1.x version"
        names = {name.lower(): value for name, value in headers}
        if len(names.get(b"content-length", b"")) > 18:
            # The engine's cap (10**18 bytes); h11 allows 20 digits. No real body is that long.
            return "a Content-Length of more than 18 digits"
        if version == b"1.0" and b"transfer-encoding" in names:
            # RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
            # framing; h11 decodes the chunks anyway.
            return "Transfer-Encoding in HTTP/1.0"
    if _framing_has_bare_lf(example):
        # RFC 9112 section 2.2: a recipient MAY take a bare LF as a line end; h11 does, the
        # engine does not (the API server ends lines with CRLF; accepting both is how
        # response splitting between two parsers starts).
        return "a bare LF as a line end"
    return None


_VT_FF = bytes.maketrans(b"\x0b\x0c", b"!!")


def engine_may_accept(example: Example, engine: Outcome) -> bool:
    """Whether the engine may accept what h11 refused: h11 refuses a vertical tab or form feed
    in a field value or reason (its pattern excludes Python's ``\\s``), while it keeps other
    control characters; the engine refuses NUL, CR and LF (RFC 9110 section 5.5: MUST) and keeps
    the other controls (the section's MAY). Checked by replacing them with ``!`` (same length,
    same framing): then h11 and the engine must agree, and the engine's answer must be the same
    but for the replacement."""
    if b"\x0b" not in example.raw and b"\x0c" not in example.raw:
        return False
    replaced = attrs.evolve(example, raw=example.raw.translate(_VT_FF))
    engine_replaced = engine_parse(replaced)
    assert engine_replaced == attrs.evolve(
        engine,
        reason=engine.reason.translate(_VT_FF),
        headers=tuple((name, value.translate(_VT_FF)) for name, value in engine.headers),
        body=engine.body.translate(_VT_FF),
        leftover=engine.leftover.translate(_VT_FF),
    )
    check_against_h11(replaced, engine_replaced)
    return True


def comparable(outcome: Outcome, *, folded: bool, engine: bool) -> Outcome:
    """``outcome`` as the two parsers can be compared.

    h11 gives a ``Content-Length`` as its one value (``5, 5`` is ``5``) and a
    ``Transfer-Encoding`` lowercased; the engine gives values as received. A folded line
    (obs-fold: ``OWS CRLF RWS``) is one space for the engine (RFC 9112 section 5.2); h11 keeps
    the whitespace before the fold. With both ``Transfer-Encoding`` and ``Content-Length`` the
    engine does not reuse the connection (RFC 9112 section 6.3: such a message "ought to be
    handled as an error"; the chunks frame it, and nothing more is trusted on that connection).
    """
    headers = []
    names: set[bytes] = set()
    for name, value in outcome.headers:
        lower = name.lower()
        if lower == b"content-length":
            if lower in names:
                continue
            value = value.split(b",")[0].strip(b" \t")
        elif lower == b"transfer-encoding":
            value = value.lower()
        if folded:
            value = re.sub(rb"[ \t]+", b" ", value)
        names.add(lower)
        headers.append((name, value))
    reusable = outcome.reusable
    if not engine and {b"content-length", b"transfer-encoding"} <= names:
        reusable = False
    return attrs.evolve(outcome, headers=tuple(headers), reusable=reusable, heads=())


# --- the property ---


def check_against_h11(example: Example, engine: Outcome) -> None:
    oracle = h11_parse(example)
    if oracle.error is not None:
        if engine.error is None:
            assert engine_may_accept(example, engine), f"the engine accepted what h11 refused ({oracle.error}): {engine}"
            event("the engine accepts: a vertical tab or form feed")
        else:
            event("both refuse")
        return
    if engine.error is not None:
        reason = engine_may_reject(example, oracle)
        assert reason, f"the engine refused ({engine.error}) what h11 accepted: {oracle}"
        event(f"the engine refuses: {reason}")
        return
    event(f"both accept: {'reusable' if oracle.reusable else 'not reusable'}, {len(oracle.body) and 'a body' or 'no body'}")
    folded = re.search(rb"\r?\n[ \t]", example.raw) is not None
    assert comparable(engine, folded=folded, engine=True) == comparable(oracle, folded=folded, engine=False)


def check(example: Example) -> None:
    engine = engine_parse(example)
    if example.oversized:
        assert engine.error is not None, "a response past the engine's limits was accepted"
        return
    assert engine.error is None or "at most" not in engine.error, engine.error
    check_against_h11(example, engine)


# --- the responses ---
# Strategies are built once: hypothesis validates each new strategy object, and building them in
# every draw costs more than the parsing under test.


def _one_of(*choices: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(choices)


_TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NAME = _one_of(b"Content-Type", b"Date", b"Audit-Id", b"Cache-Control", b"Warning", b"x-a") | st.text(
    _TOKEN_CHARS, min_size=1, max_size=8
).map(str.encode)
_VALUE = st.binary(max_size=24).map(lambda b: b.translate(None, b"\r\n\x00")) | _one_of(
    b"application/json", b"", b" padded\t", b"a, b", b"caf\xc3\xa9", b"\x01ctl", b'q="x,y"'
)
_SEPARATOR = _one_of(*[b": "] * 20, b":", b":\t", b" : ")
_FOLD = _one_of(b"\r\n ", b"\r\n\t", b" \r\n  ")
_TENTHS = st.integers(0, 9)
_VERSION = _one_of(*[b"1.1"] * 20, b"1.0", b"1.0", b"1.2", b"2.0", b"0.9")
_REASON = _one_of(b" OK", b"", b" ", b" Not Found", b" a\tb c", b" \xe9")
_INTERIM = _one_of(100, 102, 103)
_STATUS = _one_of(*[200] * 12, 201, 204, 304, 404, 500, 101, 99, 199, 600, 999)
_METHOD = _one_of(*[b"GET"] * 5, b"HEAD")
_FRAMING = _one_of(*["length"] * 5, *["chunked"] * 5, "close", "both", "bad-length", "coding")
_OFF = _one_of(*[0] * 12, -1, 1, 5)
_CHUNKS = st.lists(st.binary(min_size=1, max_size=40), max_size=4)
_EXTENSION = _one_of(b"", b";a=b", b';n="q;x"', b" ;bws", b";", b"; x = y", b"\t")
_LAST_CHUNK = _one_of(b"0", b"000", b"0;last")
_TRAILERS = st.lists(_one_of(*[b"X-T: 1", b"Grpc-Status: 0", b"X-Fold: a\r\n b", b"X-E:"] * 3, b"bad", b" lead: x"), max_size=2)
_CODING = _one_of(b"chunked", b"Chunked", b"chunked ")
_BAD_LENGTH = _one_of(b"-1", b"1 2", b"0x10", b"", b"1,2", b"9" * 19, b"5,")
_BAD_CODING = _one_of(b"gzip, chunked", b"identity", b"chunked, chunked", b"")
_CONNECTION = _one_of(*[None] * 5, b"close", b"close", b"keep-alive", b"Keep-Alive, Close", b"closed", b"upgrade")
_AFTER = _one_of(*[b""] * 12, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"garbage\r\n", b"\r\n", b"\x00")
_OVERSIZED = _one_of(b"5;" + b"e" * 5000 + b"\r\nhello\r\n", b"0\r\n" + b"X-T: " + b"t" * 4000 + b"\r\n")
_MUTATIONS = st.integers(-5, 2)
_BYTE = _one_of(*(bytes([c]) for c in b"\r\n\x00 \t:;,0aF\x0b\x7f\xff"))
_EDIT = _one_of("insert", "replace", "delete")
_CUTS = st.lists(st.integers(1, 1 << 20), max_size=8)


@st.composite
def _header(draw: st.DrawFn) -> bytes:
    line = draw(_NAME) + draw(_SEPARATOR) + draw(_VALUE)
    if draw(_TENTHS) == 0:
        line += draw(_FOLD) + draw(_VALUE)  # obs-fold
    return line


_HEADERS = st.lists(_header(), max_size=4)


def _head(draw: st.DrawFn, status: int, extra: list[bytes]) -> bytes:
    headers = draw(st.permutations(draw(_HEADERS) + extra))
    return b"HTTP/%s %03d%s\r\n" % (draw(_VERSION), status, draw(_REASON)) + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def _chunked(draw: st.DrawFn) -> bytes:
    out = b""
    for data in draw(_CHUNKS):
        size = b"%x" % len(data)
        size = draw(_one_of(size, size.upper(), b"0" * (20 - len(size)) + size, b"0" + size))
        out += size + draw(_EXTENSION) + b"\r\n" + data + b"\r\n"
    return out + draw(_LAST_CHUNK) + b"\r\n" + b"".join(t + b"\r\n" for t in draw(_TRAILERS)) + b"\r\n"


@st.composite
def responses(draw: st.DrawFn) -> Example:
    """A response (after 0 to 2 interim ones), often malformed, oversized now and then, followed
    by nothing or by more bytes, and where it is split into pieces."""
    method = draw(_METHOD)
    raw = b""
    for _ in range(draw(_TENTHS) // 7):
        raw += _head(draw, draw(_INTERIM), [])
    status = draw(_STATUS)
    body = draw(st.binary(max_size=60))
    framing = draw(_FRAMING)
    extra: list[bytes] = []
    payload = body
    if framing == "length":
        n = len(body) + draw(_OFF)
        extra.append(b"Content-Length: " + draw(_one_of(b"%d" % n, b"%d, %d" % (n, n), b"0%d" % n, b" %d " % n)))
        if draw(_TENTHS) == 0:
            extra.append(b"content-length: %d" % draw(_one_of(n, n + 1)))
    elif framing in ("chunked", "both"):
        payload = _chunked(draw)
        extra.append(b"Transfer-Encoding: " + draw(_CODING))
        if framing == "both":
            extra.append(b"Content-Length: %d" % len(body))
    elif framing == "bad-length":
        extra.append(b"Content-Length: " + draw(_BAD_LENGTH))
    elif framing == "coding":
        extra.append(b"Transfer-Encoding: " + draw(_BAD_CODING))
        payload = _chunked(draw)
    connection = draw(_CONNECTION)
    if connection is not None:
        extra.append(b"Connection: " + connection)
    raw += _head(draw, status, extra) + payload + draw(_AFTER)
    oversized = False
    kind = draw(st.integers(0, 39))
    if kind == 0:  # a head past MAX_HEAD
        raw = raw.replace(b"\r\n", b"\r\nX-Big: " + b"b" * (MAX_HEAD + 10) + b"\r\n", 1)
        oversized = True
    elif kind == 1:  # a chunk extension past the line limit, or trailers past MAX_HEAD
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + draw(_OVERSIZED) * 20 + b"0\r\n\r\n"
        method, oversized = b"GET", True
    else:
        for _ in range(draw(_MUTATIONS)):  # malformed: a byte inserted, replaced or deleted
            at = draw(st.integers(0, len(raw)))
            edit = draw(_EDIT)
            byte = draw(_BYTE)
            raw = raw[:at] + (byte if edit != "delete" else b"") + raw[at + (edit != "insert") :]
        ends = [m.start() for m in re.finditer(b"\r\n", raw[: raw.find(b"\r\n\r\n") + 2])]
        if draw(_TENTHS) == 0 and ends:  # a line of the head ended by a bare LF
            at = draw(_one_of(*(ends[1:] or ends)))
            raw = raw[:at] + raw[at + 1 :]
    if draw(_TENTHS) == 0 and len(raw) < 4000:
        cuts = tuple(range(1, len(raw)))
    else:
        cuts = tuple(sorted({cut % len(raw) for cut in draw(_CUTS) if cut % len(raw)}))
    return Example(raw, cuts, method, oversized)


@FUZZ
@given(responses())
def test_the_engine_parses_responses_as_h11_does(example: Example) -> None:
    check(example)


# --- the oracle catches planted bugs ---

MUTANTS = {
    "a chunk size read one too long": ("left = int(size[1], 16)", "left = int(size[1], 16) + 1"),
    "Content-Length ignored (read until the close)": ("        return Body(length)", "        return Body(None)"),
    "a folded line joined without its space": (
        'unfolded[-1] = unfolded[-1].rstrip(b" \\t") + b" " + line.lstrip(b" \\t")',
        'unfolded[-1] = unfolded[-1].rstrip(b" \\t") + line.lstrip(b" \\t")',
    ),
    "Connection: close ignored": (
        'close = b"close" in [option.strip(b" \\t") for option in value.lower().split(b",")]',
        "close = False",
    ),
    "a bare LF kept in a head": (
        'len(raw) - len(raw.translate(None, b"\\r\\n\\0")) != 2 * breaks',
        'len(raw) - len(raw.translate(None, b"\\r\\0")) != breaks',
    ),
}
"""Planted bugs: the text replaced in engine/kube/_client/_http1.py, and its replacement."""


def mutant(old: str, new: str) -> types.ModuleType:
    """``_http1`` with ``old`` (found exactly once) replaced by ``new``."""
    source = inspect.getsource(_http1)
    assert source.count(old) == 1, f"the mutation no longer applies: {old!r}"
    module = types.ModuleType("engine.kube._client._http1_mutant")
    exec(compile(source.replace(old, new), _http1.__file__ or "_http1.py", "exec"), module.__dict__)
    module.ProtocolError = ProtocolError  # the transport catches the original class
    return module


@pytest.mark.parametrize("bug", sorted(MUTANTS))
def test_the_oracle_catches_a_planted_parser_bug(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transport, "parse_head", mutant(*MUTANTS[bug]).parse_head)
    tried: list[Example] = []

    def property(example: Example) -> None:
        tried.append(example)
        check(example)

    run = settings(FUZZ, max_examples=4 * EXAMPLES, phases=[Phase.generate], report_multiple_bugs=False)(
        given(responses())(property)
    )
    with pytest.raises(AssertionError):
        run()
    print(f"{bug}: caught after {len(tried)} examples")
