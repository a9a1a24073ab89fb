"""The benchmark's operator written with this engine, as a user would write it.

    python bench/operators/engine_op.py --kubeconfig PATH --namespace NS --stats PATH

An informer on the namespace's Widgets feeds a controller (16 workers) through
``generation_changed``; the reconciler reads the cached object and writes
``status.observedN = spec.n`` with one status merge patch when it differs, in ``ctx.shield``:
a patch cut by a supersede would stay in flight, land after the next run's patch and put an
older ``observedN`` back, a status-only change that wakes nobody. SIGTERM stops the
manager gracefully. ``--transport lean`` gives the client ``_lean.LeanTransport`` (the
engine's public ``Client(transport=...)``) instead of httpx's default connection pool.
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import _stats  # noqa: E402

from engine import Controller, Manager, RunContext  # noqa: E402
from engine.kube import Client, Cluster, Config, NotFoundError, generation_changed  # noqa: E402

STATUS_WRITE_TIMEOUT = 10.0
"""Seconds a status patch of a cancelled run still gets to land (``ctx.shield``)."""


async def main(args: argparse.Namespace) -> None:
    config = Config.from_kubeconfig(args.kubeconfig)
    transport = None
    if args.transport == "lean":
        from _lean import LeanTransport  # h11 and httpx's transport API: only when asked for

        transport = LeanTransport(config.server, config.ssl_context())
    async with Client(config, transport=transport, user_agent="bench-engine-operator") as client:
        manager = Manager(grace_period=10)
        cluster = Cluster(client, manager, namespace=args.namespace)
        widgets = await cluster.informer(f"{_stats.GROUP}/{_stats.VERSION}", _stats.KIND)

        async def reconcile(ctx: RunContext) -> None:
            _stats.count(ctx.ref.name)
            obj = widgets.store.get(ctx.ref.namespace, ctx.ref.name)
            if obj is None:
                return
            n = obj["spec"]["n"]
            if (obj.get("status") or {}).get("observedN") == n:
                return
            with ctx.shield(STATUS_WRITE_TIMEOUT):
                try:
                    await client.patch_status(
                        widgets.resource, ctx.ref.name, {"status": {"observedN": n}}, namespace=ctx.ref.namespace,
                        decode=False,
                    )
                except NotFoundError:
                    pass

        controller = manager.add_controller(Controller("widgets", reconcile, max_concurrent=args.workers))
        cluster.watches(controller, widgets, predicates=[generation_changed])
        await manager.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _stats.add_arguments(parser)
    arguments = parser.parse_args()
    _stats.install(arguments.stats)
    profile = _stats.profiler(arguments.cprofile)
    try:
        trio.run(main, arguments)
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(arguments.cprofile)
