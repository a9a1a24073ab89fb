"""Authentication: who a request is.

A request is authenticated, in this order, by:

- a bearer token (``Authorization: Bearer ...``): a service account token the server issued
  (``serviceaccounts/{name}/token``, ``kubectl create token``), signed with the server's own
  key, valid until its expiry while its service account (and, if it is bound to one, its
  Secret or Pod) still exists with the same uid. It names
  ``system:serviceaccount:<namespace>:<name>`` in the groups ``system:serviceaccounts``,
  ``system:serviceaccounts:<namespace>`` and ``system:authenticated``. Any other token,
  expired or not, is refused (401);
- a TLS client certificate the server's CA signed: the common name is the user, each
  organization a group, plus ``system:authenticated`` (the kubeconfig's certificate is
  ``embedded-admin`` in ``system:masters``);
- the connection: a request without credentials over plain HTTP or the memory transport is
  the kubeconfig's user, ``kubernetes-admin`` in ``system:masters`` (as the insecure port of
  older kube-apiservers was); in TLS mode it is refused (401).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import random
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from ._errors import RequestRejected
from ._objects import Obj, meta
from ._resources import ResourceType

__all__ = ["ADMIN", "Authenticator", "UserInfo", "organizations", "unauthorized"]

ISSUER = "https://kubernetes.default.svc.cluster.local"


@attrs.frozen
class UserInfo:
    """An authenticated identity, as ``SelfSubjectReview`` shows it."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    @property
    def admin(self) -> bool:
        """Whether the user is in ``system:masters`` (allowed everything, never checked)."""
        return "system:masters" in self.groups

    def to_json(self) -> dict[str, Any]:
        """The ``userInfo`` of a review."""
        out: dict[str, Any] = {"username": self.username}
        if self.uid:
            out["uid"] = self.uid
        out["groups"] = list(self.groups)
        return out


ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
"""The embedded server's administrator: the user of its kubeconfig."""


def unauthorized() -> RequestRejected:
    """The real server's 401 answer."""
    return RequestRejected(401, "Unauthorized", "Unauthorized")


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
    """Issues and verifies the server's service account tokens.

    ``seed`` makes the signing key (and so the tokens) reproducible; without it the key is
    random. The key never leaves the server.
    """

    seed: int | None = None
    _key: bytes = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.seed is None:
            self._key = secrets.token_bytes(32)
        else:
            self._key = random.Random(f"token-key-{self.seed}").randbytes(32)

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
        return UserInfo(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
            str(account.get("uid", "")),
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
        connection: UserInfo | None,
        storage: _Lookup,
        now: Callable[[], float],
    ) -> UserInfo:
        """Who a request is (see the module docstring): ``authorization`` is its
        ``Authorization`` header, ``connection`` who its connection authenticated as
        (``None``: nobody). Raises the 401 :class:`RequestRejected`."""
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise unauthorized()
            return self.verify(token.strip(), storage, now)
        if connection is None:
            raise unauthorized()
        return connection
