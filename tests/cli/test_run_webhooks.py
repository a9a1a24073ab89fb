"""``python -m engine run --embedded --plugin bundles`` serves the bundles webhooks over HTTPS on
loopback and registers them with the embedded server, which calls them as kube-apiserver does:
kubectl sees a cyclic Bundle refused with the webhook's message and a Bundle without an
interval stored with the default (the README's demo among them); the dashboard's notices
count the requests. Real processes
and real time."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from .._e2e import ROOT
from .test_run import _embedded

KUBECTL = shutil.which("kubectl")


async def _kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    assert KUBECTL is not None
    with trio.fail_after(60):
        result = await trio.run_process([KUBECTL, "--kubeconfig", str(kubeconfig), "--request-timeout=20s", *args],
                                        stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)
    return result.returncode, (result.stdout + result.stderr).decode()


def _bundle(name: str, *depends_on: str, interval: str | None = None) -> bytes:
    spec: dict[str, object] = {"sourceRef": {"name": "podinfo"}, "dependsOn": [{"name": d} for d in depends_on]}
    if interval is not None:
        spec["interval"] = interval
    return json.dumps({"apiVersion": "bundles.engine.dev/v1alpha1", "kind": "Bundle",
                       "metadata": {"name": name, "namespace": "default"}, "spec": spec}).encode()


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_sees_a_cycle_refused_and_the_interval_defaulted(tmp_path: Path) -> None:
    async with _embedded(tmp_path, "--plugin", "bundles", "--progress", "never",
                         "--live-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0") as run:
        kubeconfig = tmp_path / "cache" / "engine" / "embedded.kubeconfig"
        [line] = [line for line in run.lines if line.startswith("webhooks on ")]
        assert line.startswith("webhooks on https://127.0.0.1:") and line.endswith(" (registered with the API server)")
        readme = (ROOT / "README.md").read_text().splitlines()
        command = next(line for line in readme if line.startswith("kubectl patch bundle infra -n demo "))
        said = readme[readme.index(command) + 1].removeprefix("# ")
        code, out = await _kubectl(kubeconfig, "wait", "--for=condition=Ready", "bundle/infra", "bundle/apps", "-n",
                                   "demo", "--timeout=50s")
        assert code == 0, out
        code, out = await _kubectl(kubeconfig, *shlex.split(command)[1:])
        assert (code, out) == (1, said + "\n")
        code, out = await _kubectl(kubeconfig, "apply", "-f", "-", stdin=_bundle("self", "self"))
        assert code == 1
        assert ('admission webhook "validate.bundles.engine.dev" denied the request: dependency cycle: '
                'self -> self (a Bundle cannot depend on itself)') in out
        for name, deps in (("a", ("b",)), ("b", ())):
            code, out = await _kubectl(kubeconfig, "apply", "-f", "-", stdin=_bundle(name, *deps, interval="1h"))
            assert code == 0, out
        code, out = await _kubectl(kubeconfig, "apply", "-f", "-", stdin=_bundle("b", "a", interval="1h"))
        assert code == 1
        assert 'denied the request: dependency cycle: b -> a -> b' in out
        code, out = await _kubectl(kubeconfig, "apply", "-f", "-", stdin=_bundle("plain"))
        assert code == 0, out
        code, out = await _kubectl(kubeconfig, "get", "bundle", "plain", "-o", "jsonpath={.spec.interval}")
        assert (code, out) == (0, "10m")
        [live] = [line.split() for line in run.lines if line.startswith("live stream on ")]
        url, token = live[3], live[-1].removesuffix(")")
        assert live[4:] == ["(python", "-m", "engine", "live", url, "--token", f"{token})"], "a token made up for the run"
        assert f"dashboard at {url.replace('ws://', 'http://').removesuffix('live')}?token={token}" in run.lines
        assert token not in run.err.decode(), "printed for the user, never logged"
        async with open_websocket_url(f"{url}?token={token}") as ws:
            hello = json.loads(await ws.get_message())
        assert hello["notices"] == [], "routine webhook counts are no warning"
        mutate, validate = hello["info"]
        assert re.fullmatch(r"webhook /mutate/default.bundles.engine.dev: \d+ requests, 0 denied, 0 errors, "
                            r"0 timeouts", mutate)
        assert re.fullmatch(r"webhook /validate/validate.bundles.engine.dev: \d+ requests, 3 denied, 0 errors, "
                            r"0 timeouts", validate)
        metrics_url = next(line.split()[2] for line in run.lines if line.startswith("metrics on "))
        async with httpx.AsyncClient() as client:
            scraped = (await client.get(f"{metrics_url}/metrics")).text
        assert re.search(r'^controller_runtime_webhook_requests_total\{code="200",'
                         r'webhook="/validate/validate.bundles.engine.dev"\} [1-9]', scraped, re.M)
        assert 'controller_runtime_webhook_latency_seconds_bucket{le="+Inf",webhook="/mutate/default.bundles' in scraped
        assert 'controller_runtime_webhook_requests_in_flight{webhook="/validate/validate.bundles.engine.dev"} 0.0' in (
            scraped)
        run.proc.send_signal(signal.SIGTERM)
    assert run.proc.returncode == 0, (run.out + run.err).decode()[-4000:]
