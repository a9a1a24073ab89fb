"""httpx authentication for the credentials a kubeconfig or a pod can carry.

:class:`BearerTokenAuth` sends a fixed token, :class:`TokenFileAuth` a token read from a file
that is re-read when it changes (service account tokens rotate), and :class:`ExecAuth` runs a
``client.authentication.k8s.io`` credential plugin, caches what it prints until it expires and
runs it again when it has expired or the API server answers 401.

None of these objects shows a credential in its ``repr``, in a log record or in an error.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
import httpx
import trio

from engine._text import REDACTED, redact, truncate

from ._errors import ConfigError

__all__ = [
    "EXEC_API_VERSIONS",
    "BearerTokenAuth",
    "ExecAuth",
    "ExecConfig",
    "ExecCredential",
    "TokenFileAuth",
]

logger = logging.getLogger("engine.kube.auth")

EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)
"""The ExecCredential API versions :class:`ExecAuth` speaks."""

def _redact(value: object) -> str:
    return REDACTED if value else repr(value)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class BearerTokenAuth(httpx.Auth):
    """Send ``Authorization: Bearer <token>`` with every request."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return f"BearerTokenAuth(token={REDACTED})"

    def authorization(self) -> str:
        """The ``Authorization`` header value this auth sends."""
        return f"Bearer {self._token}"

    def auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request


class TokenFileAuth(httpx.Auth):
    """Send a bearer token read from ``path``, re-reading the file when it changes.

    The file is stat'ed before each request and read again when its modification time, size
    or inode changed, or when ``reread_after`` seconds passed since the last read (client-go
    re-reads every minute; kubelet rotates projected tokens by swapping a symlink). If a
    re-read fails the last token read successfully is kept; if the first read fails,
    :class:`ConfigError` is raised.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        reread_after: float = 60.0,
        field: str | None = None,
        source: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = os.fspath(path)
        self._reread_after = reread_after
        self._field = field
        self._source = source
        self._clock = clock
        self._token: str | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._read_at = 0.0

    @property
    def path(self) -> str:
        """The token file."""
        return self._path

    def __repr__(self) -> str:
        return f"TokenFileAuth(path={self._path!r}, token={_redact(self._token)})"

    def token(self) -> str:
        """Return the current token, re-reading the file if it changed. Blocking file I/O."""
        now = self._clock()
        try:
            st = os.stat(self._path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if (
                self._token is None
                or stamp != self._stamp
                or now - self._read_at >= self._reread_after
            ):
                with open(self._path, encoding="utf-8") as f:
                    token = f.read().strip()
                if not token:
                    raise ConfigError(
                        f"token file {self._path} is empty",
                        path=self._source,
                        field=self._field,
                    )
                if token != self._token and self._token is not None:
                    logger.info("token file changed", extra={"token_file": self._path})
                self._token, self._stamp, self._read_at = token, stamp, now
        except (OSError, UnicodeDecodeError) as exc:
            if self._token is None:
                raise ConfigError(
                    f"token file {self._path} cannot be read ({type(exc).__name__})",
                    path=self._source,
                    field=self._field,
                ) from None
            logger.warning(
                "token file cannot be re-read; keeping the previous token",
                extra={"token_file": self._path, "error": type(exc).__name__},
            )
        assert self._token is not None
        return self._token

    def authorization(self) -> str:
        """The ``Authorization`` header value for the next request (see :meth:`token`)."""
        return f"Bearer {self.token()}"

    def auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        yield request


def _env_repr(env: tuple[tuple[str, str], ...]) -> str:
    return "(" + ", ".join(f"({name!r}, {REDACTED})" for name, _ in env) + ")"


@attrs.frozen(kw_only=True)
class ExecConfig:
    """The ``exec`` stanza of a kubeconfig user: how to run a credential plugin."""

    command: str
    """The program to run (relative paths with a separator resolved against the kubeconfig)."""
    api_version: str
    """The ExecCredential API version the plugin speaks, one of :data:`EXEC_API_VERSIONS`."""
    args: tuple[str, ...] = attrs.field(default=(), repr=_redact)
    """Arguments passed to the program (redacted in the repr: they may carry a token)."""
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=_env_repr)
    """Extra environment ``(name, value)`` pairs, merged over ``os.environ``; values redacted."""
    install_hint: str | None = None
    """Shown when the program cannot be found."""
    provide_cluster_info: bool = False
    """Whether ``KUBERNETES_EXEC_INFO`` carries the cluster's details."""
    interactive_mode: str = "IfAvailable"
    """``Never``, ``IfAvailable`` or ``Always``; the engine never runs plugins interactively."""


@attrs.frozen(kw_only=True)
class ExecCredential:
    """What a credential plugin printed: a token, a client certificate, or both."""

    token: str | None = attrs.field(default=None, repr=_redact)
    """Bearer token (redacted in the repr)."""
    client_certificate_data: bytes | None = attrs.field(default=None, repr=_redact)
    """PEM client certificate chain."""
    client_key_data: bytes | None = attrs.field(default=None, repr=_redact)
    """PEM private key (redacted in the repr)."""
    expiration: datetime | None = None
    """When the credential expires; ``None`` means valid until the server rejects it."""

    def expired(self, now: datetime) -> bool:
        """Whether the credential must not be used at ``now``."""
        return self.expiration is not None and now >= self.expiration


class ExecAuth(httpx.Auth):
    """Authenticate with the credential an exec plugin prints.

    The credential is cached until its ``expirationTimestamp``; the plugin runs again when
    it has expired and, once per request, when the API server answers 401. Concurrent
    requests under trio share one plugin run.

    ``cluster_info`` is the ``spec.cluster`` object sent in ``KUBERNETES_EXEC_INFO`` when the
    kubeconfig sets ``provideClusterInfo``. ``source`` and ``field`` locate the ``exec``
    stanza for error messages.
    """

    def __init__(
        self,
        config: ExecConfig,
        *,
        cluster_info: Mapping[str, Any] | None = None,
        source: str | None = None,
        field: str | None = None,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._config = config
        self._cluster_info = dict(cluster_info) if cluster_info is not None else None
        self._source = source
        self._field = field
        self._now = now
        self._credential: ExecCredential | None = None
        self._lock: trio.Lock | None = None

    def __repr__(self) -> str:
        return f"ExecAuth(command={self._config.command!r}, credential={_redact(self._credential)})"

    @property
    def credential(self) -> ExecCredential | None:
        """The cached credential, or ``None`` if the plugin has not run or it was dropped."""
        return self._credential

    def invalidate(self) -> None:
        """Drop the cached credential so the next request runs the plugin again."""
        self._credential = None

    # --- running the plugin

    def _argv(self) -> list[str]:
        return [self._config.command, *self._config.args]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._config.env)
        spec: dict[str, Any] = {"interactive": False}
        if self._config.provide_cluster_info and self._cluster_info is not None:
            spec["cluster"] = self._cluster_info
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {
                "apiVersion": self._config.api_version,
                "kind": "ExecCredential",
                "spec": spec,
            }
        )
        return env

    def _error(self, message: str) -> ConfigError:
        return ConfigError(message, path=self._source, field=self._field)

    def _check_mode(self) -> None:
        if self._config.interactive_mode == "Always":
            raise self._error(
                "exec plugin requires interactiveMode Always, but credential plugins are never "
                "run interactively"
            )

    def _not_found(self, exc: OSError) -> ConfigError:
        hint = (
            f"; {self._config.install_hint.strip()}"
            if self._config.install_hint
            else ""
        )
        command = self._config.command
        if isinstance(exc, FileNotFoundError):
            where = "" if os.sep in command else " on PATH"
            reason = f"was not found{where} (is it installed?)"
        elif isinstance(exc, PermissionError):
            reason = "is not executable"
        else:
            reason = f"cannot be run: {exc.strerror or type(exc).__name__}"
        field = f"{self._field}.command" if self._field else "command"
        return ConfigError(f"exec plugin {command!r} {reason}{hint}", path=self._source, field=field)

    def _scrub(self, text: str) -> str:
        """``text`` (plugin output) with the configured env values and secrets masked."""
        for _, value in self._config.env:
            if len(value) >= 3:
                text = text.replace(value, REDACTED)
        return redact(text)

    def _parse(self, returncode: int, stdout: bytes, stderr: bytes) -> ExecCredential:
        command = self._config.command
        if returncode != 0:
            lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
            if lines and lines[0].startswith("Traceback (most recent call last)"):
                lines = lines[-1:]
            detail = f": {truncate(self._scrub(lines[0]), 300)}" if lines else ""
            raise self._error(
                f"exec plugin {command!r} exited with status {returncode}{detail}"
            )
        credential = _parse_exec_credential(stdout, self._config.api_version)
        if isinstance(credential, str):
            raise self._error(
                f"exec plugin {command!r} did not print a valid ExecCredential: {credential}"
            )
        logger.debug(
            "exec plugin ran",
            extra={
                "command": command,
                "expiration": credential.expiration.isoformat()
                if credential.expiration
                else None,
            },
        )
        return credential

    def run_plugin_sync(self) -> ExecCredential:
        """Run the plugin with :mod:`subprocess`, cache and return the credential. Blocking."""
        self._check_mode()
        try:
            done = subprocess.run(
                self._argv(),
                env=self._env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
        except OSError as exc:
            raise self._not_found(exc) from None
        self._credential = self._parse(done.returncode, done.stdout, done.stderr)
        return self._credential

    async def run_plugin(self) -> ExecCredential:
        """Run the plugin with :func:`trio.run_process`, cache and return the credential.

        Cancellation: if cancelled while the plugin runs, the process is killed with SIGKILL
        (as client-go does) and reaped before :exc:`trio.Cancelled` propagates; nothing is
        cached and the previous cached credential, if any, is left as it was.
        """
        self._check_mode()
        try:
            done = await trio.run_process(
                self._argv(),
                env=self._env(),
                stdin=b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                deliver_cancel=_kill,
            )
        except OSError as exc:
            raise self._not_found(exc) from None
        self._credential = self._parse(done.returncode, done.stdout, done.stderr)
        return self._credential

    def get_credential_sync(self) -> ExecCredential:
        """Return the cached credential, running the plugin if there is none or it expired."""
        cached = self._credential
        if cached is not None and not cached.expired(self._now()):
            return cached
        return self.run_plugin_sync()

    async def get_credential(self) -> ExecCredential:
        """Return the cached credential, running the plugin if there is none or it expired.

        Concurrent callers wait for one plugin run. A checkpoint only when the plugin runs.
        Cancellation: as :meth:`run_plugin`; nothing is cached if cancelled.
        """
        cached = self._credential
        if cached is not None and not cached.expired(self._now()):
            return cached
        if self._lock is None:
            self._lock = trio.Lock()
        async with self._lock:
            cached = self._credential
            if cached is not None and not cached.expired(self._now()):
                return cached
            return await self.run_plugin()

    def _refresh_after_401(self, used: ExecCredential) -> None:
        if self._credential is used:
            self._credential = None

    @staticmethod
    def _apply(request: httpx.Request, credential: ExecCredential) -> None:
        if credential.token is not None:
            request.headers["Authorization"] = f"Bearer {credential.token}"

    # --- httpx flows

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        credential = self.get_credential_sync()
        self._apply(request, credential)
        response = yield request
        if response.status_code == 401:
            logger.info("401 from the API server; running the exec plugin again")
            self._refresh_after_401(credential)
            self._apply(request, self.get_credential_sync())
            yield request

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Authenticate ``request`` under trio, retrying it once after a 401.

        Cancellation: as :meth:`get_credential`; a cancelled plugin run is killed and leaves
        nothing cached.
        """
        credential = await self.get_credential()
        self._apply(request, credential)
        response = yield request
        if response.status_code == 401:
            logger.info("401 from the API server; running the exec plugin again")
            self._refresh_after_401(credential)
            self._apply(request, await self.get_credential())
            yield request


async def _kill(process: trio.Process) -> None:
    process.kill()


def _parse_exec_credential(stdout: bytes, api_version: str) -> ExecCredential | str:
    """Parse plugin output, or return why it is invalid (never quoting the output)."""
    try:
        doc = json.loads(stdout)
    except (ValueError, UnicodeDecodeError):
        return "output is not JSON"
    if not isinstance(doc, dict):
        return "output is not a JSON object"
    if doc.get("kind") != "ExecCredential":
        return "kind must be 'ExecCredential'"
    if doc.get("apiVersion") != api_version:
        return f"apiVersion must be {api_version!r} as configured"
    status = doc.get("status")
    if not isinstance(status, dict):
        return "status must be an object"
    token = status.get("token")
    cert = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    for name, value in (
        ("token", token),
        ("clientCertificateData", cert),
        ("clientKeyData", key),
    ):
        if value is not None and (not isinstance(value, str) or not value):
            return f"status.{name} must be a non-empty string"
    if (cert is None) != (key is None):
        return (
            "status.clientCertificateData and status.clientKeyData must be set together"
        )
    if token is None and cert is None:
        return "status must set token or clientCertificateData and clientKeyData"
    expiration: datetime | None = None
    raw = status.get("expirationTimestamp")
    if raw is not None:
        try:
            expiration = datetime.fromisoformat(raw) if isinstance(raw, str) else None
        except ValueError:
            expiration = None
        if expiration is None or expiration.tzinfo is None:
            return "status.expirationTimestamp must be an RFC 3339 timestamp"
    return ExecCredential(
        token=token,
        client_certificate_data=cert.encode() if cert else None,
        client_key_data=key.encode() if key else None,
        expiration=expiration,
    )
