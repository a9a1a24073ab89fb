"""Permissions a run of plugins needs, declared by what the plugins do.

Each piece of the engine that talks to the API server says which RBAC rules it needs:
:meth:`Cluster.informer` records ``get, list, watch`` on the type it watches (in the namespace
it watches), :func:`rules_for` maps the client's methods and the engine's helpers
(``patch_status``, ``set_finalizer``, ``apply``...) to verbs, :func:`leader_election_rules`
and :data:`EVENT_RULES` are what a :class:`LeaderElector` and a :class:`KubernetesEventSink`
use, :func:`crd_rules` what the CRD check or installation at start uses. A plugin adds the
rest (what it does through the raw client) with ``Plugin(rules=...)``,
:meth:`PluginContext.uses` or :meth:`PluginContext.require`.

A rule's ``namespace`` is ``None`` for "the namespace the plugins run for";
:meth:`Permissions.resolve` turns a set of rules into what a ClusterRole grants and what each
namespace's Role grants, once that namespace is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._client._resource import Resource

__all__ = [
    "EVENT_RULES",
    "OPERATION_VERBS",
    "Permissions",
    "PolicyRule",
    "crd_rules",
    "leader_election_rules",
    "merge_rules",
    "role_objects",
    "rules_for",
]

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
"""The verbs a rule may grant (the API server's resource verbs)."""


def _verbs(values: Iterable[str]) -> tuple[str, ...]:
    found = tuple(sorted(set(values)))
    unknown = [v for v in found if v not in VERBS]
    if unknown:
        raise ValueError(f"unknown verb {unknown[0]!r} (choose from {', '.join(sorted(VERBS))})")
    if not found:
        raise ValueError("a rule needs at least one verb")
    return found


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values)))


@attrs.frozen
class PolicyRule:
    """A permission: ``verbs`` on ``resource`` (``"bundles"``, or a subresource such as
    ``"bundles/status"``) of API ``group``, in one namespace or cluster-wide.

    ``verbs`` and ``resource_names`` are stored sorted and without repeats, so equal rules
    compare and hash equal. Raises :class:`ValueError` for an empty resource, an unknown or
    missing verb, or a rule both ``cluster_wide`` and in a ``namespace``.
    """

    group: str
    """The API group, ``""`` for the core group."""
    resource: str
    """The resource's plural name, ``"<plural>/<subresource>"`` for a subresource."""
    verbs: tuple[str, ...] = attrs.field(converter=_verbs)
    """What may be done: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
    ``delete``, ``deletecollection``."""
    namespace: str | None = None
    """The namespace the rule applies in; ``None``: the namespace the plugins run for
    (``--namespace``), or every namespace when they run for all."""
    cluster_wide: bool = False
    """Granted by a ClusterRole whatever namespace the plugins run for: a namespaced resource
    used across namespaces, or a cluster-scoped one (``namespaces``,
    ``customresourcedefinitions``), which a rule written by hand must mark so
    (:func:`rules_for` does it from the :class:`Resource`)."""
    resource_names: tuple[str, ...] = attrs.field(default=(), converter=_names)
    """Only these objects (empty: any)."""

    def __attrs_post_init__(self) -> None:
        if not self.resource or self.resource.startswith("/") or self.resource.count("/") > 1:
            raise ValueError(f"resource must be '<plural>' or '<plural>/<subresource>', got {self.resource!r}")
        if self.cluster_wide and self.namespace is not None:
            raise ValueError(f"rule on {self.resource!r}: cluster_wide and namespace {self.namespace!r} are exclusive")

    def to_dict(self) -> dict[str, Any]:
        """The rule as in a Role's or ClusterRole's ``rules`` (the scope is the role's)."""
        out: dict[str, Any] = {"apiGroups": [self.group], "resources": [self.resource]}
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        out["verbs"] = list(self.verbs)
        return out

    def _key(self) -> tuple[bool, str, str, str, tuple[str, ...]]:
        return (not self.cluster_wide, self.namespace or "", self.group, self.resource, self.resource_names)


OPERATION_VERBS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "get": ("", ("get",)),
    "list": ("", ("list",)),
    "list_all": ("", ("list",)),
    "watch": ("", ("watch",)),
    "informer": ("", ("get", "list", "watch")),
    "create": ("", ("create",)),
    "update": ("", ("update",)),
    "patch": ("", ("patch",)),
    "apply": ("", ("create", "patch")),
    "delete": ("", ("delete",)),
    "get_status": ("status", ("get",)),
    "update_status": ("status", ("update",)),
    "patch_status": ("status", ("patch",)),
    "set_finalizer": ("", ("get", "patch")),
    "hold_finalizer": ("", ("get", "patch")),
}
"""What each operation of the engine needs: the subresource (``""`` for the object itself)
and the verbs. The names are the :class:`Client` methods and the helpers of
:mod:`engine.kube` (``patch_status``, ``set_finalizer``, ``hold_finalizer``); ``apply`` is a
server-side apply, a patch that creates a missing object (so ``create`` too); ``informer`` is
what :meth:`Cluster.informer` records."""


def rules_for(
    resource: Resource, *operations: str, namespace: str | None = None, cluster_wide: bool = False
) -> tuple[PolicyRule, ...]:
    """The rules ``operations`` (names from :data:`OPERATION_VERBS`) on ``resource`` need,
    merged: one rule for the object, one per subresource.

    A cluster-scoped ``resource`` always gives ``cluster_wide`` rules. Raises
    :class:`ValueError` for an unknown operation or none at all.
    """
    if not operations:
        raise ValueError("rules_for needs at least one operation")
    verbs: dict[str, set[str]] = {}
    for operation in operations:
        try:
            subresource, needed = OPERATION_VERBS[operation]
        except KeyError:
            raise ValueError(
                f"unknown operation {operation!r} (choose from {', '.join(sorted(OPERATION_VERBS))})"
            ) from None
        verbs.setdefault(subresource, set()).update(needed)
    wide = cluster_wide or not resource.namespaced
    return tuple(
        PolicyRule(
            resource.group,
            f"{resource.plural}/{sub}" if sub else resource.plural,
            tuple(needed),
            namespace=None if wide else namespace,
            cluster_wide=wide,
        )
        for sub, needed in sorted(verbs.items())
    )


def leader_election_rules(namespace: str) -> tuple[PolicyRule, ...]:
    """What a :class:`LeaderElector` does with its Lease in ``namespace``: read it, create it
    the first time, renew, take over and release it by update, and watch it
    (``fieldSelector=metadata.name=<name>``) while standing by."""
    return (PolicyRule("coordination.k8s.io", "leases", ("create", "get", "update", "watch"), namespace=namespace),)


EVENT_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("events.k8s.io", "events", ("create", "get", "patch")),
)
"""What a :class:`KubernetesEventSink` does, in the namespace of each object its events are
about: create ``events.k8s.io/v1`` Events, read one whose name is taken, patch a series."""


def crd_rules(crds: Iterable[Mapping[str, Any]], *, install: bool) -> tuple[PolicyRule, ...]:
    """What :func:`install_crds` does with ``crds``: with ``install``, server-side apply each
    (``create`` cannot be limited to names, so the rule covers every CRD); without, read each
    by name."""
    names = tuple(str(crd["metadata"]["name"]) for crd in crds)
    if not names:
        return ()
    group, resource = "apiextensions.k8s.io", "customresourcedefinitions"
    if install:
        return (PolicyRule(group, resource, ("create", "get", "patch"), cluster_wide=True),)
    return (PolicyRule(group, resource, ("get",), cluster_wide=True, resource_names=names),)


def merge_rules(rules: Iterable[PolicyRule]) -> tuple[PolicyRule, ...]:
    """One rule per group, resource, resource names and scope, with the union of their verbs;
    sorted: cluster-wide rules first, then those for the namespace the plugins run for, then
    those of each named namespace; within each by group, resource and resource names."""
    merged: dict[tuple[str, str, tuple[str, ...], str | None, bool], set[str]] = {}
    for rule in rules:
        key = (rule.group, rule.resource, rule.resource_names, rule.namespace, rule.cluster_wide)
        merged.setdefault(key, set()).update(rule.verbs)
    out = [
        PolicyRule(group, resource, tuple(verbs), namespace=ns, cluster_wide=wide, resource_names=names)
        for (group, resource, names, ns, wide), verbs in merged.items()
    ]
    return tuple(sorted(out, key=PolicyRule._key))


@attrs.frozen
class Permissions:
    """Rules resolved for the namespace a run is for: what its ClusterRole grants and what the
    Role of each namespace grants. Every rule in :attr:`cluster` is ``cluster_wide``, every
    rule in :attr:`namespaces` carries its namespace."""

    cluster: tuple[PolicyRule, ...]
    """The ClusterRole's rules, sorted."""
    namespaces: Mapping[str, tuple[PolicyRule, ...]]
    """Each namespace's Role rules, sorted, by namespace in sorted order."""

    @classmethod
    def resolve(cls, rules: Iterable[PolicyRule], *, namespace: str | None) -> Permissions:
        """Resolve ``rules`` for a run for ``namespace`` (``None``: every namespace): a rule
        without a namespace applies there (cluster-wide when ``None``). Rules are merged
        (:func:`merge_rules`); a namespace's verbs that the ClusterRole already grants on the
        same resource (and resource names) are left out, and a rule left without verbs
        dropped."""
        placed: list[PolicyRule] = []
        for rule in rules:
            ns = rule.namespace if rule.namespace is not None else namespace
            if rule.cluster_wide or ns is None:
                placed.append(attrs.evolve(rule, namespace=None, cluster_wide=True))
            else:
                placed.append(attrs.evolve(rule, namespace=ns))
        merged = merge_rules(placed)
        cluster = tuple(r for r in merged if r.cluster_wide)
        granted = {(r.group, r.resource, r.resource_names): set(r.verbs) for r in cluster}
        namespaces: dict[str, list[PolicyRule]] = {}
        for rule in merged:
            if rule.cluster_wide or rule.namespace is None:
                continue
            left = set(rule.verbs) - granted.get((rule.group, rule.resource, rule.resource_names), set())
            if left:
                namespaces.setdefault(rule.namespace, []).append(attrs.evolve(rule, verbs=tuple(left)))
        return cls(cluster=cluster, namespaces={ns: tuple(namespaces[ns]) for ns in sorted(namespaces)})


def role_objects(
    permissions: Permissions,
    *,
    name: str,
    service_account: str,
    service_account_namespace: str,
    cluster_name: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ClusterRole and ClusterRoleBinding (named ``cluster_name``, default ``name``; only
    when :attr:`Permissions.cluster` has rules) and each namespace's Role and RoleBinding
    (named ``name``) that grant ``permissions`` to the ServiceAccount ``service_account`` of
    ``service_account_namespace``, in the order they are applied."""
    subject = [{"kind": "ServiceAccount", "name": service_account, "namespace": service_account_namespace}]
    group = "rbac.authorization.k8s.io"
    out: list[dict[str, Any]] = []

    def metadata(object_name: str, namespace: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {"name": object_name}
        if namespace is not None:
            found["namespace"] = namespace
        if labels:
            found["labels"] = dict(labels)
        return found

    if permissions.cluster:
        wide = cluster_name or name
        out.append({"apiVersion": f"{group}/v1", "kind": "ClusterRole", "metadata": metadata(wide),
                    "rules": [rule.to_dict() for rule in permissions.cluster]})
        out.append({"apiVersion": f"{group}/v1", "kind": "ClusterRoleBinding", "metadata": metadata(wide),
                    "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": wide}, "subjects": subject})
    for ns, rules in permissions.namespaces.items():
        out.append({"apiVersion": f"{group}/v1", "kind": "Role", "metadata": metadata(name, ns),
                    "rules": [rule.to_dict() for rule in rules]})
        out.append({"apiVersion": f"{group}/v1", "kind": "RoleBinding", "metadata": metadata(name, ns),
                    "roleRef": {"apiGroup": group, "kind": "Role", "name": name}, "subjects": subject})
    return out
