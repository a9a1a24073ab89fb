"""The client side of HTTP/1.1 as the engine's transport needs it: request heads, response parsing.

A request head is written from the request line and the header list in one ``bytes`` join;
header names and values are checked (no CR, LF or NUL: no header injection). A response is
parsed from a connection's receive buffer: the status line and headers once they have all
arrived (at most :data:`MAX_HEAD` bytes), then the body by its framing (RFC 9112 section 6.3):
none (``HEAD``, 1xx, 204, 304), ``Transfer-Encoding: chunked`` (chunk extensions and trailers
read and dropped), ``Content-Length``, or until the server closes. Interim 1xx responses are
skipped. Anything malformed raises :class:`ProtocolError`. The connection may carry a next
request only if the response was HTTP/1.1 without ``Connection: close``, was framed by length
or chunks, and was read to its end with nothing after it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEAD", "Body", "ProtocolError", "ResponseHead", "parse_head", "request_head"]

MAX_HEAD = 64 * 1024
"""The most bytes a response's status line and headers may take."""

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+").fullmatch
_FIELD_VALUE = re.compile(rb"[^\x00\r\n]*").fullmatch
_TARGET = re.compile(rb"[^\x00\r\n ]+").fullmatch
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?").fullmatch
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?").fullmatch


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


_KNOWN_RESPONSE_NAMES = frozenset(
    {
        b"Audit-Id", b"Cache-Control", b"Connection", b"Content-Encoding", b"Content-Length",
        b"Content-Type", b"Date", b"Transfer-Encoding", b"Warning",
        b"X-Kubernetes-Pf-Flowschema-Uid", b"X-Kubernetes-Pf-Prioritylevel-Uid",
    }
)
"""Response header names the API server sends, known to be tokens."""


def request_head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers, ending with the blank line.

    Raises :class:`ProtocolError` for a method, target, header name or value that would break
    the message (spaces or control characters where HTTP does not allow them).
    """
    if (method not in _KNOWN_NAMES and not _TOKEN(method)) or not _TARGET(target):
        raise ProtocolError(f"the request line must be valid: {method!r} {target!r}")
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if (name not in _KNOWN_NAMES and not _TOKEN(name)) or not _FIELD_VALUE(value):
            raise ProtocolError(f"the request header {name!r} must have a valid name and value")
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class ResponseHead:
    """A response's status line and headers, and how its body is framed."""

    __slots__ = ("status", "reason", "headers", "keep_alive", "body")

    def __init__(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], keep_alive: bool, body: Body
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        """As received (names in their case), in order."""
        self.keep_alive = keep_alive
        """Whether the connection may carry another request after this response's body."""
        self.body = body


def parse_head(buffer: bytearray, method: bytes) -> ResponseHead | None:
    """Take a final response's head off the front of ``buffer`` (interim 1xx heads skipped).

    Returns ``None`` (leaving what remains in ``buffer``) if more bytes are needed. Raises
    :class:`ProtocolError` for a malformed head or one longer than :data:`MAX_HEAD`.
    """
    while True:
        end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(buffer) > MAX_HEAD:
                raise ProtocolError(f"a response head must be at most {MAX_HEAD} bytes")
            return None
        lines = bytes(buffer[:end]).split(b"\r\n")
        del buffer[: end + 4]
        status_line = _STATUS_LINE(lines[0])
        if status_line is None:
            raise ProtocolError(f"the response must start with an HTTP/1.x status line, not {lines[0][:80]!r}")
        status = int(status_line[2])
        if 100 <= status < 200 and status != 101:
            continue
        headers: list[tuple[bytes, bytes]] = []
        lengths: list[bytes] = []
        codings: list[bytes] = []
        close = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or (name not in _KNOWN_RESPONSE_NAMES and not _TOKEN(name)):
                raise ProtocolError(f"a response header line must be 'name: value', not {line[:80]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                lengths += value.split(b",")
            elif lower == b"transfer-encoding":
                codings += value.split(b",")
            elif lower == b"connection" and b"close" in value.lower():
                close = True
        http11 = status_line[1] == b"1"
        keep_alive = http11 and status != 101 and not close
        return ResponseHead(
            status, status_line[3] or b"", headers, keep_alive, _framing(method, status, lengths, codings, http11)
        )


def _framing(method: bytes, status: int, lengths: list[bytes], codings: list[bytes], http11: bool) -> Body:
    """The body's framing from the ``Content-Length`` and ``Transfer-Encoding`` values (split at
    commas, not yet stripped)."""
    if method == b"HEAD" or status in (204, 304) or status < 200:
        return Body(0)
    if codings:
        codings = [c.strip().lower() for c in codings if c.strip()]
    if codings:
        if codings[-1] != b"chunked" or not http11:
            return Body(None)
        return Body(-1)
    if lengths:
        distinct = {v.strip() for v in lengths}
        if len(distinct) != 1:
            raise ProtocolError("a response must not give several Content-Length values")
        (length,) = distinct
        if not length.isdigit() or len(length) > 18:
            raise ProtocolError(f"a response's Content-Length must be a number, not {length[:40]!r}")
        return Body(int(length))
    return Body(None)


class Body:
    """Reads one response body off a connection's receive buffer, by its framing.

    ``Body(n)``: exactly ``n`` bytes; ``Body(-1)``: chunked; ``Body(None)``: until the server
    closes the connection.
    """

    __slots__ = ("_left", "_chunked", "_state", "done", "delimited")

    def __init__(self, length: int | None) -> None:
        self._chunked = length == -1
        self._left = 0 if self._chunked or length is None else length
        self._state = _SIZE
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
            end = buffer.find(b"\r\n", 0, 4096)
            if end < 0:
                if len(buffer) > 4096:
                    raise ProtocolError("a chunk size or trailer line must be at most 4096 bytes")
                break
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if state == _TRAILERS:
                if not line:
                    self.done = True
                continue
            size = _CHUNK_SIZE(line)
            if size is None:
                raise ProtocolError(f"a chunk must start with its size in hex, not {line[:40]!r}")
            self._left = int(size[1], 16)
            self._state = _DATA if self._left else _TRAILERS
        if parts:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if self.done:
            return b""
        if eof:
            raise ProtocolError("the server closed the connection in the middle of a chunked response body")
        return None


_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)
