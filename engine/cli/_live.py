"""``python -m engine live URL``: a terminal client of the live stream (alias: ``watch``).

On a terminal it shows a live table: per controller its queue depth and runs in flight, per
object its last step, attempt, how long its run in progress has been running and the last
error. ``--follow`` (or any output that is not a terminal) prints one plain line per message
instead. ``--count N`` stops after N run or event messages and then prints the table;
``--once`` prints the table of the connect-time snapshot (every object the stream remembers,
sent in ``objects`` messages after ``hello``) and exits.

Exit codes: 0 when done (``--count``/``--once`` reached, or the server closed the stream), 1
when it cannot connect (one line on stderr says why), 2 for usage errors, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import IO, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    open_websocket_url,
)

from ._args import ArgumentParser

__all__ = ["main", "LiveState", "format_line"]

TOKEN_ENV = "ENGINE_LIVE_TOKEN"

_LINE_TYPES = frozenset({"run", "event", "skipped"})
"""Messages ``--follow`` prints; the dashboard's snapshot and statistics messages are not."""
_SNAPSHOT_END = "events"
"""The last message of the connect-time snapshot (``hello``, ``objects``..., ``events``)."""
_FAILED_STEPS = frozenset({"failed", "terminal_error", "deadline"})
_CLEAR = "\x1b[H\x1b[2J"
_HIDE_CURSOR = "\x1b[?25l"
_SHOW_CURSOR = "\x1b[?25h"


@attrs.define
class _Row:
    controller: str
    object: str
    last: str = "-"
    attempt: int = 0
    running: bool = False
    run_id: str = "-"
    error: str = ""
    updated: float = 0.0
    started: float | None = None
    """Wall-clock start of the run in progress, when known."""


@attrs.define
class _ControllerRow:
    name: str
    queue_depth: int = 0
    in_flight: int = 0
    max_concurrent: int = 0


@attrs.define
class LiveState:
    """What the table shows, folded from live-stream messages by :meth:`apply`."""

    rows: dict[tuple[str, str], _Row] = attrs.field(factory=dict)
    controllers: dict[str, _ControllerRow] = attrs.field(factory=dict)
    manager: str = ""
    skipped: int = 0
    messages: int = 0

    def apply(self, message: dict[str, Any]) -> None:
        """Fold one message into the state. Unknown message types are ignored."""
        kind = message.get("type")
        if kind == "hello":
            self.manager = str(message.get("manager", ""))
            for c in message.get("controllers", []):
                self.controllers[c["name"]] = _ControllerRow(
                    c["name"], c.get("queue_depth", 0), c.get("in_flight", 0), c.get("max_concurrent", 0)
                )
                for run in c.get("running", []):
                    row = self._row(c["name"], run["object"])
                    row.last, row.running, row.run_id = "started", True, run.get("run_id", "-")
                    row.attempt = run.get("attempt", row.attempt)
                    if "running_for" in run:
                        row.started = float(message.get("ts", 0.0)) - float(run["running_for"])
            return
        if kind == "objects":
            for entry in message.get("objects", []):
                self._apply_object(entry)
            return
        if kind == "controllers":
            for c in message.get("controllers", []):
                crow = self.controllers.setdefault(c["name"], _ControllerRow(c["name"]))
                crow.queue_depth = int(c.get("queue_depth", crow.queue_depth))
                crow.in_flight = int(c.get("in_flight", crow.in_flight))
                crow.max_concurrent = int(c.get("max_concurrent", crow.max_concurrent))
            return
        if kind == "skipped":
            self.skipped += int(message.get("count", 0))
            return
        if kind not in ("run", "event"):
            return
        self.messages += 1
        controller, obj = str(message.get("controller", "")), str(message.get("object", ""))
        row = self._row(controller, obj)
        row.updated = float(message.get("ts", 0.0))
        if kind == "event":
            return
        crow = self.controllers.setdefault(controller, _ControllerRow(controller))
        crow.queue_depth = int(message.get("queue_depth", crow.queue_depth))
        crow.in_flight = int(message.get("in_flight", crow.in_flight))
        step = str(message.get("step", ""))
        row.last = step
        if step == "queued":
            return
        row.attempt = int(message.get("attempt", row.attempt))
        row.run_id = str(message.get("run_id", row.run_id))
        row.running = step == "started"
        if step == "started":
            row.started = row.updated
            return
        row.started = None
        row.error = str(message.get("error", "")) if step in _FAILED_STEPS else ""

    def _apply_object(self, entry: dict[str, Any]) -> None:
        """Fold one entry of an ``objects`` snapshot message (the stream's memory of an object)."""
        row = self._row(str(entry.get("controller", "")), str(entry.get("object", "")))
        last = entry.get("last") or {}
        running = entry.get("running")
        if last:
            row.last = str(last.get("step", row.last))
            row.attempt = int(last.get("attempt", row.attempt))
            row.run_id = str(last.get("run_id", row.run_id))
            row.updated = float(last.get("ts", row.updated))
            row.error = str(last.get("error", "")) if row.last in _FAILED_STEPS else ""
        if entry.get("queued"):
            row.last = "queued"
        row.running = bool(running)
        row.started = None
        if running:
            row.last = "started"
            row.run_id = str(running.get("run_id", row.run_id))
            row.attempt = int(running.get("attempt", row.attempt))
            row.started = float(running["ts"]) if running.get("ts") is not None else None

    def _row(self, controller: str, obj: str) -> _Row:
        row = self.rows.get((controller, obj))
        if row is None:
            row = self.rows[(controller, obj)] = _Row(controller, obj)
        return row

    def render(self, width: int = 120, *, now: float | None = None) -> list[str]:
        """The table as lines, at most ``width`` characters each; ``now`` (wall clock, default
        the current time) measures how long runs in progress have been running."""
        now = time.time() if now is None else now
        header = f"manager {self.manager!r}" if self.manager else "manager"
        lines = [header + (f"  ({self.skipped} messages skipped: this client fell behind)" if self.skipped else "")]
        lines.append(_columns(["CONTROLLER", "QUEUE", "IN-FLIGHT", "WORKERS"],
                              [[c.name, str(c.queue_depth), str(c.in_flight), str(c.max_concurrent or "-")]
                               for c in self.controllers.values()]))
        lines.append("")
        body = [
            [r.controller, r.object, r.last, str(r.attempt or "-"), _running_for(r, now), r.run_id, r.error]
            for r in sorted(self.rows.values(), key=lambda r: (r.controller, r.object))
        ]
        lines.append(_columns(["CONTROLLER", "OBJECT", "LAST", "ATTEMPT", "RUNNING", "RUN", "ERROR"], body))
        return [line[:width] for text in lines for line in text.split("\n")]


def _running_for(row: _Row, now: float) -> str:
    if not row.running:
        return "-"
    if row.started is None:
        return "yes"
    seconds = max(now - row.started, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _columns(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = []
    for cells in [headers, *rows]:
        out.append("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip())
    return "\n".join(out)


def format_line(message: dict[str, Any]) -> str:
    """One plain line for a message, as ``--follow`` prints it."""
    ts = float(message.get("ts", 0.0))
    stamp = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"
    kind = message.get("type")
    if kind == "skipped":
        return f"{stamp} skipped {message.get('count')} messages (this client fell behind)"
    if kind == "hello":
        names = ", ".join(c["name"] for c in message.get("controllers", []))
        return f"{stamp} connected to manager {message.get('manager')!r} (controllers: {names})"
    head = f"{stamp} {message.get('controller')} {message.get('object')}"
    if kind == "event":
        return f"{head} event {message.get('event_type')} {message.get('reason')}: {message.get('message')}"
    parts = [head, str(message.get("step"))]
    for key in ("run_id", "attempt", "delay", "supersedes", "reason", "error", "dependencies"):
        value = message.get(key)
        if value in (None, "", []):
            continue
        if key == "run_id":
            key = "run"
        if isinstance(value, list):
            value = ",".join(map(str, value))
        text = str(value)
        parts.append(f"{key}={json.dumps(text) if ' ' in text else text}")
    return " ".join(parts)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m engine live",
        description="Watch a manager's live stream: a live table, or raw lifecycle lines.",
    )
    parser.add_argument("url", help="the live stream, for example ws://127.0.0.1:8082/live")
    parser.add_argument("--token", help=f"bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--controller", action="append", default=[], help="only this controller (repeatable)")
    parser.add_argument("--object", action="append", default=[], help="only this object, Kind/namespace/name (repeatable)")
    parser.add_argument("--namespace", action="append", default=[], help="only this namespace (repeatable)")
    parser.add_argument("--follow", "-f", action="store_true", help="print one line per lifecycle step instead of the table")
    parser.add_argument("--count", type=int, help="exit after this many run or event messages")
    parser.add_argument("--once", action="store_true", help="print the table of the current state and exit")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the connection (default 5)")
    return parser


def _stream_url(args: argparse.Namespace) -> str:
    parts = urlsplit(str(args.url))
    if parts.scheme not in ("ws", "wss"):
        raise ValueError("the URL must start with ws:// or wss://")
    query = [(k, v) for k in ("controller", "object", "namespace") for v in getattr(args, k)]
    path = parts.path or "/live"
    extra = urlencode(query)
    merged = "&".join(q for q in (parts.query, extra) if q)
    return str(urlunsplit((parts.scheme, parts.netloc, path, merged, "")))


def main(argv: list[str], *, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Run the live command; returns the exit code."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.count is not None and args.count < 1:
        print("live: --count must be >= 1", file=err)
        return 2
    try:
        url = _stream_url(args)
    except ValueError as exc:
        print(f"live: {exc}", file=err)
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or None
    interactive = out.isatty() and not args.follow and args.count is None and not args.once
    try:
        code = trio.run(_until_interrupted, partial(_follow, args, url, token, out, err, interactive))
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was installed
        code = 130
    if code == 130 and interactive:
        out.write(_SHOW_CURSOR + "\n")
        out.flush()
    return code


async def _until_interrupted(follow: Callable[[], Awaitable[int]]) -> int:
    """Run ``follow`` and return its exit code; SIGINT cancels it and the code is 130.

    Receiving the signal as a message (rather than as ``KeyboardInterrupt``, which trio raises
    in whatever task runs, a websocket library task included) ends the command cleanly.
    """
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return await follow()
    code = 130
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def cancel_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(cancel_on_signal)
            code = await follow()
            nursery.cancel_scope.cancel()
    return code


async def _follow(
    args: argparse.Namespace, url: str, token: str | None, out: IO[str], err: IO[str], interactive: bool
) -> int:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else None
    state = LiveState()
    shown = _without_token(str(args.url))
    try:
        async with open_websocket_url(url, extra_headers=headers, connect_timeout=args.timeout) as ws:
            hello = json.loads(await ws.get_message())
            state.apply(hello)
            if args.once:
                await _read_snapshot(ws, state, args.timeout)
                _print_table(state, out)
                return 0
            if not interactive:
                print(format_line(hello), file=err, flush=True)
            return await _loop(ws, state, args, out, err, interactive)
    except ConnectionRejected as exc:
        hint = " (check --token)" if exc.status_code in (401, 403) else ""
        print(f"live: cannot connect to {shown}: the server refused the handshake with HTTP {exc.status_code}{hint}",
              file=err)
        return 1
    except (HandshakeError, OSError) as exc:
        print(f"live: cannot connect to {shown}: {_reason(exc)}", file=err)
        return 1
    finally:
        if interactive:
            out.write(_SHOW_CURSOR)
            out.flush()


async def _loop(
    ws: Any, state: LiveState, args: argparse.Namespace, out: IO[str], err: IO[str], interactive: bool
) -> int:
    if interactive:
        out.write(_HIDE_CURSOR)
    last_draw = -1.0
    try:
        while True:
            if interactive and trio.current_time() - last_draw >= 0.1:
                _draw(state, out)
                last_draw = trio.current_time()
            if interactive:
                with trio.move_on_after(0.5):
                    state.apply(json.loads(await ws.get_message()))
                continue
            message = json.loads(await ws.get_message())
            state.apply(message)
            if message.get("type") not in _LINE_TYPES:
                continue
            print(format_line(message), file=out, flush=True)
            if args.count is not None and state.messages >= args.count:
                if not args.follow:
                    print(file=out)
                    _print_table(state, out)
                return 0
    except ConnectionClosed as exc:
        if interactive:
            _draw(state, out)
        reason = exc.reason
        detail = ""
        if reason is not None:
            detail = f" (code {reason.code}" + (f": {reason.reason}" if reason.reason else "") + ")"
        print(f"live: the server closed the stream{detail}", file=err)
        return 0


async def _read_snapshot(ws: Any, state: LiveState, timeout: float) -> None:
    """Fold the rest of the connect-time snapshot (``objects``... then ``events``) into ``state``;
    gives up after ``timeout`` seconds without a message (a server that sends no snapshot)."""
    while True:
        message: dict[str, Any] | None = None
        with trio.move_on_after(timeout):
            message = json.loads(await ws.get_message())
        if message is None:
            return
        state.apply(message)
        if message.get("type") == _SNAPSHOT_END:
            return


def _without_token(url: str) -> str:
    """``url`` with the value of a ``token`` query parameter hidden, for messages."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = "&".join("token=REDACTED" if item.split("=", 1)[0] == "token" else item for item in parts.query.split("&"))
    return str(urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment)))


def _reason(exc: BaseException) -> str:
    """The most specific reason in ``exc``'s chain: an ``OSError``'s strerror if there is one."""
    fallback = ""
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return str(current.strerror)
        if not fallback and str(current):
            fallback = str(current)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    if isinstance(exc, ConnectionTimeout):
        return "timed out"
    return fallback or type(exc).__name__


def _draw(state: LiveState, out: IO[str]) -> None:
    try:
        size = os.get_terminal_size(out.fileno())
        width, height = size.columns or 120, size.lines or 50
    except (OSError, ValueError, AttributeError):
        width, height = 120, 50
    lines = state.render(width)[: max(height - 1, 1)]
    out.write(_CLEAR + "\n".join(lines) + "\n")
    out.flush()


def _print_table(state: LiveState, out: IO[str]) -> None:
    print("\n".join(state.render(10_000)), file=out, flush=True)
