"""A plugin for the scale-out end-to-end test: it reconciles the ConfigMaps of its namespace and
records the start and end of every run (pid, key, wall-clock time) by appending a line to the
file named by ``$RING_RECORD``; each run sleeps ``$RING_RUN_SECONDS`` and requeues itself
after ``$RING_REQUEUE_SECONDS``, so every replica keeps running its keys, ``$RING_WORKERS`` at
a time."""

from __future__ import annotations

import os
import time

import trio

from engine import Controller, Result, RunContext
from engine.kube import Plugin, PluginContext


def _record(fd: int, what: str, key: str) -> None:
    os.write(fd, f"{what} {os.getpid()} {key} {time.time():.6f}\n".encode())


async def _setup(ctx: PluginContext) -> None:
    fd = os.open(os.environ["RING_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seconds = float(os.environ.get("RING_RUN_SECONDS", "0.1"))
    requeue = float(os.environ.get("RING_REQUEUE_SECONDS", "2"))
    workers = int(os.environ.get("RING_WORKERS", "16"))

    async def reconcile(run: RunContext) -> Result:
        key = f"{run.ref.namespace}/{run.ref.name}"
        _record(fd, "start", key)
        try:
            await trio.sleep(seconds)
        finally:
            _record(fd, "end", key)
        return Result(requeue_after=requeue)

    controller = ctx.manager.add_controller(Controller("ring-recorder", reconcile, max_concurrent=workers))
    informer = await ctx.cluster.informer("v1", "ConfigMap", sharded=True)
    ctx.cluster.watches(controller, informer)


plugin = Plugin(name="ring-recorder", setup=_setup)
