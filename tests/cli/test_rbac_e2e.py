"""Issue 20's "done means", end to end with subprocesses: the ``manifests`` of ``bundles``
applied with kubectl to the embedded server, a token of its ServiceAccount from ``kubectl create
token``, and ``run --kubeconfig <that token's kubeconfig> --plugin bundles --skip-crd-install``
converging the example Bundles with no 403; a ServiceAccount without the Role is refused at
start in one line."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import trio
import yaml

from engine.apiserver import ApiServer
from engine.apiserver._api import ServedRequest

from .._e2e import ROOT, runner

KUBECTL = shutil.which("kubectl")
EXAMPLES = ROOT / "examples" / "bundles.yaml"

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)"),
]


async def _run(*argv: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    with trio.fail_after(90):
        result = await trio.run_process(
            list(argv), stdin=stdin, capture_stdout=True, capture_stderr=True, check=False, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def _kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> str:
    assert KUBECTL is not None
    code, out, err = await _run(KUBECTL, "--request-timeout=20s", *args, stdin=stdin,
                                env={"KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)})
    assert code == 0, out + err
    return out


def _token_kubeconfig(path: Path, api: ApiServer, token: str) -> Path:
    """A kubeconfig with the server's cluster (its URL and CA) and only ``token`` as credential."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": api.kubeconfig["clusters"][0]["cluster"]}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": "engine-system"}}],
        "current-context": "sa",
    }))
    path.chmod(0o600)
    return path


async def test_the_generated_role_is_enough_and_a_bare_service_account_is_refused(tmp_path: Path) -> None:
    served: list[ServedRequest] = []
    async with ApiServer(tls=True) as api:
        api.add_request_observer(served.append)
        admin = tmp_path / "admin.kubeconfig"
        api.write_kubeconfig(admin)
        code, manifests, err = await _run(sys.executable, "-m", "engine", "manifests", "--plugin", "bundles")
        assert code == 0 and err.startswith("note: the runner provisions the webhooks' serving certificate"), err
        # The webhook configurations call the webhook Service, which no pod backs here (the
        # runner runs outside): leave them out, or every Bundle write would fail closed.
        installed = [doc for doc in yaml.safe_load_all(manifests)
                     if doc["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
        await _kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump_all(installed).encode())
        await _kubectl(admin, "apply", "-f", str(EXAMPLES))
        token = (await _kubectl(admin, "create", "token", "engine-bundles", "-n", "engine-system")).strip()
        operator = _token_kubeconfig(tmp_path / "sa.kubeconfig", api, token)

        async with runner(operator, "--plugin", "bundles", "--skip-crd-install", "--progress", "never"):
            with trio.fail_after(60):
                while True:
                    bundles = yaml.safe_load(await _kubectl(admin, "get", "bundles", "-n", "demo", "-o", "yaml"))
                    ready = {b["metadata"]["name"] for b in bundles["items"]
                             if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in (b.get("status") or {}).get("conditions") or [])}
                    if ready == {"infra", "apps"}:
                        break
                    await trio.sleep(0.2)
        assert await _kubectl(admin, "get", "configmap", "frontend", "-n", "demo", "-o", "name") == (
            "configmap/frontend\n")
        assert [(r.verb, r.kind, r.status) for r in served if r.status == 403] == []

        await _kubectl(admin, "create", "serviceaccount", "nobody", "-n", "engine-system")
        bare = (await _kubectl(admin, "create", "token", "nobody", "-n", "engine-system")).strip()
        nobody = _token_kubeconfig(tmp_path / "nobody.kubeconfig", api, bare)
        code, out, err = await _run(sys.executable, "-m", "engine", "run", "--kubeconfig", str(nobody),
                                    "--plugin", "bundles", "--skip-crd-install", "--progress", "never",
                                    "--log-format", "json", "--log-level", "error")
        assert (code, out) == (1, "")
        assert [(r["level"], r["logger"], r["msg"]) for r in map(json.loads, err.splitlines())] == [(
            "error", "engine.cli",
            'User "system:serviceaccount:engine-system:nobody" lacks 2 permissions the plugins need: '
            'get customresourcedefinitions.apiextensions.k8s.io "bundles.bundles.engine.dev" cluster-wide; '
            'get customresourcedefinitions.apiextensions.k8s.io "sources.bundles.engine.dev" cluster-wide '
            "(python -m engine manifests --plugin bundles generates the Role they need)"
        )]
        assert bare not in err and token not in err
