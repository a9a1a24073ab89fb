"""A small HTTP/1.1 receiver on loopback for webhook tests (trio + h11, real sockets)."""

from __future__ import annotations

import json
from typing import Any

import h11
import trio


class WebhookReceiver:
    """Records POSTed JSON bodies. ``mode``: ``"ok"``, ``"blackhole"`` (accept, never answer),
    ``"status"`` (answer ``status`` with ``headers`` for the next ``times`` requests, then ok)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.connections = 0
        self.mode = "ok"
        self.status = 500
        self.headers: list[tuple[str, str]] = []
        self.times = 0
        self.port = 0
        self.received = trio.Event()
        self.connected = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            await self._converse(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass  # the client went away (a killed process resets its connections)

    async def _converse(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.connected.set()
        if self.mode == "blackhole":
            await trio.sleep_forever()
        conn = h11.Connection(h11.SERVER)
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self.requests += 1
                if self.mode == "blackhole":
                    await trio.sleep_forever()
                if self.mode == "status" and self.times > 0:
                    self.times -= 1
                    status, headers = self.status, list(self.headers)
                else:
                    self.bodies.append(json.loads(body or b"{}"))
                    self.received.set()
                    self.received = trio.Event()
                    status, headers = 200, []
                await stream.send_all(conn.send(h11.Response(status_code=status, headers=[*headers, ("content-length", "0")])))
                await stream.send_all(conn.send(h11.EndOfMessage()))
                body = b""
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
            elif isinstance(event, h11.ConnectionClosed):
                return
