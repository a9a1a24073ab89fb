"""What the credentials may do: checking declared permissions at start, reporting denials.

:func:`check_permissions` asks the API server (one ``SelfSubjectAccessReview`` per verb,
resource, namespace and name) whether the current credentials have each rule a run needs,
and :func:`whoami` who they are (``SelfSubjectReview``). :class:`MissingPermissionsError` is
what a runner raises before any controller runs when some are missing.

At run time, a client's 403 answers are counted and reported by its ``forbidden``
(:class:`ForbiddenLog`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from .._client._client import Client
from .._client._errors import ForbiddenError, KubeError, NotFoundError
from .._client._forbidden import MissingPermission
from .._client._resource import Resource
from ._rbac import Permissions, PolicyRule

__all__ = [
    "MissingPermissionsError",
    "check_permissions",
    "whoami",
]

logger = logging.getLogger("engine.kube.access")

_SSAR = Resource("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False)
_SSR = Resource("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False)

class MissingPermissionsError(KubeError):
    """The credentials lack permissions a run needs (found before any controller runs).

    ``identity`` is who the server says the credentials are (``None`` when it does not say),
    ``missing`` what they lack, ``hint`` how to get the right Role (may be empty). The
    message is one line naming all three.
    """

    identity: str | None
    missing: tuple[MissingPermission, ...]
    hint: str

    def __init__(self, identity: str | None, missing: Sequence[MissingPermission], hint: str = "") -> None:
        self.identity = identity
        self.missing = tuple(missing)
        self.hint = hint
        who = f'User "{identity}"' if identity else "the current credentials"
        if len(self.missing) > 1:
            what = f"{len(self.missing)} permissions the plugins need: " + "; ".join(map(str, self.missing))
        else:
            what = f"a permission the plugins need: {self.missing[0]}" if self.missing else "no permission"
        super().__init__(f"{who} lacks {what}" + (f" ({hint})" if hint else ""))


async def whoami(client: Client) -> str | None:
    """The user name the server gives the client's credentials (``SelfSubjectReview``), or
    ``None`` when the server does not serve it or refuses it.

    Cancellation: a checkpoint; nothing to undo.
    """
    try:
        answer = await client.create(_SSR, {"apiVersion": _SSR.api_version, "kind": _SSR.kind})
    except (NotFoundError, ForbiddenError):
        return None
    name = ((answer.get("status") or {}).get("userInfo") or {}).get("username")
    return name if isinstance(name, str) and name else None


def _checks(rules: Iterable[PolicyRule], namespace: str | None) -> list[MissingPermission]:
    permissions = Permissions.resolve(rules, namespace=namespace)
    checks: list[MissingPermission] = []
    scoped: list[tuple[str | None, PolicyRule]] = [(None, r) for r in permissions.cluster]
    scoped += [(ns, r) for ns, rules_ in permissions.namespaces.items() for r in rules_]
    for ns, rule in scoped:
        for verb in rule.verbs:
            for name in rule.resource_names or ("",):
                checks.append(MissingPermission(verb, rule.group, rule.resource, ns, name))
    return checks


async def _allowed(client: Client, check: MissingPermission) -> bool:
    resource, _, sub = check.resource.partition("/")
    attributes: dict[str, Any] = {"verb": check.verb, "group": check.group, "resource": resource}
    if sub:
        attributes["subresource"] = sub
    if check.namespace is not None:
        attributes["namespace"] = check.namespace
    if check.name:
        attributes["name"] = check.name
    body = {"apiVersion": _SSAR.api_version, "kind": _SSAR.kind, "spec": {"resourceAttributes": attributes}}
    answer = await client.create(_SSAR, body)
    return bool((answer.get("status") or {}).get("allowed"))


async def check_permissions(
    client: Client, rules: Iterable[PolicyRule], *, namespace: str | None
) -> tuple[MissingPermission, ...] | None:
    """What of ``rules`` (resolved for a run for ``namespace`` as
    :meth:`Permissions.resolve` does; ``None``: every namespace) the client's credentials
    lack, one ``SelfSubjectAccessReview`` per verb, scope and name; ``()`` when nothing is
    missing, ``None`` when the server cannot say (it does not serve the reviews or refuses
    them). Other API errors propagate.

    Cancellation: a checkpoint; nothing to undo (reviews are never stored).
    """
    missing: list[MissingPermission] = []
    for check in _checks(rules, namespace):
        try:
            allowed = await _allowed(client, check)
        except (NotFoundError, ForbiddenError) as exc:
            logger.warning("cannot check permissions: the server answered %s to an access review", exc.code)
            return None
        if not allowed:
            missing.append(check)
    return tuple(missing)


