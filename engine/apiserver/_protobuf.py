"""Decoding of Kubernetes protobuf request bodies for the few kinds kubectl sends that way.

kubectl's typed commands (``create namespace``, ``create configmap``, ``create secret``,
``create serviceaccount``, ``create token``, ``create role``, ``create rolebinding``,
``create clusterrole``, ``create clusterrolebinding``, ``auth can-i``, ``auth whoami``) send
``application/vnd.kubernetes.protobuf``. This decodes the ``k8s\\x00`` envelope
(``runtime.Unknown``) and ``Namespace``, ``ConfigMap``, ``Secret``, ``ServiceAccount``,
``authentication.k8s.io/v1`` ``TokenRequest`` and ``SelfSubjectReview``,
``authorization.k8s.io/v1`` ``SelfSubjectAccessReview``, ``SelfSubjectRulesReview``,
``SubjectAccessReview`` and ``LocalSubjectAccessReview``, and ``rbac.authorization.k8s.io/v1``
``Role``, ``ClusterRole``, ``RoleBinding`` and ``ClusterRoleBinding`` into their JSON form.
Responses are always JSON (clients ask for protobuf *or* JSON). Other kinds are refused.
"""

from __future__ import annotations

import base64
from typing import Any

from ._errors import RequestRejected

__all__ = ["decode_protobuf"]

_MAGIC = b"k8s\x00"

Schema = dict[int, tuple[str, Any]]

_OWNER_REF: Schema = {
    1: ("kind", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
_OBJECT_META: Schema = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    11: ("labels", "map_string"),
    12: ("annotations", "map_string"),
    13: ("ownerReferences", ("repeated", _OWNER_REF)),
    14: ("finalizers", "repeated_string"),
}
_SELECTOR: Schema = {
    1: ("rawSelector", "string"),
    2: ("requirements", ("repeated", {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", "repeated_string")})),
}
_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "string"),
    2: ("verb", "string"),
    3: ("group", "string"),
    4: ("version", "string"),
    5: ("resource", "string"),
    6: ("subresource", "string"),
    7: ("name", "string"),
    8: ("fieldSelector", _SELECTOR),
    9: ("labelSelector", _SELECTOR),
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "string"), 2: ("verb", "string")}
_ACCESS_REVIEW_SPEC: Schema = {
    1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
    2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES),
    3: ("user", "string"),
    4: ("groups", "repeated_string"),
    5: ("extra", ("map", {1: ("items", "repeated_string")})),
    6: ("uid", "string"),
}
_POLICY_RULE: Schema = {
    1: ("verbs", "repeated_string"),
    2: ("apiGroups", "repeated_string"),
    3: ("resources", "repeated_string"),
    4: ("resourceNames", "repeated_string"),
    5: ("nonResourceURLs", "repeated_string"),
}
_LABEL_SELECTOR: Schema = {
    1: ("matchLabels", "map_string"),
    2: ("matchExpressions", ("repeated", {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", "repeated_string")})),
}
_BINDING: Schema = {
    1: ("metadata", _OBJECT_META),
    2: ("subjects", ("repeated", {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"), 4: ("namespace", "string")})),
    3: ("roleRef", {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}),
}
_RBAC = "rbac.authorization.k8s.io/v1"
_KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("finalizers", "repeated_string")}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", "map_string"),
        3: ("binaryData", "map_bytes"),
        4: ("immutable", "bool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", "map_bytes"),
        3: ("type", "string"),
        4: ("stringData", "map_string"),
        5: ("immutable", "bool"),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", _OBJECT_META),
        4: ("automountServiceAccountToken", "bool"),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {
            1: ("audiences", "repeated_string"),
            3: ("boundObjectRef", {
                1: ("kind", "string"), 2: ("apiVersion", "string"), 3: ("name", "string"), 4: ("uid", "string"),
            }),
            4: ("expirationSeconds", "int"),
        }),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", _OBJECT_META)},
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {k: v for k, v in _ACCESS_REVIEW_SPEC.items() if k in (1, 2)}),
    },
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("namespace", "string")}),
    },
    ("authorization.k8s.io/v1", "SubjectAccessReview"): {1: ("metadata", _OBJECT_META), 2: ("spec", _ACCESS_REVIEW_SPEC)},
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", _ACCESS_REVIEW_SPEC),
    },
    (_RBAC, "Role"): {1: ("metadata", _OBJECT_META), 2: ("rules", ("repeated", _POLICY_RULE))},
    (_RBAC, "ClusterRole"): {
        1: ("metadata", _OBJECT_META),
        2: ("rules", ("repeated", _POLICY_RULE)),
        3: ("aggregationRule", {1: ("clusterRoleSelectors", ("repeated", _LABEL_SELECTOR))}),
    },
    (_RBAC, "RoleBinding"): _BINDING,
    (_RBAC, "ClusterRoleBinding"): _BINDING,
}


def _malformed() -> RequestRejected:
    return RequestRejected(400, "BadRequest", "the protobuf request body is malformed")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _malformed()
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    fields: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            fields.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise _malformed()
            fields.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise _malformed()
    return fields


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _malformed()
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise _malformed() from None


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind == "string":
            if text := _text(value):
                out[name] = text
        elif kind == "bool":
            out[name] = bool(value)
        elif kind == "int":
            if not isinstance(value, int):
                raise _malformed()
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "repeated_string":
            out.setdefault(name, []).append(_text(value))
        elif kind in ("map_string", "map_bytes"):
            if not isinstance(value, bytes):
                raise _malformed()
            entry = dict(_fields(value))
            key = _text(entry.get(1, b""))
            raw = entry.get(2, b"")
            if not isinstance(raw, bytes):
                raise _malformed()
            out.setdefault(name, {})[key] = raw.decode() if kind == "map_string" else base64.b64encode(raw).decode()
        elif isinstance(kind, tuple) and kind[0] == "map":
            if not isinstance(value, bytes):
                raise _malformed()
            entry = dict(_fields(value))
            raw = entry.get(2, b"")
            if not isinstance(raw, bytes):
                raise _malformed()
            out.setdefault(name, {})[_text(entry.get(1, b""))] = _message(raw, kind[1]).get("items", [])
        elif isinstance(kind, tuple):
            if not isinstance(value, bytes):
                raise _malformed()
            out.setdefault(name, []).append(_message(value, kind[1]))
        else:
            if not isinstance(value, bytes):
                raise _malformed()
            out[name] = _message(value, kind)
    return out


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; 415 for kinds it cannot decode, 400 when
    the body is malformed."""
    if not body.startswith(_MAGIC):
        raise _malformed()
    envelope = dict(_fields(body[len(_MAGIC) :]))
    type_meta = envelope.get(1, b"")
    raw = envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise _malformed()
    meta = {number: _text(value) for number, value in _fields(type_meta)}
    api_version, kind = meta.get(1, ""), meta.get(2, "")
    schema = _KINDS.get((api_version, kind))
    if schema is None:
        known = ", ".join(f"{v} {k}" for v, k in sorted(_KINDS))
        raise RequestRejected(
            415,
            "UnsupportedMediaType",
            f"protobuf bodies are decoded only for {known}, not {api_version} {kind}; send application/json",
        )
    return {"apiVersion": api_version, "kind": kind, **_message(raw, schema)}
