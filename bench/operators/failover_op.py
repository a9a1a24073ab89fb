"""The failover benchmark's plugin (``bench/failover.py``): one run per ConfigMap, recorded.

Appends to ``$BENCH_RECORD`` (one line each, wall-clock ``time.time()``):

* ``standby <pid> <time>`` when the replica starts waiting for leadership;
* ``synced <pid> <time> <cached> <standby>`` the first time its informer holds a complete list,
  and whether the replica was still standing by then (a warm standby: ``1``);
* ``leading <pid> <time> <lists>`` when it acquired the Lease (from the elector's own record),
  with the lists its informer had done by then;
* ``run <pid> <name> <time> <lists>`` for the first run of the replica and then every
  ``$BENCH_EVERY``-th (default 1000), with the informer's lists so far.
"""

from __future__ import annotations

import os
import time

import trio

from engine import Controller, RunContext
from engine.kube import LeaderElector, Plugin, PluginContext


async def _setup(ctx: PluginContext) -> None:
    fd = os.open(os.environ["BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    every = int(os.environ.get("BENCH_EVERY", "1000"))
    workers = int(os.environ.get("BENCH_WORKERS", "4"))
    pid = os.getpid()
    informer = await ctx.cluster.informer("v1", "ConfigMap")
    runs = 0

    def record(line: str) -> None:
        os.write(fd, f"{line}\n".encode())

    async def reconcile(run: RunContext) -> None:
        nonlocal runs
        runs += 1
        if runs == 1 or runs % every == 0:
            record(f"run {pid} {run.ref.name} {time.time():.6f} {informer.statistics().lists}")
        await trio.lowlevel.checkpoint()

    controller = ctx.manager.add_controller(Controller("bench-failover", reconcile, max_concurrent=workers))
    ctx.cluster.watches(controller, informer)
    manager = ctx.manager

    async def report(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        record(f"standby {pid} {time.time():.6f}")
        while not manager.started:
            if informer.synced:
                record(f"synced {pid} {time.time():.6f} {len(informer.store.list())} {int(manager.standby)}")
                break
            await trio.sleep(0.01)
        await manager.wait_started()
        elector = manager.leader_election
        if isinstance(elector, LeaderElector):
            since = elector.statistics().leading_since
            if since is not None:
                record(f"leading {pid} {time.time() - (trio.current_time() - since):.6f} {informer.statistics().lists}")

    manager.add_service(report)


plugin = Plugin(name="bench-failover", setup=_setup)
