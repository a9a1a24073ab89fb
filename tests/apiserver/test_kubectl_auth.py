"""kubectl's RBAC commands (``auth can-i`` with ``--list``, ``--as``, ``--as-group``,
``--quiet``; ``auth whoami`` with ``-o json`` and ``-o yaml``) answer on the embedded server as on
a real kube-apiserver 1.36.2, for the admin, for a ServiceAccount with a Role and a ClusterRole
bound (impersonated with ``--as`` and by its own token), for impersonation denied, for
``system:anonymous``, a token the server did not issue and no credentials at all.

The expectations in ``data/kubectl-auth-real-1.36.2.json`` were taken from real 1.36.2
(``/work/shared/kube/serve 1.36.2``; its ``about`` says how) by running the same setup and
the same commands in the same order. Before comparing, what cannot be equal is made so, and
nothing else: the random ids (certificate digests, token ``JTI``s, uids, timestamps), the
admin's user name (the real kubeconfig's certificate is ``admin``, the embedded one's
``kubernetes-admin``), and the two ``/.well-known`` rows of ``--list``, which come from
OpenShift's ``system:openshift:public-info-viewer`` role in the recorded build, not from
upstream's bootstrap policy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from engine.apiserver import ApiServer

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)"),
]

REAL = json.loads((Path(__file__).parent / "data" / "kubectl-auth-real-1.36.2.json").read_text())


def comparable(text: str) -> str:
    text = re.sub(r"X509SHA256=[0-9a-f]{64}", "X509SHA256=<digest>", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", text)
    text = re.sub(r'(Username {3,}|"username": "|username: )admin\b', r"\1kubernetes-admin", text)
    return "\n".join(line for line in text.split("\n") if not re.search(r"\[/\.well-known(/\*)?\]", line))


def token_config(source: dict[str, Any], token: str | None) -> dict[str, Any]:
    cluster = source["clusters"][0]
    user = {"token": token} if token else {}
    return {
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "u", "context": {"cluster": cluster["name"], "user": "u", "namespace": "demo"}}],
        "current-context": "u",
    }


async def kubectl(config: Path, *args: str, check: bool = True) -> trio.CompletedProcess[bytes]:
    assert KUBECTL is not None
    with trio.fail_after(30):
        result = await trio.run_process(
            [KUBECTL, "--kubeconfig", str(config), "--request-timeout=20s", *args], stdin=b"",
            capture_stdout=True, capture_stderr=True, check=False, env={**os.environ, "HOME": str(config.parent)},
        )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr.decode()}"
    return result


async def test_kubectl_auth_answers_as_real_1_36_2(tmp_path: Path) -> None:
    async with ApiServer(tls=True) as api:
        admin = tmp_path / "admin.kubeconfig"
        api.write_kubeconfig(admin)
        for args in REAL["setup"]:
            await kubectl(admin, *args)
        configs = {"admin": admin}
        for name, account in (("sa", "app"), ("plain", "plain"), ("bad", None), ("none", None)):
            token = None
            if account is not None:
                token = (await kubectl(admin, "-n", "demo", "create", "token", account)).stdout.decode().strip()
            elif name == "bad":
                token = "nope"
            configs[name] = tmp_path / f"{name}.kubeconfig"
            configs[name].write_text(yaml.safe_dump(token_config(api.kubeconfig, token)))
        differences = []
        for command in REAL["commands"]:
            result = await kubectl(configs[command["config"]], *command["args"], check=False)
            got = (result.returncode, comparable(result.stdout.decode()), comparable(result.stderr.decode()))
            want = (command["code"], comparable(command["stdout"]), comparable(command["stderr"]))
            if got != want:
                differences.append(f"kubectl [{command['config']}] {' '.join(command['args'])}:\n"
                                   f"real 1.36.2: {want}\nembedded:    {got}")
        assert not differences, "\n\n".join(differences)

