"""ApiServer lifecycle, kubeconfig and error propagation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.apiserver import ApiServer, ApiServerError


async def test_lifecycle_errors() -> None:
    api = ApiServer(listen=False)
    with pytest.raises(ApiServerError, match=r"^the ApiServer is unopened: it must be running \(inside `async with`\)$"):
        api.memory_transport()
    async with api:
        pass
    with pytest.raises(ApiServerError, match=r"^an ApiServer can be started only once$"):
        async with api:
            pass


async def test_errors_in_the_body_propagate_unwrapped() -> None:
    with pytest.raises(KeyError, match=r"^'boom'$"):
        async with ApiServer(listen=False):
            raise KeyError("boom")


async def test_port_in_use_raises_oserror() -> None:
    async with ApiServer() as first:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(OSError):
            async with ApiServer(port=port):
                pass


async def test_kubeconfig_for_plain_http(tmp_path: Path) -> None:
    async with ApiServer() as api:
        path = tmp_path / "kc"
        api.write_kubeconfig(path)
        config = yaml.safe_load(path.read_text())
        assert config == api.kubeconfig
        assert config["clusters"] == [{"name": "embedded", "cluster": {"server": api.url}}]
        assert config["users"] == [{"name": "embedded", "user": {"token": api.admin_token}}]
        assert config["contexts"][0]["context"] == {"cluster": "embedded", "user": "embedded", "namespace": "default"}
        assert api.admin_token not in repr(api)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"^bookmark_interval must be > 0$"):
        ApiServer(bookmark_interval=0)
    with pytest.raises(ValueError, match=r"^history_size must be >= 1$"):
        ApiServer(history_size=0)
