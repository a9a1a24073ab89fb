from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import trio
import trio.testing

from engine import Controller, Manager, ObjectRef, RunContext, TerminalError
from engine.cli._live import LiveState, format_line, main
from engine.observability import Observability

from .._support import running
from ..observability._support import Recorder

OK = ObjectRef("Widget", "ok", "ns")
BAD = ObjectRef("Widget", "bad", "ns")


async def reconcile(ctx: RunContext) -> None:
    if ctx.ref == BAD:
        raise TerminalError("bad spec")


def setup(**kwargs: Any) -> tuple[Manager, Controller, Observability, Recorder]:
    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    controller = manager.add_controller(Controller("c", reconcile))
    obs = Observability(manager, live_bind_address=":0", **kwargs)
    return manager, controller, obs, recorder


def stream(obs: Observability) -> list[str]:
    """The live command's arguments for this stream: its URL and the token it made up."""
    assert obs.live is not None
    return [str(obs.live_url), "--token", obs.live.token]


class Signalling(io.StringIO):
    """A stderr for main() in a thread: sets a trio event once a line contains ``marker``."""

    def __init__(self, event: trio.Event, marker: str) -> None:
        super().__init__()
        self._event = event
        self._marker = marker
        self._token = trio.lowlevel.current_trio_token()

    def write(self, text: str) -> int:
        n = super().write(text)
        if self._marker in self.getvalue() and not self._event.is_set():
            self._token.run_sync_soon(self._event.set)
        return n


async def test_watch_main_against_a_running_manager_prints_lines_then_the_table() -> None:
    manager, controller, obs, recorder = setup()
    connected = trio.Event()
    out, err = io.StringIO(), Signalling(connected, "connected to manager")
    codes: list[int] = []

    async def watch() -> None:
        codes.append(await trio.to_thread.run_sync(lambda: main([*stream(obs), "--count", "7"], stdout=out, stderr=err)))

    with trio.fail_after(10):
        async with running(manager):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await connected.wait()
                controller.trigger(OK, reason="created")
                await recorder.wait_until(lambda: len(recorder.finished) == 1)
                controller.trigger(BAD, reason="created")
    assert codes == [0]
    lines = out.getvalue().splitlines()
    steps = [line.split(" ", 1)[1] for line in lines[:7]]
    assert steps[:3] == [
        "c Widget/ns/ok queued reason=created",
        "c Widget/ns/ok started run=c-1 attempt=1 reason=created",
        "c Widget/ns/ok succeeded run=c-1 attempt=1",
    ]
    assert "c Widget/ns/bad terminal_error run=c-2 attempt=1 error=\"TerminalError: bad spec\"" in steps
    assert "c Widget/ns/bad event Warning ReconcileTerminalError: TerminalError: bad spec" in steps
    table = "\n".join(lines[8:])
    assert "CONTROLLER  QUEUE  IN-FLIGHT  WORKERS\nc           0      0          1" in table
    assert "c           Widget/ns/bad  terminal_error  1        -        c-2  TerminalError: bad spec" in table
    assert "c           Widget/ns/ok   succeeded       1        -        c-1" in table


async def test_python_m_engine_watch_subprocess_follow_and_ctrl_c() -> None:
    manager, controller, obs, recorder = setup()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with trio.fail_after(15):
        async with running(manager):
            for argv, interrupt in (([*stream(obs), "--follow", "--count", "3"], False),
                                    ([*stream(obs), "--follow"], True)):
                process = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "engine", "watch", *argv],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                )
                assert process.stdout is not None and process.stderr is not None
                err = b""
                while b"connected to manager" not in err:
                    chunk = await process.stderr.receive_some(4096)
                    assert chunk, err
                    err += chunk
                if interrupt:
                    process.send_signal(signal.SIGINT)
                else:
                    controller.trigger(OK, reason="created")
                out = b""
                while chunk := await process.stdout.receive_some(4096):
                    out += chunk
                while chunk := await process.stderr.receive_some(4096):
                    err += chunk
                code = await process.wait()
                if interrupt:
                    assert code == 130, err
                    assert b"Traceback" not in err
                else:
                    assert code == 0, err
                    assert [line.split(" ", 1)[1] for line in out.decode().splitlines()] == [
                        "c Widget/ns/ok queued reason=created",
                        "c Widget/ns/ok started run=c-1 attempt=1 reason=created",
                        "c Widget/ns/ok succeeded run=c-1 attempt=1",
                    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_watch_says_clearly_when_it_cannot_connect() -> None:
    url = f"ws://127.0.0.1:{_free_port()}/live"
    out, err = io.StringIO(), io.StringIO()
    assert main([url], stdout=out, stderr=err) == 1
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"live: cannot connect to {url}: ")
    err = io.StringIO()
    assert main(["http://127.0.0.1:1/live"], stdout=out, stderr=err) == 2
    assert err.getvalue() == "live: the URL must start with ws:// or wss://\n"


async def test_watch_token_from_flag_or_environment_and_once() -> None:
    manager, controller, obs, recorder = setup(live_token="t0ken")
    results: dict[str, tuple[int, str, str]] = {}

    def run(name: str, argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        results[name] = (main(argv, stdout=out, stderr=err), out.getvalue(), err.getvalue())

    with trio.fail_after(10):
        async with running(manager):
            controller.trigger(OK)
            await recorder.wait_until(lambda: len(recorder.finished) == 1)
            url = str(obs.live_url)
            await trio.to_thread.run_sync(run, "none", [url, "--once"])
            await trio.to_thread.run_sync(run, "flag", [url, "--once", "--token", "t0ken"])
            os.environ["ENGINE_LIVE_TOKEN"] = "t0ken"
            try:
                await trio.to_thread.run_sync(run, "env", [url, "--once"])
            finally:
                del os.environ["ENGINE_LIVE_TOKEN"]
    assert results["none"] == (
        1, "", f"live: cannot connect to {url}: the server refused the handshake with HTTP 401 (check --token)\n",
    )
    for name in ("flag", "env"):
        code, out, err = results[name]
        assert code == 0
        assert out.splitlines()[:3] == [
            "manager 'manager'",
            "CONTROLLER  QUEUE  IN-FLIGHT  WORKERS",
            "c           0      0          1",
        ]
        assert "t0ken" not in out + err


def test_watch_state_table_and_lines() -> None:
    state = LiveState()
    state.apply({"type": "hello", "manager": "m", "controllers": [
        {"name": "c", "queue_depth": 2, "in_flight": 1, "max_concurrent": 4,
         "running": [{"object": "K/ns/a", "run_id": "c-7", "attempt": 3}]},
    ]})
    state.apply({"type": "skipped", "count": 5})
    message = {"type": "run", "step": "failed", "controller": "c", "object": "K/ns/a", "run_id": "c-7",
               "attempt": 3, "error": "ValueError: boom", "queue_depth": 1, "in_flight": 0, "ts": 0.0}
    state.apply(message)
    assert state.render() == [
        "manager 'm'  (5 messages skipped: this client fell behind)",
        "CONTROLLER  QUEUE  IN-FLIGHT  WORKERS",
        "c           1      0          4",
        "",
        "CONTROLLER  OBJECT  LAST    ATTEMPT  RUNNING  RUN  ERROR",
        "c           K/ns/a  failed  3        -        c-7  ValueError: boom",
    ]
    assert format_line(message).split(" ", 1)[1] == 'c K/ns/a failed run=c-7 attempt=3 error="ValueError: boom"'
    assert format_line({"type": "skipped", "count": 5, "ts": 0.0}).endswith("skipped 5 messages (this client fell behind)")


async def test_once_shows_every_object_seen_even_after_their_runs_ended() -> None:
    manager, controller, obs, recorder = setup()
    result: list[tuple[int, str]] = []

    def once() -> None:
        out = io.StringIO()
        result.append((main([*stream(obs), "--once"], stdout=out, stderr=io.StringIO()), out.getvalue()))

    with trio.fail_after(10):
        async with running(manager):
            controller.trigger(OK)
            controller.trigger(BAD)
            await recorder.wait_until(lambda: len(recorder.finished) == 2)
            await trio.to_thread.run_sync(once)
    code, out = result[0]
    assert code == 0
    rows = out.splitlines()[4:]
    assert rows[0].split() == ["CONTROLLER", "OBJECT", "LAST", "ATTEMPT", "RUNNING", "RUN", "ERROR"]
    assert [row.split()[:6] for row in rows[1:]] == [
        ["c", "Widget/ns/bad", "terminal_error", "1", "-", "c-2"],
        ["c", "Widget/ns/ok", "succeeded", "1", "-", "c-1"],
    ]
    assert rows[1].endswith("TerminalError: bad spec")


def test_the_table_shows_how_long_a_running_run_has_been_running() -> None:
    state = LiveState()
    state.apply({"type": "run", "step": "started", "controller": "c", "object": "K/ns/a", "run_id": "c-1",
                 "attempt": 1, "ts": 1000.0})
    state.apply({"type": "objects", "ts": 1001.0, "objects": [
        {"controller": "c", "object": "K/ns/b", "running": {"run_id": "c-2", "attempt": 2, "ts": 900.0},
         "last": {"step": "failed", "attempt": 1, "run_id": "c-1", "error": "E: x", "ts": 899.0}, "queued": False},
        {"controller": "c", "object": "K/ns/c", "running": None, "queued": True,
         "last": {"step": "succeeded", "attempt": 1, "run_id": "c-3", "ts": 950.0}},
    ]})
    assert state.render(now=1012.5)[-4:] == [
        "CONTROLLER  OBJECT  LAST     ATTEMPT  RUNNING  RUN  ERROR",
        "c           K/ns/a  started  1        12.5s    c-1",
        "c           K/ns/b  started  2        1m52s    c-2  E: x",
        "c           K/ns/c  queued   1        -        c-3",
    ]
