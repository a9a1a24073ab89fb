"""set_finalizer against the embedded API server."""

from __future__ import annotations

from pathlib import Path

from engine.kube import Client, Config, set_finalizer
from engine.testing import ApiServer


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
