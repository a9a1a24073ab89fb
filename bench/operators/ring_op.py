"""The scale-out benchmark's plugin (``bench/scale_out.py``): one run per ConfigMap change.

Each run waits ``$BENCH_RUN_SECONDS`` (default 0.05, an I/O wait) and appends
``run <pid> <name> <data.n> <time>`` to ``$BENCH_RECORD``; a service appends
``owned <pid> <share> <time>`` whenever the replica's owned share of the key space changes
(polled every 20 ms), so the driver can see when part of the key space was owned by nobody.
"""

from __future__ import annotations

import os
import time

import trio

from engine import Controller, RunContext
from engine.kube import Plugin, PluginContext


async def _setup(ctx: PluginContext) -> None:
    fd = os.open(os.environ["BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seconds = float(os.environ.get("BENCH_RUN_SECONDS", "0.05"))
    workers = int(os.environ.get("BENCH_WORKERS", "2"))
    pid = os.getpid()
    informer = await ctx.cluster.informer("v1", "ConfigMap", sharded=True)

    async def reconcile(run: RunContext) -> None:
        await trio.sleep(seconds)
        obj = informer.store.get(run.ref.namespace, run.ref.name)
        n = (obj or {}).get("data", {}).get("n", "-")
        os.write(fd, f"run {pid} {run.ref.name} {n} {time.time():.6f}\n".encode())

    controller = ctx.manager.add_controller(Controller("bench-ring", reconcile, max_concurrent=workers))
    ctx.cluster.watches(controller, informer)
    gate = ctx.manager.ownership

    async def report_owned(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        last = -1.0
        while gate is not None:
            share = gate.owned.share
            if share != last:
                os.write(fd, f"owned {pid} {share:.6f} {time.time():.6f}\n".encode())
                last = share
            await trio.sleep(0.02)

    ctx.manager.add_service(report_owned)


plugin = Plugin(name="bench-ring", setup=_setup)
