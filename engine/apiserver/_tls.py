"""Certificates for TLS mode: a throw-away CA, a server certificate and a client certificate.

``trustme`` is imported only here, so plain HTTP mode does not need it.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

import attrs

from ._errors import ApiServerError

__all__ = ["TlsMaterial", "CLIENT_IDENTITY", "common_name"]

CLIENT_IDENTITY = "kubernetes-admin"
"""The common name of the kubeconfig's client certificate: the user the other transports' admin
credentials name too."""


@attrs.frozen
class TlsMaterial:
    """PEM bytes for the kubeconfig and the server's SSL context."""

    ca_pem: bytes
    """The CA certificate clients trust."""
    client_cert_pem: bytes
    """A client certificate whose common name is :data:`CLIENT_IDENTITY`, in the organization
    ``system:masters``."""
    client_key_pem: bytes
    """The client certificate's private key."""
    server_context: ssl.SSLContext
    """Server side: presents the server certificate, asks for (and verifies) a client certificate."""
    ca: Any = attrs.field(repr=False)
    """The ``trustme.CA`` that signs client certificates."""

    def issue_client(self, user: str, groups: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """``(certificate, key)`` PEM of a client certificate for ``user`` (common name) in
        ``groups`` (organizations; a certificate names at most one here)."""
        if len(groups) > 1:
            raise ValueError("a generated client certificate names at most one group (organization)")
        cert = self.ca.issue_cert(f"{user.replace(':', '-')}.client.invalid", common_name=user,
                                  organization_name=groups[0] if groups else None)
        return b"".join(p.bytes() for p in cert.cert_chain_pems), cert.private_key_pem.bytes()

    @classmethod
    def generate(cls, hosts: list[str]) -> TlsMaterial:
        """A fresh CA with certificates for ``hosts`` and for the client."""
        try:
            import trustme
        except ImportError:
            raise ApiServerError("TLS mode needs the trustme package (pip install trustme)") from None
        ca = trustme.CA(organization_name="engine.testing")
        server = ca.issue_cert(*hosts)
        client = ca.issue_cert(
            f"{CLIENT_IDENTITY}.client.invalid", common_name=CLIENT_IDENTITY, organization_name="system:masters"
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.configure_cert(context)
        ca.configure_trust(context)
        context.verify_mode = ssl.CERT_OPTIONAL
        return cls(
            ca_pem=ca.cert_pem.bytes(),
            client_cert_pem=b"".join(p.bytes() for p in client.cert_chain_pems),
            client_key_pem=client.private_key_pem.bytes(),
            server_context=context,
            ca=ca,
        )


def common_name(peer: object) -> str | None:
    """The subject common name of a certificate as ``SSLObject.getpeercert()`` returns it."""
    if not isinstance(peer, dict):
        return None
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
