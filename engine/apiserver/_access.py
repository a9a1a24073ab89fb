"""Authorization: RBAC objects' validation, the RBAC authorizer, access reviews and
TokenRequests.

Every request of a user not in ``system:masters`` is decided by the stored RBAC objects, as
the RBAC authorizer decides it (:func:`authorize`): a rule of a Role bound in the request's
namespace, or of a ClusterRole bound there or cluster-wide, must match its verb, API group,
resource (``res/sub`` for a subresource, ``*`` for any), name (``resourceNames``) or, for
other paths, its ``nonResourceURLs``. The ClusterRoles and ClusterRoleBindings of
kube-apiserver's bootstrap policy that decide what every user may do apply even when they are
not stored: ``cluster-admin`` for ``system:masters``; ``system:discovery`` and
``system:basic-user`` (self reviews) for every authenticated user;
``system:public-info-viewer`` (``/healthz``, ``/livez``, ``/readyz``, ``/version``) for
everyone, ``system:unauthenticated`` included; ``system:service-account-issuer-discovery``
for ``system:serviceaccounts``. (OpenShift's builds add ``system:openshift:public-info-viewer``
for ``/.well-known``; upstream has no such role, nor has this server.) Aggregated
ClusterRoles are not aggregated. A denial is the real server's 403 (:func:`forbidden`).

``SelfSubjectAccessReview``, ``SelfSubjectRulesReview`` and ``SelfSubjectReview`` answer for
the caller (the impersonated user under impersonation), ``SubjectAccessReview`` for exactly
the user, groups and uid it names; reviews are answered (201) in kube-apiserver 1.36's shape
and never stored. ``serviceaccounts/{name}/token`` answers a TokenRequest with a token the server
signed (see :mod:`._authn`), bound to a Secret or Pod when ``boundObjectRef`` names one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ._authn import ISSUER, Authenticator, UserInfo
from ._errors import RequestRejected
from ._objects import Obj, format_time, meta
from ._resources import ResourceType
from ._selectors import FieldSelector, LabelSelector
from ._status import CauseSpec, invalid_causes, not_found


class ObjectStorage(Protocol):
    """What reviews read of the server's storage (:class:`._storage.ObjectStorage`)."""

    def find_type(self, group: str, version: str, plural: str) -> ResourceType | None: ...

    def lookup(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None: ...

    def list_objects(
        self, rt: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> tuple[list[Obj], int, str | None, int | None]: ...

    @property
    def wall_clock(self) -> Callable[[], float]: ...

__all__ = [
    "Attributes",
    "BOOTSTRAP_BINDINGS",
    "BOOTSTRAP_ROLES",
    "RBAC",
    "authorize",
    "forbidden",
    "review",
    "token_request",
    "validate_rbac",
]

RBAC = "rbac.authorization.k8s.io"

def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def validate_rbac(rt: ResourceType, obj: Obj, old: Obj | None) -> list[CauseSpec]:
    """The causes for what is wrong with a Role, ClusterRole, RoleBinding or ClusterRoleBinding."""
    causes: list[CauseSpec] = []
    if rt.plural in ("roles", "clusterroles"):
        for i, rule in enumerate(obj.get("rules") or []):
            rule = _dict(rule)
            where = f"rules[{i}]"
            if not rule.get("verbs"):
                causes.append(("FieldValueRequired", f"{where}.verbs", "Required value: verbs must contain at least one value"))
            if rule.get("nonResourceURLs"):
                if rt.plural == "roles":
                    causes.append(("FieldValueInvalid", f"{where}.nonResourceURLs", "Invalid value: []string{...}: namespaced rules cannot apply to non-resource URLs"))
                if rule.get("apiGroups") or rule.get("resources"):
                    causes.append(("FieldValueInvalid", f"{where}.nonResourceURLs", "Invalid value: []string{...}: rules cannot apply to both regular resources and non-resource URLs"))
            else:
                if not rule.get("apiGroups"):
                    causes.append(("FieldValueRequired", f"{where}.apiGroups", "Required value: resource rules must supply at least one api group"))
                if not rule.get("resources"):
                    causes.append(("FieldValueRequired", f"{where}.resources", "Required value: resource rules must supply at least one resource"))
        return causes
    ref = _dict(obj.get("roleRef"))
    if ref.get("apiGroup") != RBAC:
        causes.append(("FieldValueNotSupported", "roleRef.apiGroup", f'Unsupported value: "{ref.get("apiGroup", "")}": supported values: "{RBAC}"'))
    allowed_kinds = ("Role", "ClusterRole") if rt.plural == "rolebindings" else ("ClusterRole",)
    if ref.get("kind") not in allowed_kinds:
        causes.append(("FieldValueNotSupported", "roleRef.kind", f'Unsupported value: "{ref.get("kind", "")}": supported values: ' + ", ".join(f'"{k}"' for k in allowed_kinds)))
    if not ref.get("name"):
        causes.append(("FieldValueRequired", "roleRef.name", "Required value"))
    for i, subject in enumerate(obj.get("subjects") or []):
        subject = _dict(subject)
        kind = subject.get("kind")
        if kind not in ("ServiceAccount", "User", "Group"):
            causes.append(("FieldValueNotSupported", f"subjects[{i}].kind", f'Unsupported value: "{kind or ""}": supported values: "ServiceAccount", "User", "Group"'))
        if not subject.get("name"):
            causes.append(("FieldValueRequired", f"subjects[{i}].name", "Required value"))
        if kind == "ServiceAccount" and rt.plural == "clusterrolebindings" and not subject.get("namespace"):
            causes.append(("FieldValueRequired", f"subjects[{i}].namespace", "Required value"))
    if old is not None and obj.get("roleRef") != old.get("roleRef"):
        causes.append(("FieldValueInvalid", "roleRef", "Invalid value: cannot change roleRef"))
    return causes


def _matches(values: list[Any], wanted: str) -> bool:
    return "*" in values or wanted in values


def _subject_matches(subject: dict[str, Any], user: str, groups: tuple[str, ...], namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace') or namespace}:{subject.get('name', '')}"
    return False


def _describe(subject: dict[str, Any], namespace: str) -> str:
    """A subject as the RBAC authorizer's reasons name it."""
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        name = f"{name}/{subject.get('namespace') or namespace}"
    return f'{kind} "{name}"'


_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]
BOOTSTRAP_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "system:discovery": [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}],
    "system:basic-user": [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    ],
    "system:public-info-viewer": [
        {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
    ],
    "system:service-account-issuer-discovery": [
        {
            "nonResourceURLs": [
                "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                "/openid/v1/jwks", "/openid/v1/jwks/",
            ],
            "verbs": ["get"],
        },
    ],
}
"""The ClusterRoles a cluster bootstraps that the authorizer uses when they are not stored
(a stored ClusterRole of the same name wins)."""

BOOTSTRAP_BINDINGS: dict[str, tuple[str, ...]] = {
    "cluster-admin": ("system:masters",),
    "system:discovery": ("system:authenticated",),
    "system:basic-user": ("system:authenticated",),
    "system:public-info-viewer": ("system:authenticated", "system:unauthenticated"),
    "system:service-account-issuer-discovery": ("system:serviceaccounts",),
}
"""The groups each bootstrap ClusterRole is bound to by the ClusterRoleBinding of the same
name, used when that binding is not stored."""


@attrs.frozen
class Attributes:
    """What a request asks to do, as the authorizer sees it."""

    verb: str
    resource: str = ""
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    """The path of a non-resource request."""
    is_resource: bool = True
    """Whether the request is about a resource (else about :attr:`path`)."""

    @classmethod
    def from_review(cls, spec: dict[str, Any]) -> Attributes:
        """The attributes a review's ``spec`` asks about."""
        if isinstance(spec.get("resourceAttributes"), dict):
            a = spec["resourceAttributes"]
            return cls(
                str(a.get("verb", "")), str(a.get("resource", "")), str(a.get("group", "")),
                str(a.get("subresource", "")), str(a.get("namespace", "")), str(a.get("name", "")),
            )
        a = _dict(spec.get("nonResourceAttributes"))
        return cls(str(a.get("verb", "")), path=str(a.get("path", "")), is_resource=False)


def _rule_allows(rule: dict[str, Any], attributes: Attributes) -> bool:
    if not _matches(rule.get("verbs") or [], attributes.verb):
        return False
    if not attributes.is_resource:
        path = attributes.path
        return any(u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in rule.get("nonResourceURLs") or [])
    name = attributes.resource
    if attributes.subresource:
        name = f"{name}/{attributes.subresource}"
    if not _matches(rule.get("apiGroups") or [], attributes.group):
        return False
    resources = rule.get("resources") or []
    if not (_matches(resources, name) or (attributes.subresource and f"*/{attributes.subresource}" in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.name in names


def _bindings(storage: ObjectStorage, namespace: str) -> list[tuple[Obj, str]]:
    """The ClusterRoleBindings (bootstrap ones not stored included) and the RoleBindings of
    ``namespace``, each with its namespace (``""`` for a ClusterRoleBinding)."""
    found: list[tuple[Obj, str]] = []
    rt = storage.find_type(RBAC, "v1", "clusterrolebindings")
    stored = storage.list_objects(rt, None, LabelSelector(), FieldSelector())[0] if rt is not None else []
    names = {str(meta(b).get("name", "")) for b in stored}
    for role, groups in BOOTSTRAP_BINDINGS.items():
        if role not in names:
            subjects = [{"kind": "Group", "apiGroup": RBAC, "name": g} for g in groups]
            found.append(({"metadata": {"name": role}, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role}, "subjects": subjects}, ""))
    found.extend((b, "") for b in stored)
    if namespace:
        rt = storage.find_type(RBAC, "v1", "rolebindings")
        if rt is not None:
            found.extend((b, namespace) for b in storage.list_objects(rt, namespace, LabelSelector(), FieldSelector())[0])
    return found


def _role_rules(storage: ObjectStorage, ref: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
    rt = storage.find_type(RBAC, "v1", "roles" if kind == "Role" else "clusterroles")
    role = storage.lookup(rt, namespace if kind == "Role" else None, name) if rt is not None else None
    if role is None:
        return [dict(r) for r in BOOTSTRAP_ROLES.get(name, [])] if kind == "ClusterRole" else []
    return [_dict(r) for r in role.get("rules") or []]


def _matching_rules(
    storage: ObjectStorage, user: UserInfo, namespace: str
) -> list[tuple[dict[str, Any], Obj, str, dict[str, Any]]]:
    """Every rule that applies to ``user`` in ``namespace``, with the binding that grants it,
    the binding's namespace and the subject of it that names the user."""
    out: list[tuple[dict[str, Any], Obj, str, dict[str, Any]]] = []
    for binding, ns in _bindings(storage, namespace):
        subject = next(
            (_dict(s) for s in binding.get("subjects") or [] if _subject_matches(_dict(s), user.username, user.groups, ns)),
            None,
        )
        if subject is None:
            continue
        out.extend((rule, binding, ns, subject) for rule in _role_rules(storage, _dict(binding.get("roleRef")), ns))
    return out


def authorize(storage: ObjectStorage, user: UserInfo, attributes: Attributes) -> tuple[bool, str]:
    """Whether ``user`` may do what ``attributes`` say, as the RBAC authorizer decides it (a
    user in ``system:masters`` may do everything), and the reason of an allowance, worded as
    kube-apiserver's (``RBAC: allowed by RoleBinding "b/ns" of Role "r" to ServiceAccount
    "sa/ns"``)."""
    if user.admin:
        return True, ""
    namespace = attributes.namespace if attributes.is_resource else ""
    for rule, binding, ns, subject in _matching_rules(storage, user, namespace):
        if _rule_allows(rule, attributes):
            ref = _dict(binding.get("roleRef"))
            name = str(meta(binding).get("name", ""))
            source = f'RoleBinding "{name}/{ns}"' if ns else f'ClusterRoleBinding "{name}"'
            return True, f'RBAC: allowed by {source} of {ref.get("kind")} "{ref.get("name")}" to {_describe(subject, ns)}'
    return False, ""


def forbidden(user: UserInfo, attributes: Attributes, reason: str = "") -> RequestRejected:
    """The real server's 403 for a request ``user`` may not make; ``reason``, when given, is
    appended as kube-apiserver appends an authorizer's reason."""
    who = f'User "{user.username}"'
    suffix = f": {reason}" if reason else ""
    if not attributes.is_resource:
        message = f'forbidden: {who} cannot {attributes.verb} path "{attributes.path}"{suffix}'
        return RequestRejected(403, "Forbidden", message, details={})
    resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
    scope = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    reason = f'{who} cannot {attributes.verb} resource "{resource}" in API group "{attributes.group}" {scope}{suffix}'
    qualified = attributes.resource + (f".{attributes.group}" if attributes.group else "")
    subject = f'{qualified} "{attributes.name}"' if attributes.name else qualified
    details: dict[str, Any] = {}
    if attributes.name:
        details["name"] = attributes.name
    if attributes.group:
        details["group"] = attributes.group
    details["kind"] = attributes.resource
    return RequestRejected(403, "Forbidden", f"{subject} is forbidden: {reason}", details=details)


def _rules_review(storage: ObjectStorage, user: UserInfo, namespace: str) -> dict[str, Any]:
    """The rules of every binding naming ``user`` (for ``system:masters`` too: its
    ``cluster-admin`` binding gives it ``*``), cluster-wide ones first, duplicates kept."""
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for rule, _binding, _ns, _subject in _matching_rules(storage, user, namespace):
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []), "nonResourceURLs": list(rule["nonResourceURLs"])})
        else:
            out: dict[str, Any] = {"verbs": list(rule.get("verbs") or []), "apiGroups": list(rule.get("apiGroups") or [])}
            out["resources"] = list(rule.get("resources") or [])
            if rule.get("resourceNames"):
                out["resourceNames"] = list(rule["resourceNames"])
            resource_rules.append(out)
    return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}


def _spec_user(spec: dict[str, Any]) -> UserInfo:
    groups = tuple(str(g) for g in spec.get("groups") or [])
    return UserInfo(str(spec.get("user", "")), groups, str(spec.get("uid", "")))


def _review_causes(spec: dict[str, Any], *, self_review: bool) -> list[CauseSpec]:
    causes: list[CauseSpec] = []
    has_resource = isinstance(spec.get("resourceAttributes"), dict)
    has_non_resource = isinstance(spec.get("nonResourceAttributes"), dict)
    if has_resource == has_non_resource:
        causes.append(("FieldValueInvalid", "spec.resourceAttributes", "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not self_review and not spec.get("user") and not spec.get("groups") and not spec.get("uid"):
        causes.append(("FieldValueInvalid", "spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    return causes


def _fields_v1(value: dict[str, Any]) -> dict[str, Any]:
    return {
        f"f:{k}": {".": {}, **_fields_v1(v)} if isinstance(v, dict) else {}
        for k, v in value.items()
        if v not in ("", None, [], {}, False)
    }


def review(
    storage: ObjectStorage, rt: ResourceType, namespace: str | None, body: Any, caller: UserInfo, manager: str = ""
) -> Obj:
    """Answer a create of the review type ``rt`` (not stored) by ``caller``; raises
    :class:`RequestRejected` (400, 422).

    As kube-apiserver 1.36 answers: a ``SelfSubjectReview`` is dated now; a
    ``SelfSubjectRulesReview`` is its status alone (empty metadata and spec) and needs
    ``spec.namespace`` (400 ``no namespace on request``); access reviews echo their spec and,
    undated, carry the ``managedFields`` entry of ``manager`` for the spec they were sent.
    """
    if not isinstance(body, dict):
        raise RequestRejected(400, "BadRequest", "the request body must be a JSON object")
    spec = _dict(body.get("spec"))
    plural = rt.plural
    answer: Obj = {"kind": rt.kind, "apiVersion": rt.api_version}
    if plural == "selfsubjectreviews":
        answer["metadata"] = {"creationTimestamp": format_time(storage.wall_clock())}
        answer["status"] = {"userInfo": caller.to_json()}
        return answer
    if plural == "selfsubjectrulesreviews":
        rules_namespace = str(spec.get("namespace") or "")
        if not rules_namespace:
            raise RequestRejected(400, "BadRequest", "no namespace on request")
        answer["metadata"] = {}
        answer["spec"] = {}
        answer["status"] = _rules_review(storage, caller, rules_namespace)
        return answer
    answer["metadata"] = {k: v for k, v in _dict(body.get("metadata")).items() if k in ("name", "generateName", "labels", "annotations")}
    if rt.namespaced:
        answer["metadata"]["namespace"] = namespace
    self_review = plural == "selfsubjectaccessreviews"
    causes = _review_causes(spec, self_review=self_review)
    if plural == "localsubjectaccessreviews":
        attributes_ns = _dict(spec.get("resourceAttributes")).get("namespace")
        if attributes_ns != namespace:
            causes.append(("FieldValueInvalid", "spec.resourceAttributes.namespace", f'Invalid value: "{attributes_ns or ""}": must match metadata.namespace'))
    if causes:
        raise invalid_causes(rt, str(meta(body).get("name", "")), causes)
    answer["spec"] = spec
    if manager:
        answer["metadata"]["managedFields"] = [{
            "manager": manager, "operation": "Update", "apiVersion": rt.api_version,
            "time": format_time(storage.wall_clock()), "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": _fields_v1(spec)},
        }]
    allowed, reason = authorize(storage, caller if self_review else _spec_user(spec), Attributes.from_review(spec))
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    answer["status"] = status
    return answer


def token_request(
    storage: ObjectStorage, tokens: Authenticator, rt: ResourceType, namespace: str | None, name: str, body: Any
) -> Obj:
    """Answer ``POST serviceaccounts/{name}/token`` with a token ``tokens`` signed (its
    ``metadata`` names the service account, with its uid, as 1.36 answers); raises
    :class:`RequestRejected` (404 for a missing service account or bound object, 422 for a
    too short expiry or a bound object of another kind than Secret or Pod)."""
    now = storage.wall_clock
    account = storage.lookup(rt, namespace, name)
    if account is None:
        raise not_found(rt, name)
    body = _dict(body)
    spec = _dict(body.get("spec"))
    seconds = spec.get("expirationSeconds", 3600)
    token_rt = ResourceType("authentication.k8s.io", "v1", "tokenrequests", "tokenrequest", "TokenRequest", True)
    if not isinstance(seconds, int) or seconds < 600:
        raise invalid_causes(token_rt, name, [("FieldValueInvalid", "spec.expirationSeconds", f"Invalid value: {seconds}: may not specify a duration less than 10 minutes")])
    if seconds > 2**32:
        raise invalid_causes(token_rt, name, [("FieldValueTooLong", "spec.expirationSeconds", f"Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds")])
    audiences = list(spec.get("audiences") or [ISSUER])
    issued = int(now())
    private: dict[str, Any] = {
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": meta(account).get("uid")},
    }
    bound = spec.get("boundObjectRef")
    if isinstance(bound, dict):
        kind = bound.get("kind")
        if kind not in ("Secret", "Pod"):
            raise invalid_causes(token_rt, name, [("FieldValueNotSupported", "spec.boundObjectRef.kind", f'Unsupported value: "{kind or ""}": supported values: "Pod", "Secret"')])
        bound_rt = storage.find_type("", "v1", "secrets" if kind == "Secret" else "pods")
        target = storage.lookup(bound_rt, namespace, str(bound.get("name", ""))) if bound_rt is not None else None
        if target is None or bound_rt is None:
            raise not_found(bound_rt or rt, str(bound.get("name", "")))
        if bound.get("uid") and bound["uid"] != meta(target).get("uid"):
            raise RequestRejected(409, "Conflict", f'the UID in the bound object reference ({bound["uid"]}) does not match the UID in record. The object might have been deleted and then recreated')
        private[str(kind).lower()] = {"name": meta(target).get("name"), "uid": meta(target).get("uid")}
    claims = {
        "aud": audiences,
        "exp": issued + seconds,
        "iat": issued,
        "iss": ISSUER,
        "jti": tokens.new_jti(),
        "kubernetes.io": private,
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }
    token = tokens.issue(claims)
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": meta(account).get("uid"),
            "creationTimestamp": format_time(issued),
        },
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
        "status": {"token": token, "expirationTimestamp": format_time(issued + seconds)},
    }

