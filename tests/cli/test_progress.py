"""The runner's terminal progress: what it prints as objects change, and during a shutdown."""

from __future__ import annotations

import io

import trio
import trio.testing

from engine import Controller, DependencyNotReady, Manager, ObjectRef, Priority, RunContext
from engine.cli._progress import SeedProgress, TerminalProgress

INFRA = ObjectRef("Bundle", "infra", "demo")
APPS = ObjectRef("Bundle", "apps", "demo")
SLOW = ObjectRef("Bundle", "slow", "demo")


def _lines(out: io.StringIO) -> list[str]:
    return [line[10:] for line in out.getvalue().splitlines()]


async def test_progress_tells_ready_failures_waits_wakeups_rollouts_and_the_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = Manager(handle_signals=False, grace_period=12, event_flush_timeout=3)
    attempts: dict[ObjectRef, int] = {}
    ready: set[ObjectRef] = set()

    async def reconcile(ctx: RunContext) -> None:
        attempts[ctx.ref] = attempts.get(ctx.ref, 0) + 1
        if ctx.ref == SLOW:
            await trio.sleep(60)
        if ctx.ref == APPS and INFRA not in ready:
            raise DependencyNotReady([INFRA], retry_after=300)
        await trio.sleep(1)
        if ctx.ref == INFRA and attempts[INFRA] <= 2:
            raise ValueError("the artifact is not there yet")
        if ctx.ref == APPS:
            manager.mark_ready(APPS)  # as a plugin's status write seen by the watch, before the run ends

    controller = manager.add_controller(Controller("bundles", reconcile, max_concurrent=4))
    out = io.StringIO()
    progress = TerminalProgress(manager, out)
    manager.add_observer(progress)

    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as ui:
        ui.start_soon(progress.run)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            controller.trigger(APPS, reason="Bundle added")
            controller.trigger(INFRA, reason="Bundle added")
            while attempts.get(INFRA, 0) < 3 or controller.running:
                await trio.sleep(0.5)
            ready.add(INFRA)
            manager.mark_ready(INFRA)
            while controller.running or attempts.get(APPS, 0) < 2:
                await trio.sleep(0.5)
            controller.trigger(INFRA, reason="source revision changed")
            await trio.sleep(0.5)
            controller.trigger(INFRA, reason="source revision changed")
            while controller.running:
                await trio.sleep(0.5)
            controller.trigger(SLOW, reason="Bundle added")
            await trio.sleep(1)
            manager.stop("SIGTERM")
            await progress.report_shutdown("SIGTERM", tick=5)
        progress.close()

    assert _lines(out) == [
        "waiting    Bundle demo/apps  for Bundle demo/infra",
        "failed     Bundle demo/infra  ValueError: the artifact is not there yet (attempt 1, retried with backoff)",
        "recovered  Bundle demo/infra  after 3 attempts",
        "ready      Bundle demo/infra",
        "woken      Bundle demo/apps  its dependency Bundle demo/infra is ready",
        "ready      Bundle demo/apps",
        "rollout    Bundle demo/infra  source revision changed",
        "superseded Bundle demo/infra  run bundles-6 cancelled: source revision changed",
        "reconciled Bundle demo/infra  rollout finished in 1.5 s",
        "stopping   on SIGTERM  1 run in flight, grace period 12 s",
        "draining   1 run in flight  7 s of grace left",
        "draining   1 run in flight  2 s of grace left",
        "drained    all runs ended in 12.0 s, 1 run cancelled at the end of the grace period  "
        "flushing events (up to 3 s)",
    ]


async def test_objects_that_report_no_readiness_are_reported_once_reconciled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = Manager(handle_signals=False)

    async def reconcile(ctx: RunContext) -> None:
        return None

    controller = manager.add_controller(Controller("mirror", reconcile))
    out = io.StringIO()
    progress = TerminalProgress(manager, out)
    manager.add_observer(progress)
    config = ObjectRef("ConfigMap", "settings", "team-a")
    async with trio.open_nursery() as ui:
        ui.start_soon(progress.run)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            for _ in range(2):
                controller.trigger(config, reason="ConfigMap modified")
                await trio.testing.wait_all_tasks_blocked()
            manager.stop("test over")
        progress.close()
    assert _lines(out) == [
        "reconciled ConfigMap team-a/settings  in 0.00 s",
        "rollout    ConfigMap team-a/settings  ConfigMap modified",
        "reconciled ConfigMap team-a/settings  rollout finished in 0.0 s",
    ]


async def test_a_list_is_not_a_rollout(autojump_clock: trio.testing.MockClock) -> None:
    """A joining replica or a restarted runner lists what is there (its triggers come at
    ``Priority.LOW``, as a resync's): no rollout line; a change after it is one."""
    manager = Manager(handle_signals=False)

    async def reconcile(ctx: RunContext) -> None:
        return None

    controller = manager.add_controller(Controller("bundles", reconcile))
    out = io.StringIO()
    progress = TerminalProgress(manager, out)
    manager.add_observer(progress)
    async with trio.open_nursery() as ui:
        ui.start_soon(progress.run)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            controller.trigger(INFRA, reason="Bundle added", priority=Priority.LOW)
            await trio.testing.wait_all_tasks_blocked()
            manager.mark_ready(INFRA)
            for reason in ("Bundle added", "source revision changed", "resync"):
                controller.trigger(INFRA, reason=reason, priority=Priority.LOW)
                await trio.testing.wait_all_tasks_blocked()
            controller.trigger(INFRA, reason="source revision changed")
            await trio.testing.wait_all_tasks_blocked()
            manager.stop("test over")
        progress.close()
    assert _lines(out) == [
        "reconciled Bundle demo/infra  in 0.00 s",
        "ready      Bundle demo/infra",
        "rollout    Bundle demo/infra  source revision changed",
        "reconciled Bundle demo/infra  rollout finished in 0.0 s",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_seed_progress_rewrites_one_line_at_most_four_times_a_second() -> None:
    now = [100.0]
    out = _Terminal()
    progress = SeedProgress(out, 10, clock=lambda: now[0])
    progress.update(0, 0)
    for done, at, violations in ((1, 100.1, 0), (2, 100.3, 1), (3, 100.4, 1), (4, 102.0, 1)):
        now[0] = at
        progress.update(done, violations)
    progress.clear()
    progress.clear()
    assert out.getvalue() == (
        "\r0/10 seeds, 0 violations, first seed running\x1b[K"
        "\r2/10 seeds, 1 violation, 6.7 seeds/s\x1b[K"
        "\r4/10 seeds, 1 violation, 2.0 seeds/s\x1b[K"
        "\r\x1b[K"
    )


def test_seed_progress_writes_nothing_off_a_terminal() -> None:
    out = io.StringIO()
    progress = SeedProgress(out, 3)
    progress.update(0, 0)
    progress.update(3, 1)
    progress.clear()
    assert out.getvalue() == ""
