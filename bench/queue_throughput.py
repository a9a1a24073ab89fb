"""No-op reconciles per second through the full engine, beside a bare trio channel hop.

Run by hand:  python bench/queue_throughput.py [--count N] [--repeat R] [--metrics] [--tracing] [--clock cpu]

For 1, 4 and 64 workers it measures, in one run and interleaved, (a) the floor: N items sent
with ``send_nowait`` on a trio memory channel and received by the same number of tasks, and
(b) the engine: N distinct keys triggered on a controller, each taken by a worker, run as a
no-op reconcile in its own cancel scope, settled and marked done. It prints the best of R
repetitions of each and the ratio engine/floor (issue 24's target is at most 2x).

With ``--metrics`` it also measures (c) the engine with ``Observability(manager)`` installed
(metrics observers on every run and queue operation; no server, no scrape), interleaved with
the others, and prints its rate and its overhead over (b).

With ``--tracing`` it also measures (d) the engine with a :class:`engine.RunTracer` on an
OpenTelemetry SDK ``TracerProvider`` with no span processor (every run's span and queue-wait
span recorded and ended, nothing exported), and prints its overhead over (b). Without it
OpenTelemetry is not imported: (b) is the engine with tracing off.

``--clock cpu`` times with the process's CPU time (``time.process_time``) instead of the wall
clock: on a machine shared with other jobs, their load moves wall-clock figures far more than
it moves the CPU this process spends (both sides of the ratio are timed the same way).
"""

from __future__ import annotations

import argparse
import math
import time

import trio

from engine import Controller, Manager, ObjectRef, RunContext, RunTracer
from engine.observability import Observability

_clock = time.perf_counter


async def floor(count: int, workers: int) -> float:
    send, receive = trio.open_memory_channel[int](math.inf)
    done = trio.Event()
    left = [count]

    async def worker() -> None:
        async for _ in receive:
            left[0] -= 1
            if not left[0]:
                done.set()

    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)
        await trio.testing_wait()
        start = _clock()
        for i in range(count):
            send.send_nowait(i)
        await done.wait()
        elapsed = _clock() - start
        nursery.cancel_scope.cancel()
    return elapsed


async def engine(count: int, workers: int, observers: int = 0, metrics: bool = False, tracing: bool = False) -> float:
    left = [count]
    done = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        left[0] -= 1
        if not left[0]:
            done.set()

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("bench", reconcile, max_concurrent=workers))
    if metrics:
        Observability(manager, process_metrics=False)
    if tracing:
        from opentelemetry.sdk.trace import TracerProvider

        manager.add_observer(RunTracer(TracerProvider()))
    keys = [ObjectRef("Bench", f"k{i}", "ns") for i in range(count)]
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await trio.testing_wait()
        start = _clock()
        trigger = controller.trigger
        for key in keys:
            trigger(key)
        await done.wait()
        elapsed = _clock() - start
        manager.stop()
    return elapsed


async def _settle() -> None:
    import trio.testing

    await trio.testing.wait_all_tasks_blocked()


trio.testing_wait = _settle  # type: ignore[attr-defined]


async def main(count: int, repeat: int, metrics: bool = False, tracing: bool = False) -> None:
    print(f"{count} no-op reconciles per measurement, best of {repeat}, {'CPU time' if _clock is time.process_time else 'wall clock'}")
    variants = [name for name, on in (("metrics", metrics), ("tracing", tracing)) if on]
    extra = "".join(f" {'+' + name + '/s':>12} {name + ' us':>10} {'overhead':>8}" for name in variants)
    print(f"{'workers':>8} {'floor/s':>12} {'engine/s':>12} {'floor us':>9} {'engine us':>10} {'ratio':>6}{extra}")
    for workers in (1, 4, 64):
        f_best = e_best = math.inf
        v_best = dict.fromkeys(variants, math.inf)
        for _ in range(repeat):
            f_best = min(f_best, await floor(count, workers))
            e_best = min(e_best, await engine(count, workers))
            for name in variants:
                v_best[name] = min(v_best[name], await engine(count, workers, **{name: True}))
        line = (
            f"{workers:>8} {count / f_best:>12,.0f} {count / e_best:>12,.0f} "
            f"{f_best / count * 1e6:>9.2f} {e_best / count * 1e6:>10.2f} {e_best / f_best:>6.2f}"
        )
        for best in v_best.values():
            line += f" {count / best:>12,.0f} {best / count * 1e6:>10.2f} {(best / e_best - 1) * 100:>7.1f}%"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--metrics", action="store_true", help="also measure the engine with metrics on")
    parser.add_argument("--tracing", action="store_true", help="also measure the engine with a RunTracer (OpenTelemetry SDK)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="time with the wall clock (default) or this process's CPU time"
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        _clock = time.process_time
    trio.run(main, args.count, args.repeat, args.metrics, args.tracing)
