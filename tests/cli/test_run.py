"""The runner (``python -m engine run``) as a user drives it."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.kube import Client, Config

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
        assert [e for e in run.logs if e.get("raw")] == [], "a human line among the JSON logs"
        assert ("skipped: plugin 'broken' failed to set up: RuntimeError: cannot reach the widget service"
                in run.stdout)


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
        readme = (ROOT / "README.md").read_text()
        said = next(line for line in readme.splitlines() if line.startswith("kubectl get bundles -n demo "))
        columns = said.partition("# ")[2].removesuffix(" columns").split(", ")
        assert listing.splitlines()[0].split() == columns
        with trio.fail_after(60):
            await _kubectl(kubeconfig, "wait", "--for=condition=Ready", "source/platform", "source/apps", "-n", "demo",
                           "--timeout=50s")
        sources = (await _kubectl(kubeconfig, "get", "sources", "-n", "demo")).splitlines()
        assert [re.split(r"\s{2,}", line)[:-1] for line in sources] == [
            ["NAME", "REVISION", "READY", "STATUS"],
            ["apps", "a1", "True", "revision a1 with 1 object"],
            ["platform", "r1", "True", "revision r1 with 1 object"],
        ]
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


class _Embedded:
    """``python -m engine run --embedded`` in a subprocess, started in an empty directory."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.out = b""
        self.err = b""
        self._changed = trio.Event()

    async def _pump(self, stream: Any, name: str) -> None:
        async for chunk in stream:
            setattr(self, name, getattr(self, name) + chunk)
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, text: str) -> None:
        while text.encode() not in self.out:
            assert self.proc.returncode is None, (self.out + self.err).decode()
            await self._changed.wait()

    @property
    def lines(self) -> list[str]:
        return self.out.decode().splitlines()


@asynccontextmanager
async def _embedded(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[_Embedded]:
    work = tmp_path / "work"
    work.mkdir()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "run", "--embedded", "--no-cluster-events", *args],
        cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})},
    )
    run = _Embedded(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run._pump, proc.stdout, "out")
            nursery.start_soon(run._pump, proc.stderr, "err")
            with trio.fail_after(60):
                await run.wait_for("running; press Ctrl-C to stop")
            yield run
            with trio.fail_after(30):
                await proc.wait()
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


async def test_embedded_start_up_prints_once_keeps_the_kubeconfig_out_of_the_working_directory(
    tmp_path: Path,
) -> None:
    from engine.cli._live import main as live

    async with _embedded(tmp_path, "--plugin", "bundles", "--live-bind-address", "127.0.0.1:0",
                         "--progress", "never", env={"ENGINE_LIVE_TOKEN": "s3cret"}) as run:
        kubeconfig = tmp_path / "cache" / "engine" / "embedded.kubeconfig"
        assert f"kubeconfig written to {kubeconfig}" in run.lines
        assert kubeconfig.exists()
        assert list((tmp_path / "work").iterdir()) == []
        assert f"try: kubectl --kubeconfig {kubeconfig} get sources,bundles -A" in run.lines
        url = next(line.split()[3] for line in run.lines if line.startswith("live stream on "))
        address = url.removeprefix("ws://").removesuffix("/live")
        assert f"dashboard at http://{address}/ (add ?token=<the live token>)" in run.lines
        codes = {}
        for name, argv in (("no token", [url, "--once"]), ("token", [url, "--once", "--token", "s3cret"])):
            out, err = io.StringIO(), io.StringIO()
            codes[name] = await trio.to_thread.run_sync(lambda argv=argv, out=out, err=err: live(argv, stdout=out, stderr=err))
        assert codes == {"no token": 1, "token": 0}
        run.proc.send_signal(signal.SIGTERM)
    assert run.proc.returncode == 0, (run.out + run.err).decode()[-4000:]
    everything = (run.out + run.err).decode()
    assert everything.count("embedded API server listening on") == 1
    assert "HTTP Request" not in everything


async def test_the_hint_fits_the_plugins_that_run(tmp_path: Path) -> None:
    async with _embedded(tmp_path, "--plugin", "mirror", "--progress", "never") as run:
        hints = [line for line in run.lines if line.startswith("try: ")]
        assert len(hints) == 1
        assert hints[0].endswith(" get configmaps,namespaces -A")
        run.proc.send_signal(signal.SIGTERM)
    assert run.proc.returncode == 0, (run.out + run.err).decode()[-4000:]


async def test_the_example_count_is_pluralised(tmp_path: Path) -> None:
    async with _embedded(tmp_path, "--plugin", "tests.programs.plugins_for_tests:one_example",
                         "--progress", "never") as run:
        assert "applied 1 example object" in run.lines
        run.proc.send_signal(signal.SIGTERM)
    assert run.proc.returncode == 0, (run.out + run.err).decode()[-4000:]


async def test_on_a_terminal_the_runner_shows_readiness_wakeups_rollouts_and_shutdown(tmp_path: Path) -> None:
    async with _embedded(tmp_path, "--plugin", "bundles", env={"ENGINE_PROGRESS": "always"}) as run:
        with trio.fail_after(60):
            await run.wait_for("ready      Bundle demo/apps")
        kubeconfig = tmp_path / "cache" / "engine" / "embedded.kubeconfig"
        async with Client(Config.from_kubeconfig(kubeconfig)) as client:
            sources = await client.resource("bundles.engine.dev/v1alpha1", "Source")
            await client.patch(sources, "platform", {"spec": {"revision": "r2", "artifact": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "platform-settings"},
                 "data": {"revision": "r2"}}]}}, namespace="demo")
        with trio.fail_after(60):
            await run.wait_for("reconciled Bundle demo/infra  rollout finished in ")
        run.proc.send_signal(signal.SIGTERM)
    assert run.proc.returncode == 0, (run.out + run.err).decode()[-4000:]
    words = [line[10:] for line in run.lines if line[:2].isdigit()]
    assert "waiting    Bundle demo/apps  for Bundle demo/infra" in words
    assert "ready      Bundle demo/infra" in words
    assert "woken      Bundle demo/apps  its dependency Bundle demo/infra is ready" in words
    assert "rollout    Bundle demo/infra  source revision changed" in words
    assert any(w.startswith("stopping   on SIGTERM  0 runs in flight, grace period 15 s") for w in words)
    assert any(w.startswith("drained    all runs ended in ") for w in words)
    assert run.lines[-1].startswith("stopped (SIGTERM): runs drained in ")
    assert b'"level"' not in run.err  # logs at warning and above only: nothing went wrong


def test_default_grace_period_leaves_room_in_a_pods_termination_grace_period() -> None:
    from engine import Manager
    from engine.cli._run import _parser

    manager = Manager(handle_signals=False)
    shielded_status_writes = 5.0
    assert manager.grace_period + shielded_status_writes + manager.event_flush_timeout < 30.0
    assert _parser().parse_args([]).grace_period == manager.grace_period


async def test_the_example_runner_does_not_log_every_http_request(tmp_path: Path) -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(ROOT / "examples" / "kubeconfig_runner.py"), "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        run = _Embedded(proc)
        try:
            async with trio.open_nursery() as pumps:
                pumps.start_soon(run._pump, proc.stdout, "out")
                pumps.start_soon(run._pump, proc.stderr, "err")
                with trio.fail_after(60):
                    while b"plugin bundles set up" not in run.err:
                        assert proc.returncode is None, run.err.decode()
                        await run._changed.wait()
                proc.send_signal(signal.SIGTERM)
                with trio.fail_after(30):
                    await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()
    assert b"HTTP Request" not in run.err


def test_warm_standby_is_the_default_and_no_warm_standby_turns_it_off() -> None:
    from engine import Manager
    from engine.cli._run import _parser

    assert _parser().parse_args(["--leader-elect"]).warm_standby is Manager(handle_signals=False).enable_warmup is True
    assert _parser().parse_args(["--leader-elect", "--no-warm-standby"]).warm_standby is False
