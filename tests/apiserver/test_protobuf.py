"""The protobuf request-body decoder (kubectl's typed commands; end to end in test_kubectl.py)."""

from __future__ import annotations

import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._protobuf import decode_protobuf


def field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(3, b"") + field(4, b"")


def test_decodes_a_configmap() -> None:
    meta = field(1, b"c") + field(2, b"") + field(11, field(1, b"app") + field(2, b"web")) + field(14, b"f")
    raw = field(1, meta) + field(2, field(1, b"k") + field(2, b"v")) + field(3, field(1, b"b") + field(2, b"\x00\x01"))
    assert decode_protobuf(envelope("v1", "ConfigMap", raw)) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"app": "web"}, "finalizers": ["f"]},
        "data": {"k": "v"},
        "binaryData": {"b": "AAE="},
    }


def test_refuses_other_kinds_and_garbage() -> None:
    with pytest.raises(RequestRejected, match=(
            r"^protobuf bodies are decoded only for authentication.k8s.io/v1 SelfSubjectReview, "
            r"authentication.k8s.io/v1 TokenRequest, authorization.k8s.io/v1 LocalSubjectAccessReview, "
            r"authorization.k8s.io/v1 SelfSubjectAccessReview, authorization.k8s.io/v1 SelfSubjectRulesReview, "
            r"authorization.k8s.io/v1 SubjectAccessReview, rbac.authorization.k8s.io/v1 ClusterRole, "
            r"rbac.authorization.k8s.io/v1 ClusterRoleBinding, rbac.authorization.k8s.io/v1 Role, "
            r"rbac.authorization.k8s.io/v1 RoleBinding, v1 ConfigMap, "
            r"v1 Namespace, v1 Secret, v1 ServiceAccount, not apps/v1 Deployment; send application/json$")):
        decode_protobuf(envelope("apps/v1", "Deployment", b""))
    with pytest.raises(RequestRejected, match=r"^the protobuf request body is malformed$"):
        decode_protobuf(b"k8s\x00\x0a\xff")
    with pytest.raises(RequestRejected, match=r"^the protobuf request body is malformed$"):
        decode_protobuf(b"{}")


def test_decodes_a_token_request() -> None:
    bound = field(1, b"Secret") + field(3, b"s") + field(4, b"u-1")
    spec = field(1, b"api") + field(3, bound) + bytes([4 << 3, 0x90, 0x1C])
    assert decode_protobuf(envelope("authentication.k8s.io/v1", "TokenRequest", field(1, b"") + field(2, spec))) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {},
        "spec": {"audiences": ["api"], "boundObjectRef": {"kind": "Secret", "name": "s", "uid": "u-1"},
                 "expirationSeconds": 3600},
    }
