"""set_finalizer and hold_finalizer against the embedded API server."""

from __future__ import annotations

from pathlib import Path

from engine.apiserver import ApiServer
from engine.kube import Client, Config, hold_finalizer, set_finalizer


async def test_set_finalizer_keeps_other_finalizers_written_meanwhile(tmp_path: Path) -> None:
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kc")
        async with Client(Config.from_kubeconfig(tmp_path / "kc")) as client:
            cms = await client.resource("v1", "ConfigMap")
            stale = await client.create(cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                                        namespace="default")
            await client.patch(cms, "x", {"metadata": {"finalizers": ["other.example/keep"]}}, namespace="default")
            assert await set_finalizer(client, cms, stale, "mine.example/f", present=True)
            obj = await client.get(cms, "x", namespace="default")
            assert obj["metadata"]["finalizers"] == ["other.example/keep", "mine.example/f"]
            assert not await set_finalizer(client, cms, obj, "mine.example/f", present=True), "already there"
            assert await set_finalizer(client, cms, obj, "mine.example/f", present=False)
            obj = await client.get(cms, "x", namespace="default")
            assert obj["metadata"]["finalizers"] == ["other.example/keep"]
            await client.delete(cms, "x", namespace="default")
            assert not await set_finalizer(client, cms, obj, "mine.example/f", present=False)


async def test_hold_finalizer_answers_from_the_server_not_the_cached_object(tmp_path: Path) -> None:
    async with ApiServer() as api:
        api.write_kubeconfig(tmp_path / "kc")
        async with Client(Config.from_kubeconfig(tmp_path / "kc")) as client:
            cms = await client.resource("v1", "ConfigMap")
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
            cached = await client.create(cms, cm, namespace="default")

            live = await hold_finalizer(client, cms, cached, "mine.example/f")
            assert live is not None and live["metadata"]["finalizers"] == ["mine.example/f"]
            stale = dict(live)  # a cache that still shows the finalizer after it was removed

            await client.patch(cms, "x", {"metadata": {"finalizers": None}}, namespace="default")
            again = await hold_finalizer(client, cms, stale, "mine.example/f")
            assert again is not None and again["metadata"]["finalizers"] == ["mine.example/f"]

            await client.delete(cms, "x", namespace="default")
            deleting = await hold_finalizer(client, cms, stale, "mine.example/f")
            assert deleting is not None and deleting["metadata"]["deletionTimestamp"]

            await set_finalizer(client, cms, deleting, "mine.example/f", present=False)
            assert await hold_finalizer(client, cms, stale, "mine.example/f") is None, "gone"

            await client.create(cms, cm, namespace="default")
            assert await hold_finalizer(client, cms, stale, "mine.example/f") is None, "replaced: another uid"
            assert "finalizers" not in (await client.get(cms, "x", namespace="default"))["metadata"]
