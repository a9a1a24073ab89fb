"""A minimal reference reconciler for the benchmark: httpx and trio, nothing else on the hot path.

    python bench/operators/reference_op.py --kubeconfig PATH --namespace NS --stats PATH

One list, then one watch from its resourceVersion (resumed from the last one seen when it
ends; a 410 or an error relists). Every event updates a dict of the latest objects; a Widget
whose ``status.observedN`` differs from ``spec.n`` is queued once (a queued name is not queued
again), and 16 workers each take a name and write ``status.observedN`` from the latest cached
object with one status merge patch (a failed request is retried after 0.1 s; requests time
out after 30 s, as the engine's client does). Only the kubeconfig (server, TLS, credentials) is read
with ``engine.kube.Config``. SIGTERM cancels everything and exits. ``--transport lean`` uses
``_lean.LeanTransport`` instead of httpx's default connection pool.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from typing import Any

import httpx
import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import _stats  # noqa: E402

from engine.kube import Config  # noqa: E402


class Reference:
    def __init__(self, http: httpx.AsyncClient, namespace: str) -> None:
        self.http = http
        self.base = f"/apis/{_stats.GROUP}/{_stats.VERSION}/namespaces/{namespace}/{_stats.PLURAL}"
        self.objects: dict[str, dict[str, Any]] = {}
        self.queued: set[str] = set()
        self.send, self.receive = trio.open_memory_channel[str](math.inf)

    def observe(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.objects[name] = obj
        if obj.get("spec", {}).get("n") != (obj.get("status") or {}).get("observedN") and name not in self.queued:
            self.queued.add(name)
            self.send.send_nowait(name)

    async def relist(self) -> str:
        response = await self.http.get(self.base)
        response.raise_for_status()
        body = response.json()
        self.objects.clear()
        for obj in body["items"]:
            self.observe(obj)
        return str(body["metadata"]["resourceVersion"])

    async def watch(self) -> None:
        rv = await self.relist()
        while True:
            params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
            try:
                async with self.http.stream("GET", self.base, params=params, timeout=httpx.Timeout(10, read=None)) as r:
                    r.raise_for_status()
                    async for line in r.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise httpx.HTTPError(f"watch error: {obj.get('message')}")
                        rv = obj["metadata"]["resourceVersion"]
                        if event["type"] == "DELETED":
                            self.objects.pop(obj["metadata"]["name"], None)
                        elif event["type"] != "BOOKMARK":
                            self.observe(obj)
            except httpx.HTTPError:
                await trio.sleep(0.1)
                rv = await self.relist()

    async def worker(self) -> None:
        async for name in self.receive:
            self.queued.discard(name)
            obj = self.objects.get(name)
            if obj is None:
                continue
            _stats.count(name)
            n = obj["spec"]["n"]
            try:
                response = await self.http.patch(
                    f"{self.base}/{name}/status",
                    content=json.dumps({"status": {"observedN": n}}).encode(),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            except httpx.HTTPError:
                await trio.sleep(0.1)
                self.observe(self.objects.get(name, obj))
                continue
            if response.status_code >= 400 and response.status_code != 404:
                self.observe(obj)


async def main(args: argparse.Namespace) -> None:
    config = Config.from_kubeconfig(args.kubeconfig)
    kwargs = config.httpx_client_kwargs()
    if args.transport == "lean":
        from _lean import LeanTransport  # h11: only when asked for

        kwargs["transport"] = LeanTransport(config.server, config.ssl_context())
    headers = {"User-Agent": "bench-reference-operator"}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30), **kwargs) as http:
        reference = Reference(http, args.namespace)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reference.watch)
                for _ in range(args.workers):
                    nursery.start_soon(reference.worker)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break


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
