"""``python -m engine demo``: three production failures of controller runtimes, replayed here.

Each scenario runs in-process on the real clock in about a second or two, prints what
happened, and ends with a one-line verdict. The command exits 1 if any verdict fails.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Awaitable, Callable

import trio

from .._controller import Controller, SupersedePolicy
from .._events import EventType
from .._logging import configure_logging
from .._manager import Manager
from .._observer import RunLog
from .._outcome import DependencyNotReady, OutcomeKind
from .._refs import ObjectRef
from .._run import RunContext
from .._sinks import MemorySink, WebhookSink
from ._args import ArgumentParser

__all__ = ["main"]

_DESCRIPTION = """\
Replay, in-process and on the real clock, three production failures of controller runtimes
that this engine makes impossible: a superseded run never re-run, a shutdown reported as
failures, and a slow event endpoint delaying dependents. Each scenario prints what happened
and a verdict; the command exits 1 if any verdict fails.
"""


def _say(text: str) -> None:
    print(text, flush=True)


async def _run_manager(manager: Manager, body: Callable[[], Awaitable[None]]) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await body()
        manager.stop("scenario finished")


async def superseded_health_checks() -> bool:
    """Seed 1: rapid revisions, each update delivered twice, health checks superseded."""
    _say("1. Rapid source revisions supersede a running health check")
    _say("   50 revisions, 10 ms apart; every update is mapped from the old and the new object;")
    _say("   the health check (300 ms) runs inside ctx.interruptible().")
    source = ObjectRef("Source", "repo", "demo")
    bundle = ObjectRef("Bundle", "app", "demo")
    cache = {"revision": "r0"}
    healthy: list[str] = []

    async def reconcile(ctx: RunContext) -> None:
        revision = cache["revision"]
        await trio.sleep(0.002)
        with ctx.interruptible():
            await trio.sleep(0.3)
        healthy.append(revision)

    manager = Manager(handle_signals=False)
    log = RunLog()
    manager.add_observer(log)
    controller = manager.add_controller(
        Controller("bundles", reconcile, supersede=SupersedePolicy.INTERRUPTIBLE)
    )

    async def body() -> None:
        for n in range(1, 51):
            cache["revision"] = f"r{n}"
            seq = controller.next_sequence()
            controller.trigger(bundle, reason=f"{source} old object", revision=f"r{n}", sequence=seq)
            await trio.sleep(0)  # a worker may pick the key up between the two deliveries
            controller.trigger(bundle, reason=f"{source} new object", revision=f"r{n}", sequence=seq)
            await trio.sleep(0.01)
        with trio.move_on_after(5):
            while not healthy or controller.running:
                await trio.sleep(0.05)

    await _run_manager(manager, body)
    superseded = log.kinds().count(OutcomeKind.SUPERSEDED)
    _say(f"   runs: {len(log.records)}, superseded: {superseded}, healthy at: {healthy}")
    ok = healthy[-1:] == ["r50"] and log.records[-1].kind is OutcomeKind.SUCCEEDED
    _say(f"   verdict: {'PASS' if ok else 'FAIL'}: the bundle ended healthy at the final revision r50"
         if ok else f"   verdict: FAIL: the bundle is stuck at {healthy[-1:] or 'nothing'}")
    return ok


async def shutdown_is_not_failure() -> bool:
    """Seed 2: a shutdown during reconciles drains, then cancels with cause SHUTDOWN."""
    _say("2. Shutdown during reconciles")
    _say("   grace period 0.5 s; 'quick' needs 0.2 s more, 'long' needs 60 s; stop is requested.")
    sink = MemorySink()
    manager = Manager(handle_signals=False, grace_period=0.5)
    manager.add_sink(sink)
    log = RunLog()
    manager.add_observer(log)

    async def reconcile(ctx: RunContext) -> None:
        ctx.events.normal("Progressing", f"reconciling {ctx.ref.name}")
        await trio.sleep(0.2 if ctx.ref.name == "quick" else 60)
        ctx.events.normal("ReconciliationSucceeded", f"{ctx.ref.name} applied")

    controller = manager.add_controller(Controller("bundles", reconcile, max_concurrent=2))
    report_box = []

    async with trio.open_nursery() as nursery:
        async def run() -> None:
            report_box.append(await manager.run())

        nursery.start_soon(run)
        await manager.wait_started()
        controller.trigger(ObjectRef("Bundle", "quick", "demo"))
        controller.trigger(ObjectRef("Bundle", "long", "demo"))
        await trio.sleep(0.05)
        t0 = trio.current_time()
        manager.stop("SIGTERM (simulated)")
    took = trio.current_time() - t0
    outcomes = {r.key.name: r.kind.value for r in log.records}
    failures = [e for e in sink.events if e.type is EventType.WARNING]
    _say(f"   outcomes: {outcomes}; shutdown took {took:.2f}s; failure events: {len(failures)}")
    ok = outcomes == {"quick": "success", "long": "shutdown"} and not failures and took < 1.0
    _say(f"   verdict: {'PASS' if ok else 'FAIL'}: the quick run completed, the long one was cancelled "
         "as SHUTDOWN, and no failure was reported")
    return ok


async def blackholed_webhook() -> bool:
    """Seed 3: a black-holed notification endpoint does not delay dependents."""
    _say("3. A dependency chain with a black-holed webhook")
    _say("   the webhook accepts connections and never answers (5 s per attempt, 4 attempts);")
    _say("   'apps' depends on 'infra', which becomes ready after a 0.3 s health check.")
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []
    infra, apps = ObjectRef("Bundle", "infra", "demo"), ObjectRef("Bundle", "apps", "demo")
    ready: set[ObjectRef] = set()
    times: dict[str, float] = {}

    manager = Manager(handle_signals=False, event_flush_timeout=0.2)
    webhook = WebhookSink(f"http://127.0.0.1:{port}/hook", timeout=5, max_attempts=4)
    manager.add_sink(webhook)

    async def reconcile(ctx: RunContext) -> None:
        ctx.events.normal("Progressing", f"reconciling {ctx.ref.name}")
        if ctx.ref == apps:
            if infra not in ready:
                raise DependencyNotReady([infra], retry_after=30)
            times["apps started"] = trio.current_time()
            return
        await trio.sleep(0.3)
        ready.add(infra)
        times["infra ready"] = trio.current_time()
        ctx.events.normal("ReconciliationSucceeded", "infra is ready")
        manager.mark_ready(infra)

    controller = manager.add_controller(Controller("bundles", reconcile, max_concurrent=2))

    async def blackhole(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async def hold(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        task_status.started()
        await trio.serve_listeners(hold, listeners)

    manager.add_service(blackhole)

    async def body() -> None:
        controller.trigger(infra)
        controller.trigger(apps)
        with trio.move_on_after(3):
            while "apps started" not in times:
                await trio.sleep(0.01)

    await _run_manager(manager, body)
    if "apps started" not in times:
        _say("   verdict: FAIL: 'apps' never started")
        return False
    delay = times["apps started"] - times["infra ready"]
    _say(f"   webhook connections held open: {len(accepted)}; 'apps' started {delay * 1000:.1f} ms "
         "after 'infra' was ready (Flux's synchronous recorder: about 220 s)")
    ok = delay < 1.0
    _say(f"   verdict: {'PASS' if ok else 'FAIL'}: the dependent started within 1 s")
    return ok


async def _main() -> bool:
    results = []
    for scenario in (superseded_health_checks, shutdown_is_not_failure, blackholed_webhook):
        results.append(await scenario())
        _say("")
    passed = sum(results)
    _say(f"{passed}/{len(results)} scenarios passed")
    return all(results)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m engine demo", description=_DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="show the engine's logs")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    configure_logging(logging.INFO if args.verbose else logging.CRITICAL)
    return 0 if trio.run(_main) else 1
