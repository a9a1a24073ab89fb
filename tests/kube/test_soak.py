"""Soak: 10,000 objects created, updated and deleted under injected stream drops; afterwards the
informer's cache must equal a fresh list. Excluded by default; run with

    python -m pytest -m soak tests/kube/test_soak.py
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

from engine.apiserver import ApiServer
from engine.kube import Client, Config, Informer, InformerEvent, Resource, RetryPolicy, WatchOptions

pytestmark = [pytest.mark.soak, pytest.mark.timeout(1800)]

CONFIGMAPS = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)
OBJECTS = 10_000
WORKERS = 16


async def test_soak_cache_equals_fresh_list_after_churn_and_drops() -> None:
    rng = random.Random(20261202)
    async with ApiServer(listen=False, history_size=5_000, watch_buffer=2_000, seed=1) as api:
        config = Config.from_dict(api.kubeconfig)
        retry = RetryPolicy(max_attempts=10, base_delay=0.05, max_delay=1.0)
        async with Client(config, transport=api.memory_transport(), retry=retry) as writer, Client(
            config, transport=api.memory_transport(), retry=retry, user_agent="soak-informer"
        ) as reader:
            informer = Informer(reader, CONFIGMAPS, namespace="default", options=WatchOptions(page_size=1_000, max_backoff=2.0))
            seen: dict[tuple[str | None, str], str] = {}

            sentinel_seen = trio.Event()

            def track(event: InformerEvent) -> None:
                meta = event.obj["metadata"]
                if meta["name"] == "zz-sentinel":
                    sentinel_seen.set()
                key = (meta.get("namespace"), meta["name"])
                if event.type.value == "DELETED":
                    seen.pop(key, None)
                else:
                    seen[key] = meta["resourceVersion"]

            informer.add_handler(track)
            done = 0
            drops: list[int] = []
            async with trio.open_nursery() as nursery:
                await nursery.start(informer.run)
                await informer.wait_synced()

                async def churn(worker: int) -> None:
                    nonlocal done
                    for i in range(worker, OBJECTS, WORKERS):
                        name = f"obj-{i:05d}"
                        body: dict[str, Any] = {"metadata": {"name": name}, "data": {"v": "0"}}
                        await writer.create(CONFIGMAPS, body)
                        await writer.patch(CONFIGMAPS, name, {"data": {"v": "1"}})
                        if i % 3 == 0:
                            await writer.delete(CONFIGMAPS, name)
                        elif i % 3 == 1:
                            current = await writer.get(CONFIGMAPS, name)
                            current["data"]["v"] = "2"
                            await writer.update(CONFIGMAPS, current)
                        done += 1
                        if done % 150 == 0:
                            drops.append(api.faults.drop_watches(abrupt=rng.random() < 0.5))
                        if done % 1_700 == 0:
                            api.faults.expire_next_watch(client="soak-informer")

                async with trio.open_nursery() as workers:
                    for w in range(WORKERS):
                        workers.start_soon(churn, w)

                await writer.create(CONFIGMAPS, {"metadata": {"name": "zz-sentinel"}})
                with trio.fail_after(120):
                    await sentinel_seen.wait()
                fresh = await writer.list_all(CONFIGMAPS, namespace="default", page_size=2_000)
                expected = {
                    (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                    for o in fresh.items
                }
                assert {
                    (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                    for o in informer.store.list()
                } == expected
                assert seen == expected
                assert len(expected) == OBJECTS - len(range(0, OBJECTS, 3)) + 1
                stats = informer.statistics()
                assert stats.stream_failures + stats.gone >= 15
                assert informer.synced
                assert sum(drops) >= 15
                nursery.cancel_scope.cancel()
