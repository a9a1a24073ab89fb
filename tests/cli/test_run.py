"""The runner (``python -m engine run``) as a user drives it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from .._e2e import ROOT, cluster, runner

KUBECTL = shutil.which("kubectl")


async def test_a_plugin_failing_setup_does_not_take_down_the_others() -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        args = ("--plugin", "tests.programs.plugins_for_tests:broken_setup", "--plugin", "bundles", "--no-cluster-events",
                "--no-strict-plugins")
        async with runner(kubeconfig, *args) as run:
            assert any("broken" in e.get("msg", "") or "widget" in str(e) for e in run.logs)
            run.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await run.proc.wait() == 0


async def _kubectl(kubeconfig: Path, *args: str) -> str:
    assert KUBECTL is not None
    result = await trio.run_process([KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_stdout=True,
                                    capture_stderr=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_drives_the_embedded_run_as_the_readme_says(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "embedded.kubeconfig"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "run", "--embedded", "--plugin", "bundles", "--write-kubeconfig", str(kubeconfig)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        out = b""
        with trio.fail_after(60):
            async for chunk in proc.stdout:
                out += chunk
                if b"running; press Ctrl-C" in out:
                    break
        assert f"kubeconfig written to {kubeconfig}".encode() in out
        with trio.fail_after(60):
            await _kubectl(kubeconfig, "wait", "--for=condition=Ready", "bundle/infra", "bundle/apps", "-n", "demo", "--timeout=50s")
        listing = await _kubectl(kubeconfig, "get", "bundles", "-n", "demo")
        assert "infra" in listing and "apps" in listing
        await _kubectl(kubeconfig, "patch", "source", "platform", "-n", "demo", "--type", "merge", "-p",
                       '{"spec":{"revision":"r2","artifact":[{"apiVersion":"v1","kind":"ConfigMap",'
                       '"metadata":{"name":"platform-settings"},"data":{"revision":"r2"}}]}}')
        with trio.fail_after(60):
            await _kubectl(kubeconfig, "wait", "--for=jsonpath={.status.lastAppliedRevision}=r2", "bundle/infra",
                           "-n", "demo", "--timeout=50s")
        data = await _kubectl(kubeconfig, "get", "configmap", "platform-settings", "-n", "demo", "-o", "jsonpath={.data.revision}")
        assert data == "r2"
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(40):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_runner_serves_metrics_and_probes_on_the_addresses_it_prints() -> None:
    import httpx

    async with cluster() as (api, client, kubeconfig, nursery):
        args = ("--plugin", "bundles", "--no-cluster-events",
                "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0")
        async with runner(kubeconfig, *args) as run:
            urls = {line.split(" on ")[0]: line.split(" on ")[1] for line in run.stdout if " on http://" in line}
            async with httpx.AsyncClient() as http:
                ready = await http.get(urls["health probes"] + "/readyz")
                metrics = await http.get(urls["metrics"] + "/metrics")
            assert ready.status_code == 200
            assert 'controller_runtime_max_concurrent_reconciles{controller="bundles"} 4.0' in metrics.text
            run.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await run.proc.wait() == 0
