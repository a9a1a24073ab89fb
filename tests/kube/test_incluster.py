"""The in-cluster config as a pod runs it: the service account token kubelet rotates on disk
(swapping the ``..data`` symlink), the CA file and ``KUBERNETES_SERVICE_HOST``/``PORT``,
against the embedded server in TLS mode with authentication and authorization on."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest

from engine.apiserver import ApiServer
from engine.kube import Client, Config, Resource, UnauthorizedError, whoami

pytest.importorskip("trustme")

SA = "system:serviceaccount:default:engine"


def _mount(base: Path, generation: int, token: str) -> None:
    """Project ``token`` as kubelet does: a new timestamped directory, then an atomic swap
    of the ``..data`` symlink the files point through."""
    data = base / f"..{generation}"
    data.mkdir()
    (data / "token").write_text(token)
    for name in ("ca.crt", "namespace"):
        if (base / name).exists():
            (data / name).write_bytes((base / name).read_bytes())
    link = base / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, base / "..data")


async def _bound_token(admin: Client, secret: str) -> str:
    secrets = await admin.resource("v1", "Secret")
    created = await admin.create(secrets, {"metadata": {"name": secret}}, namespace="default")
    tokens = Resource("", "v1", "TokenRequest", "serviceaccounts/engine/token", True)
    ref = {"kind": "Secret", "apiVersion": "v1", "name": secret, "uid": created["metadata"]["uid"]}
    answer = await admin.create(tokens, {"apiVersion": "authentication.k8s.io/v1", "spec": {"boundObjectRef": ref}},
                                namespace="default")
    return str(answer["status"]["token"])


async def test_a_rotated_token_is_used_once_kubelet_swaps_it(tmp_path: Path) -> None:
    async with ApiServer(tls=True) as api, Client(Config.from_dict(api.kubeconfig)) as admin:
        accounts = await admin.resource("v1", "ServiceAccount")
        await admin.create(accounts, {"metadata": {"name": "engine"}}, namespace="default")
        first, second = await _bound_token(admin, "first"), await _bound_token(admin, "second")

        base = tmp_path / "serviceaccount"
        base.mkdir()
        assert api.ca_pem is not None
        _mount(base, 1, first)
        (base / "..data" / "ca.crt").write_bytes(api.ca_pem)
        (base / "..data" / "namespace").write_text("default")
        for name in ("token", "ca.crt", "namespace"):
            (base / name).symlink_to(f"..data/{name}")
        port = api.url.rsplit(":", 1)[1]
        config = Config.incluster(
            base_dir=base, environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port})
        assert (config.server, config.namespace) == (f"https://127.0.0.1:{port}", "default")
        assert first not in repr(config)

        async with Client(config) as pod:
            assert await whoami(pod) == SA
            _mount(base, 2, second)
            secrets = await admin.resource("v1", "Secret")
            await admin.delete(secrets, "first", namespace="default")
            async with Client(attrs.evolve(config, token=first, token_file=None)) as stale:
                with pytest.raises(UnauthorizedError, match=r"^401 Unauthorized: Unauthorized$"):
                    await whoami(stale)
            assert await whoami(pod) == SA, "the rotated token is read before the next request"
            assert first not in repr(pod.__dict__)
