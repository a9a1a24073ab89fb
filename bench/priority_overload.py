"""A stream of changes above a controller's throughput: how long a low-priority key waits.

Run by hand (not a test)::

    python bench/priority_overload.py [--listed 100] [--workers 4] [--run-time 0.05]
                                      [--load 1.5] [--duration 60] [--kubeconfig PATH]

For each mode, in a fresh namespace, ``--listed`` ConfigMaps exist before a controller starts,
so its informer's list queues them at ``Priority.LOW``. As soon as the list is in, a driver
creates new ConfigMaps at ``--load`` times the controller's throughput (``--workers`` workers,
each run sleeping ``--run-time`` seconds) for ``--duration`` seconds: each creation is a change
(``NORMAL``), and the queue can never catch up while the stream lasts. After the stream, the
controller drains. Measured per key, from the trigger that queued it to the start of its run:
the wait in seconds and in hand-outs (runs started meanwhile).

The modes, interleaved over ``--repeat`` rounds:

* **priorities**: the engine as it is: a LOW key is passed over by at most ``max_overtakes``
  (32) hand-outs in a row, so it runs within ``(n + 1) * 33`` hand-outs of being queued behind
  ``n`` ready keys, however many changes arrive (the stated bound, checked for every key);
* **no aging**: the same queue with that bound lifted (``max_overtakes`` unbounded): what a
  priority queue without aging gives: listed keys wait for the stream to end;
* **FIFO**: every trigger at ``NORMAL`` (client-go's queue, the engine's before priorities).

Against the embedded API server in this process (its memory transport) unless ``--kubeconfig``
names a cluster (a fresh namespace per mode there, deleted afterwards).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from typing import Any

import trio

sys.path.insert(0, os.environ.get("ROOT", "."))

from bench.priority_restart import FifoController, bench_client  # noqa: E402
from engine import Controller, Manager, RunContext  # noqa: E402
from engine.kube import Client, Cluster, InformerEvent, Resource  # noqa: E402

MODES = ("priorities", "no aging", "FIFO")


async def create(client: Client, cms: Resource, namespace: str, name: str) -> None:
    await client.create(cms, {"metadata": {"name": name, "namespace": namespace}, "data": {"n": "1"}},
                        namespace=namespace)


async def create_listed(client: Client, cms: Resource, namespace: str, n: int) -> None:
    send, receive = trio.open_memory_channel[int](0)

    async def worker() -> None:
        async for i in receive:
            await create(client, cms, namespace, f"listed-{i:06d}")

    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(worker)
        async with send:
            for i in range(n):
                await send.send(i)


async def stream(client: Client, cms: Resource, namespace: str, rate: float, duration: float) -> int:
    """Create ConfigMaps at ``rate`` per second for ``duration`` seconds, on schedule (a late
    creation does not delay the next). Returns how many it created."""
    made = 0
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        while (due := start + made / rate) < start + duration:
            await trio.sleep_until(due)
            nursery.start_soon(create, client, cms, namespace, f"stream-{made:06d}")
            made += 1
    return made


async def one_mode(client: Client, namespace: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cms = await client.resource("v1", "ConfigMap")
    await create_listed(client, cms, namespace, args.listed)

    handed_out = 0
    queued: dict[str, tuple[float, int, int]] = {}
    """A listed key's name: (its first trigger's time, hand-outs so far, ready keys then); a
    relist under load lists streamed objects too, which stay changes here."""
    waits: dict[str, list[tuple[float, int, int]]] = {"listed": [], "stream": []}
    """Per first run: (seconds waited, hand-outs waited, the bound in hand-outs or -1)."""
    seen: set[str] = set()
    everything_ran = trio.Event()
    expected = [sys.maxsize]

    async def reconcile(ctx: RunContext) -> None:
        nonlocal handed_out
        handed_out += 1
        name = ctx.ref.name
        if name not in seen:
            seen.add(name)
            now = trio.current_time()
            if name in queued:
                at, before, ready = queued[name]
                bound = (ready + 1) * (controller.queue.max_overtakes + 1) if mode == "priorities" else -1
                waits["listed"].append((now - at, handed_out - 1 - before, bound))
            else:
                waits["stream"].append((now - ctx.trigger.observed_at, -1, -1))
            if len(seen) >= expected[0]:
                everything_ran.set()
        await trio.sleep(args.run_time)

    manager = Manager(handle_signals=False)
    kind = FifoController if mode == "FIFO" else Controller
    controller = manager.add_controller(kind("configmaps", reconcile, max_concurrent=args.workers))
    if mode == "no aging":
        controller.queue.max_overtakes = sys.maxsize
    cluster = Cluster(client, manager)
    informer = await cluster.informer("v1", "ConfigMap", namespace=namespace)

    def on_event(event: InformerEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.listed and name.startswith("listed-") and name not in queued:
            queued[name] = (trio.current_time(), handed_out, len(controller.queue))

    informer.add_handler(on_event)
    cluster.watches(controller, informer)
    rate = args.load * args.workers / args.run_time
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await cluster.wait_synced()
        started = time.perf_counter()
        made = await stream(client, cms, namespace, rate, args.duration)
        streamed = time.perf_counter() - started
        expected[0] = args.listed + made
        if len(seen) >= expected[0]:
            everything_ran.set()
        with trio.fail_after(args.timeout):
            await everything_ran.wait()
        drained = time.perf_counter() - started
        manager.stop("measured")
    return {
        "mode": mode,
        "rate": rate,
        "created": made,
        "stream_seconds": streamed,
        "drained_seconds": drained,
        "runs": handed_out,
        "listed": waits["listed"],
        "stream": waits["stream"],
    }


def summary(result: dict[str, Any]) -> dict[str, Any]:
    listed = result["listed"]
    streamed = [w for w, _, _ in result["stream"]]
    over = [(w, h, b) for w, h, b in listed if b >= 0 and h > b]
    return {
        "mode": result["mode"],
        "listed_longest_s": max(w for w, _, _ in listed),
        "listed_longest_handouts": max(h for _, h, _ in listed),
        "bound_handouts": max((b for _, _, b in listed), default=-1),
        "over_bound": len(over),
        "stream_median_s": statistics.median(streamed),
        "stream_longest_s": max(streamed),
        "created": result["created"],
        "rate": result["rate"],
        "drained_seconds": result["drained_seconds"],
    }


async def main(args: argparse.Namespace) -> None:
    async with bench_client(args.kubeconfig) as client:
        await rounds(client, args, cluster=bool(args.kubeconfig))


async def rounds(client: Client, args: argparse.Namespace, *, cluster: bool) -> None:
    namespaces = await client.resource("v1", "Namespace")
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    print(f"{args.listed} listed keys (LOW), then creations at {args.load}x the throughput of "
          f"{args.workers} workers x {args.run_time * 1000:.0f} ms for {args.duration:.0f} s"
          f"{' on ' + args.kubeconfig if cluster else ' on the embedded server'}", flush=True)
    for round_ in range(args.repeat):
        for mode in MODES if round_ % 2 == 0 else tuple(reversed(MODES)):
            namespace = f"overload-{mode.replace(' ', '-').lower()}-{secrets.token_hex(3)}"
            await client.create(namespaces, {"metadata": {"name": namespace}})
            try:
                result = summary(await one_mode(client, namespace, mode, args))
            finally:
                if cluster:
                    await client.delete(namespaces, namespace)
            results[mode].append(result)
            print(f"  round {round_ + 1} {mode:>10}: listed key waited at most "
                  f"{result['listed_longest_s']:6.1f} s / {result['listed_longest_handouts']} hand-outs"
                  + (f" (bound {result['bound_handouts']}, {result['over_bound']} over it)"
                     if result["bound_handouts"] >= 0 else "")
                  + f"; a change waited {result['stream_median_s']:5.1f} s median, "
                  f"{result['stream_longest_s']:5.1f} s at most; {result['created']} created "
                  f"at {result['rate']:.0f}/s, all ran {result['drained_seconds']:.0f} s after the list",
                  flush=True)
    print()
    print(f"{'':>12} {'listed (LOW) key, longest wait':>32} {'change (NORMAL) wait':>26}")
    print(f"{'':>12} {'seconds':>12} {'hand-outs':>10} {'bound':>8} {'median s':>12} {'longest s':>12}")
    for mode, rows in results.items():
        worst = max(rows, key=lambda r: r["listed_longest_s"])
        bound = str(worst["bound_handouts"]) if worst["bound_handouts"] >= 0 else "-"
        print(f"{mode:>12} {worst['listed_longest_s']:12.1f} {worst['listed_longest_handouts']:>10} "
              f"{bound:>8} {statistics.median(r['stream_median_s'] for r in rows):12.1f} "
              f"{max(r['stream_longest_s'] for r in rows):12.1f}")
    over = sum(r["over_bound"] for r in results["priorities"])
    print(f"listed keys handed out past the stated bound with priorities: {over}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listed", type=int, default=100, help="objects listed at start, LOW (default 100)")
    parser.add_argument("--workers", type=int, default=4, help="workers of the controller (default 4)")
    parser.add_argument("--run-time", type=float, default=0.05, help="seconds each run takes (default 0.05)")
    parser.add_argument("--load", type=float, default=1.5, help="change rate over the controller's throughput (1.5)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds the stream lasts (default 60)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, modes interleaved (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the drain (900)")
    parser.add_argument("--kubeconfig", help="run against this cluster instead of the embedded server")
    trio.run(main, parser.parse_args())
