"""Authorization and identity: RBAC objects' validation, access reviews and TokenRequests.

The embedded server has one user, who may do everything (as ``system:masters`` on a cluster):
``SelfSubjectAccessReview`` and ``SelfSubjectRulesReview`` always allow. A
``SubjectAccessReview`` about another user is decided by the stored RBAC objects, as the RBAC
authorizer decides it: a user in ``system:masters`` may do everything; otherwise a rule of a
Role bound in the namespace, or of a ClusterRole bound anywhere (``cluster-admin`` allows
everything even when it is not stored), must match. Reviews are answered (201) and never
stored. ``serviceaccounts/{name}/token`` answers a TokenRequest with an unsigned token whose
claims are those of a real bound service account token.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, Protocol

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

__all__ = ["RBAC", "validate_rbac", "review", "token_request", "USER"]

RBAC = "rbac.authorization.k8s.io"
USER = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
"""Who every request to the embedded server is (TLS client certificates name a user too, but
all users may do everything)."""

_ISSUER = "https://kubernetes.default.svc.cluster.local"


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


def _rule_allows(rule: dict[str, Any], attributes: dict[str, Any], resource: bool) -> bool:
    verb = str(attributes.get("verb", ""))
    if not _matches(rule.get("verbs") or [], verb):
        return False
    if not resource:
        path = str(attributes.get("path", ""))
        return any(u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in rule.get("nonResourceURLs") or [])
    name = str(attributes.get("resource", ""))
    if attributes.get("subresource"):
        name = f"{name}/{attributes['subresource']}"
    if not _matches(rule.get("apiGroups") or [], str(attributes.get("group", ""))):
        return False
    if not _matches(rule.get("resources") or [], name):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.get("name") in names


def _subject_matches(subject: dict[str, Any], user: str, groups: list[str]) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace', '')}:{subject.get('name', '')}"
    return False


def _allowed(storage: ObjectStorage, spec: dict[str, Any]) -> tuple[bool, str]:
    user = str(spec.get("user", ""))
    groups = [str(g) for g in spec.get("groups") or []]
    if user.startswith("system:serviceaccount:"):
        groups = [*groups, "system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"]
    if "system:masters" in groups:
        return True, ""
    resource = isinstance(spec.get("resourceAttributes"), dict)
    attributes = _dict(spec.get("resourceAttributes") if resource else spec.get("nonResourceAttributes"))
    namespace = str(attributes.get("namespace", "")) if resource else ""

    def rules_of(kind: str, name: str, ns: str) -> list[dict[str, Any]] | None:
        rt = storage.find_type(RBAC, "v1", "roles" if kind == "Role" else "clusterroles")
        role = storage.lookup(rt, ns or None, name) if rt is not None else None
        if role is None:
            return [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "nonResourceURLs": ["*"]}] if name == "cluster-admin" and kind == "ClusterRole" else None
        return [_dict(r) for r in role.get("rules") or []]

    bindings: list[tuple[Obj, str]] = []
    for plural in ("clusterrolebindings", "rolebindings"):
        rt = storage.find_type(RBAC, "v1", plural)
        found = storage.list_objects(rt, None, LabelSelector(), FieldSelector())[0] if rt is not None else []
        for binding in found:
            ns = str(meta(binding).get("namespace", ""))
            if plural == "rolebindings" and (not namespace or ns != namespace):
                continue
            bindings.append((binding, ns))
    for binding, ns in bindings:
        if not any(_subject_matches(_dict(s), user, groups) for s in binding.get("subjects") or []):
            continue
        ref = _dict(binding.get("roleRef"))
        rules = rules_of(str(ref.get("kind", "")), str(ref.get("name", "")), ns if ref.get("kind") == "Role" else "")
        for rule in rules or []:
            if _rule_allows(rule, attributes, resource):
                kind = "RoleBinding" if ns else "ClusterRoleBinding"
                where = f' of {ref.get("kind")} "{ref.get("name")}" to User "{user}"'
                return True, f'RBAC: allowed by {kind} "{meta(binding).get("name")}"' + (f' in namespace "{ns}"' if ns else "") + where
    return False, ""


def _review_causes(spec: dict[str, Any], *, self_review: bool) -> list[CauseSpec]:
    causes: list[CauseSpec] = []
    has_resource = isinstance(spec.get("resourceAttributes"), dict)
    has_non_resource = isinstance(spec.get("nonResourceAttributes"), dict)
    if has_resource == has_non_resource:
        causes.append(("FieldValueInvalid", "spec.resourceAttributes", "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not self_review and not spec.get("user") and not spec.get("groups") and not spec.get("uid"):
        causes.append(("FieldValueInvalid", "spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    return causes


def review(storage: ObjectStorage, rt: ResourceType, namespace: str | None, body: Any, now: Callable[[], float]) -> Obj:
    """Answer a create of the review type ``rt`` (not stored); raises :class:`RequestRejected`
    (400, 422)."""
    if not isinstance(body, dict):
        raise RequestRejected(400, "BadRequest", "the request body must be a JSON object")
    spec = _dict(body.get("spec"))
    answer: Obj = {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        "metadata": {**{k: v for k, v in _dict(body.get("metadata")).items() if k in ("name", "generateName", "labels", "annotations")}, "creationTimestamp": None},
    }
    if rt.namespaced:
        answer["metadata"]["namespace"] = namespace
    plural = rt.plural
    if plural == "selfsubjectreviews":
        answer["status"] = {"userInfo": dict(USER)}
        return answer
    if plural == "selfsubjectrulesreviews":
        answer["spec"] = spec
        answer["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
        return answer
    self_review = plural == "selfsubjectaccessreviews"
    causes = _review_causes(spec, self_review=self_review)
    if plural == "localsubjectaccessreviews":
        attributes_ns = _dict(spec.get("resourceAttributes")).get("namespace")
        if attributes_ns != namespace:
            causes.append(("FieldValueInvalid", "spec.resourceAttributes.namespace", f'Invalid value: "{attributes_ns or ""}": must match metadata.namespace'))
    if causes:
        raise invalid_causes(rt, str(meta(body).get("name", "")), causes)
    answer["spec"] = spec
    if self_review:
        answer["status"] = {"allowed": True}
        return answer
    allowed, reason = _allowed(storage, spec)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    answer["status"] = status
    return answer


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_request(storage: ObjectStorage, rt: ResourceType, namespace: str | None, name: str, body: Any, now: Callable[[], float]) -> Obj:
    """Answer ``POST serviceaccounts/{name}/token``; raises :class:`RequestRejected` (404 for a
    missing service account, 422 for a too short expiry)."""
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
    audiences = list(spec.get("audiences") or [_ISSUER])
    issued = int(now())
    claims = {
        "aud": audiences,
        "exp": issued + seconds,
        "iat": issued,
        "iss": _ISSUER,
        "jti": str(meta(account).get("uid", "")),
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": meta(account).get("uid")},
        },
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }
    header = {"alg": "none", "kid": "engine-testing"}
    token = ".".join((_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()), ""))
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": format_time(issued)},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
        "status": {"token": token, "expirationTimestamp": format_time(issued + seconds)},
    }

