"""Helpers for end-to-end tests: the embedded API server in the test process, the runner in a
subprocess, and an informer-backed way to wait for cluster state (no polling sleeps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from engine.apiserver import ApiServer
from engine.kube import Client, Config, Informer, InformerEvent, install_crds
from engine.plugins.bundles import plugin as bundles_plugin

ROOT = Path(__file__).resolve().parent.parent
API = "bundles.engine.dev/v1alpha1"


class Runner:
    """``python -m engine run`` in a subprocess; collects its JSON log lines and stdout."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.logs: list[dict[str, Any]] = []
        self.stdout: list[str] = []
        self._changed = trio.Event()
        self.closed = 0

    async def _pump(self, stream: Any, sink: Callable[[str], None]) -> None:
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                sink(line.decode(errors="replace"))
                self._changed.set()
                self._changed = trio.Event()
        self.closed += 1
        self._changed.set()

    def _log(self, line: str) -> None:
        try:
            self.logs.append(json.loads(line))
        except json.JSONDecodeError:
            self.logs.append({"msg": line, "raw": True})

    async def wait_for(self, predicate: Callable[[Runner], bool]) -> None:
        while not predicate(self):
            await self._changed.wait()

    def messages(self, needle: str) -> list[dict[str, Any]]:
        return [e for e in self.logs if needle in str(e.get("msg", ""))]


@asynccontextmanager
async def runner(kubeconfig: Path, *args: str, ready: str = "running") -> AsyncIterator[Runner]:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "run", "--kubeconfig", str(kubeconfig), "--log-format", "json",
         # several replicas run side by side: each its own webhook port, not the default 9443
         *([] if any(a.startswith("--webhook-bind-address") for a in args) else ["--webhook-bind-address=127.0.0.1:0"]),
         *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    r = Runner(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(r._pump, proc.stdout, r.stdout.append)
            nursery.start_soon(r._pump, proc.stderr, r._log)
            with trio.fail_after(60):
                await r.wait_for(lambda r: any(ready in line for line in r.stdout) or r.closed == 2)
            if r.closed == 2:
                raise AssertionError("the runner exited at start-up:\n" + "\n".join(
                    [*r.stdout, *(str(e) for e in r.logs)]))
            yield r
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


class Watcher:
    """An informer in the test process whose state changes wake waiters."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.events: list[tuple[float, InformerEvent]] = []
        self._changed = trio.Event()
        informer.add_handler(self._on)

    def _on(self, event: InformerEvent) -> None:
        self.events.append((trio.current_time(), event))
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, predicate: Callable[[Watcher], bool]) -> None:
        while not predicate(self):
            await self._changed.wait()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.informer.store.get(namespace, name)


@asynccontextmanager
async def cluster(**server_kwargs: Any) -> AsyncIterator[tuple[ApiServer, Client, Path, trio.Nursery]]:
    """An embedded API server with the bundles CRDs installed, a client and a kubeconfig."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    async with ApiServer(**server_kwargs) as api:
        path = tmp / f"e2e-{id(api)}.kubeconfig"
        api.write_kubeconfig(path)
        async with Client(Config.from_kubeconfig(path), user_agent="e2e-test") as client:
            await install_crds(client, bundles_plugin.crds)
            ns = await client.resource("v1", "Namespace")
            await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e"}})
            async with trio.open_nursery() as nursery:
                yield api, client, path, nursery
                nursery.cancel_scope.cancel()
        path.unlink(missing_ok=True)


async def watch(nursery: trio.Nursery, client: Client, api_version: str, kind: str) -> Watcher:
    informer = Informer(client, await client.resource(api_version, kind), namespace="e2e")
    w = Watcher(informer)
    await nursery.start(informer.run)
    await informer.wait_synced()
    return w


def _metadata(name: str, namespace: str | None) -> dict[str, Any]:
    return {"name": name, "namespace": namespace} if namespace else {"name": name}


def source(name: str, revision: str, manifests: list[Mapping[str, Any]], *, namespace: str | None = "e2e"
           ) -> dict[str, Any]:
    """A Source in ``namespace`` (``None``: none named, as the harness then puts it in the test's)."""
    return {"apiVersion": API, "kind": "Source", "metadata": _metadata(name, namespace),
            "spec": {"revision": revision, "artifact": list(manifests)}}


def bundle(name: str, source_name: str, *, depends_on: tuple[str, ...] = (), wait: str = "0s",
           timeout: str = "5m", namespace: str | None = "e2e") -> dict[str, Any]:
    """A Bundle in ``namespace`` (``None``: none named, as the harness then puts it in the test's)."""
    return {"apiVersion": API, "kind": "Bundle", "metadata": _metadata(name, namespace),
            "spec": {"sourceRef": {"name": source_name}, "dependsOn": [{"name": d} for d in depends_on],
                     "interval": "10m", "timeout": timeout, "healthCheckWait": wait}}


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def ready_at(obj: Mapping[str, Any] | None, revision: str) -> bool:
    if not obj:
        return False
    status = obj.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or ()}
    ready = conditions.get("Ready", {})
    return (
        ready.get("status") == "True"
        and status.get("lastAppliedRevision") == revision
        and ready.get("observedGeneration") == obj["metadata"].get("generation")
    )
