"""Benchmark: how fast an engine.kube Informer ingests objects, and what each cached object costs.

Run by hand (not a test)::

    python bench/informer.py [--sizes 1000,10000]

For each size N it seeds N ConfigMaps into an embedded API server (running in its own thread,
reached over loopback sockets by both clients) and measures, beside the same operation done by
the official ``kubernetes`` client in a thread of the same process:

* initial list: objects per second from the start of the informer until ``synced`` (paged
  list, decode, store with indexes; also unpaged) vs ``CoreV1Api.list_namespaced_config_map``;
* watch: objects per second through the watch path (the informer's watch loop replaying N
  ADDED events from the server's history into its store) vs ``watch.Watch().stream``;
* resident memory per cached object: RSS growth while the informer's store holds N objects vs
  while the official client's list result (model objects) is held.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from typing import Any

import psutil
import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from engine.apiserver import ApiServer  # noqa: E402
from engine.kube import Client, Config, Informer, ObjectList, Resource, RetryPolicy, Watcher, WatchOptions  # noqa: E402

CONFIGMAPS = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)
PROCESS = psutil.Process()
REPEATS = 3


def rss() -> int:
    gc.collect()
    return int(PROCESS.memory_info().rss)


def configmap(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"cm-{i:06d}",
            "labels": {"app": "bench", "shard": str(i % 16)},
            "annotations": {"bench.example.com/index": str(i)},
        },
        "data": {"key": f"value-{i}", "config.yaml": "a: 1\nb: [x, y, z]\n" * 4},
    }


class _ReplayWatcher(Watcher):
    """A watcher whose first list is replaced by 'empty at resourceVersion R', so its watch
    loop replays everything committed after R: the watch path alone."""

    def __init__(self, *args: Any, start_rv: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_rv: str | None = start_rv

    async def _list_page(self, continue_token: str | None) -> ObjectList:
        if self._start_rv is not None:
            rv, self._start_rv = self._start_rv, None
            return ObjectList(items=[], resource_version=rv)
        return await super()._list_page(continue_token)


class _ReplayInformer(Informer):
    """An informer fed by a :class:`_ReplayWatcher`: it stores what the watch path replays."""

    def __init__(self, client: Client, resource: Resource, *, namespace: str, start_rv: str) -> None:
        super().__init__(client, resource, namespace=namespace)
        self.watcher = _ReplayWatcher(client, resource, namespace=namespace, start_rv=start_rv)


async def seed(client: Client, namespace: str, n: int) -> str:
    ns = await client.resource("v1", "Namespace")
    await client.create(ns, {"metadata": {"name": namespace}})
    start_rv = (await client.list(CONFIGMAPS, namespace=namespace, limit=1)).resource_version
    async with trio.open_nursery() as nursery:
        for w in range(8):

            async def worker(w: int = w) -> None:
                for i in range(w, n, 8):
                    await client.create(CONFIGMAPS, configmap(i), namespace=namespace)

            nursery.start_soon(worker)
    return start_rv


async def ours_list(
    client: Client, namespace: str, n: int, page_size: int = 500
) -> tuple[float, float]:
    before = rss()
    informer = Informer(client, CONFIGMAPS, namespace=namespace, options=WatchOptions(page_size=page_size))
    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        await nursery.start(informer.run)
        await informer.wait_synced()
        elapsed = time.perf_counter() - start
        assert len(informer.store) == n
        per_object = (rss() - before) / n
        nursery.cancel_scope.cancel()
    return n / elapsed, per_object


async def ours_watch(client: Client, namespace: str, n: int, start_rv: str) -> float:
    informer = _ReplayInformer(client, CONFIGMAPS, namespace=namespace, start_rv=start_rv)
    done = trio.Event()
    informer.add_handler(lambda e: done.set() if len(informer.store) >= n else None)
    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        await nursery.start(informer.run)
        await done.wait()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return n / elapsed


def official_list(kubeconfig: str, namespace: str, n: int) -> tuple[float, float]:
    import kubernetes

    api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    v1 = kubernetes.client.CoreV1Api(api_client)
    v1.list_namespaced_config_map(namespace, limit=1)
    before = rss()
    start = time.perf_counter()
    result = v1.list_namespaced_config_map(namespace)
    elapsed = time.perf_counter() - start
    assert len(result.items) == n
    per_object = (rss() - before) / n
    del result
    api_client.close()
    return n / elapsed, per_object


def official_watch(kubeconfig: str, namespace: str, n: int, start_rv: str) -> float:
    import kubernetes

    api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    v1 = kubernetes.client.CoreV1Api(api_client)
    v1.list_namespaced_config_map(namespace, limit=1)
    watch = kubernetes.watch.Watch()
    seen = 0
    start = time.perf_counter()
    for event in watch.stream(
        v1.list_namespaced_config_map, namespace, resource_version=start_rv, timeout_seconds=600
    ):
        if event["type"] == "ADDED":
            seen += 1
            if seen >= n:
                break
    elapsed = time.perf_counter() - start
    watch.stop()
    api_client.close()
    return n / elapsed


def main(sizes: list[int]) -> None:
    server = ApiServer(history_size=sum(sizes) + 1_000, watch_buffer=sum(sizes) + 1_000)
    with server.run_in_thread() as api, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        api.write_kubeconfig(kubeconfig)
        rows = trio.run(measure, kubeconfig, sizes)
    report(rows)


async def measure(kubeconfig: str, sizes: list[int]) -> list[tuple[Any, ...]]:
    rows = []
    config = Config.from_kubeconfig(kubeconfig)
    async with Client(config, retry=RetryPolicy(max_attempts=5)) as client:
        for n in sizes:
            namespace = f"bench-{n}"
            start_rv = await seed(client, namespace, n)
            ours_watch_rate = theirs_watch_rate = ours_list_rate = ours_unpaged_rate = 0.0
            theirs_list_rate = 0.0
            ours_mem = theirs_mem = 0.0
            for attempt in range(REPEATS):
                rate = await ours_watch(client, namespace, n, start_rv)
                ours_watch_rate = max(ours_watch_rate, rate)
                rate = await trio.to_thread.run_sync(official_watch, kubeconfig, namespace, n, start_rv)
                theirs_watch_rate = max(theirs_watch_rate, rate)
                rate, mem = await ours_list(client, namespace, n)
                ours_list_rate = max(ours_list_rate, rate)
                ours_mem = mem if attempt == 0 else ours_mem
                rate, _ = await ours_list(client, namespace, n, page_size=n)
                ours_unpaged_rate = max(ours_unpaged_rate, rate)
                rate, mem = await trio.to_thread.run_sync(official_list, kubeconfig, namespace, n)
                theirs_list_rate = max(theirs_list_rate, rate)
                theirs_mem = mem if attempt == 0 else theirs_mem
            rows.append(
                (
                    n,
                    ours_list_rate,
                    ours_unpaged_rate,
                    theirs_list_rate,
                    ours_watch_rate,
                    theirs_watch_rate,
                    ours_mem,
                    theirs_mem,
                )
            )
    return rows


def report(rows: list[tuple[Any, ...]]) -> None:
    print(f"python {sys.version.split()[0]}, trio {trio.__version__}, one process, loopback sockets")
    header = (
        f"{'objects':>8} | {'list obj/s':>11} {'1 page':>9} {'official':>10} {'ratio':>6} | "
        f"{'watch obj/s':>11} {'official':>10} {'ratio':>6} | "
        f"{'RSS B/obj':>9} {'official':>9} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for n, ol, ou, tl, ow, tw, om, tm in rows:
        print(
            f"{n:>8} | {ol:>11,.0f} {ou:>9,.0f} {tl:>10,.0f} {ol / tl:>5.2f}x | "
            f"{ow:>11,.0f} {tw:>10,.0f} {ow / tw:>5.2f}x | "
            f"{om:>9,.0f} {tm:>9,.0f} {om / tm if tm > 0 else float('nan'):>5.2f}x"
        )
    print(
        f"rates: best of {REPEATS} runs; RSS: growth during the first run.\n"
        "list obj/s: the informer's paged list (500 per page); 1 page: the same unpaged, as the\n"
        "official call is; ratio = engine.kube (paged) / official kubernetes client (higher is\n"
        "faster for obj/s; lower is leaner for RSS). The server runs in this process and its CPU\n"
        "time is included in every figure."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated object counts")
    args = parser.parse_args()
    main([int(s) for s in args.sizes.split(",")])
