from __future__ import annotations

import pytest
import trio

from engine import Event, EventType, ObjectRef, WebhookDeliveryError, WebhookSink

from ._webhook import WebhookReceiver

REF = ObjectRef("Bundle", "app", "prod", group="bundles.engine.dev")


def event(reason: str = "ReconcileFailed") -> Event:
    return Event(involved=REF, type=EventType.WARNING, reason=reason, message="boom", controller="bundles",
                 timestamp=1_700_000_000.0, first_timestamp=1_700_000_000.0, metadata={"revision": "r1"})


async def test_webhook_posts_the_event_as_json() -> None:
    receiver = WebhookReceiver()
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        sink = WebhookSink(receiver.url)
        with trio.fail_after(10):
            await sink.deliver(event())
        await sink.aclose()
        nursery.cancel_scope.cancel()
    assert receiver.bodies == [{
        "involvedObject": {"kind": "Bundle", "apiGroup": "bundles.engine.dev", "namespace": "prod", "name": "app"},
        "severity": "error",
        "type": "Warning",
        "reason": "ReconcileFailed",
        "message": "boom",
        "metadata": {"revision": "r1"},
        "reportingController": "bundles",
        "timestamp": "2023-11-14T22:13:20Z",
        "count": 1,
        "reconcileID": None,
    }]


async def test_webhook_honours_retry_after_on_429() -> None:
    receiver = WebhookReceiver()
    receiver.mode, receiver.status, receiver.times = "status", 429, 2
    receiver.headers = [("retry-after", "0")]
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        sink = WebhookSink(receiver.url, backoff=30, max_backoff=60)
        with trio.fail_after(10):  # the 30 s backoff would exceed this: Retry-After: 0 is used
            await sink.deliver(event())
        await sink.aclose()
        nursery.cancel_scope.cancel()
    assert receiver.requests == 3
    assert len(receiver.bodies) == 1
    assert sink.attempts == 3


async def test_webhook_retries_server_errors_then_gives_up() -> None:
    receiver = WebhookReceiver()
    receiver.mode, receiver.status, receiver.times = "status", 503, 100
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        sink = WebhookSink(receiver.url, backoff=0.001, max_backoff=0.002, max_attempts=3)
        with trio.fail_after(10):
            with pytest.raises(WebhookDeliveryError, match=r"^webhook webhook gave up after 3 attempts: HTTP 503$"):
                await sink.deliver(event())
        await sink.aclose()
        nursery.cancel_scope.cancel()
    assert receiver.requests == 3
    assert sink.gave_up == 1


async def test_webhook_does_not_retry_client_errors() -> None:
    receiver = WebhookReceiver()
    receiver.mode, receiver.status, receiver.times = "status", 400, 100
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        sink = WebhookSink(receiver.url)
        with trio.fail_after(10):
            with pytest.raises(WebhookDeliveryError, match=r"^webhook webhook refused event: HTTP 400$"):
                await sink.deliver(event())
        await sink.aclose()
        nursery.cancel_scope.cancel()
    assert receiver.requests == 1


async def test_webhook_attempt_timeout_bounds_a_black_hole(autojump_clock: trio.testing.MockClock) -> None:
    receiver = WebhookReceiver()
    receiver.mode = "blackhole"
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        sink = WebhookSink(receiver.url, timeout=5, max_attempts=4, backoff=1, max_backoff=1)
        start = trio.current_time()
        with pytest.raises(WebhookDeliveryError, match=r"attempt timed out after 5s$"):
            await sink.deliver(event())
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert 4 * 5 + 3 * 0.5 <= elapsed <= 4 * 5 + 3 * 1
    assert sink.gave_up == 1


async def test_webhook_connection_refused_is_counted() -> None:
    receiver = WebhookReceiver()
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        url = receiver.url
        nursery.cancel_scope.cancel()
    sink = WebhookSink(url, max_attempts=2, backoff=0.001)
    with trio.fail_after(10):
        with pytest.raises(WebhookDeliveryError, match=r"^webhook webhook gave up after 2 attempts: ConnectError"):
            await sink.deliver(event())


def test_repr_has_no_headers() -> None:
    sink = WebhookSink("http://127.0.0.1:1/x", headers={"Authorization": "Bearer s3cr3t-token"})
    assert "s3cr3t" not in repr(sink)
