"""403 answers: what permission they say is missing, counted and logged once.

:class:`ForbiddenLog` (a :class:`Client`'s ``forbidden``) sees every 403 the client receives:
it counts them per verb and resource and logs an error naming the missing permission the
first time each (verb, resource) is refused, so a reconcile retried with backoff does not
repeat it. A 403 that an admission webhook's denial carries (``admission webhook "NAME" denied
the request: ...``) is not about permissions and is left out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import attrs

from ._errors import ApiError

__all__ = ["ForbiddenLog", "MissingPermission"]

_ADMISSION_DENIAL = 'admission webhook "'

logger = logging.getLogger("engine.kube.forbidden")

_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]*)"| at the cluster scope)'
)


@attrs.frozen
class MissingPermission:
    """A permission the credentials lack: ``verb`` on ``resource`` (``res/sub`` for a
    subresource) of ``group``, in ``namespace`` (``None``: cluster-wide), on the object
    ``name`` (``""``: any)."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None
    name: str = ""

    @classmethod
    def from_error(cls, error: ApiError) -> MissingPermission | None:
        """What a 403 of the API server says is missing (``None`` when its message does not
        have the RBAC authorizer's form)."""
        found = _FORBIDDEN.search(error.message)
        if found is None:
            return None
        name = error.details.get("name")
        return cls(found["verb"], found["group"], found["resource"], found["namespace"],
                   name if isinstance(name, str) else "")

    def __str__(self) -> str:
        resource = self.resource + (f".{self.group}" if self.group else "")
        if "/" in self.resource:
            plural, _, sub = self.resource.partition("/")
            resource = f"{plural}{'.' + self.group if self.group else ''}/{sub}"
        named = f' "{self.name}"' if self.name else ""
        where = f'in namespace "{self.namespace}"' if self.namespace is not None else "cluster-wide"
        return f"{self.verb} {resource}{named} {where}"


@attrs.define(eq=False)
class ForbiddenLog:
    """Counts 403 answers per (verb, resource) and logs the first of each as an error naming
    the missing permission. Synchronous, never raises."""

    _counts: dict[tuple[str, str], int] = attrs.field(factory=dict)
    _missing: dict[tuple[str, str], MissingPermission] = attrs.field(factory=dict)

    def record(self, error: ApiError) -> None:
        """Count ``error`` (a 403) and log it if it is the first for its verb and resource."""
        if error.message.startswith(_ADMISSION_DENIAL):
            return
        missing = MissingPermission.from_error(error)
        verb, resource = ("", "") if missing is None else (missing.verb, _qualified(missing))
        key = (verb, resource)
        first = key not in self._counts
        self._counts[key] = self._counts.get(key, 0) + 1
        if first and missing is not None:
            self._missing[key] = missing
        if first:
            permission = str(missing) if missing is not None else error.message
            logger.error(
                "forbidden: the credentials lack the permission to %s; requests needing it fail until "
                "it is granted (declare it in the plugin's rules, see python -m engine manifests)",
                permission, extra={"verb": verb, "resource": resource},
            )

    def missing(self) -> tuple[MissingPermission, ...]:
        """The first missing permission each (verb, resource) was refused for, in the order
        they were first refused (403s whose message does not name one are left out)."""
        return tuple(self._missing.values())

    def notices(self) -> list[str]:
        """One line per missing permission with how many requests it refused so far, as the
        dashboard shows them (``LiveStream.add_notices``)."""
        return [
            f"forbidden: the credentials lack the permission to {missing} ({self._counts[key]} refused)"
            for key, missing in self._missing.items()
        ]

    def counts(self) -> Mapping[tuple[str, str], int]:
        """The 403 answers so far by (verb, resource as ``plural.group``); a copy."""
        return dict(self._counts)


def _qualified(missing: MissingPermission) -> str:
    plural, _, sub = missing.resource.partition("/")
    name = plural + (f".{missing.group}" if missing.group else "")
    return f"{name}/{sub}" if sub else name
