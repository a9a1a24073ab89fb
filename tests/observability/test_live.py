from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import time
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, ConnectionRejected, WebSocketConnection, open_websocket_url

from engine import Controller, DependencyNotReady, Manager, ObjectRef, Result, RunContext, TerminalError
from engine.observability import Observability

from .._secrets import ALL_SECRETS, SECRET_TEXTS
from .._support import running
from ._support import Recorder, get

OK = ObjectRef("Widget", "ok", "ns")
BAD = ObjectRef("Widget", "bad", "ns")
SUP = ObjectRef("Widget", "sup", "ns")
LATER = ObjectRef("Widget", "later", "ns")
TERM = ObjectRef("Widget", "term", "other")
DEP = ObjectRef("Widget", "dep", "ns")
STUCK = ObjectRef("Widget", "stuck", "ns")
SLOW = ObjectRef("Widget", "slow", "ns")
SOURCE = ObjectRef("Source", "repo", "ns")


SNAPSHOT_AND_STATS = ("objects", "events", "controllers")
"""Connect-time snapshot and periodic messages (tested in tests/observability/test_dashboard.py)."""


async def collect(ws: WebSocketConnection, into: list[dict[str, Any]], until: Any = None) -> None:
    """Read messages into ``into`` until ``until(message)`` or the connection closes."""
    try:
        while True:
            message = json.loads(await ws.get_message())
            if message["type"] in SNAPSHOT_AND_STATS:
                continue
            into.append(message)
            if until is not None and until(message):
                return
    except ConnectionClosed:
        return


def steps(messages: list[dict[str, Any]], ref: ObjectRef) -> list[str]:
    return [m["step"] for m in messages if m["type"] == "run" and m["object"] == str(ref)]


def run_messages(messages: list[dict[str, Any]], ref: ObjectRef) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == "run" and m["object"] == str(ref)]


async def test_lifecycle_sequence_per_key_and_events() -> None:
    release = trio.Event()

    async def reconcile(ctx: RunContext) -> Result | None:
        if ctx.ref == OK:
            ctx.events.normal("Done", "all good")
        if ctx.ref == BAD and ctx.attempt == 1:
            raise ValueError("boom")
        if ctx.ref == SUP and not release.is_set():
            await trio.sleep_forever()
        if ctx.ref == LATER:
            return Result(requeue_after=3600)
        if ctx.ref == TERM:
            raise TerminalError("bad spec")
        if ctx.ref == DEP:
            raise DependencyNotReady([SOURCE], retry_after=60)
        if ctx.ref == STUCK:
            await trio.sleep_forever()
        return None

    async def timed(ctx: RunContext) -> None:
        if ctx.attempt == 1:
            await trio.sleep_forever()

    manager = Manager(handle_signals=False, grace_period=0)
    recorder = Recorder()
    manager.add_observer(recorder)
    c = manager.add_controller(Controller("c", reconcile, max_concurrent=8))
    t = manager.add_controller(Controller("t", timed, timeout=0.05))
    obs = Observability(manager, live_bind_address=":0")
    messages: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with running(manager):
                assert obs.live_url is not None and obs.live_url.startswith("ws://127.0.0.1:")
                ws = await nursery.start(_connect, authed(obs))
                hello = json.loads(await ws.get_message())
                nursery.start_soon(collect, ws, messages, lambda m: m.get("step") == "shutdown")
                for ref in (OK, BAD, LATER, TERM, DEP):
                    c.trigger(ref, reason="changed")
                t.trigger(SLOW)
                c.trigger(SUP, reason="first")
                await recorder.wait_until(lambda: ("c", str(SUP), 1) in recorder.started)
                c.trigger(SUP, reason="second", revision="v2")
                release.set()
                await recorder.wait_until(lambda: len(recorder.kinds(str(SUP))) == 2)
                await recorder.wait_until(lambda: len(recorder.kinds(str(BAD))) == 2)
                await recorder.wait_until(lambda: len(recorder.kinds(str(SLOW))) == 2)
                c.trigger(STUCK)
                await recorder.wait_until(lambda: ("c", str(STUCK), 1) in recorder.started)
            nursery.cancel_scope.cancel()
    assert hello["type"] == "hello"
    assert [x["name"] for x in hello["controllers"]] == ["c", "t"]
    assert steps(messages, OK) == ["queued", "started", "succeeded"]
    assert steps(messages, BAD) == ["queued", "started", "failed", "started", "succeeded"]
    assert steps(messages, SUP) == ["queued", "started", "queued", "superseded", "started", "succeeded"]
    assert steps(messages, LATER) == ["queued", "started", "requeued"]
    assert steps(messages, TERM) == ["queued", "started", "terminal_error"]
    assert steps(messages, DEP) == ["queued", "started", "dependency_not_ready"]
    assert steps(messages, SLOW) == ["queued", "started", "deadline", "started", "succeeded"]
    assert steps(messages, STUCK) == ["queued", "started", "shutdown"]

    bad = run_messages(messages, BAD)
    assert bad[2]["error"] == "ValueError: boom"
    assert (bad[2]["attempt"], bad[3]["attempt"]) == (1, 2)
    assert bad[2]["result"] == "error"
    sup = run_messages(messages, SUP)
    assert sup[2]["supersedes"] == sup[1]["run_id"]
    assert sup[2]["revision"] == "v2"
    assert sup[3]["reason"].startswith("superseded by trigger")
    assert sup[4]["reason"] == "second"
    assert run_messages(messages, LATER)[2]["delay"] == 3600
    assert run_messages(messages, DEP)[2]["dependencies"] == [str(SOURCE)]
    assert run_messages(messages, DEP)[2]["delay"] == 60
    assert run_messages(messages, TERM)[2]["error"] == "TerminalError: bad spec"
    assert run_messages(messages, SLOW)[2]["error"].startswith("TimeoutError: run exceeded the controller timeout")
    assert run_messages(messages, STUCK)[1]["in_flight"] == 1
    events = {(m["object"], m["event_type"], m["reason"]) for m in messages if m["type"] == "event"}
    assert {(str(OK), "Normal", "Done"), (str(BAD), "Warning", "ReconcileFailed")} <= events
    ok_event = next(m for m in messages if m["type"] == "event" and m["reason"] == "Done")
    assert ok_event["run_id"] == run_messages(messages, OK)[1]["run_id"]
    assert ok_event["message"] == "all good"


async def test_no_secret_reaches_a_live_stream_client() -> None:
    """Error summaries, trigger reasons and event messages carrying a token, a proxy password,
    a client key or an exec env var reach a client masked, live and in the late-join snapshot."""
    refs = [ObjectRef("Widget", f"w{i}", "ns") for i in range(len(SECRET_TEXTS))]

    async def reconcile(ctx: RunContext) -> None:
        text = SECRET_TEXTS[refs.index(ctx.ref)]
        ctx.events.warning("CallFailed", text)
        raise TerminalError(text)

    manager = Manager(handle_signals=False, grace_period=0)
    recorder = Recorder()
    manager.add_observer(recorder)
    c = manager.add_controller(Controller("c", reconcile))
    obs = Observability(manager, live_bind_address=":0")
    raw: list[str] = []
    late: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with running(manager):
                assert obs.live_url is not None
                ws = await nursery.start(_connect, authed(obs))
                raw.append(await ws.get_message())

                async def read_all() -> None:
                    with contextlib.suppress(ConnectionClosed):
                        while True:
                            raw.append(await ws.get_message())

                nursery.start_soon(read_all)
                for ref, text in zip(refs, SECRET_TEXTS):
                    c.trigger(ref, reason=f"changed: {text}")
                await recorder.wait_until(lambda: len(recorder.finished) == len(refs))
                while sum('"CallFailed"' in m for m in raw) < len(refs):
                    await trio.sleep(0.01)
                late_ws = await nursery.start(_connect, authed(obs))
                for _ in range(3):
                    late.append(await late_ws.get_message())
            nursery.cancel_scope.cancel()
    messages = [json.loads(m) for m in raw]
    errors = [m["error"] for m in messages if m.get("step") == "terminal_error"]
    assert len(errors) == len(refs) and all(e.startswith("TerminalError: ") for e in errors)
    assert len([m for m in messages if m["type"] == "event" and m["reason"] == "CallFailed"]) == len(refs)
    assert any(json.loads(m)["type"] == "events" and json.loads(m)["events"] for m in late)
    for secret in ALL_SECRETS:
        for text in raw + late:
            assert secret not in text, secret


def authed(obs: Observability) -> str:
    """The live stream's URL with its token (every stream has one; this one made it up)."""
    assert obs.live is not None and obs.live_url is not None
    return f"{obs.live_url}?token={obs.live.token}"


async def _connect(url: str, *, task_status: trio.TaskStatus[WebSocketConnection] = trio.TASK_STATUS_IGNORED) -> None:
    async with open_websocket_url(url) as ws:
        task_status.started(ws)
        await trio.sleep_forever()


async def test_filters_by_controller_object_and_namespace() -> None:
    async def reconcile(ctx: RunContext) -> None:
        ctx.events.normal("Done", "ok")

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    a = manager.add_controller(Controller("a", reconcile))
    b = manager.add_controller(Controller("b", reconcile))
    obs = Observability(manager, live_bind_address=":0")
    seen: dict[str, list[dict[str, Any]]] = {"ctl": [], "obj": [], "ns": []}
    with trio.fail_after(10):
        async with running(manager):
            url = authed(obs)
            async with open_websocket_url(f"{url}&controller=b") as ctl, \
                    open_websocket_url(f"{url}&object={OK}&object={TERM}") as obj, \
                    open_websocket_url(f"{url}&namespace=other") as ns:
                hellos = [json.loads(await w.get_message()) for w in (ctl, obj, ns)]
                a.trigger(OK)
                a.trigger(BAD)
                b.trigger(TERM)
                await recorder.wait_until(lambda: len(recorder.finished) == 3)
                last = str(TERM)
                async with trio.open_nursery() as nursery:
                    for name, w in (("ctl", ctl), ("obj", obj), ("ns", ns)):
                        nursery.start_soon(
                            collect, w, seen[name],
                            lambda m: m["type"] == "event" and m["object"] == last,
                        )
    assert hellos[0]["filters"] == {"controller": ["b"], "object": [], "namespace": []}
    assert {m["controller"] for m in seen["ctl"]} == {"b"}
    assert {m["object"] for m in seen["obj"]} == {str(OK), str(TERM)}
    assert {m["object"] for m in seen["ns"]} == {str(TERM)}
    assert steps(seen["obj"], OK) == ["queued", "started", "succeeded"]


async def test_a_stream_given_no_token_makes_one_up_and_refuses_clients_without_it() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0")
    assert obs.live is not None and obs.live.token_generated and len(obs.live.token) >= 32
    assert obs.live.token not in repr(obs.live)
    with trio.fail_after(10):
        async with running(manager):
            assert obs.live_url is not None and obs.live_address is not None
            for url in (obs.live_url, f"{obs.live_url}?token=", f"{obs.live_url}?token=wrong"):
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(url):
                        pass
                assert rejected.value.status_code == 401
            page = await get(obs.live_address, "/")
            async with open_websocket_url(authed(obs)) as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
    assert page.status_code == 401


async def test_bearer_token_is_required_and_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = "s3cret-live-token"
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0", live_token=token, metrics_bind_address=":0")
    with trio.fail_after(10):
        async with running(manager):
            url = obs.live_url
            assert url is not None
            for headers in (None, [(b"authorization", b"Bearer wrong")], [(b"authorization", b"Basic czNjcmV0")]):
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(url, extra_headers=headers):
                        pass
                assert rejected.value.status_code == 401
            with pytest.raises(ConnectionRejected) as wrong_path:
                async with open_websocket_url(url.replace("/live", "/other"),
                                              extra_headers=[(b"authorization", f"Bearer {token}".encode())]):
                    pass
            assert wrong_path.value.status_code == 404
            async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {token}".encode())]) as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
            metrics = await get(obs.metrics_address, "/metrics")
    assert "engine_live_stream_rejected_total 4.0" in metrics.text
    assert caplog.records
    assert all(token not in r.getMessage() and token not in str(vars(r)) for r in caplog.records)


async def _stuck_client(address: tuple[str, int] | None, token: str) -> trio.SocketStream:
    """A websocket client that completes the handshake and then never reads."""
    assert address is not None
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(address)
    stream = trio.SocketStream(sock)
    key = base64.b64encode(os.urandom(16))
    await stream.send_all(
        b"GET /live?token=" + token.encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    response = b""
    while b"\r\n\r\n" not in response:
        response += await stream.receive_some(1)
    assert response.startswith(b"HTTP/1.1 101 ")
    return stream


async def test_a_client_that_never_reads_does_not_slow_the_engine() -> None:
    count = 2000

    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=4))
    obs = Observability(manager, live_bind_address=":0", live_client_buffer=64)
    assert obs.live is not None

    async def batch(tag: str) -> float:
        before = len(recorder.finished)
        start = time.process_time()
        for i in range(count):
            controller.trigger(ObjectRef("K", f"{tag}-{i}"))
        await recorder.wait_until(lambda: len(recorder.finished) - before == count)
        return time.process_time() - start

    with trio.fail_after(15):
        async with running(manager):
            alone = await batch("alone")
            assert obs.live is not None
            stuck = await _stuck_client(obs.live_address, obs.live.token)
            await trio.testing.wait_all_tasks_blocked()
            assert obs.live.statistics().clients == 1
            with_stuck = await batch("stuck")
            again = await batch("again")
            stats = obs.live.statistics()
            stopping = time.perf_counter()
        stopped = time.perf_counter()
        await stuck.aclose()
    assert len(recorder.finished) == 3 * count
    assert stats.clients == 1
    assert stats.skipped > count
    assert stats.sent < 3 * count
    # Building the messages costs something; blocking on the client would never finish (the
    # fail_after above). CPU time, so that other processes on the machine do not count.
    assert max(with_stuck, again) < max(1.0, 10 * alone), (alone, with_stuck, again)
    assert stopped - stopping < 2.0, "a stuck client must not hold up shutdown"


async def test_a_slow_client_is_told_how_many_messages_it_missed() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    controller = manager.add_controller(Controller("c", reconcile, max_concurrent=4))
    obs = Observability(manager, live_bind_address=":0", live_client_buffer=4)
    assert obs.live is not None
    messages: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with running(manager):
            async with open_websocket_url(authed(obs)) as ws:
                await ws.get_message()
                for i in range(10):
                    controller.trigger(ObjectRef("K", f"k{i}"))
                await recorder.wait_until(lambda: len(recorder.finished) == 10)
                await trio.testing.wait_all_tasks_blocked()
                controller.trigger(ObjectRef("K", "last"))
                await collect(ws, messages, lambda m: m.get("object") == "K/last" and m.get("step") == "succeeded")
    stats = obs.live.statistics()
    runs = [m for m in messages if m["type"] == "run"]
    assert stats.skipped > 0
    assert len(runs) + stats.skipped == 33
    assert sum(m["count"] for m in messages if m["type"] == "skipped") == stats.skipped
    assert messages[1]["type"] == "run"
    assert [m["step"] for m in runs[-3:]] == ["queued", "started", "succeeded"]


async def test_too_many_clients_are_refused() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0")
    assert obs.live is not None
    obs.live._max_clients = 1
    with trio.fail_after(10):
        async with running(manager):
            async with open_websocket_url(authed(obs)) as ws:
                await ws.get_message()
                with pytest.raises(ConnectionRejected) as rejected:
                    async with open_websocket_url(authed(obs)):
                        pass
    assert rejected.value.status_code == 503


async def test_notices_reach_hello_and_every_controllers_message_redacted() -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    manager.add_controller(Controller("c", reconcile))
    obs = Observability(manager, live_bind_address=":0")
    assert obs.live is not None
    notices = ["forbidden: the credentials lack the permission to list configmaps"]

    def broken() -> list[str]:
        raise RuntimeError("this source is broken")

    obs.live.add_notices(lambda: list(notices))
    obs.live.add_notices(broken)
    obs.live.add_notices(lambda: [f"token {SECRET_TEXTS[0]}"])
    obs.live.add_info(lambda: ["webhook /validate/x: 3 requests, 1 denied, 0 errors, 0 timeouts"])
    obs.live.add_info(broken)
    with trio.fail_after(10):
        async with running(manager):
            async with open_websocket_url(authed(obs)) as ws:
                hello = json.loads(await ws.get_message())
                notices.append("a second notice")
                while (message := json.loads(await ws.get_message()))["type"] != "controllers":
                    pass
    assert hello["notices"][0] == "forbidden: the credentials lack the permission to list configmaps"
    assert message["notices"][:2] == [notices[0], "a second notice"]
    assert len(hello["notices"]) == 2 and len(message["notices"]) == 3
    assert hello["info"] == message["info"] == ["webhook /validate/x: 3 requests, 1 denied, 0 errors, 0 timeouts"]
    assert not any(secret in json.dumps([hello, message]) for secret in ALL_SECRETS)


async def test_a_client_gone_while_a_message_is_being_sent_ends_its_stream_quietly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The send can notice the close before the read of the client's input does; the failure
    then comes out of the feed's nursery, and must end the stream as a close does, not the
    server (a loaded CI run of test_live_state showed it)."""
    from trio_websocket import CloseReason

    from engine.observability import LiveStream
    from engine.observability._live import _Client

    class Gone:
        async def send_message(self, message: str) -> None:
            raise ConnectionClosed(CloseReason(1000, None))

        async def get_message(self) -> str:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    live = LiveStream(Manager(handle_signals=False))
    send, receive = trio.open_memory_channel[tuple[int, dict[str, Any]]](4)
    client = _Client(send=send, receive=receive, controllers=frozenset(), objects=frozenset(),
                     namespaces=frozenset(), remote="test", buffered=1)
    send.send_nowait((0, {"type": "controllers"}))
    with trio.fail_after(5):
        await live._stream(client, Gone())  # type: ignore[arg-type]
    assert client.sent == 0


def test_a_generated_token_can_follow_a_flag_on_a_command_line() -> None:
    """Printed as ``--token TOKEN``: a token that began with ``-`` read as a flag (1 in 64 did)."""
    from engine.apiserver._authn import Authenticator

    for _ in range(500):
        live = Observability(Manager(handle_signals=False), live_bind_address=":0").live
        assert live is not None
        assert not live.token.startswith("-") and live.token.isalnum()
        assert Authenticator().admin_token.isalnum()
