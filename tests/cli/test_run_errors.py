"""``python -m engine run`` start-up failures: one ``error:`` line, exit code 2 for a bad flag and
1 for a runtime problem, no traceback unless ``--log-level debug``, and nothing written to the
cluster before every check passed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
import yaml

from engine.apiserver import ApiServer
from engine.cli._run import _StartupError, wait_for_server
from engine.kube import Client, Config, NotFoundError, RetryPolicy, UnauthorizedError

from .._e2e import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
BUNDLE_CRD = "bundles.bundles.engine.dev"


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", "run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=ENV)


async def _arun(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process([sys.executable, "-m", "engine", "run", *args], cwd=ROOT,
                                      capture_stdout=True, capture_stderr=True, check=False, env=ENV)


def _one_error(stderr: str) -> str:
    """The one line a failed start wrote on stderr, as ``error: ...``: a usage error before the
    logs are set up is that line; after, off a terminal, it is a JSON record like every log."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    if lines[0].startswith("{"):
        return _fatal(stderr)
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def _fatal(stderr: str) -> str:
    """Off a terminal every stderr line is a JSON record, the last one why the run ended
    (returned as ``error: <msg>``); no human line among them."""
    records = [json.loads(line) for line in stderr.splitlines()]
    last = records[-1]
    assert (last["level"], last["logger"]) == ("error", "engine.cli"), stderr
    return f"error: {last['msg']}"


def _kubeconfig(tmp_path: Path, *, server: str = "http://127.0.0.1:1", user: dict[str, object] | None = None,
                ca_data: str | None = None) -> Path:
    cluster: dict[str, object] = {"server": server}
    if ca_data is not None:
        cluster["certificate-authority-data"] = ca_data
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


@pytest.mark.parametrize(("flags", "message"), [
    (("--grace-period", "-5"), "error: --grace-period must be a number of seconds >= 0, got -5"),
    (("--startup-timeout", "nan"), "error: --startup-timeout must be a number of seconds >= 0, got nan"),
    (("--leader-elect", "--leader-elect-lease-duration", "5"),
     "error: --leader-elect-lease-duration (5) must be greater than --leader-elect-renew-deadline (10)"),
    (("--leader-elect-renew-deadline", "2"),
     "error: --leader-elect-renew-deadline (2) must be greater than --leader-elect-retry-period (2)"),
    (("--metrics-bind-address", "foo"),
     "error: --metrics-bind-address: bind address must be 'host:port', ':port' or '0' to disable, got 'foo'"),
    (("--live-bind-address", ":9555", "--metrics-bind-address", "127.0.0.1:9555"),
     "error: --live-bind-address and --metrics-bind-address both ask for 127.0.0.1:9555"),
    (("--embedded", "--kubeconfig", "x"), "error: --embedded and --kubeconfig/--context are exclusive"),
    (("--scale-out", "--leader-elect"),
     "error: --scale-out and --leader-elect are exclusive: the replicas of a ring all run"),
    (("--scale-out", "--scale-out-handover-grace", "-1"),
     "error: --scale-out-handover-grace must be a number of seconds >= 0, got -1"),
    (("--webhook-bind-address", "9443:x"),
     "error: --webhook-bind-address: bind address must be 'host:port', ':port' or '0' to disable, got '9443:x'"),
    (("--webhook-service", "engine-webhook"), "error: --webhook-service must be NAMESPACE/NAME, got 'engine-webhook'"),
    (("--webhook-service", "ops/a/b"), "error: --webhook-service must be NAMESPACE/NAME, got 'ops/a/b'"),
    (("--webhook-service", "ops/hook", "--webhook-cert-dir", "/certs"),
     "error: --webhook-service provisions the certificate: not with --webhook-cert-dir"),
    (("--webhook-configuration", "engine-bundles"), "error: --webhook-configuration needs --webhook-service"),
])
def test_a_bad_flag_is_one_error_line_and_exit_code_2(tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    out = _run("--kubeconfig", str(_kubeconfig(tmp_path)), "--plugin", "bundles", *flags)
    assert out.returncode == 2, out.stderr
    assert _one_error(out.stderr) == message


def test_runner_without_a_plugin_is_a_usage_error() -> None:
    out = _run("--embedded")
    assert out.returncode == 2
    assert _one_error(out.stderr) == "error: no plugin to run (give --plugin NAME, e.g. --plugin bundles)"


def test_garbage_certificate_authority_data_names_the_kubeconfig_field(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, server="https://127.0.0.1:1", ca_data="Z2FyYmFnZQ==")
    out = _run("--kubeconfig", str(path), "--plugin", "bundles")
    assert out.returncode == 1
    line = _one_error(out.stderr)
    assert line.startswith(f"error: {path}: clusters[name=c].cluster.certificate-authority-data: ")


@pytest.mark.parametrize(("command", "field", "reason"), [
    ("/nonexistent/kubectl-auth-plugin", "exec.command", "was not found"),
    ("false", "exec", "exited with status 1"),
])
def test_an_exec_credential_plugin_that_fails_is_one_line(tmp_path: Path, command: str, field: str, reason: str) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": command}}
    path = _kubeconfig(tmp_path, user=user)
    out = _run("--kubeconfig", str(path), "--plugin", "bundles")
    assert out.returncode == 1
    line = _one_error(out.stderr)
    assert line.startswith(f"error: {path}: users[name=u].user.{field}: ") and reason in line, line


def test_debug_log_level_adds_the_traceback(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, server="https://127.0.0.1:1", ca_data="Z2FyYmFnZQ==")
    out = _run("--kubeconfig", str(path), "--plugin", "bundles", "--log-level", "debug")
    assert out.returncode == 1
    assert _fatal(out.stderr).startswith(f"error: {path}: clusters[name=c].cluster.certificate-authority-data")
    assert "Traceback" in json.loads(out.stderr.splitlines()[-1])["stacktrace"]
    text = _run("--kubeconfig", str(path), "--plugin", "bundles", "--log-level", "debug", "--log-format", "text")
    assert "Traceback" in text.stderr
    assert text.stderr.splitlines()[-1].startswith(f"error: {path}: clusters[name=c].cluster.certificate-authority-data")


async def _bundle_crd_exists(client: Client) -> bool:
    crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    try:
        await client.get(crds, BUNDLE_CRD)
    except NotFoundError:
        return False
    return True


async def test_a_port_in_use_or_an_unknown_host_stops_the_start_up_before_the_cluster_is_written(
    tmp_path: Path,
) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
            kubeconfig = tmp_path / "kubeconfig"
            api.write_kubeconfig(kubeconfig)
            for flag, address, reason in (
                ("--metrics-bind-address", f"127.0.0.1:{port}", "Address already in use"),
                ("--health-probe-bind-address", f"127.0.0.1:{port}", "Address already in use"),
                ("--live-bind-address", "no-such-host.invalid:8080", ""),
                ("--webhook-bind-address", f"127.0.0.1:{port}", "Address already in use"),
            ):
                out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "bundles", flag, address)
                assert out.returncode == 1, out.stderr
                line = _one_error(out.stderr.decode())
                assert line.startswith(f"error: {flag} {address}: cannot listen on ")
                assert reason in line
                if reason:
                    assert line.endswith(f"{reason} (another process listens there, another replica on this host "
                                         f"perhaps: give each its own {flag})")
                assert not await _bundle_crd_exists(client)
        out = await _arun("--embedded", "--plugin", "bundles", "--apiserver-port", str(port))
        assert out.returncode == 1, out.stderr
        assert _one_error(out.stderr.decode()) == (
            f"error: --apiserver-port {port}: cannot listen on 127.0.0.1:{port}: Address already in use (another "
            f"process listens there: give another --apiserver-port, or 0 for a free one)"
        )
    finally:
        busy.close()


async def test_an_unreadable_webhook_certificate_is_one_line_before_the_cluster_is_written(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "tls.crt").write_text("not a certificate")
    (tmp_path / "certs" / "tls.key").write_text("not a key")
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        for directory, reason in ((tmp_path / "missing", "No such file or directory"), (tmp_path / "certs", "[SSL]")):
            out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "bundles", "--webhook-bind-address",
                              "127.0.0.1:0", "--webhook-cert-dir", str(directory))
            assert out.returncode == 1, out.stderr
            line = _one_error(out.stderr.decode())
            assert line.startswith(f"error: --webhook-cert-dir: cannot read the webhook certificate {directory}/tls.crt "
                                   f"and key {directory}/tls.key: ")
            assert reason in line
            assert not await _bundle_crd_exists(client)


async def test_a_plugin_that_fails_to_load_stops_the_run_before_the_cluster_is_written(tmp_path: Path) -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "bundels", "--plugin", "bundles")
        assert out.returncode == 1
        assert _one_error(out.stderr.decode()) == (
            "error: plugin 'bundels' not found (no module 'engine.plugins.bundels', no entry point in 'engine.plugins') "
            "(--no-strict-plugins runs the other plugins)"
        )
        assert not await _bundle_crd_exists(client)


async def test_a_misspelled_plugin_config_key_stops_the_run_before_the_cluster_is_written(tmp_path: Path) -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        for settings, message in (
            ({"bundles": {"concurency": 2}},
             "error: plugin 'bundles' has no setting 'concurency' "
             "(its settings: concurrency, dependencyRetry, healthPollInterval)"),
            ({"bundle": {"concurrency": 2}},
             "error: configuration for 'bundle', which is not a plugin of this run (plugins: bundles)"),
        ):
            config = tmp_path / "plugins.yaml"
            config.write_text(yaml.safe_dump(settings))
            out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "bundles", "--plugin-config", str(config))
            assert out.returncode == 1, out.stderr
            assert _one_error(out.stderr.decode()) == message
            assert not await _bundle_crd_exists(client)


async def test_a_plugin_that_fails_to_set_up_stops_the_run_by_default(tmp_path: Path) -> None:
    async with ApiServer() as api:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "tests.programs.plugins_for_tests:broken_setup",
                          "--plugin", "bundles", "--no-cluster-events")
        assert out.returncode == 1
        assert _fatal(out.stderr.decode()) == (
            "error: plugin 'broken' failed to set up: RuntimeError: cannot reach the widget service")
        assert b"Traceback" not in out.stderr


async def test_a_replica_of_a_ring_whose_members_run_other_plugins_refuses_to_start(tmp_path: Path) -> None:
    from engine.kube import RING_LABEL
    from engine.kube.lowlevel import LEASE_RESOURCE

    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        now = "2030-01-01T00:00:00.000000Z"
        await client.create(LEASE_RESOURCE, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "ring-x-member", "namespace": "default", "labels": {RING_LABEL: "ring-x"},
                         "annotations": {"ring.engine.dev/plugins": "bundles", "ring.engine.dev/held": ""}},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": now, "acquireTime": now},
        })
        out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "tests.programs.plugins_for_tests:good",
                          "--scale-out", "--leader-election-id", "ring-x", "--no-cluster-events")
        assert out.returncode == 1
        assert _fatal(out.stderr.decode()) == "error: ring 'ring-x' has members running plugins 'bundles', not 'good'"
        leases = await client.list(LEASE_RESOURCE, namespace="default", label_selector={RING_LABEL: "ring-x"})
        assert [item["metadata"]["name"] for item in leases.items] == ["ring-x-member"]


def test_the_dashboard_notice_names_the_ring_its_members_and_the_owned_share() -> None:
    from engine import OwnershipGate
    from engine._keyspace import KeyRange, KeyRanges
    from engine.cli._run import _ring_notice
    from engine.kube import HashRing

    gate = OwnershipGate(lambda ref: None, owned=KeyRanges((KeyRange(0, 1 << 62),)))
    ring = HashRing(object(), gate, name="engine-x", namespace="default")  # type: ignore[arg-type]
    assert _ring_notice(ring) == [
        f"scale-out ring engine-x: 0 member(s); this replica ({ring.member}) owns 25.0% of the keys in 1 range(s)"
    ]


def test_on_a_terminal_each_change_of_the_replicas_share_is_one_line() -> None:
    import io

    from engine import OwnershipGate
    from engine._keyspace import KeyRange, KeyRanges
    from engine.cli._run import _RingShare
    from engine.kube import HashRing

    gate = OwnershipGate(lambda ref: None)
    ring = HashRing(object(), gate, name="engine-x", namespace="default")  # type: ignore[arg-type]
    out = io.StringIO()
    share = _RingShare(ring, out)
    share()
    share()
    gate.gain(KeyRanges((KeyRange(0, 1 << 62),)))
    share()
    share()
    assert out.getvalue().splitlines() == [
        f"scale-out ring engine-x: 0 member(s); this replica ({ring.member}) owns 0.0% of the keys in 0 range(s)",
        f"scale-out ring engine-x: 0 member(s); this replica ({ring.member}) owns 25.0% of the keys in 1 range(s)",
    ]


# -- an API server that is not up yet ------------------------------------------------------------


def _client(api: ApiServer) -> Client:
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), user_agent="runner/1.0",
                  retry=RetryPolicy(max_attempts=1))


async def test_start_up_waits_for_an_api_server_that_answers_late(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
) -> None:
    async with ApiServer(listen=False) as api, _client(api) as client:
        down = api.faults.fail(503, count=4, client="runner/")
        started = trio.current_time()
        await wait_for_server(client, within=120)
        assert down.hits == 4
        assert 0 < trio.current_time() - started < 120
    warnings = [r.getMessage() for r in caplog.records if r.name == "engine.runner" and r.levelname == "WARNING"]
    assert len(warnings) == 4
    assert warnings[0].startswith("the API server does not answer yet (503 ServiceUnavailable")


async def test_start_up_gives_up_after_the_startup_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, _client(api) as client:
        api.faults.fail(503, count=None, client="runner/")
        started = trio.current_time()
        with pytest.raises(_StartupError) as caught:
            await wait_for_server(client, within=30)
        assert trio.current_time() - started == pytest.approx(30, abs=0.01)
    assert str(caught.value).startswith("no answer from the API server within --startup-timeout 30s: 503 ServiceUnavailable")


async def test_start_up_does_not_wait_out_a_refused_credential(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        bad = Config.from_dict(api.kubeconfig)
        async with Client(attrs.evolve(bad, token="not-the-token"), transport=api.memory_transport(),
                          user_agent="runner/1.0") as client:
            started = trio.current_time()
            with pytest.raises(UnauthorizedError):
                await wait_for_server(client, within=120)
            assert trio.current_time() - started < 1


def test_a_server_that_never_answers_ends_the_start_after_the_startup_timeout(tmp_path: Path) -> None:
    out = _run("--kubeconfig", str(_kubeconfig(tmp_path)), "--plugin", "bundles", "--startup-timeout", "4")
    assert out.returncode == 1, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines()]
    retries = [r for r in records if r["level"] == "warn" and r["msg"].startswith("the API server does not answer yet")]
    assert len(retries) >= 1
    assert _fatal(out.stderr) == ("error: no answer from the API server within --startup-timeout 4s: "
                                  "cannot reach the API server at http://127.0.0.1:1: connection refused")


async def test_a_later_start_up_step_that_outlasts_the_startup_timeout_names_the_timeout(tmp_path: Path) -> None:
    async with ApiServer() as api:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        api.faults.fail(503, count=None, resource="selfsubjectaccessreviews", client="engine-runner/")
        out = await _arun("--kubeconfig", str(kubeconfig), "--plugin", "bundles", "--no-cluster-events",
                          "--startup-timeout", "3")
    assert out.returncode == 1
    stderr = out.stderr.decode()
    retries = [r for r in map(json.loads, stderr.splitlines())
               if r["level"] == "warn" and r["msg"].startswith("start-up: the access check failed")]
    assert retries
    assert _fatal(stderr).startswith("error: no answer from the API server within --startup-timeout 3s: "
                                     "503 ServiceUnavailable"), stderr
    assert "Traceback" not in stderr
