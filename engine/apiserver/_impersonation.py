"""Impersonation: ``Impersonate-User``, ``-Group``, ``-Uid`` and ``-Extra-<key>`` headers, as
kube-apiserver 1.36 honours them (``kubectl --as``, ``--as-group``, ``--as-uid``).

The requester must be authorized to impersonate what the headers name, in one of the modes
kube-apiserver tries, in this order (KEP-5284, constrained impersonation, on by default in
1.36), and the first mode that allows the whole request wins:

- ``arbitrary-node`` (only ``Impersonate-User: system:node:<name>``), ``serviceaccount`` (only
  ``Impersonate-User: system:serviceaccount:<ns>:<name>``) and ``user-info`` (any other user,
  with groups, uid and extras): the requester needs ``impersonate-on:<mode>:<verb>`` on what
  the request does, then ``impersonate:<mode>`` on ``nodes``, ``serviceaccounts`` (in their
  namespace), ``users``, ``groups``, ``uids`` and ``userextras/<key>`` (API group
  ``authentication.k8s.io``); ``system:masters`` and the empty group cannot be impersonated
  this way;
- ``legacy``: ``impersonate`` on ``users``, ``groups`` and ``serviceaccounts`` (core group),
  ``uids`` and ``userextras/<key>`` (``authentication.k8s.io``).

The mode that last succeeded for a requester is tried first next time, so, as on a real
server, which denial a refused request reports (the first one met) depends on what the
requester did before. The impersonated user gets ``system:authenticated`` (``system:anonymous``
gets ``system:unauthenticated``), a service account named alone its two service account groups,
a node ``system:nodes``. A denial is the real server's 403; groups, a uid or extras without a
user are a 400. Repeated headers arrive joined with ``", "`` and are split there again (a group
name containing ``", "`` cannot be impersonated).
"""

from __future__ import annotations

import re
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping

import attrs

from ._access import Attributes, forbidden
from ._authn import UserInfo
from ._errors import RequestRejected

__all__ = ["Impersonation", "wanted_user"]

AUTHENTICATION = "authentication.k8s.io"
_EXTRA_PREFIX = "impersonate-extra-"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MANY = 4
"""From this many groups (or extra values) on, a constrained mode first asks for all at once."""
_REMEMBERED = 10_000


@attrs.frozen
class Wanted:
    """Who the impersonation headers ask for, unchanged."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def only_name(self) -> bool:
        return not (self.uid or self.groups or self.extra)


def _split(value: str) -> list[str]:
    return value.split(", ")


def _go_strings(values: tuple[str, ...] | list[str]) -> str:
    return "[]string{" + ", ".join(_go_quote(v) for v in values) + "}"


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wanted_user(headers: Mapping[str, str]) -> Wanted | None:
    """The user the ``Impersonate-*`` headers of a request ask for, ``None`` without them;
    raises the real server's 400 for groups, a uid or extras without a user."""
    name = headers.get("impersonate-user", "")
    uid = headers.get("impersonate-uid", "")
    groups = tuple(_split(headers["impersonate-group"])) if "impersonate-group" in headers else ()
    extra: dict[str, list[str]] = {}
    for header, value in headers.items():
        if header.startswith(_EXTRA_PREFIX):
            key = urllib.parse.unquote(header[len(_EXTRA_PREFIX):]).lower()
            extra.setdefault(key, []).extend(_split(value))
    if not name and (uid or "impersonate-group" in headers or extra):
        group_text = _go_strings(groups) if "impersonate-group" in headers else "[]string(nil)"
        extra_text = (
            "map[string][]string{" + ", ".join(f"{_go_quote(k)}:{_go_strings(v)}" for k, v in sorted(extra.items())) + "}"
            if extra else "map[string][]string(nil)"
        )
        raise RequestRejected(
            400, "BadRequest",
            f'requested &user.DefaultInfo{{Name:"", UID:{_go_quote(uid)}, Groups:{group_text}, Extra:{extra_text}}} '
            "without impersonating a user name",
        )
    if not name:
        return None
    return Wanted(name, uid, groups, tuple((k, tuple(v)) for k, v in extra.items()))


def _service_account(name: str) -> tuple[str, str] | None:
    if not name.startswith("system:serviceaccount:"):
        return None
    parts = name[len("system:serviceaccount:"):].split(":")
    if len(parts) != 2 or not _DNS_LABEL.match(parts[0]) or not _DNS_SUBDOMAIN.match(parts[1]):
        return None
    return parts[0], parts[1]


def _node(name: str) -> str | None:
    if not name.startswith("system:node:"):
        return None
    node = name[len("system:node:"):]
    return node if _DNS_SUBDOMAIN.match(node) else None


Allowed = Callable[[UserInfo, Attributes], bool]


@attrs.frozen
class _Mode:
    name: str
    constrained: bool

    def applies(self, wanted: Wanted) -> bool:
        if self.name == "arbitrary-node":
            return wanted.only_name and _node(wanted.name) is not None
        if self.name == "serviceaccount":
            return wanted.only_name and _service_account(wanted.name) is not None
        if self.name == "user-info":
            return _node(wanted.name) is None and _service_account(wanted.name) is None
        return True

    def check(self, allowed: Allowed, requester: UserInfo, wanted: Wanted, request: Attributes) -> UserInfo:
        """The impersonated user; raises the 403 of the first check that fails."""
        if self.constrained:
            on = attrs.evolve(request, verb=f"impersonate-on:{self.name}:{request.verb}")
            _require(allowed, requester, on)
        verb = f"impersonate:{self.name}" if self.constrained else "impersonate"
        group = AUTHENTICATION if self.constrained else ""
        groups = wanted.groups
        user = Attributes(verb, "users", group, name=wanted.name)
        node = _node(wanted.name) if self.constrained else None
        account = _service_account(wanted.name)
        if node is not None:
            user = attrs.evolve(user, resource="nodes", name=node)
            groups = ("system:nodes",)
        elif account is not None:
            user = attrs.evolve(user, resource="serviceaccounts", namespace=account[0], name=account[1])
            if not groups:
                groups = ("system:serviceaccounts", f"system:serviceaccounts:{account[0]}")
        _require(allowed, requester, user)
        if wanted.uid:
            _require(allowed, requester, Attributes(verb, "uids", AUTHENTICATION, name=wanted.uid))
        self._groups(allowed, requester, verb, group, wanted.groups)
        self._extra(allowed, requester, verb, wanted.extra)
        if wanted.name == "system:anonymous":
            groups = _ensure(groups, "system:unauthenticated")
        elif "system:unauthenticated" not in groups:
            groups = _ensure(groups, "system:authenticated")
        return UserInfo(wanted.name, groups, wanted.uid, wanted.extra)

    def _groups(self, allowed: Allowed, requester: UserInfo, verb: str, group: str, groups: tuple[str, ...]) -> None:
        if not groups:
            return
        attributes = Attributes(verb, "groups", group)
        if self.constrained:
            if "" in groups:
                raise forbidden(requester, attributes, "impersonating the empty string group is not allowed")
            if "system:masters" in groups:
                raise forbidden(requester, attrs.evolve(attributes, name="system:masters"),
                                "impersonating the system:masters group is not allowed")
            if len(groups) >= _MANY and allowed(requester, attrs.evolve(attributes, name="*")):
                return
        for name in groups:
            _require(allowed, requester, attrs.evolve(attributes, name=name))

    def _extra(self, allowed: Allowed, requester: UserInfo, verb: str, extra: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        if not extra:
            return
        attributes = Attributes(verb, "userextras", AUTHENTICATION)
        if self.constrained:
            for key, values in extra:
                problem = (
                    "impersonating the empty string key in extra is not allowed" if not key
                    else "impersonating the empty string value in extra is not allowed" if "" in values else ""
                )
                if problem:
                    raise forbidden(requester, attributes, problem)
            count = sum(len(values) for _, values in extra)
            if max(len(extra), count) >= _MANY and allowed(requester, attrs.evolve(attributes, subresource="*", name="*")):
                return
        for key, values in extra:
            for value in values:
                _require(allowed, requester, attrs.evolve(attributes, subresource=key, name=value))


def _ensure(groups: tuple[str, ...], group: str) -> tuple[str, ...]:
    return groups if group in groups else (*groups, group)


def _require(allowed: Allowed, requester: UserInfo, attributes: Attributes) -> None:
    if not allowed(requester, attributes):
        raise forbidden(requester, attributes)


_MODES = (
    _Mode("arbitrary-node", True),
    _Mode("serviceaccount", True),
    _Mode("user-info", True),
    _Mode("legacy", False),
)


@attrs.define(eq=False)
class Impersonation:
    """Decides impersonated requests (see the module docstring); remembers, per requester
    name, the mode that last succeeded (at most 10,000 names, least recently used forgotten)."""

    _last: OrderedDict[str, int] = attrs.field(factory=OrderedDict, init=False)

    def user(self, allowed: Allowed, requester: UserInfo, wanted: Wanted, request: Attributes) -> UserInfo:
        """Who ``requester`` acts as for ``request`` (its authorization attributes); raises
        the 403 :class:`RequestRejected` of the first denial met."""
        first: RequestRejected | None = None
        order = list(range(len(_MODES)))
        remembered = self._last.get(requester.username)
        if remembered is not None:
            order.remove(remembered)
            order.insert(0, remembered)
        for index in order:
            mode = _MODES[index]
            if not mode.applies(wanted):
                continue
            try:
                user = mode.check(allowed, requester, wanted, request)
            except RequestRejected as exc:
                first = first or exc
                continue
            self._last[requester.username] = index
            self._last.move_to_end(requester.username)
            while len(self._last) > _REMEMBERED:
                self._last.popitem(last=False)
            return user
        assert first is not None, "the legacy mode applies to every user"
        raise first
