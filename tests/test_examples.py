"""The examples run as documented."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import trio

from ._e2e import API, ROOT, bundle, cluster, configmap, ready_at, source, watch


async def test_kubeconfig_runner_example_reconciles_and_stops_on_sigterm() -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        await client.create(await client.resource(API, "Source"), source("repo", "r1", [configmap("example")]))
        await client.create(await client.resource(API, "Bundle"), bundle("demo", "repo"))
        bundles = await watch(nursery, client, API, "Bundle")
        proc = await trio.lowlevel.open_process(
            [sys.executable, "examples/kubeconfig_runner.py", "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            with trio.fail_after(30):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "demo"), "r1"))
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await proc.wait() == 0
            assert proc.stdout is not None
            out = await proc.stdout.receive_some(65536)
            assert b"stopped (SIGTERM)" in out
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
