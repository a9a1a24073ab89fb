"""A simulated plugin's webhooks: one Service in front of the webhook servers of its live replicas.

On a cluster a webhook configuration names a Service and each call goes to one ready pod
behind it, which answers from its own caches. The simulator registers the plugin's webhooks
once (in process, as the harness does: :func:`~engine.testing._harness.register_in_process`)
with a :class:`WebhookService` as the server's webhook transport: each call goes to the
webhook server of one live replica, in turn (round robin over the live replicas by slot, so
a seed replays exactly); with none live it fails as kube-apiserver's call fails when the
Service has no endpoints, and the webhook's ``failurePolicy`` decides the write.

Every call is told to the service's observers as a :class:`WebhookCall` when it is asked, and
completed (answer or failure, when) once it ends: what an observer on the wire between the API
server and the webhooks sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import httpx
import trio

from engine.kube import WebhookServer

__all__ = ["WebhookCall", "WebhookService"]


@attrs.define(eq=False)
class WebhookCall:
    """One webhook call, as seen on the wire."""

    path: str
    """The webhook's path (``/validate/NAME`` or ``/mutate/NAME``)."""
    request: Mapping[str, Any]
    """The review's ``request`` (empty for a body that is not a review)."""
    replica: str | None
    """The identity of the replica whose webhook server was asked (``None``: no endpoint)."""
    asked_at: float
    answered_at: float | None = None
    """When it ended (``None`` while in flight, and for a call cancelled by its timeout)."""
    response: Mapping[str, Any] | None = None
    """The review's ``response`` once answered with one."""
    failure: str | None = None
    """Why there is no response (no endpoint, an HTTP error, cancelled)."""

    @property
    def allowed(self) -> bool:
        return self.response is not None and bool(self.response.get("allowed"))


def _review_request(body: bytes) -> Mapping[str, Any]:
    try:
        review = json.loads(body or b"null")
    except ValueError:
        return {}
    request = review.get("request") if isinstance(review, Mapping) else None
    return request if isinstance(request, Mapping) else {}


class WebhookService(httpx.AsyncBaseTransport):
    """Routes webhook calls to the webhook server of a live replica (``endpoints()``: identity
    and server of each, by slot), in turn; tells ``observers`` of every call."""

    def __init__(self, name: str, endpoints: Callable[[], Sequence[tuple[str, WebhookServer]]]) -> None:
        self.name = name
        self._endpoints = endpoints
        self._turn = 0
        self.observers: list[Callable[[WebhookCall], None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request`` from one live replica's webhook server, or 503 with the
        missing-endpoints message. Cancellation (the API server's timeout): the handler is
        cancelled, the call recorded as failed, and ``Cancelled`` propagates."""
        body = await request.aread()
        live = list(self._endpoints())
        replica, server = live[self._turn % len(live)] if live else (None, None)
        self._turn += 1
        call = WebhookCall(request.url.path, _review_request(body), replica, trio.current_time())
        for observer in self.observers:
            observer(call)
        if server is None:
            message = f'no endpoints available for service "{self.name}"'
            call.failure, call.answered_at = message, trio.current_time()
            return httpx.Response(503, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                             "message": message, "reason": "ServiceUnavailable", "code": 503})
        try:
            response = await server.transport().handle_async_request(request)
        except BaseException as exc:
            call.failure = f"the call ended: {type(exc).__name__}"
            raise
        call.answered_at = trio.current_time()
        answer = None
        try:
            answer = json.loads(response.content or b"null")
        except ValueError:
            pass
        found = answer.get("response") if isinstance(answer, Mapping) else None
        if response.status_code == 200 and isinstance(found, Mapping):
            call.response = found
        else:
            call.failure = f"HTTP {response.status_code}"
        return response
