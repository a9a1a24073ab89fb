"""A user's change during the restart of a converged controller, with and without priorities.

Run by hand (not a test)::

    python bench/priority_restart.py [--n 10000] [--workers 4] [--repeat 2] [--kubeconfig PATH]

Creates N ConfigMaps in the embedded API server (in this process, through its memory
transport), or with ``--kubeconfig PATH`` in a fresh namespace of that cluster (deleted after).
Then, for each mode, interleaved ``--repeat`` times, it starts a fresh manager as a restarted
controller would: a :class:`~engine.kube.Cluster` informer on the ConfigMaps and a controller
of ``--workers`` workers whose reconcile reads its object from the server (a converged object:
nothing to write). As soon as the informer has listed every object (N keys queued), a user
patches one of them, the last one the list gave, and the time from the patch's answer to the
start of the run its change triggered is measured.

The modes:

* **priorities**: the engine as it is: listed objects wait at ``Priority.LOW``, the watch event
  of the patch comes in at ``NORMAL`` and moves the key up;
* **FIFO**: the same, but every trigger at ``NORMAL`` (the controller's ``trigger`` drops the
  priority it is given): client-go's queue, the engine's before priorities, where the change
  merges into the key's queued place from the list.

Both figures are printed side by side, with how many runs started before the patched one.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

sys.path.insert(0, os.environ.get("ROOT", "."))

from engine import Controller, Manager, ObjectRef, Priority, RunContext, Trigger  # noqa: E402
from engine.apiserver import ApiServer  # noqa: E402
from engine.kube import Client, Cluster, Config, Resource  # noqa: E402


class FifoController(Controller):
    """Every trigger at ``NORMAL``: the queue is then client-go's FIFO."""

    def trigger(
        self,
        ref: ObjectRef,
        *,
        reason: str = "",
        revision: str | None = None,
        sequence: int | None = None,
        priority: Priority = Priority.NORMAL,
        news: bool = False,
    ) -> Trigger | None:
        return super().trigger(ref, reason=reason, revision=revision, sequence=sequence, news=news)


async def create_all(client: Client, cms: Resource, namespace: str, n: int) -> None:
    send, receive = trio.open_memory_channel[int](0)

    async def worker() -> None:
        async for i in receive:
            await client.create(
                cms, {"metadata": {"name": f"cm-{i:06d}", "namespace": namespace}, "data": {"n": "1"}},
                namespace=namespace,
            )

    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(worker)
        async with send:
            for i in range(n):
                await send.send(i)


async def restart(client: Client, cms: Resource, namespace: str, *, fifo: bool, workers: int) -> dict[str, Any]:
    """One restart: returns the seconds from the patch to its run and the runs before it."""
    runs = 0
    patched: dict[str, Any] = {}
    done = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        nonlocal runs
        runs += 1
        if ctx.ref.name == patched.get("name") and ctx.trigger.revision == patched.get("revision"):
            patched["ran_at"] = time.perf_counter()
            patched["runs_before"] = runs - 1
            done.set()
        await client.get(cms, ctx.ref.name, namespace=namespace)

    manager = Manager(handle_signals=False)
    kind = FifoController if fifo else Controller
    controller = manager.add_controller(kind("configmaps", reconcile, max_concurrent=workers))
    cluster = Cluster(client, manager)
    informer = await cluster.informer("v1", "ConfigMap", namespace=namespace)
    order: list[str] = []
    informer.add_handler(lambda event: order.append(event.obj["metadata"]["name"]) if event.listed else None)
    cluster.watches(controller, informer)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await cluster.wait_synced()
        name = order[-1]
        patched["name"] = name
        answer = await client.patch(cms, name, {"data": {"n": f"changed-{secrets.token_hex(4)}"}}, namespace=namespace)
        patched["revision"] = answer["metadata"]["resourceVersion"]
        patched["at"] = time.perf_counter()
        queued = len(controller.queue)
        with trio.fail_after(3600):
            await done.wait()
        manager.stop("measured")
    return {
        "seconds": patched["ran_at"] - patched["at"],
        "runs_before": patched["runs_before"],
        "queued": queued,
        "total_runs": runs,
    }


@asynccontextmanager
async def bench_client(kubeconfig: str | None) -> AsyncIterator[Client]:
    """A client of the cluster of ``kubeconfig``, else of an embedded API server in this
    process (through its memory transport), stopped on exit."""
    if kubeconfig:
        async with Client(Config.from_kubeconfig(kubeconfig)) as client:
            yield client
        return
    async with ApiServer(listen=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            yield client


async def main(args: argparse.Namespace) -> None:
    async with bench_client(args.kubeconfig) as client:
        if not args.kubeconfig:
            await measure(client, "default", args)
            return
        namespaces = await client.resource("v1", "Namespace")
        namespace = f"restart-{secrets.token_hex(3)}"
        await client.create(namespaces, {"metadata": {"name": namespace}})
        try:
            await measure(client, namespace, args)
        finally:
            await client.delete(namespaces, namespace)


async def measure(client: Client, namespace: str, args: argparse.Namespace) -> None:
    cms = await client.resource("v1", "ConfigMap")
    started = time.perf_counter()
    await create_all(client, cms, namespace, args.n)
    print(f"created {args.n} ConfigMaps in {time.perf_counter() - started:.1f} s", flush=True)
    results: dict[str, list[dict[str, Any]]] = {"priorities": [], "FIFO": []}
    for round_ in range(args.repeat):
        for mode in ("priorities", "FIFO") if round_ % 2 == 0 else ("FIFO", "priorities"):
            result = await restart(client, cms, namespace, fifo=mode == "FIFO", workers=args.workers)
            results[mode].append(result)
            print(
                f"  round {round_ + 1} {mode:>10}: patch to run {result['seconds'] * 1000:9.1f} ms, "
                f"{result['runs_before']} runs before it ({result['queued']} keys queued at the patch)",
                flush=True,
            )
    print()
    print(f"restart of a converged controller, {args.n} objects, {args.workers} workers, "
          f"a user's patch as the list ends (best of {args.repeat}):")
    print(f"{'':>12} {'patch to run':>14} {'runs before it':>16}")
    for mode, rows in results.items():
        best = min(rows, key=lambda r: r["seconds"])
        print(f"{mode:>12} {best['seconds'] * 1000:11.1f} ms {best['runs_before']:>16}")
    fast = min(r["seconds"] for r in results["priorities"])
    slow = min(r["seconds"] for r in results["FIFO"])
    print(f"{'FIFO/priorities':>12} {slow / fast:12.0f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="objects (default 10,000)")
    parser.add_argument("--workers", type=int, default=4, help="workers of the controller (default 4)")
    parser.add_argument("--repeat", type=int, default=2, help="restarts per mode, interleaved (default 2)")
    parser.add_argument("--kubeconfig", help="run against this cluster (in a fresh namespace, deleted after)")
    trio.run(main, parser.parse_args())
