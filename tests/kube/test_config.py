from __future__ import annotations

import base64
import functools
import os
import socket
import ssl
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
import yaml

from engine.kube import BearerTokenAuth, Config, ConfigError, TokenFileAuth
from engine.kube.lowlevel import ExecAuth, ExecCredential

SECRET = "sekrit-TOKEN-0123456789"


def kubeconfig(
    *,
    server: str | None = "https://10.0.0.1:6443",
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    current: str | None = "dev",
) -> dict[str, Any]:
    cl: dict[str, Any] = {} if server is None else {"server": server}
    cl.update(cluster or {})
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c1", "cluster": cl}],
        "users": [
            {"name": "u1", "user": user if user is not None else {"token": SECRET}}
        ],
        "contexts": [
            {
                "name": "dev",
                "context": {"cluster": "c1", "user": "u1", **(context or {})},
            }
        ],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def write(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    for var in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


# --- loading


def test_from_kubeconfig_token(tmp_path: Path) -> None:
    path = write(tmp_path / "config", kubeconfig(context={"namespace": "team-a"}))
    config = Config.from_kubeconfig(path)
    assert config.server == "https://10.0.0.1:6443"
    assert (config.context, config.cluster, config.user) == ("dev", "c1", "u1")
    assert config.namespace == "team-a"
    assert config.source == str(path)
    assert config.auth_kind == "token"
    assert config.token == SECRET
    assert isinstance(config.auth(), BearerTokenAuth)


def test_namespace_defaults_and_scheme_added() -> None:
    config = Config.from_dict(kubeconfig(server="api.example.com:6443"))
    assert config.namespace == "default"
    assert config.server == "https://api.example.com:6443"


def test_default_path_is_home_kube_config(tmp_path: Path) -> None:
    kube = tmp_path / "home" / ".kube"
    kube.mkdir()
    write(kube / "config", kubeconfig())
    assert Config.from_kubeconfig().source == str(kube / "config")


def test_kubeconfig_env_merges_first_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first = {
        "clusters": [
            {
                "name": "c1",
                "cluster": {
                    "server": "https://first:1",
                    "certificate-authority": "ca.pem",
                },
            }
        ],
        "users": [{"name": "u1", "user": {"tokenFile": "tok"}}],
    }
    second = kubeconfig(server="https://second:2", current="other")
    second["contexts"].append(
        {"name": "other", "context": {"cluster": "c2", "user": "u1"}}
    )
    second["clusters"].append(
        {
            "name": "c2",
            "cluster": {"server": "https://c2:3", "certificate-authority": "ca.pem"},
        }
    )
    third = kubeconfig(current="dev")
    monkeypatch.setenv(
        "KUBECONFIG",
        os.pathsep.join(
            [
                str(write(a / "config", first)),
                str(tmp_path / "missing"),
                str(write(b / "config", second)),
                str(write(tmp_path / "third", third)),
            ]
        ),
    )
    config = Config.from_kubeconfig()
    assert config.context == "other"
    assert config.cluster == "c2"
    assert config.server == "https://c2:3"
    assert config.ca_file == str(b / "ca.pem")
    assert config.token_file == str(a / "tok")
    dev = Config.from_kubeconfig(context="dev")
    assert dev.server == "https://first:1"
    assert dev.ca_file == str(a / "ca.pem")


def test_relative_paths_resolved_against_kubeconfig_dir(tmp_path: Path) -> None:
    doc = kubeconfig(
        cluster={"certificate-authority": "certs/ca.pem"},
        user={"client-certificate": "c.pem", "client-key": "/abs/k.pem"},
    )
    config = Config.from_dict(doc, path=tmp_path / "config")
    assert config.ca_file == str(tmp_path / "certs" / "ca.pem")
    assert config.client_cert_file == str(tmp_path / "c.pem")
    assert config.client_key_file == "/abs/k.pem"
    assert Config.from_dict(doc).ca_file == "certs/ca.pem"


def test_context_override_and_anonymous_user() -> None:
    doc = kubeconfig()
    doc["contexts"].append({"name": "anon", "context": {"cluster": "c1"}})
    config = Config.from_dict(doc, context="anon")
    assert config.user is None
    assert config.auth_kind == "none"
    assert config.auth() is None


def test_basic_auth(tmp_path: Path) -> None:
    config = Config.from_dict(
        kubeconfig(user={"username": "admin", "password": SECRET})
    )
    assert config.auth_kind == "basic"
    auth = config.auth()
    assert isinstance(auth, httpx.BasicAuth)
    request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
    assert request.headers["Authorization"] == "Basic " + b64(
        f"admin:{SECRET}".encode()
    )


def test_token_file_wins_over_token(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    config = Config.from_dict(
        kubeconfig(user={"token": SECRET, "tokenFile": "tok"}), path=tmp_path / "config"
    )
    auth = config.auth()
    assert isinstance(auth, TokenFileAuth)
    request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
    assert request.headers["Authorization"] == "Bearer from-file"


def test_exec_config_parsed(tmp_path: Path) -> None:
    config = Config.from_dict(
        kubeconfig(
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "./bin/plugin",
                    "args": ["get-token"],
                    "env": [{"name": "PLUGIN_SECRET", "value": SECRET}],
                    "provideClusterInfo": True,
                    "interactiveMode": "Never",
                }
            }
        ),
        path=tmp_path / "config",
    )
    assert config.exec is not None
    assert config.exec.command == str(tmp_path / "bin" / "plugin")
    assert config.exec.args == ("get-token",)
    assert config.exec.env == (("PLUGIN_SECRET", SECRET),)
    assert config.auth_kind == "exec"
    assert isinstance(config.auth(), ExecAuth)
    bare = Config.from_dict(
        kubeconfig(
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "plugin",
                }
            }
        ),
        path=tmp_path / "config",
    )
    assert bare.exec is not None and bare.exec.command == "plugin"


def test_httpx_client_kwargs(ca: trustme.CA) -> None:
    config = Config.from_dict(
        kubeconfig(
            cluster={
                "certificate-authority-data": b64(ca.cert_pem.bytes()),
                "proxy-url": "http://proxy.local:3128",
            }
        )
    )
    kwargs = config.httpx_client_kwargs()
    assert set(kwargs) == {"base_url", "verify", "auth", "proxy"}
    assert kwargs["base_url"] == "https://10.0.0.1:6443"
    assert isinstance(kwargs["verify"], ssl.SSLContext)
    assert isinstance(kwargs["auth"], BearerTokenAuth)
    assert kwargs["proxy"] == "http://proxy.local:3128"
    httpx.AsyncClient(**kwargs)
    assert "proxy" not in Config.from_dict(kubeconfig()).httpx_client_kwargs()


# --- secrets


def test_secrets_not_in_repr(ca: trustme.CA) -> None:
    key = ca.issue_cert("client").private_key_pem.bytes()
    config = Config.from_dict(
        kubeconfig(
            user={
                "token": SECRET,
                "client-key-data": b64(key + SECRET.encode()),
                "client-certificate-data": b64(b"cert"),
            }
        )
    )
    text = repr(config)
    assert SECRET not in text
    assert "PRIVATE KEY" not in text
    assert "token=<redacted>" in text
    assert SECRET not in repr(config.auth())
    basic = Config.from_dict(kubeconfig(user={"username": "u", "password": SECRET}))
    assert SECRET not in repr(basic)
    assert SECRET not in repr(basic.auth())
    exec_config = Config.from_dict(
        kubeconfig(
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "p",
                    "env": [{"name": "X", "value": SECRET}],
                }
            }
        )
    )
    assert SECRET not in repr(exec_config)
    assert "'X'" in repr(exec_config)


def test_no_kind_of_secret_in_the_repr_of_config_or_credentials(ca: trustme.CA, tmp_path: Path) -> None:
    """A token, a password in a proxy URL, a client key and an exec env var (and exec
    arguments, which may carry a token) never show in a repr."""
    key = ca.issue_cert("client").private_key_pem.bytes()
    body = key.decode().splitlines()[1]
    config = Config.from_dict(
        kubeconfig(
            cluster={"proxy-url": "http://alice:hunter2-PASS@proxy.local:3128"},
            user={
                "client-key-data": b64(key),
                "client-certificate-data": b64(b"cert"),
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "get-token",
                    "args": ["--token", "arg-TOKEN-123"],
                    "env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalr-ENV-VALUE"}],
                },
            },
        ),
        path=tmp_path / "config",
    )
    token = Config(server="https://bob:server-PASS@10.0.0.1:6443", token="abc.def")
    exec_auth = config.auth()
    credential = ExecCredential(token="abc.def", client_key_data=key)
    texts = [repr(x) for x in (config, config.exec, exec_auth, token, token.auth(), credential)]
    file_auth = TokenFileAuth(write(tmp_path / "token", "abc.def"))
    assert file_auth.token() == "abc.def"
    texts.append(repr(file_auth))
    for text in texts:
        for secret in ("abc.def", "hunter2-PASS", "server-PASS", body, "wJalr-ENV-VALUE", "arg-TOKEN-123"):
            assert secret not in text, (secret, text)
    assert "proxy_url='http://alice:<redacted>@proxy.local:3128'" in texts[0]
    assert "command='get-token'" in texts[0] and "'AWS_SECRET_ACCESS_KEY'" in texts[0]


def test_secrets_not_in_errors(tmp_path: Path) -> None:
    bad = kubeconfig(user={"token": SECRET, "client-key-data": SECRET + "!!"})
    with pytest.raises(ConfigError) as info:
        Config.from_dict(bad, path=tmp_path / "config")
    assert SECRET not in str(info.value)
    text = yaml.safe_dump(kubeconfig(user={"token": SECRET})) + "\n  : bad: [\n"
    with pytest.raises(ConfigError) as info:
        Config.from_kubeconfig(write(tmp_path / "y", text))
    assert SECRET not in str(info.value)


# --- errors


def test_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(
        ConfigError, match=rf"^{missing}: kubeconfig file does not exist$"
    ) as info:
        Config.from_kubeconfig(missing)
    assert info.value.path == str(missing)
    assert info.value.field is None


def test_no_kubeconfig_env_files_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "x"))
    with pytest.raises(
        ConfigError, match=r": none of the files listed in KUBECONFIG exists$"
    ):
        Config.from_kubeconfig()


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        "clusters:\n- name: a\n  cluster: {server: x\ncontexts: []\n",
    )
    with pytest.raises(
        ConfigError,
        match=rf"^{path}: kubeconfig is not valid YAML: .* at line 4, column \d+$",
    ):
        Config.from_kubeconfig(path)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "config", "- a\n- b\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: kubeconfig must be a YAML mapping, got list$"
    ):
        Config.from_kubeconfig(path)


def test_missing_clusters(tmp_path: Path) -> None:
    doc = kubeconfig()
    del doc["clusters"]
    with pytest.raises(
        ConfigError,
        match=r"^.*/config: clusters: is required: the kubeconfig defines no clusters$",
    ) as info:
        Config.from_dict(doc, path=tmp_path / "config")
    assert info.value.field == "clusters"


def test_missing_server() -> None:
    with pytest.raises(
        ConfigError, match=r"^clusters\[name=c1\]\.cluster\.server: is required$"
    ) as info:
        Config.from_dict(kubeconfig(server=None))
    assert info.value.path is None


def test_bad_server_url() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster\.server: must be an http or https URL$",
    ):
        Config.from_dict(kubeconfig(server="ftp://host"))


def test_context_references_missing_cluster(tmp_path: Path) -> None:
    doc = kubeconfig(context={"cluster": "ghost"})
    with pytest.raises(
        ConfigError,
        match=r"^.*config: contexts\[name=dev\]\.context\.cluster: names cluster 'ghost', which is not defined in clusters$",
    ) as info:
        Config.from_dict(doc, path=tmp_path / "config")
    assert info.value.field == "contexts[name=dev].context.cluster"
    assert info.value.path == str(tmp_path / "config")


def test_context_without_cluster() -> None:
    doc = kubeconfig()
    del doc["contexts"][0]["context"]["cluster"]
    with pytest.raises(
        ConfigError, match=r"^contexts\[name=dev\]\.context\.cluster: is required$"
    ):
        Config.from_dict(doc)


def test_context_references_missing_user() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^contexts\[name=dev\]\.context\.user: names user 'ghost', which is not defined in users$",
    ):
        Config.from_dict(kubeconfig(context={"user": "ghost"}))


def test_unknown_context() -> None:
    with pytest.raises(ConfigError, match=r"^contexts: context 'prod' is not defined$"):
        Config.from_dict(kubeconfig(), context="prod")


def test_current_context_not_defined() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^current-context: names context 'prod', which is not defined in contexts$",
    ):
        Config.from_dict(kubeconfig(current="prod"))


def test_no_current_context() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^current-context: no current-context is set and no context was given$",
    ):
        Config.from_dict(kubeconfig(current=None))


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("cluster", "certificate-authority-data"),
        ("user", "client-certificate-data"),
        ("user", "client-key-data"),
    ],
)
def test_bad_base64(where: str, key: str) -> None:
    if where == "cluster":
        doc = kubeconfig(cluster={key: "not base64!"})
        field = rf"clusters\[name=c1\]\.cluster\.{key}"
    else:
        doc = kubeconfig(user={key: "not base64!"})
        field = rf"users\[name=u1\]\.user\.{key}"
    with pytest.raises(ConfigError, match=rf"^{field}: is not valid base64$") as info:
        Config.from_dict(doc)
    assert info.value.field == field.replace("\\", "")


def test_file_and_data_both_set() -> None:
    doc = kubeconfig(
        cluster={
            "certificate-authority": "/ca",
            "certificate-authority-data": b64(b"x"),
        }
    )
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster: must set certificate-authority or certificate-authority-data, not both$",
    ):
        Config.from_dict(doc)


@pytest.mark.parametrize(
    ("where", "key", "field"),
    [
        (
            "cluster",
            "certificate-authority",
            r"clusters\[name=c1\]\.cluster\.certificate-authority",
        ),
        ("user", "client-certificate", r"users\[name=u1\]\.user\.client-certificate"),
        ("user", "client-key", r"users\[name=u1\]\.user\.client-key"),
    ],
)
def test_unreadable_files(tmp_path: Path, where: str, key: str, field: str) -> None:
    other = "client-key" if key == "client-certificate" else "client-certificate"
    (tmp_path / "present.pem").write_text("x")
    if where == "cluster":
        doc = kubeconfig(cluster={key: "gone.pem"})
    else:
        doc = kubeconfig(user={key: "gone.pem", other: "present.pem"})
    config = Config.from_dict(doc, path=tmp_path / "config")
    gone = tmp_path / "gone.pem"
    with pytest.raises(
        ConfigError,
        match=rf"^.*config: {field}: file {gone} cannot be read \(FileNotFoundError\)$",
    ):
        config.ssl_context()


def test_ca_data_not_pem() -> None:
    config = Config.from_dict(
        kubeconfig(cluster={"certificate-authority-data": b64(b"garbage")})
    )
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster\.certificate-authority-data: must contain PEM CA certificates$",
    ):
        config.ssl_context()


def test_cert_without_key(ca: trustme.CA) -> None:
    config = Config.from_dict(kubeconfig(user={"client-certificate-data": b64(b"x")}))
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u1\]\.user: a client certificate and a client key must be given together$",
    ):
        config.ssl_context()


@pytest.mark.parametrize(
    ("cert_key", "key_key", "field", "rule"),
    [
        ("client-certificate-data", "client-key-data", "client-key-data", "must be a PEM private key"),
        ("client-certificate-data", "client-key", "client-key", "must be a PEM private key"),
        ("client-certificate-data", "client-key-data", "client-certificate-data", "must be a PEM certificate"),
    ],
)
def test_garbage_client_credentials_name_the_field(
    ca: trustme.CA, tmp_path: Path, cert_key: str, key_key: str, field: str, rule: str
) -> None:
    client = ca.issue_cert("client")
    cert, key = client.cert_chain_pems[0].bytes(), client.private_key_pem.bytes()
    if field == cert_key:
        cert = b"garbage"
    else:
        key = b"garbage"
    (tmp_path / "k.pem").write_bytes(key)
    user = {cert_key: b64(cert), key_key: b64(key) if key_key.endswith("-data") else "k.pem"}
    config = Config.from_dict(kubeconfig(user=user), path=tmp_path / "config")
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'config'}: users\[name=u1\]\.user\.{field}: {rule}$"):
        config.ssl_context()


def test_mismatched_cert_and_key(ca: trustme.CA) -> None:
    one, two = ca.issue_cert("a"), ca.issue_cert("b")
    config = Config.from_dict(
        kubeconfig(
            user={
                "client-certificate-data": b64(one.cert_chain_pems[0].bytes()),
                "client-key-data": b64(two.private_key_pem.bytes()),
            }
        )
    )
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u1\]\.user: client certificate and key must be a matching PEM certificate and private key$",
    ):
        config.ssl_context()


def test_exec_without_command() -> None:
    doc = kubeconfig(user={"exec": {"apiVersion": "client.authentication.k8s.io/v1"}})
    with pytest.raises(
        ConfigError, match=r"^users\[name=u1\]\.user\.exec\.command: is required$"
    ):
        Config.from_dict(doc)


def test_exec_api_version_unsupported() -> None:
    doc = kubeconfig(
        user={
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1alpha1",
                "command": "p",
            }
        }
    )
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u1\]\.user\.exec\.apiVersion: 'client.authentication.k8s.io/v1alpha1' is not supported; use one of client.authentication.k8s.io/v1, client.authentication.k8s.io/v1beta1$",
    ):
        Config.from_dict(doc)


def test_exec_api_version_missing() -> None:
    with pytest.raises(
        ConfigError, match=r"^users\[name=u1\]\.user\.exec\.apiVersion: is required$"
    ):
        Config.from_dict(kubeconfig(user={"exec": {"command": "p"}}))


@pytest.mark.parametrize("provider", ["gcp", "azure", "oidc"])
def test_auth_provider_rejected(provider: str) -> None:
    doc = kubeconfig(
        user={"auth-provider": {"name": provider, "config": {"id-token": SECRET}}}
    )
    with pytest.raises(
        ConfigError,
        match=rf"^users\[name=u1\]\.user\.auth-provider: the legacy auth-provider '{provider}' is unsupported; configure an exec credential plugin instead",
    ) as info:
        Config.from_dict(doc)
    assert SECRET not in str(info.value)


def test_two_auth_methods_rejected() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^users\[name=u1\]\.user: must set at most one of token, username/password and exec, got token and username/password$",
    ):
        Config.from_dict(
            kubeconfig(user={"token": SECRET, "username": "a", "password": "b"})
        )


@pytest.mark.parametrize("name", ["a" * 64 + ".example", "bad..name", "\u2028"])
def test_a_tls_server_name_tls_cannot_send_is_rejected_naming_the_field(name: str) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster\.tls-server-name: must be a DNS name or an IP address$",
    ):
        Config.from_dict(kubeconfig(cluster={"tls-server-name": name}))


def test_a_tls_server_name_is_checked_when_a_config_is_made_and_before_a_socket_is_wrapped() -> None:
    bad = "a" * 64 + ".example"
    with pytest.raises(ValueError, match="^tls_server_name must be a DNS name or an IP address$"):
        Config(server="https://10.0.0.1:6443", tls_server_name=bad)
    context = Config(server="https://10.0.0.1:6443", tls_server_name="kube.internal").ssl_context()
    context.engine_server_name = bad  # type: ignore[attr-defined]
    with socket.socket() as sock:
        with pytest.raises(UnicodeError):
            context.wrap_socket(sock, server_hostname="10.0.0.1", do_handshake_on_connect=False)
        assert sock.fileno() != -1, "the socket was detached, and would leak"


def test_insecure_with_ca_rejected() -> None:
    doc = kubeconfig(
        cluster={"insecure-skip-tls-verify": True, "certificate-authority": "/ca"}
    )
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster\.insecure-skip-tls-verify: must not be true when a certificate authority is also given$",
    ):
        Config.from_dict(doc)


def test_wrong_types() -> None:
    with pytest.raises(
        ConfigError, match=r"^clusters: must be a list of named cluster entries$"
    ):
        Config.from_dict({**kubeconfig(), "clusters": {"c1": {}}})
    with pytest.raises(
        ConfigError, match=r"^users\[1\]\.name: must be a non-empty string$"
    ):
        doc = kubeconfig()
        doc["users"].append({"user": {}})
        Config.from_dict(doc)
    with pytest.raises(
        ConfigError,
        match=r"^clusters\[name=c1\]\.cluster\.insecure-skip-tls-verify: must be true or false, got str$",
    ):
        Config.from_dict(kubeconfig(cluster={"insecure-skip-tls-verify": "yes"}))


# --- TLS


def test_ssl_context_verifies_by_default() -> None:
    ctx = Config.from_dict(kubeconfig()).ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname


def test_ssl_context_insecure_only_when_asked() -> None:
    ctx = Config.from_dict(
        kubeconfig(cluster={"insecure-skip-tls-verify": True})
    ).ssl_context()
    assert ctx.verify_mode == ssl.CERT_NONE
    assert not ctx.check_hostname


def test_ssl_context_loads_ca_file_and_inline_client_cert(
    ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = ca.issue_cert("client@example")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    mkstemp = tempfile.mkstemp
    modes: list[int] = []

    def spying_mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, name = mkstemp(*args, **kwargs)
        modes.append(os.stat(name).st_mode & 0o777)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", spying_mkstemp)
    config = Config.from_dict(
        kubeconfig(
            cluster={"certificate-authority": "ca.pem"},
            user={
                "client-certificate-data": b64(client.cert_chain_pems[0].bytes()),
                "client-key-data": b64(client.private_key_pem.bytes()),
            },
        ),
        path=tmp_path / "config",
    )
    ctx = config.ssl_context()
    assert len(ctx.get_ca_certs()) == 1
    assert modes == [0o600]
    assert list(tmp.iterdir()) == []


def test_ssl_context_client_cert_files(ca: trustme.CA, tmp_path: Path) -> None:
    client = ca.issue_cert("client@example")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    config = Config.from_dict(
        kubeconfig(
            cluster={"certificate-authority-data": b64(ca.cert_pem.bytes())},
            user={"client-certificate": "c.pem", "client-key": "k.pem"},
        ),
        path=tmp_path / "config",
    )
    assert isinstance(config.ssl_context(), ssl.SSLContext)


async def test_real_https_with_client_cert_and_tls_server_name(ca: trustme.CA) -> None:
    """An httpx client built from the config talks to a loopback TLS server requiring client
    certificates, whose certificate names only the tls-server-name, not 127.0.0.1."""
    server_cert = ca.issue_cert("kube.internal")
    client = ca.issue_cert("alice@example")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(server_ctx)
    ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    seen: dict[str, Any] = {}

    async def handler(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, server_ctx, server_side=True)
        await tls.do_handshake()
        seen["peer"] = tls.getpeercert()
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await tls.receive_some()
            if not chunk:
                return
            data += chunk
        seen["request"] = data
        await tls.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        )
        await tls.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        config = Config.from_dict(
            kubeconfig(
                server=f"https://127.0.0.1:{port}",
                cluster={
                    "certificate-authority-data": b64(ca.cert_pem.bytes()),
                    "tls-server-name": "kube.internal",
                },
                user={
                    "token": SECRET,
                    "client-certificate-data": b64(client.cert_chain_pems[0].bytes()),
                    "client-key-data": b64(client.private_key_pem.bytes()),
                },
            )
        )
        async with httpx.AsyncClient(**config.httpx_client_kwargs()) as http:
            response = await http.get("/version")
        nursery.cancel_scope.cancel()
    assert response.status_code == 200
    assert response.text == "ok"
    assert ("email", "alice@example") in seen["peer"]["subjectAltName"]
    assert f"authorization: Bearer {SECRET}".lower().encode() in seen["request"].lower()


async def test_tls_verification_fails_without_server_name(ca: trustme.CA) -> None:
    server_cert = ca.issue_cert("kube.internal")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(server_ctx)

    async def handler(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, server_ctx, server_side=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        config = Config.from_dict(
            kubeconfig(
                server=f"https://127.0.0.1:{port}",
                cluster={"certificate-authority-data": b64(ca.cert_pem.bytes())},
            )
        )
        async with httpx.AsyncClient(**config.httpx_client_kwargs()) as http:
            with pytest.raises(httpx.ConnectError) as info:
                await http.get("/version")
        nursery.cancel_scope.cancel()
    causes = []
    exc: BaseException | None = info.value
    while exc is not None:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(c, ssl.SSLCertVerificationError) for c in causes)


# --- in-cluster and infer


def incluster_dir(
    tmp_path: Path, ca: trustme.CA, *, namespace: str | None = "team-b"
) -> Path:
    base = tmp_path / "sa"
    base.mkdir()
    (base / "token").write_text(SECRET + "\n")
    ca.cert_pem.write_to_path(str(base / "ca.crt"))
    if namespace is not None:
        (base / "namespace").write_text(namespace)
    return base


def test_incluster(tmp_path: Path, ca: trustme.CA) -> None:
    base = incluster_dir(tmp_path, ca)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = Config.incluster(base_dir=base, environ=env)
    assert config.server == "https://10.96.0.1:443"
    assert config.namespace == "team-b"
    assert config.ca_file == str(base / "ca.crt")
    assert config.auth_kind == "token-file"
    assert SECRET not in repr(config)
    auth = config.auth()
    assert isinstance(auth, TokenFileAuth)
    request = next(auth.sync_auth_flow(httpx.Request("GET", "https://x/")))
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(auth)
    assert len(config.ssl_context().get_ca_certs()) == 1


def test_incluster_ipv6_and_default_namespace(tmp_path: Path, ca: trustme.CA) -> None:
    base = incluster_dir(tmp_path, ca, namespace=None)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    config = Config.incluster(base_dir=base, environ=env)
    assert config.server == "https://[fd00::1]:6443"
    assert config.namespace == "default"


def test_incluster_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^KUBERNETES_SERVICE_HOST: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set",
    ):
        Config.incluster(base_dir=tmp_path, environ={})
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(
        ConfigError, match=r"/token: service account token file does not exist$"
    ):
        Config.incluster(base_dir=tmp_path, environ=env)


def test_infer_prefers_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: trustme.CA
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    base = incluster_dir(tmp_path, ca)
    assert Config.infer(incluster_dir=base).server == "https://10.96.0.1:443"
    monkeypatch.setenv("KUBECONFIG", str(write(tmp_path / "config", kubeconfig())))
    assert Config.infer(incluster_dir=base).server == "https://10.0.0.1:6443"


def test_infer_does_not_mask_kubeconfig_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = tmp_path / "home" / ".kube"
    kube.mkdir()
    write(kube / "config", "[]")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(
        ConfigError, match=r"kubeconfig must be a YAML mapping, got list$"
    ):
        Config.infer()


def test_infer_nothing_found() -> None:
    with pytest.raises(
        ConfigError, match=r"^no configuration found: KUBECONFIG is unset"
    ):
        Config.infer()
