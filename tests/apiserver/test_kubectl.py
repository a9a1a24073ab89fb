"""Compatibility with kubectl (a client nobody here wrote), driven against the embedded server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.apiserver import ApiServer

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)"),
]

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  labels: {app: demo}
data:
  a: "1"
"""

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"""

WIDGET = """\
apiVersion: example.com/v1
kind: Widget
metadata: {name: %s, labels: {tier: %s}}
spec: {size: %d}
"""


class Kubectl:
    def __init__(self, api: ApiServer, tmp_path: Path) -> None:
        self.tmp = tmp_path
        config = tmp_path / "kubeconfig"
        api.write_kubeconfig(config)
        self.env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)

    async def __call__(self, *args: str, check: bool = True) -> str:
        assert KUBECTL is not None
        with trio.fail_after(30):
            result = await trio.run_process(
                [KUBECTL, "--request-timeout=20s", *args],
                capture_stdout=True,
                capture_stderr=True,
                env=self.env,
                check=False,
            )
        out = result.stdout.decode() + result.stderr.decode()
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{out}"
        return out

    async def json(self, *args: str) -> Any:
        return json.loads(await self(*args, "-o", "json"))


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    async with ApiServer(tls=True) as api:
        yield Kubectl(api, tmp_path)


async def test_get_create_apply_patch_delete(kubectl: Kubectl) -> None:
    assert "default" in await kubectl("get", "namespaces")
    path = kubectl.file("cm.yaml", CONFIGMAP)
    assert "configmap/demo created" in await kubectl("create", "-f", path)
    assert "already exists" in await kubectl("create", "-f", path, check=False)
    out = await kubectl("get", "configmaps", "-l", "app=demo")
    assert "demo" in out and "NAME" in out
    assert "No resources found" in await kubectl("get", "cm", "-l", "app=other")
    assert "configmap/demo configured" in await kubectl("apply", "-f", path)
    path = kubectl.file("cm.yaml", CONFIGMAP.replace('a: "1"', 'a: "2"\n  b: "3"'))
    assert "configmap/demo configured" in await kubectl("apply", "-f", path)
    obj = await kubectl.json("get", "cm", "demo")
    assert obj["data"] == {"a": "2", "b": "3"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    path = kubectl.file("cm.yaml", CONFIGMAP.replace('a: "1"', 'a: "2"'))
    await kubectl("apply", "-f", path)
    assert (await kubectl.json("get", "cm", "demo"))["data"] == {"a": "2"}
    assert "unchanged" in await kubectl("apply", "-f", path)
    assert "patched" in await kubectl("patch", "configmap", "demo", "--type", "merge", "-p", '{"data":{"c":"4"}}')
    assert (await kubectl.json("get", "cm", "demo"))["data"] == {"a": "2", "c": "4"}
    live = await kubectl("get", "cm", "demo", "-o", "yaml")
    await kubectl("replace", "-f", kubectl.file("live.yaml", live.replace('a: "2"', 'a: "8"')))
    assert (await kubectl.json("get", "cm", "demo"))["data"]["a"] == "8"
    dry = kubectl.file("dry.yaml", CONFIGMAP.replace("name: demo", "name: dry"))
    assert "created (server dry run)" in await kubectl("apply", "--dry-run=server", "-f", dry)
    assert "NotFound" in await kubectl("get", "cm", "dry", check=False)
    assert 'configmap "demo" deleted' in await kubectl("delete", "cm", "demo")
    assert "NotFound" in await kubectl("get", "cm", "demo", check=False)


async def test_apply_server_side(kubectl: Kubectl) -> None:
    path = kubectl.file("cm.yaml", CONFIGMAP)
    assert "serverside-applied" in await kubectl("apply", "--server-side", "-f", path)
    path = kubectl.file("cm.yaml", CONFIGMAP.replace('a: "1"', 'a: "5"'))
    assert "serverside-applied" in await kubectl("apply", "--server-side", "-f", path)
    obj = await kubectl.json("get", "cm", "demo", "--show-managed-fields")
    assert obj["data"] == {"a": "5"}
    assert [m["manager"] for m in obj["metadata"]["managedFields"]] == ["kubectl"]
    await kubectl("patch", "cm", "demo", "--type", "merge", "-p", '{"data":{"a":"6"}}')
    conflict = await kubectl("apply", "--server-side", "-f", path, check=False)
    assert "conflict" in conflict.lower()
    assert "serverside-applied" in await kubectl("apply", "--server-side", "--force-conflicts", "-f", path)
    assert (await kubectl.json("get", "cm", "demo"))["data"] == {"a": "5"}


async def test_api_resources(kubectl: Kubectl) -> None:
    out = await kubectl("api-resources")
    for line in ("configmaps", "leases", "customresourcedefinitions", "namespaces"):
        assert line in out
    await kubectl("apply", "-f", kubectl.file("crd.yaml", CRD))
    assert "widgets" in await kubectl("api-resources", "--api-group=example.com")


async def test_crd_and_custom_objects(kubectl: Kubectl) -> None:
    assert "created" in await kubectl("apply", "-f", kubectl.file("crd.yaml", CRD))
    for name, tier, size in [("w1", "a", 1), ("w2", "b", 2)]:
        assert "created" in await kubectl("apply", "-f", kubectl.file(f"{name}.yaml", WIDGET % (name, tier, size)))
    out = await kubectl("get", "widgets")
    assert "w1" in out and "w2" in out
    assert "w2" not in await kubectl("get", "wd", "-l", "tier=a")
    assert "configured" in await kubectl("apply", "-f", kubectl.file("w1.yaml", WIDGET % ("w1", "a", 10)))
    obj = await kubectl.json("get", "widget.example.com", "w1")
    assert obj["spec"] == {"size": 10} and obj["metadata"]["generation"] == 2
    assert "patched" in await kubectl("patch", "wd", "w2", "--type", "merge", "-p", '{"spec":{"size":3}}')
    await kubectl("create", "-f", kubectl.file("w3.yaml", WIDGET % ("w3", "c", 3)))
    assert "serverside-applied" in await kubectl("apply", "--server-side", "-f", kubectl.file("w4.yaml", WIDGET % ("w4", "d", 4)))
    assert (await kubectl.json("get", "wd", "w4"))["spec"] == {"size": 4}
    assert "deleted" in await kubectl("delete", "wd", "w3")
    assert "deleted" in await kubectl("delete", "crd", "widgets.example.com")


async def test_get_watch(kubectl: Kubectl) -> None:
    assert KUBECTL is not None
    await kubectl("create", "-f", kubectl.file("cm.yaml", CONFIGMAP))
    proc = await trio.lowlevel.open_process(
        [KUBECTL, "get", "configmaps", "-w", "-o", "name"], stdout=subprocess.PIPE, env=kubectl.env
    )
    try:
        assert proc.stdout is not None
        buffer = b""

        async def wait_for(text: bytes) -> None:
            nonlocal buffer
            while text not in buffer:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, f"kubectl get -w ended before printing {text!r}: {buffer!r}"
                buffer += chunk

        with trio.fail_after(30):
            await wait_for(b"configmap/demo")
            await kubectl("create", "-f", kubectl.file("cm2.yaml", CONFIGMAP.replace("name: demo", "name: second")))
            await wait_for(b"configmap/second")
    finally:
        proc.kill()
        with trio.fail_after(10):
            await proc.wait()


async def test_get_watch_prints_server_side_columns(kubectl: Kubectl) -> None:
    assert KUBECTL is not None
    await kubectl("create", "-f", kubectl.file("cm.yaml", CONFIGMAP))
    proc = await trio.lowlevel.open_process([KUBECTL, "get", "configmaps", "-w"], stdout=subprocess.PIPE, env=kubectl.env)
    try:
        assert proc.stdout is not None
        buffer = b""

        async def lines_until(name: bytes) -> list[list[str]]:
            nonlocal buffer
            while not any(line.startswith(name) for line in buffer.split(b"\n")[:-1]):
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, f"kubectl get -w ended before printing {name!r}: {buffer!r}"
                buffer += chunk
            return [line.split() for line in buffer.decode().splitlines()]

        with trio.fail_after(30):
            await lines_until(b"demo")
            await kubectl("create", "-f", kubectl.file("cm2.yaml", CONFIGMAP.replace("name: demo", "name: second")))
            lines = await lines_until(b"second")
        assert [line[:2] for line in lines] == [["NAME", "DATA"], ["demo", "1"], ["second", "1"]]
    finally:
        proc.kill()
        with trio.fail_after(10):
            await proc.wait()


async def test_typed_commands_sending_protobuf(kubectl: Kubectl) -> None:
    assert "namespace/team created" in await kubectl("create", "namespace", "team")
    await kubectl("create", "configmap", "c", "-n", "team", "--from-literal=a=b", "--from-literal=c=d")
    await kubectl("create", "secret", "generic", "s", "-n", "team", "--from-literal=pw=hunter2")
    assert (await kubectl.json("get", "cm", "c", "-n", "team"))["data"] == {"a": "b", "c": "d"}
    secret = await kubectl.json("get", "secret", "s", "-n", "team")
    assert secret["data"] == {"pw": "aHVudGVyMg=="} and secret["type"] == "Opaque"
    await kubectl("label", "cm", "c", "-n", "team", "tier=x")
    assert "c" in await kubectl("get", "cm", "-n", "team", "-l", "tier=x")
    assert 'namespace "team" deleted' in await kubectl("delete", "namespace", "team")
    assert "NotFound" in await kubectl("get", "cm", "c", "-n", "team", check=False)


async def test_tls_with_client_certificate(tmp_path: Path) -> None:
    pytest.importorskip("trustme")
    async with ApiServer(tls=True) as api:
        kubectl = Kubectl(api, tmp_path)
        assert "kube-system" in await kubectl("get", "namespaces")
        await kubectl("create", "-f", kubectl.file("cm.yaml", CONFIGMAP))
        assert "demo" in await kubectl("get", "cm")
        anonymous = api.kubeconfig
        anonymous["users"][0]["user"] = {"token": "not-a-certificate"}
        (tmp_path / "anonymous").write_text(json.dumps(anonymous))
        kubectl.env["KUBECONFIG"] = str(tmp_path / "anonymous")
        assert "Unauthorized" in await kubectl("get", "cm", check=False)


async def test_get_prints_the_servers_table_columns(kubectl: Kubectl) -> None:
    from engine.plugins.bundles._crds import BUNDLE_CRD

    assert "created" in await kubectl("apply", "-f", kubectl.file("bundles.json", json.dumps(BUNDLE_CRD)))
    bundle = {
        "apiVersion": "bundles.engine.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": {"name": "web"},
        "spec": {"sourceRef": {"name": "repo"}},
    }
    await kubectl("apply", "-f", kubectl.file("web.json", json.dumps(bundle)))
    status = {
        "status": {
            "lastAppliedRevision": "abc123",
            "conditions": [
                {"type": "Healthy", "status": "False", "message": "not this one"},
                {"type": "Ready", "status": "True", "message": "Applied revision abc123"},
            ],
        }
    }
    await kubectl("patch", "bundle", "web", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    columns = [c["name"] for c in BUNDLE_CRD["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:3] == ["Revision", "Ready", "Status"]
    lines = (await kubectl("get", "bundles")).splitlines()
    assert lines[0].split() == ["NAME", *(c.upper() for c in columns)]
    assert lines[1].split()[:6] == ["web", "abc123", "True", "Applied", "revision", "abc123"]
    await kubectl("create", "-f", kubectl.file("cm.yaml", CONFIGMAP))
    lines = (await kubectl("get", "configmaps", "demo")).splitlines()
    assert lines[0].split() == ["NAME", "DATA", "AGE"]
    assert lines[1].split()[:2] == ["demo", "1"]
    wide = (await kubectl("get", "namespaces", "default", "-o", "wide")).splitlines()
    assert wide[0].split() == ["NAME", "STATUS", "AGE"] and wide[1].split()[:2] == ["default", "Active"]


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: c, image: "registry.example/app:1.0", ports: [{containerPort: 8080}]}
"""


async def test_apply_a_deployment_and_scale_it(kubectl: Kubectl) -> None:
    path = kubectl.file("deploy.yaml", DEPLOYMENT)
    assert "deployment.apps/web created" in await kubectl("apply", "-f", path)
    deploy = await kubectl.json("get", "deployment", "web")
    assert deploy["spec"]["replicas"] == 1 and deploy["metadata"]["generation"] == 1
    assert deploy["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent" and container["ports"][0]["protocol"] == "TCP"
    assert "unchanged" in await kubectl("apply", "-f", path)
    assert "deployment.apps/web scaled" in await kubectl("scale", "deployment", "web", "--replicas=3")
    assert (await kubectl.json("get", "deploy", "web"))["spec"]["replicas"] == 3
    typo = kubectl.file("typo.yaml", DEPLOYMENT.replace("image:", "imag: x, image:"))
    rejected = await kubectl("apply", "-f", typo, check=False)
    assert 'unknown field "spec.template.spec.containers[0].imag"' in rejected
    bad = kubectl.file("bad.yaml", DEPLOYMENT.replace("labels: {app: web}}\n    spec", "labels: {app: other}}\n    spec"))
    assert "`selector` does not match template `labels`" in await kubectl("apply", "-f", bad, check=False)


async def test_events_show_in_get_events_and_describe(kubectl: Kubectl) -> None:
    await kubectl("create", "-f", kubectl.file("cm.yaml", CONFIGMAP))
    cm = await kubectl.json("get", "cm", "demo")
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "demo.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "engine.dev/demo",
        "reportingInstance": "demo-1",
        "action": "Reconcile",
        "reason": "Synced",
        "type": "Normal",
        "note": "all good",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "demo", "uid": cm["metadata"]["uid"]},
    }
    await kubectl("create", "-f", kubectl.file("ev.json", json.dumps(event)))
    core = await kubectl.json("get", "events")
    assert [(e["reason"], e["message"], e["involvedObject"]["name"]) for e in core["items"]] == [("Synced", "all good", "demo")]
    listed = await kubectl("events", "--for", "configmap/demo")
    assert "Synced" in listed and "all good" in listed
    described = await kubectl("describe", "configmap", "demo")
    assert "Events:" in described and "Synced" in described and "all good" in described


async def test_delete_namespace_waits_for_its_contents(kubectl: Kubectl) -> None:
    await kubectl("create", "namespace", "team")
    await kubectl("create", "configmap", "c", "-n", "team", "--from-literal=a=b")
    await kubectl("apply", "-n", "team", "-f", kubectl.file("deploy.yaml", DEPLOYMENT))
    assert 'namespace "team" deleted' in await kubectl("delete", "namespace", "team")
    assert "NotFound" in await kubectl("get", "namespace", "team", check=False)
    assert "NotFound" in await kubectl("get", "cm", "c", "-n", "team", check=False)
