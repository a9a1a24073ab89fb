"""kubectl against the embedded server with admission webhooks: a denial's message and the
webhooks' warnings reach the user as they do from a real cluster."""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from engine.apiserver import ApiServer

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)"),
]

CONFIGURATIONS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: guard}
webhooks:
- name: guard.example.com
  clientConfig: {url: "https://hooks.example.com/validate"}
  rules: [{operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: stamp}
webhooks:
- name: stamp.example.com
  clientConfig: {url: "https://hooks.example.com/mutate"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  sideEffects: None
  admissionReviewVersions: [v1]
"""


async def _answer(request: httpx.Request) -> httpx.Response:
    review = json.loads(request.content)["request"]
    response: dict[str, Any] = {"uid": review["uid"], "allowed": True}
    if request.url.path == "/mutate":
        ops = [{"op": "add", "path": "/metadata/labels", "value": {"stamped": "yes"}}]
        response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(ops).encode()).decode(),
                        warnings=["stamped by the webhook"])
    elif (review["object"].get("data") or {}).get("forbidden"):
        response.update(allowed=False, status={"code": 403, "message": "data.forbidden is not allowed"})
    return httpx.Response(200, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Any]:
    async with ApiServer(tls=True, webhook_transport=httpx.MockTransport(_answer)) as api:
        config = tmp_path / "kubeconfig"
        api.write_kubeconfig(config)
        env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

        async def run(*args: str) -> tuple[int, str, str]:
            assert KUBECTL is not None
            with trio.fail_after(30):
                result = await trio.run_process(
                    [KUBECTL, "--request-timeout=20s", *args], capture_stdout=True, capture_stderr=True, env=env, check=False
                )
            return result.returncode, result.stdout.decode(), result.stderr.decode()

        yield run


async def test_kubectl_apply_shows_denials_and_warnings(kubectl: Any, tmp_path: Path) -> None:
    configurations = tmp_path / "hooks.yaml"
    configurations.write_text(CONFIGURATIONS)
    code, out, err = await kubectl("apply", "-f", str(configurations))
    assert code == 0, err
    good = tmp_path / "good.yaml"
    good.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {a: '1'}\n")
    code, out, err = await kubectl("apply", "-f", str(good))
    assert code == 0, err
    assert "configmap/good created" in out
    assert "Warning: stamped by the webhook" in err
    code, out, err = await kubectl("get", "configmap", "good", "-o", "jsonpath={.metadata.labels.stamped}")
    assert out == "yes"
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {forbidden: 'x'}\n")
    code, out, err = await kubectl("apply", "-f", str(bad))
    assert code == 1
    assert (
        f'Error from server: error when creating "{bad}": '
        'admission webhook "guard.example.com" denied the request: data.forbidden is not allowed'
    ) in err

    code, out, err = await kubectl("get", "validatingwebhookconfigurations")
    assert code == 0, err
    assert out.split("\n")[0].split() == ["NAME", "WEBHOOKS", "AGE"]
    assert out.split("\n")[1].split()[:2] == ["guard", "1"]
