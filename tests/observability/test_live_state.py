"""What the live stream remembers for late clients (engine.observability._live_state), and how it sends it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import open_websocket_url

from engine import Controller, DependencyNotReady, Manager, ObjectRef, RunContext
from engine.observability import LiveStream
from engine.observability._live_state import LiveState

from .._support import running
from ._support import Recorder

APP = ObjectRef("Widget", "app", "ns")
DEP = ObjectRef("Widget", "dep", "ns")
SLOW = ObjectRef("Widget", "slow", "ns")


def entry(live: LiveStream, ref: ObjectRef) -> dict[str, Any]:
    return next(o for o in live.state.objects() if o["object"] == str(ref))


async def test_objects_keep_outcome_revision_history_dependencies_and_readiness(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broken = {"dep": False}
    release = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref == APP and ctx.trigger.reason != f"dependency {DEP} ready":
            raise DependencyNotReady([DEP], retry_after=600)
        if ctx.ref == DEP:
            await trio.sleep(2)
            if broken["dep"]:
                raise ValueError("dep broke")
        if ctx.ref == SLOW:
            await release.wait()

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    live = LiveStream(manager)
    c = manager.add_controller(Controller("c", reconcile, max_concurrent=4))
    async with running(manager):
        c.trigger(APP, revision="v1")
        await recorder.wait_until(lambda: len(recorder.kinds(str(APP))) == 1)
        app = entry(live, APP)
        assert app["last"]["step"] == "dependency_not_ready"
        assert app["dependencies"] == [{"object": str(DEP), "ready": False}]
        assert app["revision"] == "v1" and app["running"] is None and app["queued"] is False

        c.trigger(DEP, revision="d1")
        await recorder.wait_until(lambda: len(recorder.kinds(str(DEP))) == 1)
        manager.mark_ready(DEP)
        await recorder.wait_until(lambda: len(recorder.kinds(str(APP))) == 2)
        app, dep = entry(live, APP), entry(live, DEP)
        assert app["last"]["step"] == "succeeded"
        assert [h[0] for h in app["history"]] == ["dependency_not_ready", "succeeded"]
        assert app["dependencies"] == [{"object": str(DEP), "ready": True}], "kept after the wait ended"
        assert dep["ready"] is True and dep["revision"] == "d1"
        assert dep["last"]["duration"] == 2.0 and dep["history"][0][2] == 2.0

        broken["dep"] = True
        c.trigger(DEP)
        await recorder.wait_until(lambda: len(recorder.kinds(str(DEP))) == 2)
        dep = entry(live, DEP)
        assert dep["last"]["step"] == "failed" and dep["last"]["error"] == "ValueError: dep broke"
        assert dep["ready"] is False, "its own failing run clears a ref's readiness"
        assert entry(live, APP)["dependencies"] == [{"object": str(DEP), "ready": False}]

        c.trigger(SLOW, revision="s1")
        await recorder.wait_until(lambda: ("c", str(SLOW), 1) in recorder.started)
        c.trigger(SLOW, revision="s2")
        slow = entry(live, SLOW)
        assert slow["running"]["run_id"].startswith("c-") and slow["running"]["attempt"] == 1
        assert slow["queued"] is True and slow["revision"] == "s2" and slow["last"] is None
        release.set()
        await recorder.wait_until(lambda: len(recorder.kinds(str(SLOW))) == 2)
        assert entry(live, SLOW)["queued"] is False


async def test_memory_is_bounded_per_object_and_in_objects(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    live = LiveStream(manager, max_objects=3)
    c = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        for n in range(15):
            c.trigger(APP)
            await recorder.wait_until(lambda n=n: len(recorder.finished) == n + 1)
        for name in "abcde":
            c.trigger(ObjectRef("Widget", name, "ns"))
        await recorder.wait_until(lambda: len(recorder.finished) == 20)
    assert [o["name"] for o in live.state.objects()] == ["c", "d", "e"], "the least recently active go first"
    assert len(live.state) == 3


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^max_objects must be >= 1$"):
        LiveState(max_objects=0)
    with pytest.raises(ValueError, match=r"^history must be >= 1$"):
        LiveState(history=0)


async def test_history_keeps_the_newest_runs(autojump_clock: trio.testing.MockClock) -> None:
    async def reconcile(ctx: RunContext) -> None:
        await trio.sleep(float(ctx.trigger.revision or 0))

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    live = LiveStream(manager)
    c = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        for n in range(15):
            c.trigger(APP, revision=str(n))
            await recorder.wait_until(lambda n=n: len(recorder.finished) == n + 1)
    assert [h[2] for h in entry(live, APP)["history"]] == [float(n) for n in range(3, 15)]


async def test_late_client_gets_objects_in_chunks_then_events_then_stats_and_ready() -> None:
    total = 1201

    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref.name == "n0":
            ctx.events.normal("Done", "first one")

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    live = LiveStream(manager, stats_interval=0.01)
    c = manager.add_controller(Controller("c", reconcile, max_concurrent=8))

    async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await live.bind("127.0.0.1", 0)
        await live.serve(listeners, task_status=task_status)  # type: ignore[arg-type]

    manager.add_service(serve)
    with trio.fail_after(30):
        async with running(manager):
            for n in range(total):
                c.trigger(ObjectRef("Widget", f"n{n}", "ns"), revision="r1")
            await recorder.wait_until(lambda: len(recorder.finished) == total)
            assert live.url is not None
            async with open_websocket_url(f"{live.url}?token={live.token}", max_message_size=16 * 1024 * 1024) as ws:
                hello = json.loads(await ws.get_message())
                chunks = [json.loads(await ws.get_message()) for _ in range(3)]
                events = json.loads(await ws.get_message())
                stats = json.loads(await ws.get_message())
                manager.mark_ready(ObjectRef("Widget", "n7", "ns"), revision="42")
                while (ready := json.loads(await ws.get_message()))["type"] != "ready":
                    assert ready["type"] == "controllers"
    assert hello["type"] == "hello"
    controller = hello["controllers"][0]
    assert (controller["runs"], controller["errors"], controller["live_workers"]) == (total, 0, 8)
    assert controller["outcomes"] == {"success": total}
    assert [m["type"] for m in chunks] == ["objects"] * 3
    assert [len(m["objects"]) for m in chunks] == [500, 500, 201]
    objects = {o["object"]: o for m in chunks for o in m["objects"]}
    assert len(objects) == total
    first = objects["Widget/ns/n0"]
    assert (first["controller"], first["last"]["step"], first["revision"]) == ("c", "succeeded", "r1")
    assert events["type"] == "events"
    assert [(e["object"], e["reason"], e["message"]) for e in events["events"]] == [("Widget/ns/n0", "Done", "first one")]
    assert stats["type"] == "controllers"
    assert stats["controllers"][0]["name"] == "c" and stats["controllers"][0]["runs"] == total
    assert (ready["object"], ready["revision"]) == ("Widget/ns/n7", "42")


async def test_the_revision_a_controller_reports_in_its_events_is_kept_beside_the_triggers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        if ctx.trigger.revision == "1002":
            ctx.events.normal("Applied", "applied revision r2", metadata={"revision": "r2"})
        else:
            ctx.events.normal("Checked", "nothing to apply")

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    live = LiveStream(manager)
    c = manager.add_controller(Controller("c", reconcile))
    async with running(manager):
        c.trigger(APP, revision="1001")
        await recorder.wait_until(lambda: len(recorder.kinds(str(APP))) == 1)
        await trio.sleep(1)
        first = entry(live, APP)
        c.trigger(APP, revision="1002")
        await recorder.wait_until(lambda: len(recorder.kinds(str(APP))) == 2)
        await trio.sleep(1)
        second = entry(live, APP)
        c.trigger(APP, revision="1003")
        await recorder.wait_until(lambda: len(recorder.kinds(str(APP))) == 3)
        await trio.sleep(1)
        third = entry(live, APP)
    assert [(e["revision"], e["reported_revision"]) for e in (first, second, third)] == [
        ("1001", None), ("1002", "r2"), ("1003", "r2")]
    events = [message for _, _, message in live.state.events]
    assert [(m["reason"], m.get("revision")) for m in events] == [("Checked", None), ("Applied", "r2"), ("Checked", None)]


def test_an_event_about_an_object_not_remembered_sets_no_revision() -> None:
    state = LiveState()
    state.event(("c", APP, {"type": "event", "revision": "r1"}))
    assert state.objects() == [] and len(state.events) == 1
