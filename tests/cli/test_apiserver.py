"""`python -m engine apiserver` (engine.cli._apiserver.main) as a real subprocess."""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
import yaml

from engine.cli._apiserver import _parser, main, server_from_args

CODE = "import sys; from engine.cli._apiserver import main; sys.exit(main(sys.argv[1:]))"


async def read_lines(stream: trio.abc.ReceiveStream, count: int) -> list[str]:
    buffer = b""
    while buffer.count(b"\n") < count:
        chunk = await stream.receive_some()
        if not chunk:
            break
        buffer += chunk
    return buffer.decode().splitlines()


@pytest.mark.parametrize(
    ("sig", "command"),
    [(signal.SIGTERM, [sys.executable, "-c", CODE]), (signal.SIGINT, [sys.executable, "-m", "engine", "apiserver"])],
)
async def test_cli_serves_until_signalled(tmp_path: Path, sig: signal.Signals, command: list[str]) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process(
            [*command, "--port", "0", "--write-kubeconfig", str(kubeconfig), "--host", "127.0.0.1"],
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            first, second = await read_lines(proc.stdout, 2)
            assert first.startswith("listening on https://127.0.0.1:"), "HTTPS is the default"
            assert second == f"kubeconfig written to {kubeconfig}"
            url = first.removeprefix("listening on ")
            config = yaml.safe_load(kubeconfig.read_text())
            assert config["clusters"][0]["cluster"]["server"] == url
            assert config["current-context"] == "embedded"
            ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
            async with httpx.AsyncClient(base_url=url, verify=ssl.create_default_context(cadata=ca)) as client:
                assert (await client.get("/version")).status_code == 200
                assert (await client.get("/api/v1/secrets")).status_code == 403
            proc.send_signal(sig)
            assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_cli_tls_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", CODE, "--write-kubeconfig", str(kubeconfig), "--tls"], stdout=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            first, _ = await read_lines(proc.stdout, 2)
            assert first.startswith("listening on https://127.0.0.1:")
            config = yaml.safe_load(kubeconfig.read_text())
            assert set(config["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}
            assert "certificate-authority-data" in config["clusters"][0]["cluster"]
            assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_cli_plain_http_on_request(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", CODE, "--write-kubeconfig", str(kubeconfig), "--plain-http"], stdout=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            first, _ = await read_lines(proc.stdout, 2)
            assert first.startswith("listening on http://127.0.0.1:")
            url = first.removeprefix("listening on ")
            token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
            async with httpx.AsyncClient(base_url=url) as client:
                assert (await client.get("/api/v1/secrets")).status_code == 403
                r = await client.get("/api/v1/secrets", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def test_cli_https_unless_plain_http_is_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert server_from_args(_parser().parse_args([])).tls is True
    assert server_from_args(_parser().parse_args(["--tls"])).tls is True
    assert server_from_args(_parser().parse_args(["--plain-http"])).tls is False
    assert main(["--tls", "--plain-http"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "not-a-number"]) == 2
    assert "invalid int value" in capsys.readouterr().err


def test_cli_reports_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--port", str(port)]) == 1
    assert "cannot start the API server" in capsys.readouterr().err


def test_cli_controllers_run_unless_disabled() -> None:
    assert server_from_args(_parser().parse_args([])).controllers is True
    assert server_from_args(_parser().parse_args(["--no-controllers"])).controllers is False


def test_cli_authorization_is_on_unless_disabled() -> None:
    assert server_from_args(_parser().parse_args([])).authorization is True
    assert server_from_args(_parser().parse_args(["--no-authorization"])).authorization is False
