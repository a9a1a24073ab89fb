"""Authentication: who a request is.

A request is authenticated, in the order kube-apiserver's authenticators run, by:

- a TLS client certificate the server's CA signed: the common name is the user, each
  organization a group, plus ``system:authenticated``, with the credential id
  ``X509SHA256=<hex digest of the certificate>`` in ``extra`` (the kubeconfig's certificate is
  ``kubernetes-admin`` in ``system:masters``);
- a bearer token (``Authorization: Bearer ...``): the server's admin token (the kubeconfig's
  credential over plain HTTP, ``kubernetes-admin`` in ``system:masters``, as a
  ``--token-auth-file`` line names a user), or a service account token the server issued
  (``serviceaccounts/{name}/token``, ``kubectl create token``), signed with the server's own
  key, valid until its expiry while its service account (and, if it is bound to one, its
  Secret or Pod) still exists with the same uid. A service account token names
  ``system:serviceaccount:<namespace>:<name>`` (uid the service account's) in the groups
  ``system:serviceaccounts``, ``system:serviceaccounts:<namespace>`` and
  ``system:authenticated``, with the credential id ``JTI=<the token's jti>``. Any other token,
  expired or not, is refused (401). An ``Authorization`` header of another scheme, or an
  empty bearer token, is no credential (as kube-apiserver, which has no basic auth, ignores it);
- neither: a request that came over a socket is ``system:anonymous`` in
  ``system:unauthenticated`` (kube-apiserver's default ``--anonymous-auth=true``), whom the
  bootstrap roles let read ``/healthz``, ``/livez``, ``/readyz`` and ``/version`` only (see
  :mod:`._access`); one that came through the in-process memory or direct transport is the
  kubeconfig's user. Those transports open no socket, so only code in the server's own process
  reaches them, and it could read the store directly anyway.

The admin token and the token signing key never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import random
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from ._errors import RequestRejected
from ._objects import Obj, meta
from ._resources import ResourceType
from ._tls import common_name

__all__ = ["ADMIN", "ANONYMOUS", "Authenticator", "UserInfo", "bearer_token", "certificate_user", "organizations", "unauthorized"]

ISSUER = "https://kubernetes.default.svc.cluster.local"


@attrs.frozen
class UserInfo:
    """An authenticated identity, as ``SelfSubjectReview`` shows it."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``user.Info``'s extra, as ``(key, values)`` pairs."""

    @property
    def admin(self) -> bool:
        """Whether the user is in ``system:masters`` (allowed everything, never checked)."""
        return "system:masters" in self.groups

    @property
    def anonymous(self) -> bool:
        """Whether the request carried no credentials (the group ``system:unauthenticated``)."""
        return "system:unauthenticated" in self.groups

    def to_json(self) -> dict[str, Any]:
        """The ``userInfo`` of a review."""
        out: dict[str, Any] = {"username": self.username}
        if self.uid:
            out["uid"] = self.uid
        out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {key: list(values) for key, values in self.extra}
        return out


ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
"""The embedded server's administrator: the user of its kubeconfig."""

ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))
"""Who a request without credentials over a socket is."""


def unauthorized() -> RequestRejected:
    """The real server's 401 answer."""
    return RequestRejected(401, "Unauthorized", "Unauthorized")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, as kube-apiserver reads it;
    ``None`` for no header, another scheme or an empty token."""
    parts = (authorization or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def certificate_user(peer: object, der: bytes | None) -> UserInfo | None:
    """The user a verified client certificate names (``None`` without a common name):
    ``getpeercert()``'s dict and the certificate's DER bytes."""
    name = common_name(peer)
    if name is None:
        return None
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if der:
        extra = (("authentication.kubernetes.io/credential-id", (f"X509SHA256={hashlib.sha256(der).hexdigest()}",)),)
    return UserInfo(name, (*organizations(peer), "system:authenticated"), extra=extra)


class _Lookup(Protocol):
    def find_type(self, group: str, version: str, plural: str) -> ResourceType | None: ...

    def lookup(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None: ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def organizations(peer: object) -> tuple[str, ...]:
    """The subject organizations of a certificate as ``SSLObject.getpeercert()`` returns it."""
    if not isinstance(peer, dict):
        return ()
    return tuple(str(value) for rdn in peer.get("subject", ()) for key, value in rdn if key == "organizationName")


@attrs.define(eq=False)
class Authenticator:
    """Issues and verifies the server's service account tokens, and holds its admin token.

    ``seed`` makes the signing key and the tokens' ``jti`` (and so the tokens) reproducible;
    without it they are random. The admin token is random either way (nothing reproducible
    depends on it). Neither the key nor the admin token leaves the server but through
    :attr:`admin_token`.
    """

    seed: int | None = None
    _key: bytes = attrs.field(init=False, repr=False)
    _admin_token: str = attrs.field(init=False, repr=False, factory=lambda: secrets.token_hex(32))
    _jti: random.Random = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.seed is None:
            self._key = secrets.token_bytes(32)
            self._jti = random.SystemRandom()
        else:
            self._key = random.Random(f"token-key-{self.seed}").randbytes(32)
            self._jti = random.Random(f"token-jti-{self.seed}")

    @property
    def admin_token(self) -> str:
        """The bearer token of ``kubernetes-admin`` (``system:masters``)."""
        return self._admin_token

    def new_jti(self) -> str:
        """A fresh token id (a random UUID, as kube-apiserver's)."""
        return str(uuid.UUID(int=self._jti.getrandbits(128), version=4))

    def _sign(self, signing_input: bytes) -> str:
        return _b64(hmac.new(self._key, signing_input, hashlib.sha256).digest())

    def issue(self, claims: Mapping[str, Any]) -> str:
        """A signed JWT carrying ``claims``."""
        header = _b64(json.dumps({"alg": "HS256", "kid": "embedded-apiserver"}, separators=(",", ":")).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}"
        return f"{signing_input}.{self._sign(signing_input.encode())}"

    def verify(self, token: str, storage: _Lookup, now: Callable[[], float]) -> UserInfo:
        """The service account a token of this server names; raises the 401
        :class:`RequestRejected` for any other token, an expired one, or one whose service
        account or bound object is gone (or was recreated)."""
        parts = token.split(".")
        if len(parts) != 3:
            raise unauthorized()
        signing_input = f"{parts[0]}.{parts[1]}".encode()
        if not hmac.compare_digest(self._sign(signing_input), parts[2]):
            raise unauthorized()
        try:
            claims = json.loads(_unb64(parts[1]))
        except (binascii.Error, ValueError):
            raise unauthorized() from None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int) or claims["exp"] <= now():
            raise unauthorized()
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            raise unauthorized()
        namespace = str(private.get("namespace", ""))
        account = private.get("serviceaccount") or {}
        if not self._exists(storage, "serviceaccounts", namespace, account):
            raise unauthorized()
        for kind, plural in (("secret", "secrets"), ("pod", "pods")):
            bound = private.get(kind)
            if bound is not None and not self._exists(storage, plural, namespace, bound):
                raise unauthorized()
        name = str(account.get("name", ""))
        extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if claims.get("jti"):
            extra = (("authentication.kubernetes.io/credential-id", (f"JTI={claims['jti']}",)),)
        return UserInfo(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
            str(account.get("uid", "")),
            extra,
        )

    @staticmethod
    def _exists(storage: _Lookup, plural: str, namespace: str, ref: Any) -> bool:
        if not isinstance(ref, dict):
            return False
        rt = storage.find_type("", "v1", plural)
        found = storage.lookup(rt, namespace, str(ref.get("name", ""))) if rt is not None else None
        return found is not None and meta(found).get("uid") == ref.get("uid")

    def authenticate(
        self,
        authorization: str | None,
        storage: _Lookup,
        now: Callable[[], float],
        *,
        certificate: UserInfo | None = None,
        unauthenticated: UserInfo = ANONYMOUS,
    ) -> UserInfo:
        """Who a request is (see the module docstring): ``authorization`` is its
        ``Authorization`` header, ``certificate`` the user of the client certificate its TLS
        connection presented, ``unauthenticated`` who it is without credentials. Raises the
        401 :class:`RequestRejected` for a token this server does not accept."""
        if certificate is not None:
            return certificate
        token = bearer_token(authorization)
        if token is None:
            return unauthenticated
        if hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return ADMIN
        return self.verify(token, storage, now)
