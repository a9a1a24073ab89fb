"""The webhook server's own serving certificate, kept in a Secret, its CA injected where the API
server needs it: what controller-runtime users get from cert-controller, without cert-manager.

:class:`CertRotator` keeps a CA and a serving certificate for the Service ``<name>.<namespace>.svc``
in a Secret (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``), issuing them when the Secret is
empty, unreadable, names other hosts or is close to expiry, and writes the CA into the
``caBundle`` of every webhook of the named ``Mutating``/``ValidatingWebhookConfiguration`` and
of every CRD conversion that calls that Service. Replicas share the Secret: each write carries
the ``resourceVersion`` it read, so when two race, one issues and the other loads what it wrote.
The webhook server's TLS context (:class:`~engine.kube.WebhookCertificates`) is swapped in place,
so connections made after a rotation use the new certificate.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .._access._rbac import PolicyRule
from .._client._client import Client
from .._client._errors import AlreadyExistsError, ApiError, ConflictError, KubeError, NotFoundError, TransportError
from ._review import AdmissionWebhook, ConversionWebhook, Webhook
from ._server import WebhookCertificates, load_server_context

__all__ = ["CertProvisioning", "CertRotator", "issue_serving_certificate"]

logger = logging.getLogger("engine.kube.webhooks")

CA_LIFETIME = datetime.timedelta(days=3650)
CERT_LIFETIME = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
_ADMISSION = "admissionregistration.k8s.io"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _new_ca(common_name: str, now: datetime.datetime, lifetime: datetime.timedelta) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue_serving_certificate(
    ca_cert: bytes, ca_key: bytes, hosts: Sequence[str], *, now: datetime.datetime | None = None,
    lifetime: datetime.timedelta = CERT_LIFETIME,
) -> tuple[bytes, bytes]:
    """A serving certificate for ``hosts`` (DNS names or IP addresses) signed by the CA
    ``ca_cert``/``ca_key`` (PEM), valid for ``lifetime`` from ``now``: its PEM and its key's."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or _utcnow()
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    key = _new_key()
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())  # type: ignore[arg-type]
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _why_reissue(data: Mapping[str, bytes], hosts: Sequence[str], now: datetime.datetime,
                 renew_before: datetime.timedelta) -> tuple[str, bool] | None:
    """Why the Secret's certificates cannot be served as they are, and whether the CA must be
    made anew too; ``None`` when they can."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    if not all(data.get(k) for k in _KEYS):
        return "the Secret holds no certificate yet", True
    try:
        ca = x509.load_pem_x509_certificate(data["ca.crt"])
        ca_key = serialization.load_pem_private_key(data["ca.key"], password=None)
    except ValueError:
        return "the Secret's CA cannot be read", True
    if ca.not_valid_after_utc - renew_before <= now:
        return f"the CA expires at {ca.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}", True
    if ca.public_key().public_numbers() != ca_key.public_key().public_numbers():  # type: ignore[union-attr]
        return "the Secret's CA key does not match its CA", True
    try:
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        key = serialization.load_pem_private_key(data["tls.key"], password=None)
    except ValueError:
        return "the Secret's certificate cannot be read", False
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        return "the Secret's key does not match its certificate", False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the certificate is not signed by the Secret's CA", False
    if cert.not_valid_after_utc - renew_before <= now:
        return f"the certificate expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}", False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the certificate names no host", False
    named = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    named |= {str(n) for n in san.get_values_for_type(x509.IPAddress)}
    missing = [h for h in hosts if h not in named]
    if missing:
        return f"the certificate does not name {', '.join(missing)}", False
    return None


def _decode(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for key, value in dict((secret or {}).get("data") or {}).items():
        try:
            found[key] = base64.b64decode(value or "", validate=True)
        except (ValueError, TypeError):
            found[key] = b""
    return found


def _admission_client_configs(obj: Mapping[str, Any]) -> list[Any]:
    return [w.get("clientConfig") for w in obj.get("webhooks") or [] if isinstance(w, dict)]


def _conversion_client_configs(obj: Mapping[str, Any]) -> list[Any]:
    found: Any = obj
    for key in ("spec", "conversion", "webhook"):
        found = found.get(key) if isinstance(found, dict) else None
    return [found.get("clientConfig")] if isinstance(found, dict) else []


@attrs.frozen
class CertProvisioning:
    """The runner provisions its webhook serving certificate itself (``run --webhook-service``):
    for the Service ``namespace/service``, kept in the Secret ``secret`` (default
    ``<service>-cert``) of that namespace, its CA written into the webhook configurations named
    ``configuration`` and into the CRD conversions that call the Service."""

    service: str
    namespace: str
    configuration: str
    secret: str | None = None

    @property
    def secret_name(self) -> str:
        """The Secret's name."""
        return self.secret or f"{self.service}-cert"

    def configurations(self, webhooks: Sequence[Webhook]) -> tuple[tuple[str, str], ...]:
        """``(kind, name)`` of the configurations ``webhooks`` are registered in."""
        kinds = dict.fromkeys("MutatingWebhookConfiguration" if w.mutating else "ValidatingWebhookConfiguration"
                              for w in webhooks if isinstance(w, AdmissionWebhook))
        return tuple((kind, self.configuration) for kind in sorted(kinds))

    def rules(self, webhooks: Sequence[Webhook], *, create_secret: bool = False) -> tuple[PolicyRule, ...]:
        """What :class:`CertRotator` needs: ``get`` and ``update`` of the Secret (and
        ``create`` of Secrets with ``create_secret``), of the configurations and of the CRDs
        with a conversion webhook."""
        found = [PolicyRule("", "secrets", ("get", "update"), namespace=self.namespace,
                            resource_names=(self.secret_name,))]
        if create_secret:
            found.append(PolicyRule("", "secrets", ("create",), namespace=self.namespace))
        for kind, name in self.configurations(webhooks):
            found.append(PolicyRule(_ADMISSION, kind.lower() + "s", ("get", "update"), cluster_wide=True,
                                    resource_names=(name,)))
        crds = sorted({w.crd for w in webhooks if isinstance(w, ConversionWebhook)})
        if crds:
            found.append(PolicyRule("apiextensions.k8s.io", "customresourcedefinitions", ("get", "update"),
                                    cluster_wide=True, resource_names=tuple(crds)))
        return tuple(found)

    def rotator(self, client: Client, webhooks: Sequence[Webhook], certificates: WebhookCertificates) -> CertRotator:
        """The :class:`CertRotator` keeping the certificate of ``webhooks`` served with ``certificates``."""
        return CertRotator(client, self.service, self.namespace, certificates,
                           configurations=self.configurations(webhooks),
                           crds=sorted({w.crd for w in webhooks if isinstance(w, ConversionWebhook)}),
                           secret=self.secret_name)


@attrs.define(eq=False)
class CertRotator:
    """Keeps the serving certificate of the webhooks behind Service ``namespace/service`` in
    the Secret ``namespace/secret`` (default ``<service>-cert``) and its CA in the ``caBundle``
    of the webhook configurations named ``configurations`` and of the conversion of the CRDs
    named ``crds``, where they call that Service. ``certificates`` is the webhook server's: its
    context is replaced whenever the Secret's certificate changes.

    The RBAC it needs: ``get`` and ``update`` of that Secret (``create`` too when it may not
    exist), and ``get`` and ``update`` of those configurations and CRDs.
    """

    client: Client
    service: str
    namespace: str
    certificates: WebhookCertificates
    configurations: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=tuple[tuple[str, str], ...])
    crds: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    secret: str = attrs.field(default=attrs.Factory(lambda self: f"{self.service}-cert", takes_self=True))
    ca_lifetime: datetime.timedelta = CA_LIFETIME
    cert_lifetime: datetime.timedelta = CERT_LIFETIME
    renew_before: datetime.timedelta = RENEW_BEFORE
    """A certificate (or CA) is issued anew once it has less than this left."""
    check_interval: float = 60.0
    """Seconds between checks of the Secret and the ``caBundle`` values after the first."""
    now: Callable[[], datetime.datetime] = _utcnow
    issued: int = 0
    """Certificates this rotator issued and wrote to the Secret."""
    loaded: int = 0
    """Times a changed certificate was loaded into the server's context."""
    injected: int = 0
    """``caBundle`` values this rotator wrote."""
    _current: tuple[bytes, bytes, bytes] | None = None

    @property
    def hosts(self) -> list[str]:
        """The names the certificate is for: how an API server addresses the Service."""
        return [f"{self.service}.{self.namespace}.svc", f"{self.service}.{self.namespace}.svc.cluster.local"]

    async def sync(self) -> None:
        """One pass: the Secret made valid (issued, renewed or left as it is), the server's
        context loaded from it if it changed, every ``caBundle`` set to its CA. Raises
        :class:`KubeError` when the server refuses (one line naming the object).

        Cancellation: a write sent stays written; the server's context is not half-replaced.
        """
        data = await self._ensure_secret()
        self._load(data)
        await self._inject(data["ca.crt"])

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """:meth:`sync` until it first succeeds (failures logged, retried with backoff up to
        ``check_interval``), then ``task_status.started()``, then again every
        ``check_interval`` seconds, a failure logged and retried at the next check.

        Cancellation: the only way it ends once started.
        """
        delay = 1.0
        while True:
            try:
                await self.sync()
                break
            except (KubeError, TransportError) as exc:
                logger.error("webhook certificate: %s; retrying in %g s", exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, self.check_interval)
        task_status.started()
        while True:
            await trio.sleep(self.check_interval)
            try:
                await self.sync()
            except (KubeError, TransportError) as exc:
                logger.error("webhook certificate: %s; checking again in %g s", exc, self.check_interval)

    async def _ensure_secret(self) -> dict[str, bytes]:
        secrets = await self.client.resource("v1", "Secret")
        where = f"Secret {self.namespace}/{self.secret}"
        for _ in range(5):
            try:
                obj: dict[str, Any] | None = await self.client.get(secrets, self.secret, namespace=self.namespace)
            except NotFoundError:
                obj = None
            except ApiError as exc:
                raise KubeError(f"cannot read the webhook certificate's {where}: {exc}") from None
            data = _decode(obj)
            now = self.now()
            why = _why_reissue(data, self.hosts, now, self.renew_before)
            if why is None:
                return data
            reason, new_ca = why
            if new_ca:
                data["ca.crt"], data["ca.key"] = _new_ca(f"{self.service}-ca", now, self.ca_lifetime)
            data["tls.crt"], data["tls.key"] = issue_serving_certificate(
                data["ca.crt"], data["ca.key"], self.hosts, now=now, lifetime=self.cert_lifetime)
            encoded = {**dict((obj or {}).get("data") or {}),
                       **{k: base64.b64encode(data[k]).decode() for k in _KEYS}}
            try:
                if obj is None:
                    await self.client.create(secrets, {
                        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                        "metadata": {"name": self.secret, "namespace": self.namespace}, "data": encoded,
                    }, namespace=self.namespace)
                else:
                    await self.client.update(secrets, {**obj, "data": encoded}, namespace=self.namespace)
            except (ConflictError, AlreadyExistsError):
                continue
            except ApiError as exc:
                raise KubeError(f"cannot write the webhook certificate to {where}: {exc}") from None
            self.issued += 1
            logger.info("webhook certificate issued for %s (%s)", self.hosts[0], reason,
                        extra={"secret": f"{self.namespace}/{self.secret}", "new_ca": new_ca})
            return data
        raise KubeError(f"cannot write the webhook certificate to {where}: it kept changing under this replica")

    def _load(self, data: Mapping[str, bytes]) -> None:
        current = (data["tls.crt"], data["tls.key"], data["ca.crt"])
        if current == self._current:
            return
        with tempfile.TemporaryDirectory(prefix="engine-webhook-certs-") as directory:
            cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            for path, content in ((cert, data["tls.crt"]), (key, data["tls.key"])):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as file:
                    file.write(content)
            self.certificates.context = load_server_context(cert, key)
        self.certificates.ca_bundle = data["ca.crt"]
        self._current = current
        self.loaded += 1

    def _calls_us(self, client_config: Any) -> bool:
        service = client_config.get("service") if isinstance(client_config, dict) else None
        return isinstance(service, dict) and service.get("name") == self.service \
            and service.get("namespace") == self.namespace

    async def _inject(self, ca: bytes) -> None:
        bundle = base64.b64encode(ca).decode()
        for kind, name in self.configurations:
            resource = await self.client.resource(f"{_ADMISSION}/v1", kind)
            await self._update(resource, f"{kind} {name}", name, _admission_client_configs, bundle)
        if self.crds:
            crds = await self.client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            for name in self.crds:
                await self._update(crds, f"CustomResourceDefinition {name}", name, _conversion_client_configs, bundle)

    async def _update(self, resource: Any, what: str, name: str,
                      configs: Callable[[Mapping[str, Any]], list[Any]], bundle: str) -> None:
        for _ in range(5):
            try:
                obj = await self.client.get(resource, name)
            except NotFoundError:
                logger.warning("webhook certificate: %s not found; its caBundle is not set", what)
                return
            except ApiError as exc:
                raise KubeError(f"cannot read {what} to set its caBundle: {exc}") from None
            stale = [c for c in configs(obj) if self._calls_us(c) and c.get("caBundle") != bundle]
            if not stale:
                return
            for config in stale:
                config["caBundle"] = bundle
            try:
                await self.client.update(resource, obj)
            except ConflictError:
                continue
            except ApiError as exc:
                raise KubeError(f"cannot set the caBundle of {what}: {exc}") from None
            self.injected += len(stale)
            logger.info("webhook certificate: CA written into %s", what, extra={"webhooks": len(stale)})
            return
        raise KubeError(f"cannot set the caBundle of {what}: it kept changing under this replica")
