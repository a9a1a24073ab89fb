"""A manager with one fast and one slow reconcile, for the SIGTERM test (run as a subprocess).

Usage: python -m tests.programs.slow_manager WEBHOOK_URL GRACE_SECONDS
Prints one JSON line per lifecycle step on stdout, and a summary when it exits.
"""

from __future__ import annotations

import json
import sys

import trio

from engine import Controller, Manager, ObjectRef, Outcome, Run, RunContext, RunObserver, WebhookSink


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Printer(RunObserver):
    def on_run_started(self, controller: Controller, run: Run) -> None:
        say(step="started", key=run.key.name)

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        say(step="finished", key=run.key.name, outcome=outcome.kind.value,
            cause=run.cause.value if run.cause else None)


async def reconcile(ctx: RunContext) -> None:
    ctx.events.normal("Progressing", f"reconciling {ctx.ref.name}")
    duration = {"fast": 1.0, "slow": 3600.0}[ctx.ref.name]
    try:
        await trio.sleep(duration)
    finally:
        if ctx.cancel_cause is None:
            ctx.events.normal("ReconciliationSucceeded", f"{ctx.ref.name} done")


async def main(url: str, grace: float) -> int:
    manager = Manager(grace_period=grace, event_flush_timeout=2.0)
    manager.add_sink(WebhookSink(url, timeout=1.0, max_attempts=2))
    manager.add_observer(Printer())
    controller = manager.add_controller(Controller("slow", reconcile, max_concurrent=2))
    async with trio.open_nursery() as nursery:
        report_box = []

        async def run() -> None:
            report_box.append(await manager.run())

        nursery.start_soon(run)
        await manager.wait_started()
        controller.trigger(ObjectRef("Job", "fast"))
        controller.trigger(ObjectRef("Job", "slow"))
    report = report_box[0]
    say(step="exit", forced=report.forced, cancelled_runs=report.cancelled_runs,
        events_flushed=report.events_flushed, drops={f"{k[0]}:{k[1]}": v for k, v in manager.events.drops().items()})
    return 0 if not report.forced else 130


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1], float(sys.argv[2])))
