"""The live stream: one JSON websocket message per run lifecycle step and per emitted event.

Connect to ``ws://HOST:PORT/live``, optionally filtered with query parameters ``controller``,
``object`` (``Kind/namespace/name``, as ``str(ObjectRef)``) and ``namespace``, each repeatable.
The handshake must carry the stream's token, as ``Authorization: Bearer <token>`` or the query
parameter ``token`` (browsers cannot set headers on a websocket); without one given, the stream
makes up a random token (:attr:`LiveStream.token`), so nobody reads the stream without
credentials. The same address serves the live dashboard, a web page, at ``/`` (see
``engine._dashboard``), which needs the token too.

Messages (every one has ``type`` and ``ts``, wall-clock seconds):

* ``hello``: a snapshot (controllers, queue depths, runs in progress), first on connect;
* ``objects``: right after ``hello``, what the stream remembers of each object (see
  :class:`~engine._live_state.LiveState`: last outcome, revision, running or queued,
  dependencies with their readiness, recent runs), in chunks of up to 500 objects; then one
  ``events`` message with the newest events (``events``: a list of ``event`` messages);
* ``controllers``: every ``stats_interval`` seconds, per controller ``queue_depth``,
  ``in_flight`` (busy workers), ``live_workers``, ``max_concurrent``, ``healthy``, ``runs`` and
  ``errors`` (finished runs and failed ones, since start) and ``outcomes`` (runs by result);
* ``ready``: ``object`` was reported ready (``Manager.mark_ready``); ``revision``;
* ``run``: ``queue_depth`` (measured when the message is sent) and ``in_flight`` (runs of the
  controller in progress) come with every step; ``step`` is ``queued`` (a trigger was accepted; ``supersedes`` names the run it
  cancelled), ``started``, then how the run ended: ``succeeded``, ``requeued`` (``delay``),
  ``failed`` (``error``, retried with backoff), ``terminal_error``, ``deadline``,
  ``dependency_not_ready`` (``dependencies``, ``delay``), ``superseded``, ``shutdown`` or
  ``leadership_lost``, ``handover``; ``result`` is the outcome's metric label;
* ``event``: an event that reached the sinks (after correlation; so it may arrive after the
  run steps around it); ``revision`` when the event's metadata names one: the revision the
  controller reports for the object (``reported_revision`` in ``objects``), where a run's
  ``revision`` is its trigger's (for a watched Kubernetes object, the resourceVersion);
* ``skipped``: ``count`` messages, at this point of the stream, were not sent to this client
  because it fell behind (skips after the last message sent are only counted).

Error summaries, reasons and event messages are redacted (:func:`engine._text.redact`): no
token, password or key reaches a client. Slow clients never slow the engine: the hooks only build a dict and ``send_nowait`` it into
the client's bounded buffer; when that is full the message is skipped and counted.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import attrs
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, wrap_server_stream

from .._events import Event
from .._http import HTTPServer, PrefixedStream, Request, is_websocket_upgrade, open_listeners, read_request_head
from .._observer import RunObserver
from .._outcome import Outcome, OutcomeKind
from .._refs import ObjectRef, Trigger
from .._run import Run
from .._text import redact, summarize
from ._dashboard import dashboard_routes
from ._live_state import LiveState

if TYPE_CHECKING:
    from .._controller import Controller
    from .._manager import Manager

__all__ = ["LiveStream", "LiveStatistics", "LIVE_PATH"]

logger = logging.getLogger("engine.live")

LIVE_PATH = "/live"

_CONNECT_TIMEOUT = 10.0
_DISCONNECT_TIMEOUT = 1.0
_CHUNK = 500

_STEPS = {
    OutcomeKind.SUCCEEDED: "succeeded",
    OutcomeKind.REQUEUE_AFTER: "requeued",
    OutcomeKind.FAILED: "failed",
    OutcomeKind.TERMINAL: "terminal_error",
    OutcomeKind.DEADLINE: "deadline",
    OutcomeKind.DEPENDENCY_NOT_READY: "dependency_not_ready",
    OutcomeKind.SUPERSEDED: "superseded",
    OutcomeKind.SHUTDOWN: "shutdown",
    OutcomeKind.LEADERSHIP_LOST: "leadership_lost",
    OutcomeKind.HANDOVER: "handover",
}


def _lines(sources: Iterable[Callable[[], Iterable[str]]]) -> list[str]:
    found: list[str] = []
    for source in sources:
        try:
            found.extend(redact(str(line)) for line in source())
        except Exception:  # noqa: BLE001 - a broken source must not break the stream
            logger.exception("a live-stream notice source failed")
    return found


@attrs.frozen
class LiveStatistics:
    """A snapshot of a :class:`LiveStream`."""

    clients: int
    """Clients connected now."""
    sent: int
    """Messages sent to clients, in total."""
    skipped: int
    """Messages skipped because a client's buffer was full, in total."""
    rejected: int
    """Handshakes refused (bad path, token or too many clients)."""


@attrs.define(eq=False)
class _Client:
    send: trio.MemorySendChannel[tuple[int, dict[str, Any]]]
    receive: trio.MemoryReceiveChannel[tuple[int, dict[str, Any]]]
    controllers: frozenset[str]
    objects: frozenset[str]
    namespaces: frozenset[str]
    remote: str
    skipped: int = 0
    pending_skipped: int = 0
    sent: int = 0
    buffered: int = 0
    """Messages in the buffer (kept here: checking it is cheaper than a failing send)."""
    flushed: trio.Event | None = None

    def wants(self, controller: str, ref: ObjectRef) -> bool:
        if self.controllers and controller not in self.controllers:
            return False
        return self.wants_ref(ref)

    def wants_ref(self, ref: ObjectRef) -> bool:
        if self.namespaces and (ref.namespace or "") not in self.namespaces:
            return False
        return not self.objects or str(ref) in self.objects


def _summary(error: BaseException | None) -> str | None:
    return None if error is None else summarize(error)


class LiveStream(RunObserver):
    """A run observer and event sink that fans messages out to websocket clients.

    Construct it with the manager (before :meth:`Manager.run`): it adds itself as an observer
    and as the event sink ``"live"``. Serve it with :meth:`serve` in the services nursery.
    ``client_buffer`` is each client's buffer, in messages; ``max_clients`` caps connections
    (more are refused with 503); ``token`` is what the handshake must carry as
    ``Authorization: Bearer <token>`` or ``?token=`` (compared in constant time, never logged,
    not in the repr): without it a random one is made (read it from :attr:`token`). When the manager stops, a shutdown hook gives
    clients up to ``flush_timeout`` seconds in all to receive what is buffered for them (run
    steps up to the last ``shutdown``); what reaches sinks later may not be sent.
    ``max_objects`` bounds what the stream remembers for late clients (:class:`LiveState`);
    ``stats_interval`` is the period of ``controllers`` messages.
    """

    name = "live"

    def __init__(
        self,
        manager: Manager,
        *,
        token: str | None = None,
        client_buffer: int = 256,
        max_clients: int = 64,
        flush_timeout: float = 0.5,
        max_objects: int = 20_000,
        stats_interval: float = 1.0,
    ) -> None:
        if client_buffer < 1:
            raise ValueError("client_buffer must be >= 1")
        if max_clients < 1:
            raise ValueError("max_clients must be >= 1")
        self.manager = manager
        self._token_generated = not token
        self._token = (token or secrets.token_hex(24)).encode()
        self._client_buffer = client_buffer
        self._max_clients = max_clients
        self._flush_timeout = flush_timeout
        self._stats_interval = stats_interval
        self.state = LiveState(max_objects=max_objects)
        """What late clients are sent after ``hello``."""
        self._clients: list[_Client] = []
        self._sent = 0
        self._skipped = 0
        self._rejected = 0
        self.address: tuple[str, int] | None = None
        """The bound ``(host, port)``, once :meth:`serve` started."""
        self._notice_sources: list[Callable[[], Iterable[str]]] = []
        self._info_sources: list[Callable[[], Iterable[str]]] = []
        manager.add_observer(self)
        manager.add_sink(self)
        manager.add_shutdown_hook(self._flush)

    def add_notices(self, source: Callable[[], Iterable[str]]) -> None:
        """Show what ``source`` returns (one-line notices, such as a permission the credentials
        lack) to every client: ``hello`` and each ``controllers`` message carry the current
        ``notices``, and the dashboard shows them above its tables. ``source`` is called
        synchronously once per message; its text is redacted, and a source that raises is
        left out of that message."""
        self._notice_sources.append(source)

    def add_info(self, source: Callable[[], Iterable[str]]) -> None:
        """Show what ``source`` returns as routine one-line facts (a replica's share of a ring,
        webhook counts): as :meth:`add_notices`, under ``info``, and the dashboard shows them
        in its header rather than as warnings."""
        self._info_sources.append(source)

    def notices(self) -> list[str]:
        """The current notices of every source, redacted, in the order the sources were added."""
        return _lines(self._notice_sources)

    def info(self) -> list[str]:
        """The current routine facts of every :meth:`add_info` source, as :meth:`notices`."""
        return _lines(self._info_sources)

    def _address_url(self, scheme: str, path: str) -> str | None:
        if self.address is None:
            return None
        host, port = self.address
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{port}{path}"

    @property
    def url(self) -> str | None:
        """``ws://host:port/live`` once serving, else ``None``."""
        return self._address_url("ws", LIVE_PATH)

    @property
    def dashboard_url(self) -> str | None:
        """``http://host:port/``, where the dashboard is served, once serving, else ``None``."""
        return self._address_url("http", "/")

    @property
    def needs_token(self) -> bool:
        """Whether the stream and the dashboard ask for a token: always (kept for callers that
        asked before every stream had one)."""
        return True

    @property
    def token(self) -> str:
        """The token the stream and the dashboard's page require (the one given, or the random
        one made up without it)."""
        return self._token.decode()

    @property
    def token_generated(self) -> bool:
        """Whether :attr:`token` was made up here (no token was given)."""
        return self._token_generated

    def statistics(self) -> LiveStatistics:
        return LiveStatistics(
            clients=len(self._clients), sent=self._sent, skipped=self._skipped, rejected=self._rejected
        )

    # -- hooks (synchronous, cheap, never raise) ---------------------------------------------

    def _publish(self, controller: str, ref: ObjectRef, message: dict[str, Any]) -> None:
        for client in self._clients:
            if client.wants(controller, ref):
                self._send_one(client, message)

    def _send_one(self, client: _Client, message: dict[str, Any]) -> None:
        if client.buffered >= self._client_buffer:
            client.skipped += 1
            client.pending_skipped += 1
            self._skipped += 1
            return
        try:
            client.send.send_nowait((client.pending_skipped, message))
        except (trio.WouldBlock, trio.BrokenResourceError):
            return
        client.pending_skipped = 0
        client.buffered += 1

    def _run_message(self, controller: Controller, ref: ObjectRef, step: str) -> dict[str, Any]:
        return {
            "type": "run",
            "step": step,
            "ts": time.time(),
            "controller": controller.name,
            "object": str(ref),
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "queue_depth": controller.queue,
            "in_flight": controller.active_workers,
        }

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        try:
            self.state.triggered(controller.name, trigger.ref, trigger.revision)
            if not self._clients:
                return
            message = self._run_message(controller, trigger.ref, "queued")
            message["reason"] = redact(trigger.reason)
            message["revision"] = trigger.revision
            message["sequence"] = trigger.sequence
            message["supersedes"] = superseded.id if superseded is not None else None
            self._publish(controller.name, trigger.ref, message)
        except Exception:
            logger.exception("live stream hook failed")

    def on_run_started(self, controller: Controller, run: Run) -> None:
        try:
            message = self._run_message(controller, run.key, "started")
            self.state.started(controller.name, run, message["ts"])
            if not self._clients:
                return
            message["run_id"] = run.id
            message["attempt"] = run.attempt
            message["reason"] = redact(run.trigger.reason)
            message["revision"] = run.trigger.revision
            if run.trace_id is not None:
                message["trace_id"] = run.trace_id
            self._publish(controller.name, run.key, message)
        except Exception:
            logger.exception("live stream hook failed")

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        try:
            step = _STEPS[outcome.kind]
            message = self._run_message(controller, run.key, step)
            message["run_id"] = run.id
            message["attempt"] = run.attempt
            message["result"] = outcome.kind.value
            finished = run.finished_at if run.finished_at is not None else run.started_at
            message["duration"] = round(finished - run.started_at, 6)
            if outcome.requeue_after is not None:
                message["delay"] = outcome.requeue_after
            if outcome.error is not None and outcome.kind is not OutcomeKind.DEPENDENCY_NOT_READY:
                message["error"] = _summary(outcome.error)
            if outcome.dependencies:
                message["dependencies"] = [str(ref) for ref in outcome.dependencies]
            if outcome.reason is not None:
                message["reason"] = redact(outcome.reason)
            if run.trace_id is not None:
                message["trace_id"] = run.trace_id
            self.state.finished(controller.name, run, outcome, step, message)
            if self._clients:
                self._publish(controller.name, run.key, message)
        except Exception:
            logger.exception("live stream hook failed")

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        try:
            self.state.mark_ready(ref)
            if not self._clients:
                return
            message = {
                "type": "ready", "ts": time.time(), "object": str(ref), "kind": ref.kind,
                "namespace": ref.namespace, "name": ref.name, "revision": revision,
            }
            for client in self._clients:
                if client.wants_ref(ref):
                    self._send_one(client, message)
        except Exception:
            logger.exception("live stream hook failed")

    async def deliver(self, event: Event) -> None:
        """Event-sink side: fan ``event`` out to clients; never blocks.

        Cancellation: not a checkpoint; it returns at once and cannot be cancelled.
        """
        ref = event.involved
        message = {
            "type": "event",
            "ts": event.timestamp,
            "controller": event.controller,
            "object": str(ref),
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "event_type": event.type.value,
            "reason": event.reason,
            "message": redact(event.message),
            "count": event.count,
            "run_id": event.run_id,
        }
        if event.metadata.get("revision"):
            message["revision"] = redact(str(event.metadata["revision"]))
        self.state.event((event.controller, ref, message))
        if self._clients:
            self._publish(event.controller, ref, message)

    def snapshot(self) -> dict[str, Any]:
        """The ``hello`` message: controllers, their queues and runs in progress."""
        controllers = []
        now = trio.current_time()
        for controller in self.manager.controllers:
            entry = self._controller_stats(controller)
            entry["running"] = [
                {"object": str(run.key), "run_id": run.id, "attempt": run.attempt,
                 "running_for": round(now - run.started_at, 6), "trace_id": run.trace_id}
                for run in controller.running.values()
            ]
            controllers.append(entry)
        return {"type": "hello", "ts": time.time(), "manager": self.manager.name, "controllers": controllers,
                "notices": self.notices(), "info": self.info()}

    @staticmethod
    def _controller_stats(controller: Controller) -> dict[str, Any]:
        stats = controller.queue.statistics()
        outcomes = {kind.value: count for kind, count in controller.outcomes.items() if count}
        return {
            "name": controller.name,
            "queue_depth": stats.depth,
            "waiting": stats.waiting,
            "in_flight": controller.active_workers,
            "live_workers": controller.live_workers,
            "max_concurrent": controller.max_concurrent,
            "healthy": controller.healthy,
            "runs": sum(controller.outcomes.values()),
            "errors": sum(count for kind, count in controller.outcomes.items() if kind.is_failure),
            "outcomes": outcomes,
        }

    def _publish_stats(self) -> None:
        if not self._clients:
            return
        stats = [self._controller_stats(controller) for controller in self.manager.controllers]
        notices, info = self.notices(), self.info()
        for client in self._clients:
            wanted = [c for c in stats if not client.controllers or c["name"] in client.controllers]
            self._send_one(client, {"type": "controllers", "ts": time.time(), "controllers": wanted,
                                    "notices": notices, "info": info})

    async def _tick(self) -> None:
        while True:
            await trio.sleep(self._stats_interval)
            self._publish_stats()

    # -- serving -----------------------------------------------------------------------------

    async def bind(self, host: str, port: int) -> list[trio.SocketListener]:
        """Open the listening sockets and set :attr:`address`; raises ``OSError`` naming it.

        Cancellation: if cancelled, nothing is left open.
        """
        listeners, self.address = await open_listeners("the live stream", host, port)
        return listeners

    async def serve(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept websocket clients and dashboard requests on ``listeners`` (from :meth:`bind`)
        until cancelled.

        A connection whose request asks for a websocket upgrade is a live-stream client; any
        other is served by the dashboard's HTTP routes. ``task_status.started`` receives the
        bound address.

        Cancellation: runs until cancelled; cancelling closes every connection at once.
        """
        assert self.address is not None
        pages = HTTPServer(dashboard_routes(self._page_authorized), name="live dashboard")
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, partial(self._connection, pages), listeners)
            nursery.start_soon(self._tick)
            logger.info("live stream listening", extra={"address": self.url})
            task_status.started(self.address)

    async def _connection(self, pages: HTTPServer, stream: trio.SocketStream) -> None:
        head = None
        with trio.move_on_after(_CONNECT_TIMEOUT):
            try:
                head = await read_request_head(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
        if not head:
            return
        prefixed = PrefixedStream(stream, head)
        if not is_websocket_upgrade(head):
            await pages.handle_connection(prefixed)
            return
        async with trio.open_nursery() as nursery:
            with trio.move_on_after(_CONNECT_TIMEOUT) as connecting:
                request = await wrap_server_stream(nursery, prefixed)
            if not connecting.cancelled_caught:
                await self._handle(request)
            nursery.cancel_scope.cancel(reason="live stream connection handled")

    def _token_ok(self, authorization: bytes | None, query_tokens: Iterable[str]) -> bool:
        if authorization is not None:
            scheme, _, credentials = authorization.partition(b" ")
            if scheme.lower() == b"bearer":
                return hmac.compare_digest(credentials.strip(), self._token)
        return any(hmac.compare_digest(token.encode(), self._token) for token in query_tokens)

    def _authorized(self, request: WebSocketRequest) -> bool:
        authorization = next((v for n, v in request.headers if n.lower() == b"authorization"), None)
        return self._token_ok(authorization, parse_qs(urlsplit(request.path).query).get("token", []))

    def _page_authorized(self, request: Request) -> bool:
        authorization = request.headers.get("authorization")
        return self._token_ok(
            authorization.encode("latin-1") if authorization is not None else None, request.query_values.get("token", [])
        )

    async def _handle(self, request: WebSocketRequest) -> None:
        target = urlsplit(request.path)
        remote = str(request.remote)
        if target.path != LIVE_PATH:
            self._rejected += 1
            await request.reject(404, body=b"not found; the live stream is at /live\n")
            return
        if not self._authorized(request):
            self._rejected += 1
            logger.warning("live stream client refused: missing or wrong bearer token", extra={"remote": remote})
            await request.reject(
                401, extra_headers=[(b"www-authenticate", b'Bearer realm="engine"')], body=b"unauthorized\n"
            )
            return
        if len(self._clients) >= self._max_clients:
            self._rejected += 1
            await request.reject(503, body=b"too many live stream clients\n")
            return
        query = parse_qs(target.query)
        send, receive = trio.open_memory_channel[tuple[int, dict[str, Any]]](self._client_buffer)
        client = _Client(
            send=send,
            receive=receive,
            controllers=_values(query.get("controller", [])),
            objects=_values(query.get("object", [])),
            namespaces=_values(query.get("namespace", [])),
            remote=remote,
        )
        ws = await request.accept()
        self._clients.append(client)
        logger.info("live stream client connected", extra={"remote": remote})
        try:
            hello = self.snapshot()
            hello["filters"] = {
                "controller": sorted(client.controllers), "object": sorted(client.objects),
                "namespace": sorted(client.namespaces),
            }
            objects = self.state.objects(client.wants)
            events = [message for controller, ref, message in self.state.events if client.wants(controller, ref)]
            await ws.send_message(json.dumps(hello))
            for start in range(0, len(objects), _CHUNK):
                chunk = objects[start:start + _CHUNK]
                await ws.send_message(json.dumps({"type": "objects", "ts": time.time(), "objects": chunk}, default=str))
            await ws.send_message(json.dumps({"type": "events", "ts": time.time(), "events": events}, default=str))
            await self._stream(client, ws)
        except ConnectionClosed:
            pass
        finally:
            self._clients.remove(client)
            send.close()
            if client.flushed is not None:
                client.flushed.set()
            with trio.move_on_after(_DISCONNECT_TIMEOUT) as closing:
                closing.shield = True
                await ws.aclose()
            logger.info(
                "live stream client disconnected",
                extra={"remote": remote, "sent": client.sent, "skipped": client.skipped},
            )

    async def _stream(self, client: _Client, ws: WebSocketConnection) -> None:
        """Feed ``client`` until it closes the connection, which either side may notice first
        (a send that fails, or the read of its input): either way this returns.

        Cancellation: stops feeding; nothing to undo.
        """
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._drain_client_input, ws, nursery.cancel_scope)
            try:
                await self._feed(client, ws)
            except ConnectionClosed:
                nursery.cancel_scope.cancel(reason="live stream client closed the connection")

    async def _feed(self, client: _Client, ws: WebSocketConnection) -> None:
        async for skipped, message in client.receive:
            client.buffered -= 1
            if skipped:
                await ws.send_message(json.dumps({"type": "skipped", "ts": time.time(), "count": skipped}))
            await ws.send_message(_encode(message))
            client.sent += 1
            self._sent += 1
            if client.flushed is not None and not client.buffered:
                client.flushed.set()

    async def _flush(self) -> None:
        """Shutdown hook: give clients up to ``flush_timeout`` to receive what is buffered.

        Clients already skipping messages are not waited for.
        """
        with trio.move_on_after(self._flush_timeout):
            for client in list(self._clients):
                if client.buffered and not client.pending_skipped:
                    client.flushed = trio.Event()
                    await client.flushed.wait()

    @staticmethod
    async def _drain_client_input(ws: WebSocketConnection, scope: trio.CancelScope) -> None:
        try:
            while True:
                await ws.get_message()
        except ConnectionClosed:
            scope.cancel(reason="live stream client closed the connection")

    # -- metrics -----------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Prometheus collector side: ``engine_live_stream_*`` series."""
        clients = GaugeMetricFamily("engine_live_stream_clients", "Live stream clients connected")
        clients.add_metric([], len(self._clients))
        sent = CounterMetricFamily("engine_live_stream_messages_sent_total", "Live stream messages sent")
        sent.add_metric([], self._sent)
        skipped = CounterMetricFamily(
            "engine_live_stream_messages_skipped_total", "Live stream messages skipped because a client fell behind"
        )
        skipped.add_metric([], self._skipped)
        rejected = CounterMetricFamily("engine_live_stream_rejected_total", "Live stream handshakes refused")
        rejected.add_metric([], self._rejected)
        return iter([clients, sent, skipped, rejected])


def _encode(message: dict[str, Any]) -> str:
    """Serialize ``message``; a queue in ``queue_depth`` is measured now, off the hot path."""
    depth = message.get("queue_depth")
    if depth is not None and not isinstance(depth, int):
        message = {**message, "queue_depth": len(depth)}
    return json.dumps(message, default=str)


def _values(raw: Iterable[str]) -> frozenset[str]:
    return frozenset(v for item in raw for v in item.split(",") if v)

