"""The install ``python -m engine manifests`` prints, applied as printed to a real
kube-apiserver: the runner, with the Deployment's own arguments and its ServiceAccount's token,
provisions its webhook certificate and the real server calls its webhooks through the Service.

What no machine here has (a kubelet to run the pod, kube-proxy) is replaced by the least that
stands in for them: the runner is a local process on a routable address, and the Service's
Endpoints and EndpointSlice name that address, which kube-apiserver uses for webhooks under
``--enable-aggregator-routing``."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from engine.kube import Client, NotFoundError
from engine.testing import EnvTest
from engine.testing._envtest import free_port

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
NAMESPACE, NAME = "engine-system", "engine-bundles"


def _routable_address() -> str | None:
    """An address of this machine other than loopback (which Endpoints may not name)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def _kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    assert KUBECTL is not None
    with trio.fail_after(60):
        result = await trio.run_process(
            [KUBECTL, "--request-timeout=20s", *args], stdin=stdin, capture_stdout=True, capture_stderr=True,
            check=False, env={**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)},
        )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


def _runner_args(printed: list[dict[str, Any]], address: str, port: int) -> list[str]:
    deployment = next(d for d in printed if d["kind"] == "Deployment")
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    replaced = {"--metrics-bind-address": "0", "--health-probe-bind-address": "0",
                "--webhook-bind-address": f"{address}:{port}"}
    return [f"{flag}={replaced[flag]}" if flag in replaced else arg
            for arg in args for flag in [arg.partition("=")[0]]]


def _endpoints(address: str, port: int) -> list[dict[str, Any]]:
    service = f"{NAME}-webhook"
    return [
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": service, "namespace": NAMESPACE},
         "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "webhook", "port": port}]}]},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{service}-local", "namespace": NAMESPACE,
                      "labels": {"kubernetes.io/service-name": service}},
         "addressType": "IPv4", "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
         "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}]},
    ]


async def _provisioned(admin: Client) -> bytes | None:
    """The CA the runner wrote, once the Secret and both configurations carry it."""
    try:
        secret = await admin.get(await admin.resource("v1", "Secret"), f"{NAME}-webhook-cert", namespace=NAMESPACE)
    except NotFoundError:
        return None
    ca = (secret.get("data") or {}).get("ca.crt")
    if not ca:
        return None
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = await admin.get(await admin.resource("admissionregistration.k8s.io/v1", kind), NAME)
        if any(w["clientConfig"].get("caBundle") != ca for w in config["webhooks"]):
            return None
    return base64.b64decode(ca)


@pytest.mark.kube_real
@pytest.mark.timeout(300)
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)")
async def test_the_printed_install_serves_its_webhooks_with_the_certificate_the_runner_provisions(
    tmp_path: Path,
) -> None:
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        pytest.skip("needs KUBEBUILDER_ASSETS: a control plane of its own, with --enable-aggregator-routing")
    address = _routable_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback for the Service's Endpoints")
    env = EnvTest(apiserver_flags={"enable-aggregator-routing": "true"})
    await trio.to_thread.run_sync(env.start)
    runner: trio.Process | None = None
    try:
        admin_config = tmp_path / "admin"
        env.write_kubeconfig(admin_config)
        printed_bytes = subprocess.run(
            [sys.executable, "-m", "engine", "manifests", "--plugin", "bundles", "--image", "registry.example/e:1"],
            check=True, capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        ).stdout
        printed = list(yaml.safe_load_all(printed_bytes))
        code, out = await _kubectl(admin_config, "apply", "-f", "-", stdin=printed_bytes)
        assert code == 0, out
        port = free_port(address)
        code, out = await _kubectl(admin_config, "apply", "-f", "-",
                                   stdin=yaml.safe_dump_all(_endpoints(address, port)).encode())
        assert code == 0, out

        code, token = await _kubectl(admin_config, "create", "token", NAME, "-n", NAMESPACE, "--duration=1h")
        assert code == 0, token
        cluster = env.kubeconfig["clusters"][0]["cluster"]
        runner_config = tmp_path / "runner"
        runner_config.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "sa", "user": {"token": token.strip()}}],
            "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        }))
        args = _runner_args(printed, address, port)
        assert f"--webhook-service={NAMESPACE}/{NAME}-webhook" in args
        log = tmp_path / "runner.log"
        with log.open("wb") as sink:
            runner = await trio.lowlevel.open_process(
                [sys.executable, "-m", "engine", "run", "--kubeconfig", str(runner_config), *args],
                stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

        async with Client(env.config) as admin:
            with trio.fail_after(60):
                while (ca := await _provisioned(admin)) is None:
                    assert runner.poll() is None, log.read_text()
                    await trio.sleep(0.2)
            assert ca.startswith(b"-----BEGIN CERTIFICATE-----")

        bundle = {"apiVersion": "bundles.engine.dev/v1alpha1", "kind": "Bundle",
                  "metadata": {"name": "loop", "namespace": "default"},
                  "spec": {"sourceRef": {"name": "src"}, "dependsOn": [{"name": "loop"}]}}
        code, out = await _kubectl(admin_config, "apply", "-f", "-", stdin=yaml.safe_dump(bundle).encode())
        assert code != 0
        assert 'admission webhook "validate.bundles.engine.dev" denied the request: dependency cycle: loop -> loop' \
            in out, out
        fine = {**bundle, "metadata": {"name": "fine", "namespace": "default"},
                "spec": {"sourceRef": {"name": "src"}}}
        code, out = await _kubectl(admin_config, "apply", "-f", "-", stdin=yaml.safe_dump(fine).encode())
        assert code == 0, out + log.read_text()
        code, out = await _kubectl(admin_config, "get", "bundle", "fine", "-n", "default",
                                   "-o", "jsonpath={.spec.interval}")
        assert (code, out) == (0, "10m")

        runner.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await runner.wait() == 0, log.read_text()
        text = log.read_text()
        assert token.strip() not in text
        assert "webhook certificate issued for engine-bundles-webhook.engine-system.svc" in text
        assert ("webhook certificate for engine-bundles-webhook.engine-system.svc issued into Secret "
                "engine-system/engine-bundles-webhook-cert; its CA written into 2 caBundles") in text
    finally:
        if runner is not None and runner.returncode is None:
            runner.kill()
            await runner.wait()
        await trio.to_thread.run_sync(env.stop)
