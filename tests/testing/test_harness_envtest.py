"""EnvTest start-up without the real binaries: stand-in etcd and kube-apiserver programs that
check what the real ones would need (flags, certificate files, client certificate auth), so
ports, certificates, readiness, the kubeconfig and tear-down are exercised for real."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import httpx
import pytest

from engine.testing import EnvTest, EnvTestError
from engine.testing._envtest import RealServer, find_binaries, parse_go_duration, real_server_from_env

FAKE_ETCD = r'''
import http.server, json, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
assert args["listen-client-urls"] == args["advertise-client-urls"], args
assert args["unsafe-no-fsync"] == "true" and args["data-dir"]
port = int(args["listen-client-urls"].rsplit(":", 1)[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"health": "true"}).encode() if self.path == "/health" else b""
        self.send_response(200 if body else 404); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''

FAKE_APISERVER = r'''
import http.server, json, os, ssl, sys, urllib.request
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
with open(os.environ["FAKE_ARGS_FILE"], "w") as f: json.dump(args, f)
for key in ("tls-cert-file", "tls-private-key-file", "client-ca-file", "service-account-key-file",
            "service-account-signing-key-file"):
    assert os.path.isfile(args[key]), key
urllib.request.urlopen(args["etcd-servers"] + "/health").read()
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(args["tls-cert-file"], args["tls-private-key-file"])
ctx.load_verify_locations(args["client-ca-file"])
ctx.verify_mode = ssl.CERT_REQUIRED
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
        body = json.dumps({"path": self.path, "user": subject["commonName"], "group": subject["organizationName"]})
        self.send_response(200); self.end_headers(); self.wfile.write(body.encode())
    def log_message(self, *a): pass
server = http.server.HTTPServer((args["bind-address"], int(args["secure-port"])), H)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
'''


def _program(path: Path, source: str) -> None:
    path.write_text(f"#!{sys.executable}\n{source}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    _program(folder / "etcd", FAKE_ETCD)
    _program(folder / "kube-apiserver", FAKE_APISERVER)
    monkeypatch.setenv("FAKE_ARGS_FILE", str(tmp_path / "apiserver-args.json"))
    return folder


def test_start_serves_https_with_client_certificates_writes_a_kubeconfig_and_stop_cleans_up(
    assets: Path, tmp_path: Path
) -> None:
    env = EnvTest(assets=str(assets), env={"KUBEBUILDER_CONTROLPLANE_START_TIMEOUT": "30s"})
    with env:
        workdir = env.workdir
        assert workdir is not None and (workdir / "certs" / "apiserver.crt").is_file()
        config = env.config
        assert config.server == env.url == f"https://127.0.0.1:{env.apiserver_port}"
        with httpx.Client(**config.httpx_client_kwargs()) as client:
            answer = client.get("/readyz").json()
        assert answer == {"path": "/readyz", "user": "admin", "group": "system:masters"}
        env.write_kubeconfig(tmp_path / "kubeconfig")
        assert oct((tmp_path / "kubeconfig").stat().st_mode & 0o777) == "0o600"
        args = json.loads((tmp_path / "apiserver-args.json").read_text())
        assert args["etcd-servers"] == f"http://127.0.0.1:{env.etcd_port}"
        assert args["service-account-issuer"] == f"https://127.0.0.1:{env.apiserver_port}/"
        assert args["authorization-mode"] == "RBAC" and args["secure-port"] == str(env.apiserver_port)
        processes = list(env._processes)
    assert all(p.poll() is not None for p in processes)
    assert not workdir.exists()


def test_an_apiserver_that_exits_fails_start_up_and_stops_etcd(assets: Path) -> None:
    _program(assets / "kube-apiserver", "import sys; sys.exit(3)")
    env = EnvTest(assets=str(assets), env={})
    with pytest.raises(EnvTestError, match=r"^kube-apiserver exited with code 3 during start-up$"):
        env.start()
    assert env._processes == []


def test_a_control_plane_not_ready_in_time_is_an_error(assets: Path) -> None:
    _program(assets / "etcd", "import time; time.sleep(60)")
    env = EnvTest(assets=str(assets), env={}, start_timeout=0.5, stop_timeout=5)
    with pytest.raises(EnvTestError, match=r"^etcd was not ready at http://127\.0\.0\.1:\d+/health in time \(last: "):
        env.start()


def test_binaries_follow_envtest_variables(tmp_path: Path, assets: Path) -> None:
    assert find_binaries(env={"KUBEBUILDER_ASSETS": str(assets)}) == (assets / "etcd", assets / "kube-apiserver")
    other = tmp_path / "my-etcd"
    _program(other, "")
    assert find_binaries(env={"KUBEBUILDER_ASSETS": str(assets), "TEST_ASSET_ETCD": str(other)})[0] == other
    with pytest.raises(EnvTestError, match=r"^no etcd binary: set KUBEBUILDER_ASSETS to a folder holding etcd and "
                                           r"kube-apiserver \(or TEST_ASSET_ETCD to the binary\)$"):
        find_binaries(env={})
    os.chmod(assets / "kube-apiserver", 0o644)
    with pytest.raises(EnvTestError, match=r"^kube-apiserver binary '.*/kube-apiserver' does not exist or is not executable$"):
        find_binaries(str(assets), env={})


def test_which_real_server_the_environment_asks_for() -> None:
    assert real_server_from_env({}) is None
    assert real_server_from_env({"KUBEBUILDER_ASSETS": "/x"}) == RealServer("envtest")
    assert real_server_from_env({"TEST_ASSET_ETCD": "/e", "TEST_ASSET_KUBE_APISERVER": "/a"}) == RealServer("envtest")
    assert real_server_from_env({"USE_EXISTING_CLUSTER": "true", "KUBEBUILDER_ASSETS": "/x"}) == RealServer("cluster")
    assert real_server_from_env({"USE_EXISTING_CLUSTER": "false"}) is None


def test_go_durations() -> None:
    assert parse_go_duration("20s") == 20
    assert parse_go_duration("1m30s") == 90
    assert parse_go_duration("1.5") == 1.5
    assert parse_go_duration("250ms") == pytest.approx(0.25)
    with pytest.raises(EnvTestError, match=r"^invalid duration '20 seconds' \(use a Go duration such as 20s or 1m\)$"):
        parse_go_duration("20 seconds")
