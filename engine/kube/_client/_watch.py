"""Watch streams: the API server's line-delimited JSON watch events, decoded and typed."""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import attrs
import httpx
import trio

from . import _json
from ._errors import ResponseError, TransportError, WatchStalledError, error_from_status, transport_reason
from ._resource import Resource
from ._transport import ResponseStream

__all__ = ["WatchEvent", "WatchEventType", "WatchStream"]

log = logging.getLogger("engine.kube.client")


class WatchEventType(enum.Enum):
    """The type of a watch event (``ERROR`` events are raised, never yielded)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@attrs.frozen
class WatchEvent:
    """One event from a watch stream."""

    type: WatchEventType
    """What happened."""
    object: dict[str, Any]
    """The object after the change (before it, for ``DELETED``); for ``BOOKMARK`` only its
    ``metadata.resourceVersion`` is meaningful."""

    @property
    def resource_version(self) -> str | None:
        """The event's ``metadata.resourceVersion``, the point to resume a watch from."""
        rv = self.object.get("metadata", {}).get("resourceVersion")
        return rv if isinstance(rv, str) and rv else None


_MAX_LINE = 64 * 1024 * 1024

_EVENT_TYPES = {member.value: member for member in WatchEventType}


class WatchStream:
    """An open watch: an async context manager and an async iterator of :class:`WatchEvent`.

    Lines that are not valid watch events (bad JSON, unknown type, an object without
    ``metadata.name`` or ``metadata.resourceVersion``) are logged and skipped. An ``ERROR``
    event is raised as the matching :class:`ApiError` (:class:`GoneError` for 410). A broken
    connection raises :class:`TransportError`; a server that ends the stream ends iteration.
    """

    def __init__(
        self,
        open_response: Callable[[], Awaitable[httpx.Response]],
        resource: Resource,
        idle_timeout: float | None,
    ) -> None:
        self._open_response = open_response
        self._resource = resource
        self._api_version = resource.api_version
        self._idle_timeout = idle_timeout
        self._response: httpx.Response | None = None
        self._chunks: Any = None
        self._buffer = bytearray()
        self._lines: collections.deque[bytes] = collections.deque()
        self._eof = False
        self.skipped = 0
        """How many malformed lines this stream skipped."""

    async def __aenter__(self) -> WatchStream:
        """Establish the stream (retried per the read policy).

        Cancellation: a checkpoint; a half-open response is closed.
        """
        response = self._response = await self._open_response()
        stream = response.stream
        if isinstance(stream, ResponseStream) and "content-encoding" not in response.headers:
            self._chunks = stream
        else:
            self._chunks = response.aiter_bytes()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the stream and its connection. Idempotent.

        Cancellation: shielded, bounded to one second of trio time.
        """
        chunks, response = self._chunks, self._response
        self._chunks = self._response = None
        self._eof = True
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 1.0):
            try:
                if chunks is not None:
                    await chunks.aclose()
            except (httpx.HTTPError, RuntimeError):
                pass
            if response is not None:
                try:
                    await response.aclose()
                except httpx.HTTPError:
                    pass

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        """The next valid event.

        Cancellation: a checkpoint; a cancelled read leaves the stream unusable (close it).
        """
        lines = self._lines
        while True:
            if lines:
                # A line already split off an earlier chunk: no read, and no coroutine for one.
                line = lines.popleft()
            else:
                read = await self._next_line()
                if read is None:
                    raise StopAsyncIteration
                line = read
            event = self._decode(line)
            if event is not None:
                return event

    async def _read_chunk(self) -> bytes | None:
        if self._chunks is None:
            return None
        try:
            if self._idle_timeout is None:
                return bytes(await self._chunks.__anext__())
            with trio.CancelScope(deadline=trio.current_time() + self._idle_timeout):
                return bytes(await self._chunks.__anext__())
        except StopAsyncIteration:
            return None
        except httpx.TransportError as exc:
            raise TransportError(
                f"the watch stream of {self._resource} broke: {transport_reason(exc)}"
            ) from exc
        except httpx.HTTPError as exc:
            raise ResponseError(
                f"the watch stream of {self._resource} must be decodable: {type(exc).__name__}"
            ) from exc
        raise WatchStalledError(
            f"a watch on {self._resource} must deliver bytes within "
            f"{self._idle_timeout:g}s (idle_timeout), and none arrived"
        )

    async def _next_line(self) -> bytes | None:
        lines = self._lines
        while not lines:
            if self._eof:
                if self._buffer.strip():
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            chunk = await self._read_chunk()
            if chunk is None:
                self._eof = True
                continue
            if b"\n" not in chunk:
                self._buffer += chunk
                if len(self._buffer) > _MAX_LINE:
                    raise ResponseError(
                        f"a watch event of {self._resource} must be at most {_MAX_LINE} bytes"
                    )
                continue
            parts = chunk.split(b"\n")
            if self._buffer:
                self._buffer += parts[0]
                parts[0] = bytes(self._buffer)
                self._buffer.clear()
            tail = parts.pop()
            if tail:
                self._buffer += tail
            lines.extend(parts)
        return lines.popleft()

    def _skip(self, why: str, line: bytes) -> None:
        self.skipped += 1
        log.warning(
            "skipping a malformed watch line of %s: %s (%d bytes)", self._resource, why, len(line)
        )

    def _decode(self, line: bytes) -> WatchEvent | None:
        if not line or line.isspace():  # as ``not line.strip()``, without copying the line
            return None
        try:
            data = _json.loads(line)
        except ValueError:
            self._skip("not JSON", line)
            return None
        if not isinstance(data, dict):
            self._skip("not a JSON object", line)
            return None
        type_, obj = data.get("type"), data.get("object")
        if type_ == "ERROR":
            raise error_from_status(obj if isinstance(obj, dict) else None, code=500)
        event_type = _EVENT_TYPES.get(type_) if type(type_) is str else None
        if event_type is None:
            self._skip("unknown event type", line)
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            self._skip("object without metadata", line)
            return None
        meta = obj["metadata"]
        if event_type is not WatchEventType.BOOKMARK:
            name = meta.get("name")
            if not isinstance(name, str) or not name:
                self._skip("object without metadata.name", line)
                return None
            ns = meta.get("namespace")
            if ns is not None and not isinstance(ns, str):
                self._skip("object with a non-string metadata.namespace", line)
                return None
            obj.setdefault("apiVersion", self._api_version)
            obj.setdefault("kind", self._resource.kind)
        rv = meta.get("resourceVersion")
        if not isinstance(rv, str) or not rv:
            self._skip("object without metadata.resourceVersion", line)
            return None
        return WatchEvent(event_type, obj)
