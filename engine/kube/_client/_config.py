"""Where the API server is and how to authenticate to it: kubeconfig and in-cluster config.

:class:`Config` is a frozen value loaded by :meth:`Config.from_kubeconfig`,
:meth:`Config.from_dict`, :meth:`Config.incluster` or :meth:`Config.infer`; the client builds
its ``httpx.AsyncClient`` from :meth:`Config.httpx_client_kwargs`.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import httpx
import yaml

from engine._text import REDACTED, redact

from ._auth import (
    EXEC_API_VERSIONS,
    BearerTokenAuth,
    ExecAuth,
    ExecConfig,
    ExecCredential,
    TokenFileAuth,
)
from ._errors import ConfigError

__all__ = ["DEFAULT_INCLUSTER_DIR", "Config"]

logger = logging.getLogger("engine.kube.config")

DEFAULT_INCLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod's service account token, CA bundle and namespace are mounted."""

AuthKind = Literal["none", "token", "token-file", "basic", "exec"]


def _redact(value: object) -> str:
    return REDACTED if value else repr(value)


def _redact_url(value: str | None) -> str:
    return repr(redact(value) if value is not None else None)


@attrs.frozen
class _Origin:
    path: str | None
    field: str | None


_NO_ORIGIN = _Origin(None, None)


def _server_name(name: str) -> str:
    """``name`` as the ASCII server name TLS sends and checks (IDNA); ``UnicodeError`` if it
    cannot be one."""
    return name.encode("idna").decode("ascii")


def _check_server_name(instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None:
        try:
            _server_name(value)
        except UnicodeError:
            raise ValueError(f"{attribute.name} must be a DNS name or an IP address") from None


class _ServerNameSSLContext(ssl.SSLContext):
    """An SSLContext that sends and verifies a fixed server name (kubeconfig tls-server-name).

    The name is encoded before the socket is touched: an unusable name raises ``UnicodeError``
    and leaves the socket as it was (``ssl.SSLContext.wrap_socket`` detaches the socket first).
    """

    engine_server_name: str | None = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        if not server_side and self.engine_server_name:
            server_hostname = _server_name(self.engine_server_name)
        return super().wrap_bio(
            incoming, outgoing, server_side, server_hostname, session
        )

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        if not server_side and self.engine_server_name:
            server_hostname = _server_name(self.engine_server_name)
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            server_hostname,
            session,
        )


def wraps_sockets_as_standard(context: ssl.SSLContext) -> bool:
    """Whether ``context`` wraps a socket as ``ssl.SSLContext`` does, so that a non-blocking
    socket can be wrapped first and its handshake driven after: a standard context or the
    kubeconfig's own (:meth:`Config.ssl_context`), not a class that wraps sockets its own way
    (``truststore.SSLContext`` verifies the peer inside ``wrap_socket``)."""
    return type(context).wrap_socket in (ssl.SSLContext.wrap_socket, _ServerNameSSLContext.wrap_socket)


@attrs.frozen(kw_only=True)
class Config:
    """How to reach one API server as one user.

    The repr shows no secret: tokens, passwords, key and certificate data, URL passwords, exec
    plugin arguments and environment values are ``<redacted>``.
    """

    server: str = attrs.field(repr=_redact_url)
    """Base URL of the API server, e.g. ``https://10.0.0.1:6443``."""
    namespace: str = "default"
    """The context's namespace (in-cluster: the pod's namespace)."""
    context: str | None = None
    """Name of the kubeconfig context used, ``None`` in-cluster."""
    cluster: str | None = None
    """Name of the kubeconfig cluster used."""
    user: str | None = None
    """Name of the kubeconfig user used."""
    tls_server_name: str | None = attrs.field(default=None, validator=_check_server_name)
    """Server name sent in SNI and checked against the server certificate instead of the host."""
    insecure_skip_tls_verify: bool = False
    """Skip server certificate verification; only ever set when the kubeconfig says so."""
    ca_file: str | None = None
    """PEM CA bundle file (absolute, or relative to the working directory)."""
    ca_data: bytes | None = attrs.field(default=None, repr=_redact)
    """PEM CA bundle, decoded from ``certificate-authority-data``."""
    client_cert_file: str | None = None
    """PEM client certificate file."""
    client_cert_data: bytes | None = attrs.field(default=None, repr=_redact)
    """PEM client certificate, decoded from ``client-certificate-data``."""
    client_key_file: str | None = None
    """PEM client key file."""
    client_key_data: bytes | None = attrs.field(default=None, repr=_redact)
    """PEM client key, decoded from ``client-key-data`` (redacted in the repr)."""
    proxy_url: str | None = attrs.field(default=None, repr=_redact_url)
    """Proxy for all requests; ``None`` lets httpx honour ``HTTPS_PROXY`` and friends (a
    password in it is redacted in the repr)."""
    token: str | None = attrs.field(default=None, repr=_redact)
    """Static bearer token (redacted in the repr)."""
    token_file: str | None = None
    """File holding a bearer token, re-read when it changes; wins over ``token``."""
    username: str | None = None
    """Basic auth user name."""
    password: str | None = attrs.field(default=None, repr=_redact)
    """Basic auth password (redacted in the repr)."""
    exec: ExecConfig | None = None
    """Credential plugin to run."""
    source: str | None = None
    """The kubeconfig file this came from (the first one when several were merged)."""
    _cluster_origin: _Origin = attrs.field(
        default=_NO_ORIGIN, alias="cluster_origin", repr=False
    )
    _user_origin: _Origin = attrs.field(
        default=_NO_ORIGIN, alias="user_origin", repr=False
    )

    @property
    def auth_kind(self) -> AuthKind:
        """Which credential :meth:`auth` sends (client certificates are separate, in TLS)."""
        if self.exec is not None:
            return "exec"
        if self.token_file is not None:
            return "token-file"
        if self.token is not None:
            return "token"
        if self.username is not None or self.password is not None:
            return "basic"
        return "none"

    @property
    def ca_source(self) -> str:
        """Where the certificate authorities trusted for the API server come from, as error
        messages name it: ``certificate-authority-data of cluster "c" in kubeconfig PATH``,
        ``certificate-authority PATH of cluster ...``, a CA file, or ``the system trust store``."""
        if self.insecure_skip_tls_verify:
            return "no CA (insecure-skip-tls-verify is set)"
        origin = self._cluster_origin
        where = ""
        if self.cluster is not None:
            where = f' of cluster "{self.cluster}" in ' + (
                f"kubeconfig {origin.path}" if origin.path else "the kubeconfig"
            )
        if self.ca_data is not None:
            return f"certificate-authority-data{where}" if where else "the configured CA data"
        if self.ca_file is not None:
            return f"certificate-authority {self.ca_file}{where}" if where else f"CA file {self.ca_file}"
        return "the system trust store"

    # --- loading

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str] | None = None, *, context: str | None = None
    ) -> Config:
        """Load a kubeconfig file, as kubectl does.

        With ``path`` ``None``, the files listed in ``KUBECONFIG`` (separated by
        ``os.pathsep``; missing ones skipped) are merged, the first file to define a cluster,
        user or context name winning, and ``current-context`` taken from the first file that
        sets it; without ``KUBECONFIG``, ``~/.kube/config`` is read. ``context`` overrides
        ``current-context``. Blocking file I/O.
        """
        if path is not None:
            paths = [os.fspath(path)]
        else:
            env = os.environ.get("KUBECONFIG", "")
            listed = [p for p in env.split(os.pathsep) if p]
            if listed:
                paths = [p for p in listed if os.path.exists(p)]
                if not paths:
                    raise ConfigError(
                        "none of the files listed in KUBECONFIG exists",
                        path=env,
                        field=None,
                    )
            else:
                paths = [os.path.join(os.path.expanduser("~"), ".kube", "config")]
        merged = _Merged()
        for p in paths:
            merged.add(_read_yaml(p), p)
        return merged.select(context)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        context: str | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> Config:
        """Build a config from an already parsed kubeconfig.

        ``path`` is the file it was read from: relative file paths inside are resolved against
        its directory and errors name it.
        """
        merged = _Merged()
        merged.add(data, os.fspath(path) if path is not None else None)
        return merged.select(context)

    @classmethod
    def incluster(
        cls,
        *,
        base_dir: str | os.PathLike[str] = DEFAULT_INCLUSTER_DIR,
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """The config of a pod's service account.

        Reads ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT`` from ``environ``
        (default ``os.environ``; IPv6 hosts are bracketed) and ``token``, ``ca.crt`` and
        ``namespace`` from ``base_dir``. The token file is re-read by :meth:`auth` when it
        changes, since kubelet rotates it. Blocking file I/O.
        """
        env = os.environ if environ is None else environ
        host = env.get("KUBERNETES_SERVICE_HOST", "")
        port = env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ConfigError(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set to load "
                "the in-cluster config (is this running in a pod?)",
                field="KUBERNETES_SERVICE_HOST"
                if not host
                else "KUBERNETES_SERVICE_PORT",
            )
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        base = os.fspath(base_dir)
        token_file = os.path.join(base, "token")
        if not os.path.isfile(token_file):
            raise ConfigError(
                "service account token file does not exist", path=token_file
            )
        ca_file = os.path.join(base, "ca.crt")
        namespace = "default"
        try:
            with open(os.path.join(base, "namespace"), encoding="utf-8") as f:
                namespace = f.read().strip() or "default"
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"namespace file cannot be read ({type(exc).__name__})",
                path=os.path.join(base, "namespace"),
            ) from None
        config = cls(
            server=f"https://{host}:{port}",
            namespace=namespace,
            ca_file=ca_file if os.path.exists(ca_file) else None,
            token_file=token_file,
        )
        logger.debug("loaded in-cluster config", extra={"server": config.server})
        return config

    @classmethod
    def infer(
        cls,
        *,
        context: str | None = None,
        incluster_dir: str | os.PathLike[str] = DEFAULT_INCLUSTER_DIR,
    ) -> Config:
        """Load the kubeconfig if there is one, otherwise the in-cluster config.

        A kubeconfig "is there" when ``KUBECONFIG`` is set or ``~/.kube/config`` exists; its
        errors are raised, not masked by falling back. ``context`` applies to the kubeconfig.
        """
        default = os.path.join(os.path.expanduser("~"), ".kube", "config")
        if os.environ.get("KUBECONFIG") or os.path.exists(default):
            return cls.from_kubeconfig(context=context)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.incluster(base_dir=incluster_dir)
        raise ConfigError(
            "no configuration found: KUBECONFIG is unset, ~/.kube/config does not exist and "
            "KUBERNETES_SERVICE_HOST is unset (not in a pod)"
        )

    # --- building a client

    def _read(self, file: str, origin: _Origin, key: str) -> bytes:
        try:
            with open(file, "rb") as f:
                return f.read()
        except OSError as exc:
            raise ConfigError(
                f"file {file} cannot be read ({type(exc).__name__})",
                path=origin.path,
                field=f"{origin.field}.{key}" if origin.field else key,
            ) from None

    def ssl_context(
        self, *, credential: ExecCredential | None = None
    ) -> ssl.SSLContext:
        """Build the TLS context: server verification on unless the kubeconfig turns it off.

        Trusts the configured CA (file or data), else the system roots; presents the client
        certificate of the config or, if given, of an exec plugin ``credential``; sends and
        checks ``tls_server_name`` when set. Inline keys go through a 0600 temporary file
        deleted right after loading. Blocking file I/O.
        """
        ctx = _ServerNameSSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.engine_server_name = self.tls_server_name
        co, uo = self._cluster_origin, self._user_origin
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ca: bytes | None = self.ca_data
            if ca is None and self.ca_file is not None:
                ca = self._read(self.ca_file, co, "certificate-authority")
            if ca is None:
                ctx.load_default_certs()
            else:
                key = (
                    "certificate-authority-data"
                    if self.ca_data is not None
                    else "certificate-authority"
                )
                try:
                    ctx.load_verify_locations(cadata=ca.decode("ascii"))
                except (ssl.SSLError, UnicodeDecodeError, ValueError):
                    raise ConfigError(
                        "must contain PEM CA certificates",
                        path=co.path,
                        field=f"{co.field}.{key}" if co.field else key,
                    ) from None
        cert: bytes | None
        key_pem: bytes | None
        if credential is not None and credential.client_certificate_data is not None:
            uo = _Origin(uo.path, _field(uo, "exec"))
            cert, key_pem = credential.client_certificate_data, credential.client_key_data
            names = ("the exec plugin's status.clientCertificateData", "the exec plugin's status.clientKeyData")
            fields = (uo.field, uo.field)
        else:
            cert = self.client_cert_data
            if cert is None and self.client_cert_file is not None:
                cert = self._read(self.client_cert_file, uo, "client-certificate")
            key_pem = self.client_key_data
            if key_pem is None and self.client_key_file is not None:
                key_pem = self._read(self.client_key_file, uo, "client-key")
            cert_key = "client-certificate-data" if self.client_cert_data is not None else "client-certificate"
            key_key = "client-key-data" if self.client_key_data is not None else "client-key"
            names = ("", "")
            fields = (_field(uo, cert_key), _field(uo, key_key))
        if (cert is None) != (key_pem is None):
            raise ConfigError(
                "a client certificate and a client key must be given together",
                path=uo.path,
                field=uo.field,
            )
        if cert is not None and key_pem is not None:
            if b"-----BEGIN CERTIFICATE-----" not in cert:
                raise ConfigError(
                    f"{names[0]} must be a PEM certificate".lstrip(), path=uo.path, field=fields[0]
                )
            if _PEM_KEY.search(key_pem) is None:
                raise ConfigError(
                    f"{names[1]} must be a PEM private key".lstrip(), path=uo.path, field=fields[1]
                )
            _load_cert_chain(ctx, cert, key_pem, uo)
        return ctx

    def auth(self) -> httpx.Auth | None:
        """A fresh httpx auth object for the configured credential, ``None`` for none.

        Exec plugins run on the first request, not here. Keep one object per client so the
        exec credential cache is shared by its requests.
        """
        uo = self._user_origin
        kind = self.auth_kind
        if kind == "exec":
            assert self.exec is not None
            cluster_info: dict[str, Any] = {"server": self.server}
            if self.tls_server_name:
                cluster_info["tls-server-name"] = self.tls_server_name
            if self.insecure_skip_tls_verify:
                cluster_info["insecure-skip-tls-verify"] = True
            if self.ca_data:
                cluster_info["certificate-authority-data"] = base64.b64encode(
                    self.ca_data
                ).decode()
            if self.proxy_url:
                cluster_info["proxy-url"] = self.proxy_url
            return ExecAuth(
                self.exec,
                cluster_info=cluster_info,
                source=uo.path,
                field=f"{uo.field}.exec" if uo.field else "exec",
            )
        if kind == "token-file":
            assert self.token_file is not None
            return TokenFileAuth(
                self.token_file,
                source=uo.path,
                field=f"{uo.field}.tokenFile" if uo.field else None,
            )
        if kind == "token":
            assert self.token is not None
            return BearerTokenAuth(self.token)
        if kind == "basic":
            return httpx.BasicAuth(self.username or "", self.password or "")
        return None

    def httpx_client_kwargs(self, *, tls: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``httpx.AsyncClient``: ``base_url``, ``verify``, ``auth``
        and, when the kubeconfig sets ``proxy-url``, ``proxy``. ``tls=False`` leaves out
        ``verify`` (building the TLS context loads the system roots, which costs), for a
        client that uses a transport of its own.

        With an exec plugin that returns client certificates, the client must run
        ``await kwargs["auth"].get_credential()`` and pass it to :meth:`ssl_context` to build
        ``verify`` instead.
        """
        kwargs: dict[str, Any] = {"base_url": self.server, "auth": self.auth()}
        if tls:
            kwargs["verify"] = self.ssl_context()
        if self.proxy_url is not None:
            kwargs["proxy"] = self.proxy_url
        return kwargs


def _field(origin: _Origin, key: str) -> str:
    return f"{origin.field}.{key}" if origin.field else key


_PEM_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


def _load_cert_chain(
    ctx: ssl.SSLContext, cert: bytes, key: bytes, origin: _Origin
) -> None:
    fd, name = tempfile.mkstemp(prefix="engine-kube-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert.rstrip(b"\n") + b"\n" + key)
        ctx.load_cert_chain(name)
    except ssl.SSLError:
        raise ConfigError(
            "client certificate and key must be a matching PEM certificate and private key",
            path=origin.path,
            field=origin.field,
        ) from None
    finally:
        os.unlink(name)


# --- kubeconfig parsing


def _read_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError("kubeconfig file does not exist", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"kubeconfig file cannot be read ({type(exc).__name__})", path=path
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = (
            f" at line {mark.line + 1}, column {mark.column + 1}"
            if mark is not None
            else ""
        )
        raise ConfigError(
            f"kubeconfig is not valid YAML: {exc.problem}{where}", path=path
        ) from None
    except yaml.YAMLError:
        raise ConfigError("kubeconfig is not valid YAML", path=path) from None


@attrs.frozen
class _Entry:
    name: str
    body: Mapping[str, Any]
    path: str | None
    field: str


class _Fields:
    """Typed access to one kubeconfig entry body, with errors naming the file and field."""

    def __init__(self, entry: _Entry) -> None:
        self.e = entry

    def error(self, key: str | None, message: str) -> ConfigError:
        field = f"{self.e.field}.{key}" if key else self.e.field
        return ConfigError(message, path=self.e.path, field=field)

    def get_str(self, key: str, *, required: bool = False) -> str | None:
        value = self.e.body.get(key)
        if value is None or value == "":
            if required:
                raise self.error(key, "is required")
            return None
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {type(value).__name__}")
        return value

    def get_bool(self, key: str) -> bool:
        value = self.e.body.get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {type(value).__name__}")
        return value

    def b64(self, key: str) -> bytes | None:
        value = self.get_str(key)
        if value is None:
            return None
        try:
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise self.error(key, "is not valid base64") from None

    def file(self, key: str) -> str | None:
        value = self.get_str(key)
        if value is None:
            return None
        return _resolve(value, self.e.path)

    def one_of(self, file_key: str, data_key: str) -> tuple[str | None, bytes | None]:
        data = self.b64(data_key)
        file = self.file(file_key)
        if data is not None and file is not None:
            raise self.error(None, f"must set {file_key} or {data_key}, not both")
        return file, data


def _resolve(file: str, kubeconfig: str | None) -> str:
    if os.path.isabs(file) or kubeconfig is None:
        return file
    return os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(kubeconfig)), file)
    )


class _Merged:
    def __init__(self) -> None:
        self.first_path: str | None = None
        self.seen_clusters_key = False
        self.clusters: dict[str, _Entry] = {}
        self.users: dict[str, _Entry] = {}
        self.contexts: dict[str, _Entry] = {}
        self.current: tuple[str, str | None] | None = None

    def add(self, doc: Any, path: str | None) -> None:
        if self.first_path is None:
            self.first_path = path
        if doc is None:
            doc = {}
        if not isinstance(doc, Mapping):
            raise ConfigError(
                f"kubeconfig must be a YAML mapping, got {type(doc).__name__}",
                path=path,
            )
        if "clusters" in doc:
            self.seen_clusters_key = True
        self._entries(doc, "clusters", "cluster", path, self.clusters)
        self._entries(doc, "users", "user", path, self.users)
        self._entries(doc, "contexts", "context", path, self.contexts)
        current = doc.get("current-context")
        if current is not None and not isinstance(current, str):
            raise ConfigError("must be a string", path=path, field="current-context")
        if current and self.current is None:
            self.current = (current, path)

    @staticmethod
    def _entries(
        doc: Mapping[str, Any],
        key: str,
        inner: str,
        path: str | None,
        into: dict[str, _Entry],
    ) -> None:
        items = doc.get(key)
        if items is None:
            return
        if not isinstance(items, list):
            raise ConfigError(
                f"must be a list of named {inner} entries", path=path, field=key
            )
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ConfigError("must be a mapping", path=path, field=f"{key}[{i}]")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    "must be a non-empty string", path=path, field=f"{key}[{i}].name"
                )
            body = item.get(inner)
            field = f"{key}[name={name}].{inner}"
            if body is None:
                body = {}
            if not isinstance(body, Mapping):
                raise ConfigError(
                    f"must be a mapping, got {type(body).__name__}",
                    path=path,
                    field=field,
                )
            into.setdefault(name, _Entry(name, body, path, field))

    def select(self, context: str | None) -> Config:
        if context is not None:
            if context not in self.contexts:
                raise ConfigError(
                    f"context {context!r} is not defined",
                    path=self.first_path,
                    field="contexts",
                )
            name = context
        elif self.current is not None:
            name, cur_path = self.current
            if name not in self.contexts:
                raise ConfigError(
                    f"names context {name!r}, which is not defined in contexts",
                    path=cur_path,
                    field="current-context",
                )
        else:
            raise ConfigError(
                "no current-context is set and no context was given",
                path=self.first_path,
                field="current-context",
            )
        ctx = _Fields(self.contexts[name])
        if not self.clusters and not self.seen_clusters_key:
            raise ConfigError(
                "is required: the kubeconfig defines no clusters",
                path=self.first_path,
                field="clusters",
            )
        cluster_name = ctx.get_str("cluster", required=True)
        assert cluster_name is not None
        if cluster_name not in self.clusters:
            raise ctx.error(
                "cluster",
                f"names cluster {cluster_name!r}, which is not defined in clusters",
            )
        user_name = ctx.get_str("user")
        if user_name is not None and user_name not in self.users:
            raise ctx.error(
                "user", f"names user {user_name!r}, which is not defined in users"
            )
        namespace = ctx.get_str("namespace") or "default"

        cl_entry = self.clusters[cluster_name]
        cl = _Fields(cl_entry)
        server = cl.get_str("server", required=True)
        assert server is not None
        if "://" not in server:
            server = f"https://{server}"
        try:
            url = httpx.URL(server)
        except httpx.InvalidURL:
            raise cl.error("server", "must be an http or https URL") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise cl.error("server", "must be an http or https URL")
        ca_file, ca_data = cl.one_of(
            "certificate-authority", "certificate-authority-data"
        )
        insecure = cl.get_bool("insecure-skip-tls-verify")
        if insecure and (ca_file or ca_data):
            raise cl.error(
                "insecure-skip-tls-verify",
                "must not be true when a certificate authority is also given",
            )
        values: dict[str, Any] = {}
        user_origin = _NO_ORIGIN
        if user_name is not None:
            u_entry = self.users[user_name]
            user_origin = _Origin(u_entry.path, u_entry.field)
            values = _user_values(_Fields(u_entry))
        tls_server_name = cl.get_str("tls-server-name")
        if tls_server_name is not None:
            try:
                _server_name(tls_server_name)
            except UnicodeError:
                raise cl.error("tls-server-name", "must be a DNS name or an IP address") from None
        config = Config(
            server=server,
            namespace=namespace,
            context=name,
            cluster=cluster_name,
            user=user_name,
            tls_server_name=tls_server_name,
            insecure_skip_tls_verify=insecure,
            ca_file=ca_file,
            ca_data=ca_data,
            proxy_url=cl.get_str("proxy-url"),
            source=self.first_path,
            cluster_origin=_Origin(cl_entry.path, cl_entry.field),
            user_origin=user_origin,
            **values,
        )
        logger.debug(
            "loaded kubeconfig",
            extra={
                "kubeconfig": self.first_path,
                "context": name,
                "cluster": cluster_name,
                "server": server,
                "auth": config.auth_kind,
            },
        )
        return config


def _user_values(u: _Fields) -> dict[str, Any]:
    provider = u.e.body.get("auth-provider")
    if provider is not None:
        pname = provider.get("name") if isinstance(provider, Mapping) else None
        raise u.error(
            "auth-provider",
            f"the legacy auth-provider{f' {pname!r}' if isinstance(pname, str) else ''} is "
            "unsupported; configure an exec credential plugin instead "
            "(e.g. gke-gcloud-auth-plugin or kubelogin)",
        )
    cert_file, cert_data = u.one_of("client-certificate", "client-certificate-data")
    key_file, key_data = u.one_of("client-key", "client-key-data")
    token = u.get_str("token")
    token_file = u.file("tokenFile")
    username = u.get_str("username")
    password = u.get_str("password")
    exec_config = _exec_config(u)
    kinds = [
        k
        for k, present in (
            ("token", token is not None or token_file is not None),
            ("username/password", username is not None or password is not None),
            ("exec", exec_config is not None),
        )
        if present
    ]
    if len(kinds) > 1:
        raise u.error(
            None,
            f"must set at most one of token, username/password and exec, got {' and '.join(kinds)}",
        )
    return {
        "client_cert_file": cert_file,
        "client_cert_data": cert_data,
        "client_key_file": key_file,
        "client_key_data": key_data,
        "token": token,
        "token_file": token_file,
        "username": username,
        "password": password,
        "exec": exec_config,
    }


def _exec_config(u: _Fields) -> ExecConfig | None:
    raw = u.e.body.get("exec")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise u.error("exec", "must be a mapping")
    ex = _Fields(_Entry(u.e.name, raw, u.e.path, f"{u.e.field}.exec"))
    command = ex.get_str("command", required=True)
    assert command is not None
    if os.sep in command or (os.altsep and os.altsep in command):
        command = _resolve(command, u.e.path)
    api_version = ex.get_str("apiVersion", required=True)
    if api_version not in EXEC_API_VERSIONS:
        raise ex.error(
            "apiVersion",
            f"{api_version!r} is not supported; use one of {', '.join(EXEC_API_VERSIONS)}",
        )
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ex.error("args", "must be a list of strings")
    env_raw = raw.get("env") or []
    if not isinstance(env_raw, list):
        raise ex.error("env", "must be a list of name/value mappings")
    env: list[tuple[str, str]] = []
    for i, item in enumerate(env_raw):
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise ex.error(f"env[{i}]", "must be a mapping with string name and value")
        env.append((item["name"], item["value"]))
    mode = ex.get_str("interactiveMode") or "IfAvailable"
    if mode not in ("Never", "IfAvailable", "Always"):
        raise ex.error("interactiveMode", "must be Never, IfAvailable or Always")
    return ExecConfig(
        command=command,
        api_version=api_version,
        args=tuple(args),
        env=tuple(env),
        install_hint=ex.get_str("installHint"),
        provide_cluster_info=ex.get_bool("provideClusterInfo"),
        interactive_mode=mode,
    )
