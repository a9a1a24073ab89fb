"""A bare operator for the benchmark, written as a Python user without a framework would: aiohttp.

    python bench/operators/bare_op.py --kubeconfig PATH --namespace NS --stats PATH

asyncio and aiohttp only: one list, then one watch from its resourceVersion (resumed from the
last one seen when it ends; an error or a 410 lists again), a dict of the latest objects, an
``asyncio.Queue`` of names (a queued name is not queued again) and 16 workers, each sending one
status merge patch per change from the latest object. The server, TLS and credentials are read
from the kubeconfig with ``engine.kube.Config`` (a bearer token, if any, goes into a header);
nothing of the engine is on the hot path. SIGTERM cancels everything and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

import aiohttp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import _stats  # noqa: E402

from engine.kube import Config  # noqa: E402


class Bare:
    def __init__(self, session: aiohttp.ClientSession, server: str, namespace: str) -> None:
        self.session = session
        self.base = f"{server}/apis/{_stats.GROUP}/{_stats.VERSION}/namespaces/{namespace}/{_stats.PLURAL}"
        self.objects: dict[str, dict[str, Any]] = {}
        self.queued: set[str] = set()
        self.queue: asyncio.Queue[str] = asyncio.Queue()

    def observe(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.objects[name] = obj
        if obj.get("spec", {}).get("n") != (obj.get("status") or {}).get("observedN") and name not in self.queued:
            self.queued.add(name)
            self.queue.put_nowait(name)

    async def relist(self) -> str:
        async with self.session.get(self.base) as response:
            response.raise_for_status()
            body = await response.json()
        self.objects.clear()
        for obj in body["items"]:
            self.observe(obj)
        return str(body["metadata"]["resourceVersion"])

    async def watch(self) -> None:
        rv = await self.relist()
        while True:
            params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
            try:
                timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
                async with self.session.get(self.base, params=params, timeout=timeout) as response:
                    response.raise_for_status()
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise aiohttp.ClientError(f"watch error: {obj.get('message')}")
                        rv = obj["metadata"]["resourceVersion"]
                        if event["type"] == "DELETED":
                            self.objects.pop(obj["metadata"]["name"], None)
                        elif event["type"] != "BOOKMARK":
                            self.observe(obj)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.1)
                rv = await self.relist()

    async def worker(self) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        while True:
            name = await self.queue.get()
            self.queued.discard(name)
            obj = self.objects.get(name)
            if obj is None:
                continue
            _stats.count(name)
            n = obj["spec"]["n"]
            try:
                async with self.session.patch(
                    f"{self.base}/{name}/status", data=json.dumps({"status": {"observedN": n}}), headers=headers
                ) as response:
                    await response.read()
                    failed = response.status >= 400 and response.status != 404
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.1)
                failed = True
            if failed:
                self.observe(self.objects.get(name, obj))


async def main(args: argparse.Namespace) -> None:
    config = Config.from_kubeconfig(args.kubeconfig)
    headers = {"User-Agent": "bench-bare-operator"}
    token = getattr(config, "token", None)
    if isinstance(token, str) and token:
        headers["Authorization"] = f"Bearer {token}"
    ssl: Any = config.ssl_context() if config.server.startswith("https:") else None
    connector = aiohttp.TCPConnector(ssl=ssl if ssl is not None else False, limit=0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with aiohttp.ClientSession(
        connector=connector, headers=headers, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        bare = Bare(session, config.server.rstrip("/"), args.namespace)
        tasks = [asyncio.create_task(bare.watch())] + [asyncio.create_task(bare.worker()) for _ in range(args.workers)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _stats.add_arguments(parser)
    arguments = parser.parse_args()
    _stats.install(arguments.stats)
    profile = _stats.profiler(arguments.cprofile)
    try:
        asyncio.run(main(arguments))
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(arguments.cprofile)
