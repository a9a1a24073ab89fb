from __future__ import annotations

import base64
import json
import logging
import os
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trustme

from engine.kube import (
    BearerTokenAuth,
    Config,
    ConfigError,
    TokenFileAuth,
)
from engine.kube.lowlevel import (
    ExecAuth,
    ExecConfig,
    ExecCredential,
)

SECRET = "sekrit-TOKEN-0123456789"
V1 = "client.authentication.k8s.io/v1"

PLUGIN = textwrap.dedent(
    """
    import json, os, sys
    d = os.environ["PLUGIN_DIR"]
    count_path = os.path.join(d, "count")
    n = int(open(count_path).read()) + 1 if os.path.exists(count_path) else 1
    with open(count_path, "w") as f:
        f.write(str(n))
    with open(os.path.join(d, "seen.json"), "w") as f:
        json.dump({"exec_info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
                   "argv": sys.argv[1:], "path_set": "PATH" in os.environ}, f)
    mode = os.environ.get("PLUGIN_MODE", "token")
    token = os.environ["PLUGIN_TOKEN"] + "-" + str(n)
    api = os.environ.get("PLUGIN_API", "client.authentication.k8s.io/v1")
    if mode == "fail":
        print(json.dumps({"status": {"token": token}}))
        sys.stderr.write("error: login required, run 'plugin login'\\nsecond line\\n")
        sys.exit(3)
    if mode == "echo-env":
        sys.stderr.write("error: login as " + os.environ["PLUGIN_TOKEN"] + " refused\\n")
        sys.exit(4)
    if mode == "traceback":
        sys.stderr.write('Traceback (most recent call last):\\n  File "p.py", line 1\\nRuntimeError: login expired\\n')
        sys.exit(1)
    if mode == "garbage":
        print("not json " + token)
        sys.exit(0)
    if mode == "sleep":
        import time
        with open(os.path.join(d, "pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    if mode == "cert":
        status = {"clientCertificateData": open(os.environ["PLUGIN_CERT"]).read(),
                  "clientKeyData": open(os.environ["PLUGIN_KEY"]).read()}
    elif mode == "nostatus":
        status = None
    else:
        status = {"token": token}
    if os.environ.get("PLUGIN_EXPIRY"):
        status["expirationTimestamp"] = os.environ["PLUGIN_EXPIRY"]
    print(json.dumps({"apiVersion": api, "kind": "ExecCredential", "status": status}))
    """
)


class Plugin:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "plugin"
        self.dir.mkdir()
        self.script = self.dir / "plugin.py"
        self.script.write_text(PLUGIN)

    @property
    def count(self) -> int:
        path = self.dir / "count"
        return int(path.read_text()) if path.exists() else 0

    @property
    def seen(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.dir / "seen.json").read_text())
        return result

    def config(self, api_version: str = V1, **env: str) -> Config:
        env = {"PLUGIN_DIR": str(self.dir), "PLUGIN_TOKEN": SECRET, **env}
        doc = {
            "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
            "users": [
                {
                    "name": "u",
                    "user": {
                        "exec": {
                            "apiVersion": api_version,
                            "command": sys.executable,
                            "args": [str(self.script), "get-token"],
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "installHint": "install it with: pip install plugin",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
            "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "dev",
        }
        return Config.from_dict(doc, path=self.dir / "kubeconfig")

    def auth(self, now: Any = None, **env: str) -> ExecAuth:
        config = self.config(**env)
        assert config.exec is not None
        kwargs: dict[str, Any] = {"field": "users[name=u].user.exec"}
        if now is not None:
            kwargs["now"] = now
        return ExecAuth(config.exec, cluster_info={"server": config.server}, **kwargs)


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    return Plugin(tmp_path)


def recording_transport(
    statuses: list[int] | None = None,
) -> tuple[httpx.MockTransport, list[str]]:
    seen: list[str] = []
    statuses = list(statuses or [])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        return httpx.Response(statuses.pop(0) if statuses else 200)

    return httpx.MockTransport(handler), seen


# --- static and file tokens


def test_bearer_token() -> None:
    auth = BearerTokenAuth(SECRET)
    request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(auth)


def test_token_file_reread_on_change(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one\n")
    now = [0.0]
    auth = TokenFileAuth(path, clock=lambda: now[0])
    assert auth.token() == "one"
    path.write_text("two-longer\n")
    os.utime(path, ns=(10**9, 10**9))
    assert auth.token() == "two-longer"
    assert "two-longer" not in repr(auth)


def test_token_file_reread_after_interval(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one")
    os.utime(path, ns=(10**9, 10**9))
    now = [0.0]
    auth = TokenFileAuth(path, reread_after=60.0, clock=lambda: now[0])
    assert auth.token() == "one"
    path.write_text("two")
    os.utime(path, ns=(10**9, 10**9))
    now[0] = 59.0
    assert auth.token() == "one"
    now[0] = 60.0
    assert auth.token() == "two"


def test_token_file_keeps_last_token_when_reread_fails(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one")
    auth = TokenFileAuth(path)
    assert auth.token() == "one"
    path.unlink()
    assert auth.token() == "one"


def test_token_file_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^f: token file .*/missing cannot be read \(FileNotFoundError\)$",
    ):
        TokenFileAuth(tmp_path / "missing", field="f").token()
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match=r"^token file .*/empty is empty$"):
        TokenFileAuth(tmp_path / "empty").token()


async def test_token_file_async_flow(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(SECRET)
    transport, seen = recording_transport()
    async with httpx.AsyncClient(
        transport=transport, auth=TokenFileAuth(tmp_path / "token")
    ) as c:
        await c.get("https://x/")
    assert seen == [f"Bearer {SECRET}"]


# --- exec plugins


async def test_exec_token_cached_without_expiry(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="engine.kube")
    config = plugin.config()
    auth = config.auth()
    assert isinstance(auth, ExecAuth)
    transport, seen = recording_transport()
    async with httpx.AsyncClient(transport=transport, auth=auth) as client:
        await client.get("https://x/a")
        await client.get("https://x/b")
    assert seen == [f"Bearer {SECRET}-1", f"Bearer {SECRET}-1"]
    assert plugin.count == 1
    assert plugin.seen["argv"] == ["get-token"]
    assert plugin.seen["path_set"] is True
    assert plugin.seen["exec_info"] == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": "https://10.0.0.1:6443"}},
    }
    assert SECRET not in repr(auth)
    assert SECRET not in repr(auth.credential)
    assert "exec plugin ran" in caplog.text
    assert SECRET not in caplog.text
    assert all(SECRET not in str(r.__dict__) for r in caplog.records)


async def test_exec_cached_until_expiry(plugin: Plugin) -> None:
    clock = [datetime(2030, 1, 1, tzinfo=UTC)]
    auth = plugin.auth(now=lambda: clock[0], PLUGIN_EXPIRY="2030-01-01T00:10:00Z")
    transport, seen = recording_transport()
    async with httpx.AsyncClient(transport=transport, auth=auth) as client:
        await client.get("https://x/")
        clock[0] += timedelta(minutes=9, seconds=59)
        await client.get("https://x/")
        assert plugin.count == 1
        clock[0] += timedelta(seconds=1)
        await client.get("https://x/")
    assert plugin.count == 2
    assert seen == [f"Bearer {SECRET}-1", f"Bearer {SECRET}-1", f"Bearer {SECRET}-2"]
    assert auth.credential is not None
    assert auth.credential.expiration == datetime(2030, 1, 1, 0, 10, tzinfo=UTC)


async def test_exec_rerun_once_on_401(plugin: Plugin) -> None:
    auth = plugin.config().auth()
    transport, seen = recording_transport([401])
    async with httpx.AsyncClient(transport=transport, auth=auth) as client:
        response = await client.get("https://x/")
        assert response.status_code == 200
        assert seen == [f"Bearer {SECRET}-1", f"Bearer {SECRET}-2"]
        assert plugin.count == 2
        await client.get("https://x/")
    assert plugin.count == 2


async def test_exec_401_twice_is_returned(plugin: Plugin) -> None:
    auth = plugin.config().auth()
    transport, seen = recording_transport([401, 401, 401])
    async with httpx.AsyncClient(transport=transport, auth=auth) as client:
        response = await client.get("https://x/")
    assert response.status_code == 401
    assert len(seen) == 2
    assert plugin.count == 2


def test_exec_sync_flow_rerun_on_401(plugin: Plugin) -> None:
    auth = plugin.config().auth()
    transport, seen = recording_transport([401])
    with httpx.Client(transport=transport, auth=auth) as client:
        assert client.get("https://x/").status_code == 200
        client.get("https://x/")
    assert seen == [f"Bearer {SECRET}-1", f"Bearer {SECRET}-2", f"Bearer {SECRET}-2"]
    assert plugin.count == 2


async def test_exec_concurrent_requests_share_one_run(plugin: Plugin) -> None:
    auth = plugin.auth()
    results: list[ExecCredential] = []

    async def get() -> None:
        results.append(await auth.get_credential())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(get)
    assert plugin.count == 1
    assert len({id(r) for r in results}) == 1


async def test_exec_v1beta1(plugin: Plugin) -> None:
    config = plugin.config(
        "client.authentication.k8s.io/v1beta1",
        PLUGIN_API="client.authentication.k8s.io/v1beta1",
    )
    auth = config.auth()
    assert isinstance(auth, ExecAuth)
    credential = await auth.get_credential()
    assert credential.token == f"{SECRET}-1"
    assert (
        plugin.seen["exec_info"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    )


async def test_exec_cancelled_kills_plugin_and_caches_nothing(
    plugin: Plugin, autojump_clock: trio.testing.MockClock
) -> None:
    auth = plugin.auth(PLUGIN_MODE="sleep")
    with trio.move_on_after(10) as scope:
        await auth.get_credential()
    assert scope.cancelled_caught
    assert auth.credential is None
    pid_file = plugin.dir / "pid"
    if pid_file.exists():
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


async def test_exec_nonzero_exit(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = plugin.auth(PLUGIN_MODE="fail")
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u\]\.user\.exec: exec plugin '.*' exited with status 3: "
        r"error: login required, run 'plugin login'$",
    ) as info:
        await auth.get_credential()
    assert SECRET not in str(info.value)
    assert SECRET not in caplog.text
    assert auth.credential is None


async def test_exec_nonzero_exit_masks_the_exec_env_values(plugin: Plugin) -> None:
    auth = plugin.auth(PLUGIN_MODE="echo-env")
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u\]\.user\.exec: exec plugin '.*' exited with status 4: error: login as <redacted> refused$",
    ) as info:
        await auth.get_credential()
    assert SECRET not in str(info.value)


async def test_exec_nonzero_exit_with_a_traceback_says_its_last_line(plugin: Plugin) -> None:
    auth = plugin.auth(PLUGIN_MODE="traceback")
    with pytest.raises(
        ConfigError, match=r"^users\[name=u\]\.user\.exec: exec plugin '.*' exited with status 1: RuntimeError: login expired$"
    ):
        await auth.get_credential()


def test_exec_nonzero_exit_sync(plugin: Plugin) -> None:
    auth = plugin.auth(PLUGIN_MODE="fail")
    with pytest.raises(
        ConfigError, match=r"exited with status 3: error: login required"
    ) as info:
        auth.get_credential_sync()
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"PLUGIN_MODE": "garbage"}, "output is not JSON"),
        ({"PLUGIN_MODE": "nostatus"}, "status must be an object"),
        (
            {"PLUGIN_API": "client.authentication.k8s.io/v1beta1"},
            "apiVersion must be 'client.authentication.k8s.io/v1' as configured",
        ),
        (
            {"PLUGIN_EXPIRY": "tomorrow"},
            "status.expirationTimestamp must be an RFC 3339 timestamp",
        ),
    ],
)
async def test_exec_invalid_output(
    plugin: Plugin, env: dict[str, str], reason: str
) -> None:
    auth = plugin.auth(**env)
    with pytest.raises(
        ConfigError,
        match=rf"^users\[name=u\]\.user\.exec: exec plugin '.*' did not print a valid ExecCredential: {reason}$",
    ) as info:
        await auth.get_credential()
    assert SECRET not in str(info.value)


async def test_exec_command_not_found(tmp_path: Path) -> None:
    auth = ExecAuth(
        ExecConfig(
            command=str(tmp_path / "nope"),
            api_version=V1,
            install_hint="brew install nope",
        ),
        source="/home/me/.kube/config",
        field="users[name=u].user.exec",
    )
    with pytest.raises(
        ConfigError,
        match=r"^/home/me/\.kube/config: users\[name=u\]\.user\.exec\.command: exec plugin '.*/nope' was not found "
        r"\(is it installed\?\); brew install nope$",
    ):
        await auth.get_credential()


async def test_exec_interactive_always_rejected() -> None:
    auth = ExecAuth(ExecConfig(command="p", api_version=V1, interactive_mode="Always"))
    with pytest.raises(
        ConfigError, match=r"^exec plugin requires interactiveMode Always"
    ):
        await auth.get_credential()


async def test_exec_client_certificate(plugin: Plugin, tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("alice@example")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    config = plugin.config(
        PLUGIN_MODE="cert",
        PLUGIN_CERT=str(tmp_path / "c.pem"),
        PLUGIN_KEY=str(tmp_path / "k.pem"),
    )
    auth = config.auth()
    assert isinstance(auth, ExecAuth)
    credential = await auth.get_credential()
    assert credential.token is None
    assert credential.client_key_data == client.private_key_pem.bytes()
    assert b"PRIVATE KEY" not in repr(credential).encode()
    ctx = config.ssl_context(credential=credential)
    assert ctx.verify_mode.name == "CERT_REQUIRED"
    transport, seen = recording_transport()
    async with httpx.AsyncClient(transport=transport, auth=auth) as c:
        await c.get("https://x/")
    assert seen == [""]


def test_exec_credential_repr_and_expiry() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    credential = ExecCredential(token=SECRET, expiration=at)
    assert SECRET not in repr(credential)
    assert not credential.expired(at - timedelta(seconds=1))
    assert credential.expired(at)
    assert not ExecCredential(token="x").expired(at)


def test_exec_env_values_not_in_repr() -> None:
    exec_config = ExecConfig(command="p", api_version=V1, env=(("TOKEN", SECRET),))
    assert SECRET not in repr(exec_config)
    assert SECRET not in repr(ExecAuth(exec_config))


def test_basic_auth_header() -> None:
    config = Config(server="https://x", username="admin", password=SECRET)
    auth = config.auth()
    assert auth is not None
    request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
    expected = base64.b64encode(f"admin:{SECRET}".encode()).decode()
    assert request.headers["Authorization"] == f"Basic {expected}"
    assert SECRET not in repr(config)
