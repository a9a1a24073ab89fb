"""A real control plane for tests: etcd and kube-apiserver, started as controller-runtime's
envtest starts them.

Conventions kept from envtest, so the same set-up works for both:

* ``KUBEBUILDER_ASSETS`` names a folder holding the ``etcd`` and ``kube-apiserver`` binaries
  (``setup-envtest use -p path`` prints one); ``TEST_ASSET_ETCD`` and
  ``TEST_ASSET_KUBE_APISERVER`` name each binary instead.
* ``KUBEBUILDER_CONTROLPLANE_START_TIMEOUT`` and ``KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT``
  (Go durations such as ``20s`` or ``1m``, default 20 s) bound start-up and tear-down;
  ``KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true`` passes the binaries' output through.
* ``USE_EXISTING_CLUSTER=true`` means: no control plane, use the kubeconfig's cluster
  (:func:`real_server_from_env` reports which).
* etcd listens for clients and peers on free loopback ports, with its data in a temporary
  folder; kube-apiserver serves HTTPS on a free loopback port with a certificate from a fresh
  CA, authenticates clients by certificates of a second CA, authorizes with RBAC, and signs
  service account tokens with a generated key. The user written to the kubeconfig is
  ``admin`` in group ``system:masters``.
* Ready means etcd answers ``GET /health`` and the API server answers ``GET /readyz`` with 200;
  tear-down sends SIGTERM, then SIGKILL after the stop timeout, and removes the folder.

All of it is synchronous (blocking) code: a session-scoped pytest fixture starts one control
plane for the whole run, outside any trio run.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import attrs
import yaml  # type: ignore[import-untyped, unused-ignore]  # types-PyYAML may be missing

from engine.kube import Config

from ._errors import EnvTestError

__all__ = [
    "EnvTest",
    "RealServer",
    "real_server_from_env",
    "ENV_ASSETS",
    "ENV_USE_EXISTING_CLUSTER",
    "parse_go_duration",
]

ENV_ASSETS = "KUBEBUILDER_ASSETS"
ENV_ETCD = "TEST_ASSET_ETCD"
ENV_APISERVER = "TEST_ASSET_KUBE_APISERVER"
ENV_START_TIMEOUT = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"
ENV_STOP_TIMEOUT = "KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT"
ENV_ATTACH_OUTPUT = "KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT"
ENV_USE_EXISTING_CLUSTER = "USE_EXISTING_CLUSTER"

DEFAULT_TIMEOUT = 20.0
ADMIN_USER = "admin"
ADMIN_GROUP = "system:masters"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_go_duration(value: str) -> float:
    """Seconds in a Go duration (``"20s"``, ``"1m30s"``, ``"500ms"``) or a plain number."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise EnvTestError(f"invalid duration {value!r} (use a Go duration such as 20s or 1m)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (bound, read, released: another process may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@attrs.frozen
class _Certs:
    ca_pem: bytes
    serving_cert_pem: bytes
    serving_key_pem: bytes
    client_ca_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    service_account_key_pem: bytes

    @classmethod
    def generate(cls, host: str) -> _Certs:
        try:
            import trustme
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric import rsa
        except ImportError:  # pragma: no cover - trustme is a dependency
            raise EnvTestError("starting a control plane needs the trustme package") from None
        serving_ca = trustme.CA(organization_name="engine envtest serving")
        serving = serving_ca.issue_cert(host, "localhost", "127.0.0.1", common_name="kube-apiserver")
        client_ca = trustme.CA(organization_name="engine envtest clients")
        client = client_ca.issue_cert(f"{ADMIN_USER}.client.invalid", common_name=ADMIN_USER,
                                      organization_name=ADMIN_GROUP)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cls(
            ca_pem=serving_ca.cert_pem.bytes(),
            serving_cert_pem=b"".join(p.bytes() for p in serving.cert_chain_pems),
            serving_key_pem=serving.private_key_pem.bytes(),
            client_ca_pem=client_ca.cert_pem.bytes(),
            client_cert_pem=b"".join(p.bytes() for p in client.cert_chain_pems),
            client_key_pem=client.private_key_pem.bytes(),
            service_account_key_pem=sa_key,
        )


def find_binaries(assets: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """``(etcd, kube-apiserver)``: from ``TEST_ASSET_*`` or the assets folder (default
    ``$KUBEBUILDER_ASSETS``). Raises :class:`EnvTestError` naming what is missing."""
    env = os.environ if env is None else env
    folder = assets if assets is not None else env.get(ENV_ASSETS)
    found: list[Path] = []
    for name, variable in (("etcd", ENV_ETCD), ("kube-apiserver", ENV_APISERVER)):
        explicit = env.get(variable)
        if explicit:
            path = Path(explicit)
        elif folder:
            path = Path(folder) / name
        else:
            raise EnvTestError(f"no {name} binary: set {ENV_ASSETS} to a folder holding etcd and kube-apiserver "
                               f"(or {variable} to the binary)")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EnvTestError(f"{name} binary {str(path)!r} does not exist or is not executable")
        found.append(path)
    return found[0], found[1]


def _wait_ready(url: str, context: ssl.SSLContext | None, deadline: float, process: subprocess.Popen[bytes],
                what: str) -> None:
    last = "no answer"
    while True:
        if process.poll() is not None:
            raise EnvTestError(f"{what} exited with code {process.returncode} during start-up")
        try:
            with urllib.request.urlopen(url, timeout=1.0, context=context) as answer:
                if answer.status == 200:
                    return
                last = f"HTTP {answer.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            last = type(exc).__name__
        if time.monotonic() >= deadline:
            raise EnvTestError(f"{what} was not ready at {url} in time (last: {last})")
        time.sleep(0.1)


@attrs.define(eq=False, kw_only=True)
class EnvTest:
    """etcd and kube-apiserver on free loopback ports, as envtest runs them.

    ``with EnvTest() as env:`` starts both (blocking until ready) and stops them when leaving;
    then :attr:`config` (a :class:`~engine.kube.Config`), :attr:`kubeconfig` and
    :meth:`write_kubeconfig` reach the API server as an administrator. Binaries, timeouts and
    output follow envtest's environment variables unless given here. ``apiserver_flags``
    adds or overrides kube-apiserver flags (name without dashes -> value).
    """

    assets: str | None = None
    start_timeout: float | None = None
    stop_timeout: float | None = None
    attach_output: bool | None = None
    host: str = "127.0.0.1"
    apiserver_flags: Mapping[str, str] = attrs.field(factory=dict)
    env: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ), repr=False)
    _workdir: Path | None = attrs.field(default=None, init=False)
    _certs: _Certs | None = attrs.field(default=None, init=False, repr=False)
    _processes: list[subprocess.Popen[bytes]] = attrs.field(factory=list, init=False, repr=False)
    etcd_port: int | None = attrs.field(default=None, init=False)
    etcd_peer_port: int | None = attrs.field(default=None, init=False)
    apiserver_port: int | None = attrs.field(default=None, init=False)

    def _timeout(self, given: float | None, variable: str) -> float:
        if given is not None:
            return given
        value = self.env.get(variable)
        return parse_go_duration(value) if value else DEFAULT_TIMEOUT

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT`` once started."""
        if self.apiserver_port is None:
            raise EnvTestError("the control plane is not started")
        return f"https://{self.host}:{self.apiserver_port}"

    def etcd_command(self, etcd: Path) -> list[str]:
        """etcd's command line (ports and folder must be chosen: :meth:`start` does it)."""
        assert self._workdir is not None and self.etcd_port is not None and self.etcd_peer_port is not None
        client_url = f"http://{self.host}:{self.etcd_port}"
        return [
            str(etcd),
            f"--advertise-client-urls={client_url}",
            f"--listen-client-urls={client_url}",
            f"--listen-peer-urls=http://{self.host}:{self.etcd_peer_port}",
            f"--data-dir={self._workdir / 'etcd'}",
            "--unsafe-no-fsync=true",
        ]

    def apiserver_command(self, apiserver: Path) -> list[str]:
        """kube-apiserver's command line (after :meth:`start` chose ports and wrote certificates)."""
        assert self._workdir is not None and self.apiserver_port is not None
        certs = self._workdir / "certs"
        flags = {
            "advertise-address": self.host,
            "bind-address": self.host,
            "secure-port": str(self.apiserver_port),
            "etcd-servers": f"http://{self.host}:{self.etcd_port}",
            "cert-dir": str(certs),
            "tls-cert-file": str(certs / "apiserver.crt"),
            "tls-private-key-file": str(certs / "apiserver.key"),
            "client-ca-file": str(certs / "client-cert-auth-ca.crt"),
            "service-account-key-file": str(certs / "sa-signer.key"),
            "service-account-signing-key-file": str(certs / "sa-signer.key"),
            "service-account-issuer": f"https://{self.host}:{self.apiserver_port}/",
            "service-cluster-ip-range": "10.0.0.0/24",
            "allow-privileged": "true",
            "authorization-mode": "RBAC",
            "disable-admission-plugins": "ServiceAccount",
            **self.apiserver_flags,
        }
        return [str(apiserver), *(f"--{name}={value}" for name, value in flags.items())]

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig (cluster, user and context ``envtest``) for the ``admin`` user."""
        if self._certs is None:
            raise EnvTestError("the control plane is not started")
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.url, "certificate-authority-data": b64(self._certs.ca_pem)}}],
            "users": [{"name": "envtest", "user": {
                "client-certificate-data": b64(self._certs.client_cert_pem),
                "client-key-data": b64(self._certs.client_key_pem)}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest",
                                                          "namespace": "default"}}],
            "current-context": "envtest",
        }

    @property
    def config(self) -> Config:
        """A :class:`~engine.kube.Config` for :attr:`kubeconfig`."""
        return Config.from_dict(self.kubeconfig)

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> None:
        """Write :attr:`kubeconfig` to ``path`` (mode 0600)."""
        fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(yaml.safe_dump(self.kubeconfig, sort_keys=False))

    def _write_certs(self) -> None:
        assert self._workdir is not None
        self._certs = certs = _Certs.generate(self.host)
        folder = self._workdir / "certs"
        folder.mkdir(mode=0o700)
        for name, data in (
            ("apiserver.crt", certs.serving_cert_pem), ("apiserver.key", certs.serving_key_pem),
            ("client-cert-auth-ca.crt", certs.client_ca_pem), ("sa-signer.key", certs.service_account_key_pem),
        ):
            path = folder / name
            path.write_bytes(data)
            path.chmod(0o600)

    def _spawn(self, command: Sequence[str], name: str) -> subprocess.Popen[bytes]:
        assert self._workdir is not None
        attach = self.attach_output if self.attach_output is not None else _truthy(self.env.get(ENV_ATTACH_OUTPUT))
        log = None if attach else open(self._workdir / f"{name}.log", "wb")  # noqa: SIM115
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT if log else None,
                                       stdin=subprocess.DEVNULL, cwd=self._workdir)
        finally:
            if log is not None:
                log.close()
        self._processes.append(process)
        return process

    def _client_context(self) -> ssl.SSLContext:
        assert self._certs is not None
        context = ssl.create_default_context(cadata=self._certs.ca_pem.decode())
        with tempfile.NamedTemporaryFile(dir=self._workdir, suffix=".pem") as pem:
            pem.write(self._certs.client_cert_pem.rstrip(b"\n") + b"\n" + self._certs.client_key_pem)
            pem.flush()
            context.load_cert_chain(pem.name)
        return context

    def start(self) -> EnvTest:
        """Start etcd, then kube-apiserver; return once both are ready. Blocking.

        Raises :class:`EnvTestError` (after stopping whatever started) when a binary is
        missing, exits, or is not ready within the start timeout.
        """
        if self._workdir is not None:
            raise EnvTestError("an EnvTest is started once")
        etcd, apiserver = find_binaries(self.assets, self.env)
        deadline = time.monotonic() + self._timeout(self.start_timeout, ENV_START_TIMEOUT)
        self._workdir = Path(tempfile.mkdtemp(prefix="engine-envtest-"))
        try:
            self.etcd_port, self.etcd_peer_port, self.apiserver_port = (free_port(self.host) for _ in range(3))
            self._write_certs()
            etcd_process = self._spawn(self.etcd_command(etcd), "etcd")
            _wait_ready(f"http://{self.host}:{self.etcd_port}/health", None, deadline, etcd_process, "etcd")
            apiserver_process = self._spawn(self.apiserver_command(apiserver), "kube-apiserver")
            _wait_ready(f"{self.url}/readyz", self._client_context(), deadline, apiserver_process, "kube-apiserver")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the API server, then etcd (SIGTERM, then SIGKILL after the stop timeout), and
        remove the working folder. Blocking; idempotent."""
        timeout = self._timeout(self.stop_timeout, ENV_STOP_TIMEOUT)
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._processes.clear()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def workdir(self) -> Path | None:
        """The temporary folder (etcd data, certificates, logs) while started."""
        return self._workdir

    def __enter__(self) -> EnvTest:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@attrs.frozen
class RealServer:
    """Which real API server the environment asks for (see :func:`real_server_from_env`)."""

    kind: Literal["envtest", "cluster"]
    """``envtest``: start a control plane; ``cluster``: the kubeconfig's (``$KUBECONFIG``, then
    ``~/.kube/config``)."""


def real_server_from_env(env: Mapping[str, str] | None = None) -> RealServer | None:
    """``USE_EXISTING_CLUSTER=true``: the kubeconfig's cluster; else ``KUBEBUILDER_ASSETS`` (or
    both ``TEST_ASSET_*`` binaries): envtest; else ``None``."""
    env = os.environ if env is None else env
    if _truthy(env.get(ENV_USE_EXISTING_CLUSTER)):
        return RealServer("cluster")
    if env.get(ENV_ASSETS) or (env.get(ENV_ETCD) and env.get(ENV_APISERVER)):
        return RealServer("envtest")
    return None
