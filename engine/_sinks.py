"""Event sinks shipped with the engine: in-memory, log, and an HTTP webhook."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import trio

from ._backoff import jittered_backoff, parse_retry_after
from ._errors import EngineError
from ._events import Event, EventType

__all__ = ["MemorySink", "LogSink", "WebhookSink", "WebhookDeliveryError", "event_to_json"]

logger = logging.getLogger("engine.sinks")


class MemorySink:
    """Keeps every delivered event in :attr:`events`, for tests."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self.events: list[Event] = []
        self._changed = trio.Event()

    async def deliver(self, event: Event) -> None:
        """Append the event to :attr:`events` and wake :meth:`wait_for`.

        Cancellation: not a checkpoint; the event is always appended.
        """
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> None:
        """Wait until at least ``count`` events were delivered.

        Cancellation: a checkpoint (when it waits); nothing changes.
        """
        while len(self.events) < count:
            await self._changed.wait()


class LogSink:
    """Writes each event as a log record on the ``engine.events`` logger."""

    def __init__(self, name: str = "log", logger_name: str = "engine.events") -> None:
        self.name = name
        self._logger = logging.getLogger(logger_name)

    async def deliver(self, event: Event) -> None:
        """Log the event: ``WARNING`` for a warning event, ``INFO`` otherwise.

        Cancellation: not a checkpoint; the record is always written.
        """
        level = logging.WARNING if event.type is EventType.WARNING else logging.INFO
        self._logger.log(
            level,
            "%s %s: %s",
            event.reason,
            event.involved,
            event.message,
            extra={
                "object": str(event.involved),
                "controller": event.controller,
                "reason": event.reason,
                "count": event.count,
                "reconcileID": event.run_id,
            },
        )


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def event_to_json(event: Event) -> dict[str, Any]:
    """The webhook body for one event (shaped after Flux's notification payload)."""
    ref = event.involved
    return {
        "involvedObject": {
            "kind": ref.kind,
            "apiGroup": ref.group,
            "namespace": ref.namespace or "",
            "name": ref.name,
        },
        "severity": "error" if event.type is EventType.WARNING else "info",
        "type": event.type.value,
        "reason": event.reason,
        "message": event.message,
        "metadata": dict(event.metadata),
        "reportingController": event.controller,
        "timestamp": _iso(event.timestamp),
        "count": event.count,
        "reconcileID": event.run_id,
    }


class WebhookSink:
    """POSTs each event as JSON to ``url``, with bounded retries. Runs in a sink task only.

    Each attempt has its own ``timeout`` (connect, write and read together). Failures
    (connection errors, timeouts, 5xx and 429) are retried with jittered exponential backoff
    from ``backoff`` up to ``max_backoff``, honouring ``Retry-After`` on 429 and 503 (capped at
    ``max_backoff``); after ``max_attempts`` attempts the event is given up (raises, so the
    recorder counts it as failed) and :attr:`gave_up` is incremented. 4xx other than 429 are
    not retried.

    If cancelled (at the end of a shutdown's flush timeout), the attempt in flight is abandoned.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str = "webhook",
        timeout: float = 5.0,
        max_attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.name = name
        self.url = url
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._headers = dict(headers or {})
        self._client = client
        self.attempts = 0
        self.gave_up = 0

    def __repr__(self) -> str:
        return f"WebhookSink(name={self.name!r}, url={self.url!r})"

    async def deliver(self, event: Event) -> None:
        """POST the event, retrying as the class describes; raise :class:`WebhookDeliveryError`
        once it is refused (4xx other than 429) or the attempts are spent.

        Cancellation: the attempt in flight (or the backoff sleep) is abandoned; the endpoint
        may or may not have received the event.
        """
        client = self._client
        if client is None:
            client = self._client = httpx.AsyncClient(timeout=None)
        body = event_to_json(event)
        last_error = "no attempt made"
        for attempt in range(1, self._max_attempts + 1):
            self.attempts += 1
            retry_after: float | None = None
            with trio.move_on_after(self._timeout) as attempt_scope:
                try:
                    response = await client.post(self.url, json=body, headers=self._headers)
                except httpx.HTTPError as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                else:
                    if response.status_code < 300:
                        return
                    last_error = f"HTTP {response.status_code}"
                    if response.status_code in (429, 503):
                        retry_after = parse_retry_after(response.headers.get("Retry-After"))
                    elif response.status_code < 500:
                        self.gave_up += 1
                        raise WebhookDeliveryError(f"webhook {self.name} refused event: {last_error}")
            if attempt_scope.cancelled_caught:
                last_error = f"attempt timed out after {self._timeout}s"
            if attempt == self._max_attempts:
                break
            if retry_after is None:
                retry_after = jittered_backoff(attempt - 1, base=self._backoff, cap=self._max_backoff)
            await trio.sleep(min(retry_after, self._max_backoff))
        self.gave_up += 1
        raise WebhookDeliveryError(
            f"webhook {self.name} gave up after {self._max_attempts} attempts: {last_error}"
        )

    async def aclose(self) -> None:
        """Close the sink's HTTP client (the one it opened, or the one it was given).

        Cancellation: shielded; the client is closed even if the caller is cancelled.
        """
        if self._client is not None:
            with trio.CancelScope(shield=True):
                await self._client.aclose()


class WebhookDeliveryError(EngineError):
    """A webhook sink could not deliver an event."""

