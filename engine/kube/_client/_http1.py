"""The client side of HTTP/1.1 as the engine's transport needs it: request heads, response parsing.

A request head is written from the request line and the header list in one ``bytes`` join;
header names and values are checked (no CR, LF or NUL: no header injection). A response is
parsed from a connection's receive buffer: the status line and headers once they have all
arrived (at most :data:`MAX_HEAD` bytes, lines ended by CRLF), then the body by its framing
(RFC 9112 section 6.3): none (``HEAD``, 1xx, 204, 304), ``Transfer-Encoding: chunked`` (chunk
extensions ignored, trailers checked and dropped), ``Content-Length``, or until the server
closes. Interim 1xx responses are skipped, at most :data:`MAX_INTERIM` of them. Anything malformed raises :class:`ProtocolError`:
a NUL, bare CR or bare LF in a head, a header line that is not ``name: value`` (a folded line
is unfolded, RFC 9112 section 5.2), a status outside 100-999 or a ``101`` (the engine asks for
no upgrade), a transfer coding other than ``chunked`` alone (or any in an HTTP/1.0 response),
conflicting or malformed ``Content-Length`` values. The connection may carry a next request
only if the response was HTTP/1.1 (or a later 1.x) without ``Connection: close``, was framed
by length or chunks (not both), and was read to its end with nothing after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "MAX_HEAD", "MAX_INTERIM", "Body", "ProtocolError", "ResponseHead", "header_lines", "parse_head", "request_head",
]

MAX_HEAD = 64 * 1024
"""The most bytes a response's status line and headers may take."""
MAX_INTERIM = 5
"""The most interim (1xx) responses that may come before the final one (as Go's client)."""

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+").fullmatch
_FIELD_VALUE = re.compile(rb"[^\x00\r\n]*").fullmatch
_TARGET = re.compile(rb"[^\x00\r\n ]+").fullmatch
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: ([^\r\n]*))?").fullmatch
_FIELD = rb"([-!#$%&'*+.^_`|~0-9A-Za-z]++):[ \t]*+((?:[^\r\n \t]++|[ \t]++(?=[^\r\n \t]))*+)[ \t]*+"
"""A header line after its CRLF: its name and its value without the spaces and tabs around
it (possessive: linear in the line's length, whatever a server sends)."""
_FIELD_LINES = re.compile(rb"(?:\r\n" + _FIELD + rb")*").fullmatch
_FIELD_LINE = re.compile(rb"\r\n" + _FIELD + rb"(?=\r\n|\Z)").findall
_FRAMING_LINE = re.compile(
    rb"\r\n(content-length|transfer-encoding|connection|content-encoding):[ \t]*+"
    rb"((?:[^\r\n \t]++|[ \t]++(?=[^\r\n \t]))*+)[ \t]*+(?=\r\n|\Z)",
    re.IGNORECASE,
).findall
_CHUNK_SIZE = re.compile(rb"0*([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?").fullmatch
_MAX_LINE = 4096
"""The most bytes a chunk size line or a trailer line may take."""


class ProtocolError(Exception):
    """The server broke HTTP/1.1 (or the request would have)."""


_KNOWN_NAMES = frozenset(
    {
        b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD",
        b"Host", b"Accept", b"Accept-Encoding", b"Authorization", b"Connection", b"Content-Length",
        b"Content-Type", b"Transfer-Encoding", b"User-Agent",
    }
)
"""Methods and header names known to be tokens, checked without the pattern."""


_OTHER, _CONTENT_LENGTH, _TRANSFER_ENCODING, _CONNECTION, _CONTENT_ENCODING = range(5)
_ROLES = {
    b"content-length": _CONTENT_LENGTH, b"transfer-encoding": _TRANSFER_ENCODING, b"connection": _CONNECTION,
    b"content-encoding": _CONTENT_ENCODING,
}
"""What the parser reads from a response header, by its name in lower case."""
_KNOWN_RESPONSE_NAMES = {
    name: _ROLES.get(name.lower(), _OTHER)
    for name in (
        b"Audit-Id", b"Cache-Control", b"Connection", b"Content-Encoding", b"Content-Length",
        b"Content-Type", b"Date", b"Transfer-Encoding", b"Warning",
        b"X-Kubernetes-Pf-Flowschema-Uid", b"X-Kubernetes-Pf-Prioritylevel-Uid",
    )
}
"""Response header names the API server sends, known to be tokens, and their roles."""


def header_lines(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """``headers`` as lines of a request head, each ``name: value`` and CRLF, for
    :func:`request_head`'s ``lines``.

    Raises :class:`ProtocolError` for a header name or value that would break the message.
    """
    parts: list[bytes] = []
    _add_lines(parts, headers)
    return b"".join(parts)


def request_head(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], lines: bytes = b"") -> bytes:
    """The request line and headers, ending with the blank line. ``lines`` (from
    :func:`header_lines`, already checked) go first, then ``headers``.

    Raises :class:`ProtocolError` for a method, target, header name or value that would break
    the message (spaces or control characters where HTTP does not allow them).
    """
    if (method not in _KNOWN_NAMES and not _TOKEN(method)) or not _TARGET(target):
        raise ProtocolError(f"the request line must be valid: {method!r} {target!r}")
    parts = [method, b" ", target, b" HTTP/1.1\r\n", lines]
    _add_lines(parts, headers)
    parts.append(b"\r\n")
    return b"".join(parts)


def _add_lines(parts: list[bytes], headers: Iterable[tuple[bytes, bytes]]) -> None:
    for name, value in headers:
        if (name not in _KNOWN_NAMES and not _TOKEN(name)) or not _FIELD_VALUE(value):
            raise ProtocolError(f"the request header {name!r} must have a valid name and value")
        parts += (name, b": ", value, b"\r\n")


class ResponseHead:
    """A response's status line and headers, and how its body is framed."""

    __slots__ = ("status", "reason", "headers", "keep_alive", "body", "encoded")

    def __init__(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], keep_alive: bool, body: Body,
        encoded: bool = False,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        """As received (names in their case), in order."""
        self.keep_alive = keep_alive
        """Whether the connection may carry another request after this response's body."""
        self.body = body
        self.encoded = encoded
        """Whether a ``Content-Encoding`` header was sent (the body must then be decoded)."""


def parse_head(buffer: bytearray, method: bytes) -> ResponseHead | None:
    """Take a final response's head off the front of ``buffer`` (interim 1xx heads before it
    skipped, at most :data:`MAX_INTERIM` of them).

    Returns ``None`` (leaving ``buffer`` as it was) if more bytes are needed. Raises
    :class:`ProtocolError` for a malformed head, one longer than :data:`MAX_HEAD`, or more
    interim heads than :data:`MAX_INTERIM`.
    """
    start = 0
    interim = 0
    while True:
        end = buffer.find(b"\r\n\r\n", start, start + MAX_HEAD + 4)
        if end < 0:
            if len(buffer) - start > MAX_HEAD:
                raise ProtocolError(f"a response head must be at most {MAX_HEAD} bytes")
            return None
        raw = bytes(buffer[start:end])
        start = end + 4
        lines = raw.split(b"\r\n")
        breaks = len(lines) - 1
        if len(raw) - len(raw.translate(None, b"\r\n\0")) != 2 * breaks:  # one pass: CR and LF in CRLFs only
            raise ProtocolError("a response head must not contain NUL, or CR or LF outside its CRLF line ends")
        status_line = _STATUS_LINE(lines[0])
        if status_line is None:
            raise ProtocolError(f"the response must start with an HTTP/1.x status line, not {lines[0][:80]!r}")
        status = int(status_line[2])
        if status < 100:
            raise ProtocolError(f"a response's status must be from 100 to 999, not {status_line[2].decode()}")
        if status == 101:
            raise ProtocolError("a response must not switch protocols (101) when the request asked for no upgrade")
        fields = _plain_fields(raw[len(lines[0]):])
        if fields is None:
            fields = _fields(lines)
            if fields is None:
                fields = _fields(_unfold(lines))
                assert fields is not None
        headers, lengths, codings, close, encoded = fields
        http11 = status_line[1] != b"0"
        body = _framing(method, status, lengths, codings, http11)
        if status < 200:
            interim += 1
            if interim > MAX_INTERIM:
                raise ProtocolError(f"a response must follow at most {MAX_INTERIM} interim (1xx) responses")
            continue
        del buffer[:start]
        keep_alive = http11 and not close and not (codings and lengths)
        return ResponseHead(status, status_line[3] or b"", headers, keep_alive, body, encoded)


_Fields = tuple[list[tuple[bytes, bytes]], list[bytes], list[bytes], bool, bool]
"""The header fields of a head (names in their case, values stripped), in order, the
``Content-Length`` values (split at commas), the ``Transfer-Encoding`` values, whether
``Connection`` has the ``close`` option and whether a ``Content-Encoding`` was sent."""


def _plain_fields(block: bytes) -> _Fields | None:
    """The fields of the header lines ``block`` (each line after a CRLF) when every one is
    ``name: value`` with a token name, found by patterns (in C, not line by line); else
    ``None`` (a folded or malformed line: :func:`_fields` tells which)."""
    if not _FIELD_LINES(block):
        return None
    return (_FIELD_LINE(block), *_framing_values(_FRAMING_LINE(block)))


def _fields(lines: list[bytes]) -> _Fields | None:
    """The fields of ``lines`` (a status line, then header lines), read line by line; ``None``
    if a line is folded (starts with a space or tab)."""
    headers: list[tuple[bytes, bytes]] = []
    framing: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        role = _KNOWN_RESPONSE_NAMES.get(name) if colon else None
        if role is None:
            if not colon or not _TOKEN(name):
                if line[:1] in (b" ", b"\t"):
                    return None
                raise ProtocolError(f"a response header line must be 'name: value', not {line[:80]!r}")
            role = _ROLES.get(name.lower(), _OTHER)
        value = value.strip(b" \t")
        headers.append((name, value))
        if role != _OTHER:
            framing.append((name, value))
    return (headers, *_framing_values(framing))


def _framing_values(fields: list[tuple[bytes, bytes]]) -> tuple[list[bytes], list[bytes], bool, bool]:
    """The ``Content-Length`` values (split at commas), the ``Transfer-Encoding`` values, whether
    ``Connection`` has the ``close`` option and whether a ``Content-Encoding`` was sent, from
    the header ``fields`` that name one of these."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    close = encoded = False
    for name, value in fields:
        role = _ROLES[name.lower()]
        if role == _CONTENT_LENGTH:
            lengths += value.split(b",")
        elif role == _TRANSFER_ENCODING:
            codings.append(value)
        elif role == _CONTENT_ENCODING:
            encoded = True
        elif not close:
            close = b"close" in [option.strip(b" \t") for option in value.lower().split(b",")]
    return lengths, codings, close, encoded


def _unfold(lines: list[bytes]) -> list[bytes]:
    """``lines`` (a status line, then header lines) with each line that starts with a space or
    tab joined to the one before by one space, as RFC 9112 section 5.2 has a user agent do."""
    unfolded = lines[:2]
    if lines[1][:1] in (b" ", b"\t"):
        raise ProtocolError(f"a response's first header line must not start with whitespace, not {lines[1][:80]!r}")
    for line in lines[2:]:
        if line[:1] in (b" ", b"\t"):
            unfolded[-1] = unfolded[-1].rstrip(b" \t") + b" " + line.lstrip(b" \t")
        else:
            unfolded.append(line)
    return unfolded


def _framing(method: bytes, status: int, lengths: list[bytes], codings: list[bytes], http11: bool) -> Body:
    """The body's framing from the ``Content-Length`` values (split at commas, not yet
    stripped) and the ``Transfer-Encoding`` values; both are checked whether or not they frame
    the body. Both present: the transfer coding frames it (RFC 9112 section 6.3)."""
    length = -1
    if lengths:
        value = lengths[0].strip(b" \t")
        # One value, as a rule: the others (a list of equal ones is allowed) are compared only if sent.
        if len(lengths) > 1 and {v.strip(b" \t") for v in lengths} != {value}:
            raise ProtocolError("a response must not give several Content-Length values")
        if not value.isdigit() or len(value) > 18:
            raise ProtocolError(f"a response's Content-Length must be a number, not {value[:40]!r}")
        length = int(value)
    if codings:
        if len(codings) != 1 or codings[0].lower() != b"chunked":
            raise ProtocolError(f"a response's Transfer-Encoding must be chunked alone, not {b', '.join(codings)[:40]!r}")
        if not http11:
            raise ProtocolError("an HTTP/1.0 response must not have a Transfer-Encoding (its framing is faulty)")
    if method == b"HEAD" or status in (204, 304) or status < 200:
        return Body(0)
    if codings:
        return Body(-1)
    if lengths:
        return Body(length)
    return Body(None)


class Body:
    """Reads one response body off a connection's receive buffer, by its framing.

    ``Body(n)``: exactly ``n`` bytes; ``Body(-1)``: chunked; ``Body(None)``: until the server
    closes the connection.
    """

    __slots__ = ("_left", "_chunked", "_state", "_trailers", "done", "delimited", "expected")

    def __init__(self, length: int | None) -> None:
        self.expected = length if length is not None and length >= 0 else 0
        """The body's length as its head gives it (``0`` when chunked or until the close)."""
        self._chunked = length == -1
        self._left = 0 if self._chunked or length is None else length
        self._state = _SIZE
        self._trailers = 0
        self.delimited = length is not None
        """Whether the body has an end the connection can continue after (length or chunks)."""
        self.done = length == 0
        """Whether the whole body was read."""

    def read(self, buffer: bytearray, eof: bool) -> bytes | None:
        """The next body bytes available in ``buffer`` (taken off it), ``b""`` when the body
        is done, ``None`` if more bytes must be received first.

        ``eof``: the server closed the connection, nothing more will come. Raises
        :class:`ProtocolError` for malformed chunks or a body cut short.
        """
        if self.done:
            return b""
        if self._chunked:
            return self._read_chunked(buffer, eof)
        if not self.delimited:
            if buffer:
                data = bytes(buffer)
                buffer.clear()
                return data
            if eof:
                self.done = True
                return b""
            return None
        if not buffer:
            if eof:
                raise ProtocolError("the server closed the connection before the end of the response body")
            return None
        if len(buffer) <= self._left:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[: self._left])
            del buffer[: self._left]
        self._left -= len(data)
        if not self._left:
            self.done = True
        return data

    def _read_chunked(self, buffer: bytearray, eof: bool) -> bytes | None:
        parts: list[bytes] = []
        while not self.done:
            state = self._state
            if state == _DATA:
                if not buffer:
                    break
                if len(buffer) <= self._left:
                    data = bytes(buffer)
                    buffer.clear()
                else:
                    data = bytes(buffer[: self._left])
                    del buffer[: self._left]
                parts.append(data)
                self._left -= len(data)
                if self._left:
                    break
                self._state = _DATA_END
                continue
            if state == _DATA_END:
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise ProtocolError("a response chunk must end with CRLF")
                del buffer[:2]
                self._state = _SIZE
                continue
            end = buffer.find(b"\r\n", 0, _MAX_LINE)
            if end < 0:
                if len(buffer) > _MAX_LINE:
                    raise ProtocolError(f"a chunk size or trailer line must be at most {_MAX_LINE} bytes")
                break
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if state == _TRAILERS:
                if not line:
                    self.done = True
                else:
                    self._trailer(line)
                continue
            size = _CHUNK_SIZE(line)
            if size is None:
                raise ProtocolError(f"a chunk must start with its size in hex, not {line[:40]!r}")
            left = int(size[1], 16)
            if not left:
                self._state = _TRAILERS
            elif len(buffer) >= left + 2:
                # The whole chunk and its CRLF are here (a watch event, as a rule): taken at once.
                if buffer[left:left + 2] != b"\r\n":
                    raise ProtocolError("a response chunk must end with CRLF")
                parts.append(bytes(buffer[:left]))
                del buffer[:left + 2]
            else:
                self._left = left
                self._state = _DATA
        if parts:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if self.done:
            return b""
        if eof:
            raise ProtocolError("the server closed the connection in the middle of a chunked response body")
        return None

    def _trailer(self, line: bytes) -> None:
        """Check one trailer line (a field line, or the continuation of one); it is dropped."""
        continued = self._trailers > 0 and line[:1] in (b" ", b"\t")
        self._trailers += len(line) + 2
        if self._trailers > MAX_HEAD:
            raise ProtocolError(f"a response's trailers must be at most {MAX_HEAD} bytes")
        if b"\r" in line or b"\n" in line or b"\0" in line:
            raise ProtocolError("a response trailer must not contain NUL, or CR or LF outside its CRLF line ends")
        if continued:
            return
        name, colon, _ = line.partition(b":")
        if not colon or not _TOKEN(name):
            raise ProtocolError(f"a response trailer line must be 'name: value', not {line[:80]!r}")


_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)
