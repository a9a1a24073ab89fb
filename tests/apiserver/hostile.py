"""Hostile requests to the embedded API server, and the oracle their answers are judged by.

:func:`hostile_request` draws one malformed or hostile request from a ``random.Random`` (the
fuzz test hands it hypothesis's seeded ``st.randoms()``, the volume run ``bench/apiserver_fuzz.py``
a plain seeded one). :func:`judge` says what is wrong with the answer, if anything: a client's
error must be a 4xx ``Status`` as a real kube-apiserver answers it. The only 5xx a real server
gives a client for its own request (``/work/shared/conformance``, steps ``limits.*``) are 504
``Timeout`` with cause ``ResourceVersionTooLarge`` for a read at a resourceVersion from the
future, 500 ``etcdserver: request is too large`` for an object over etcd's 1.5 MiB, and 500
``failed to create typed patch object`` for a server-side apply whose body does not fit the
type's schema (``tests/apiserver/test_apply_types.py``, checked on real 1.36.2).
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import attrs

__all__ = ["HostileRequest", "hostile_request", "judge", "NAMESPACE", "WELL_FORMED", "CR_PATH", "CRD"]

NAMESPACE = "fuzz"
WELL_FORMED = "wellformed"
"""The namespace of the well-formed requests, which no hostile request names."""
CM_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
CR_PATH = f"/apis/fuzz.example.com/v1/namespaces/{NAMESPACE}/widgets"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.fuzz.example.com"},
    "spec": {
        "group": "fuzz.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "size": {"type": "string", "maxLength": 20},
                                    "items": {"type": "array", "items": {"type": "string"}},
                                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

_RESOURCE_PATHS = [
    CM_PATH,
    CR_PATH,
    f"/api/v1/namespaces/{NAMESPACE}/secrets",
    f"/api/v1/namespaces/{NAMESPACE}/services",
    f"/api/v1/namespaces/{NAMESPACE}/pods",
    f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
    f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
    f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events",
    f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    "/api/v1/configmaps",
]
_SUBRESOURCES = ["status", "scale", "token", "log", "binding", "eviction", "finalize", "proxy", "exec", "x", ""]
_NAMES = ["w1", "cm1", "missing", "a" * 300, "UPPER", "-bad-", "with.dots", "%2e%2e", "..", ".", "x%00y", "é", "default"]
_SEGMENTS = [
    "api", "apis", "v1", "v2", "namespaces", "watch", NAMESPACE, "configmaps", "widgets", "fuzz.example.com", "apps",
    "", "..", ".", "%2F", "%", "%zz", "%00", "%ff%fe", "\u2603", "a" * 2000, "openapi", "version", "healthz", "_faults",
    "status", "scale", "finalize", "*", "~", "..%2f..", "%252e",
]
_CONTENT_TYPES = [
    "application/json", "application/yaml", "application/json-patch+json", "application/merge-patch+json",
    "application/strategic-merge-patch+json", "application/apply-patch+yaml", "application/vnd.kubernetes.protobuf",
    "application/cbor", "text/plain", "", "application/json; charset=utf-16", "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded", "application/json;;;", "*/*", "application/apply-patch+cbor",
    "application/vnd.kubernetes.protobuf;stream=watch", "application/json-patch+json; charset=bogus",
]
_ACCEPTS = [
    "application/json", "application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", "application/vnd.kubernetes.protobuf",
    "application/json;as=Table;v=v9;g=nope", "text/html", "*/*", "application/yaml", "application/cbor", ";;;", "a/b;c",
    "application/json;as=Table;v=v1;g=meta.k8s.io, application/json", "application/json;stream=watch",
]
_QUERY_NAMES = [
    "limit", "continue", "resourceVersion", "resourceVersionMatch", "timeoutSeconds", "watch", "allowWatchBookmarks",
    "sendInitialEvents", "labelSelector", "fieldSelector", "dryRun", "fieldValidation", "fieldManager", "force",
    "propagationPolicy", "gracePeriodSeconds", "orphanDependents", "pretty", "includeObject", "noHeaders",
    "shardSelector", "container", "follow", "exact", "export", "", "\u0000",
]
_INTS = ["-1", "0", "1", "2", "abc", "1e3", "1.5", "99999999999999999999999", "-99999999999999999", " 3", "0x10", "", "NaN", "٣"]
_LABEL_SELECTORS = [
    "app in web", "app in (", "app in ()", "!", "!!app", "=", "==", "a=b,", ",", "a!=", "a notin (x", "a in (x,,y)",
    "x" * 70 + "=y", "a/b/c=d", "a=" + "v" * 70, "a>1", "a<b", "a=b=c", "(a)", "a in (b) c", "\u2603=1", "a=%zz",
    "app=web", "app", "!app", "app in (a,b)", "a.b/c=d", "a=b,c!=d,e in (f),!g",
]
_FIELD_SELECTORS = [
    "metadata.name", "metadata.name=", "=x", "metadata.name==a", "metadata.name!=a", "data.n=sel", "spec.size=1",
    "metadata.name=a,", "metadata.name=a,,b=c", "metadata.name in (a)", "status.phase=Running", "metadata.namespace=x",
    "metadata.name=\\", "metadata.name=a\\,b", "!metadata.name", "metadata.name", "spec.nodeName=x", "type=Normal",
    "involvedObject.kind=Pod", "x" * 300 + "=y",
]


@attrs.frozen
class HostileRequest:
    """One request to send: ``path`` is the raw request target's path (not re-encoded)."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunks: tuple[bytes, ...] | None = None
    """Sent chunked when set (``body`` is then unused)."""
    credentials: str = "admin"
    """``admin``, ``none`` (``system:anonymous`` over a socket) or ``bogus`` (a token the server never issued)."""
    kind: str = ""
    """Which class of hostile input this is, for counting."""

    @property
    def watch(self) -> bool:
        """Whether a success may be a stream that never ends by itself."""
        return self.method == "GET" and (
            any(k == "watch" for k, _ in self.query) or "/watch/" in self.path or any(k == "follow" for k, _ in self.query)
        )


def _nested(rnd: random.Random, depth: int) -> bytes:
    opener, closer = rnd.choice([(b"[", b"]"), (b'{"a":', b"}")])
    inner = opener * depth + b"1" + closer * depth
    return b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":' + inner + b"}"


def _nested_yaml(rnd: random.Random, depth: int) -> bytes:
    return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx: " + b"[" * depth + b"]" * depth + b"\n"


def _laughs(levels: int) -> bytes:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    lines += ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: laughs}"]
    return "\n".join(lines).encode()


def _json_value(rnd: random.Random, depth: int = 0) -> Any:
    choice = rnd.randrange(10 if depth < 3 else 6)
    if choice == 0:
        return None
    if choice == 1:
        return rnd.choice([True, False])
    if choice == 2:
        return rnd.choice([0, -1, 2**63, -(2**63) - 1, 10**30, 1.5, 1e308])
    if choice in (3, 4, 5):
        return rnd.choice(["", "x", "a" * 300, "\u0000", "\ud7ff", "é", "${x}", "<script>", "../.."])
    if choice in (6, 7):
        return [_json_value(rnd, depth + 1) for _ in range(rnd.randrange(3))]
    keys = ["name", "namespace", "labels", "annotations", "metadata", "spec", "status", "data", "kind", "apiVersion",
            "items", "replicas", "finalizers", "ownerReferences", "resourceVersion", "uid", "$patch", "$retainKeys",
            "generateName", "managedFields", "deletionTimestamp", "x"]
    return {rnd.choice(keys): _json_value(rnd, depth + 1) for _ in range(rnd.randrange(4))}


def _object(rnd: random.Random, path: str, name: str) -> Any:
    """An object body that is wrong in one or more places (or occasionally right)."""
    if path == CR_PATH:
        obj: dict[str, Any] = {"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": name},
                               "spec": {"replicas": 1, "size": "s"}}
    else:
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}
    for _ in range(rnd.randrange(4)):
        where = rnd.choice(["top", "metadata", "spec", "data", "replace"])
        value = _json_value(rnd)
        if where == "replace":
            return value
        key = rnd.choice(["name", "namespace", "labels", "annotations", "finalizers", "ownerReferences", "kind",
                          "apiVersion", "metadata", "spec", "data", "replicas", "size", "items", "free", "uid",
                          "resourceVersion", "generateName", "managedFields", "deletionTimestamp", "binaryData"])
        container = obj if where == "top" else obj.get(where) if isinstance(obj.get(where), dict) else obj
        container[key] = value
    return obj


def _json_patch(rnd: random.Random) -> Any:
    ops = []
    for _ in range(rnd.randrange(1, 4)):
        op: dict[str, Any] = {}
        if rnd.random() < 0.9:
            op["op"] = rnd.choice(["add", "remove", "replace", "move", "copy", "test", "bogus", "", 7, None])
        if rnd.random() < 0.9:
            op["path"] = rnd.choice(["/data/k", "/metadata/name", "/metadata/labels/a~1b", "/spec/items/-",
                                     "/spec/items/99", "/spec/items/-1", "/spec/items/01", "", "/", "data", "/~2",
                                     "/metadata/finalizers/0", "/spec/replicas", "/status", "/a/b/c/d", 5, None,
                                     "/metadata/resourceVersion", "/metadata/uid", "/spec/items/1e1"])
        if rnd.random() < 0.5:
            op["from"] = rnd.choice(["/data", "/nope", "", "/spec/items/0", 3])
        if rnd.random() < 0.7:
            op["value"] = _json_value(rnd)
        ops.append(op)
    return rnd.choice([ops, ops, ops[0], {"op": "add"}, "add", None, [[]], [None], 7])


def _strategic(rnd: random.Random) -> Any:
    return rnd.choice([
        {"$patch": "delete"},
        {"$patch": "replace", "data": {"a": "b"}},
        {"$patch": "bogus"},
        {"$patch": 7},
        {"data": {"$patch": "delete"}},
        {"$retainKeys": ["data"], "data": {}},
        {"$retainKeys": "data"},
        {"$retainKeys": [1, None]},
        {"$setElementOrder/finalizers": [{"x": 1}], "metadata": {"finalizers": ["a"]}},
        {"metadata": {"$setElementOrder/finalizers": "x"}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": 5}},
        {"spec": {"ports": [{"$patch": "delete"}]}},
        {"spec": {"ports": [{"port": "x", "$patch": "delete"}]}},
        {"spec": {"ports": {"$patch": "replace"}}},
        {"spec": {"containers": [{"name": None}, {"$patch": "merge"}]}},
        {"spec": {"template": {"spec": {"containers": [{"$retainKeys": ["x"], "name": 5}]}}}},
        {"metadata": {"ownerReferences": [{"uid": None, "$patch": "delete"}]}},
        [],
        None,
        "x",
        _json_value(rnd),
    ])


def _query(rnd: random.Random) -> list[tuple[str, str]]:
    query = []
    for _ in range(rnd.randrange(4)):
        name = rnd.choice(_QUERY_NAMES)
        if name in ("limit", "timeoutSeconds", "gracePeriodSeconds"):
            value = rnd.choice(_INTS)
        elif name == "resourceVersion":
            value = rnd.choice(_INTS + ["999999999999", "1"])
        elif name == "continue":
            value = rnd.choice([
                "garbage", "", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJ4In0",
                base64.urlsafe_b64encode(json.dumps(_json_value(rnd)).encode()).decode(),
                base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":-5,"start":"\\u0000"}').decode(),
                base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":"x","start":7}').decode(), "%%%", "====",
            ])
        elif name == "labelSelector":
            value = rnd.choice(_LABEL_SELECTORS)
        elif name == "fieldSelector":
            value = rnd.choice(_FIELD_SELECTORS)
        elif name == "fieldManager":
            value = rnd.choice(["", "m", "x" * 129, "\u0000", "\t", "é" * 70, "kubectl"])
        elif name == "shardSelector":
            value = rnd.choice(["shardRange(object.metadata.uid, '0x0', '0x8')", "garbage", "shardRange(", ""])
        else:
            value = rnd.choice(["true", "false", "1", "0", "", "All", "Strict", "Ignore", "Warn", "bogus", "Exact",
                                "NotOlderThan", "Foreground", "Orphan", "\u2603", "%zz"])
        query.append((name, value))
    return query


def hostile_request(rnd: random.Random, *, huge_share: float = 1.0) -> HostileRequest:
    """One malformed or hostile request, drawn from ``rnd``; ``huge_share`` keeps that share of
    the draws of a body of megabytes (the rest become bad JSON)."""
    request = _draw(rnd, huge_share)
    if request.method == "DELETE" and request.path.rstrip("/") in (
        f"/api/v1/namespaces/{NAMESPACE}", f"/api/v1/namespaces/{WELL_FORMED}", "/api/v1/namespaces",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.fuzz.example.com",
    ):
        # Legitimate requests that would take away what the others work on.
        return attrs.evolve(request, method="GET")
    return request


def _draw(rnd: random.Random, huge_share: float) -> HostileRequest:
    kind = rnd.choice([
        "path", "json", "json", "nesting", "huge", "json_patch", "merge_patch", "strategic", "apply", "selector",
        "query", "query", "content_type", "chunked", "protobuf", "credentials", "watch",
    ])
    if kind == "huge" and rnd.random() >= huge_share:
        kind = "json"
    base = rnd.choice(_RESOURCE_PATHS[:3] + _RESOURCE_PATHS)
    name = rnd.choice(["w1", "cm1"] * 3 + _NAMES)
    item = f"{base}/{name}"
    headers: list[tuple[str, str]] = []
    query: list[tuple[str, str]] = []
    method = "GET"
    path = base
    body = b""
    chunks: tuple[bytes, ...] | None = None
    credentials = "admin"
    if kind == "path":
        method = rnd.choice(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "get"])
        path = "/" + "/".join(rnd.choice(_SEGMENTS) for _ in range(rnd.randrange(8)))
        if rnd.random() < 0.3:
            path = rnd.choice([base, item, item + "/" + rnd.choice(_SUBRESOURCES)]) + rnd.choice(["", "/", "//", "/x/y", "/.."])
        if method in ("POST", "PUT", "PATCH"):
            body = json.dumps(_object(rnd, base, name)).encode()
            headers.append(("content-type", rnd.choice(_CONTENT_TYPES[:6])))
    elif kind == "json":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else rnd.choice([item, item, item + "/status", item + "/scale"])
        text = json.dumps(_object(rnd, base, name)).encode()
        mangle = rnd.randrange(8)
        if mangle == 0:
            text = text[: rnd.randrange(len(text) + 1)]
        elif mangle == 1:
            text = text.replace(b'"', b"'", 1)
        elif mangle == 2:
            text = b"\xff\xfe" + text
        elif mangle == 3:
            text = text + rnd.choice([b"garbage", b"}", b"\x00", b" {}", b"\n---\nkind: x"])
        elif mangle == 4:
            text = rnd.choice([b"NaN", b"Infinity", b"1e99999", b"-", b'"\\ud800"', b"\x00", b"[]", b"null", b"0", b'"x"'])
        elif mangle == 5:
            text = text.replace(b"{", b'{"metadata":{"name":"dup"},', 1)
        ctype = rnd.choice(["application/json", "application/yaml", "application/merge-patch+json",
                            "application/strategic-merge-patch+json", "application/apply-patch+yaml",
                            "application/json-patch+json"])
        headers.append(("content-type", ctype))
        if ctype == "application/apply-patch+yaml":
            query.append(("fieldManager", "fuzz"))
        body = text
    elif kind == "nesting":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else item
        depth = rnd.choice([50, 500, 999, 1001, 5000, 20000, 100_000])
        yaml_body = rnd.random() < 0.3
        body = _nested_yaml(rnd, depth) if yaml_body else _nested(rnd, depth)
        if method == "PATCH":
            ctype = rnd.choice(["application/merge-patch+json", "application/strategic-merge-patch+json",
                                "application/apply-patch+yaml"])
            query.append(("fieldManager", "fuzz"))
        else:
            ctype = "application/yaml" if yaml_body else "application/json"
        headers.append(("content-type", ctype))
    elif kind == "huge":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else item
        size = rnd.choice([1_600_000, 3_145_728 + 1, 3_500_000, 5_000_000])
        blob = "x" * size
        obj = _object(rnd, base, "huge")
        if isinstance(obj, dict):
            obj.setdefault("data", {})
            obj["data"] = {"blob": blob} if not isinstance(obj["data"], dict) else {**obj["data"], "blob": blob}
            body = json.dumps(obj).encode()
        else:
            body = b'"' + blob.encode() + b'"'
        ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers.append(("content-type", ctype))
        if rnd.random() < 0.3:
            chunks = tuple(body[i : i + 65536] for i in range(0, len(body), 65536))
    elif kind == "json_patch":
        method, path = "PATCH", rnd.choice([item, item, item + "/status", item + "/scale"])
        headers.append(("content-type", "application/json-patch+json"))
        body = json.dumps(_json_patch(rnd)).encode()
    elif kind == "merge_patch":
        method, path = "PATCH", rnd.choice([item, item, item + "/status", item + "/scale"])
        headers.append(("content-type", "application/merge-patch+json"))
        body = json.dumps(rnd.choice([_json_value(rnd), _object(rnd, base, name), {"metadata": _json_value(rnd)}])).encode()
    elif kind == "strategic":
        method, path = "PATCH", rnd.choice([item, item, item + "/status", item + "/scale"])
        headers.append(("content-type", "application/strategic-merge-patch+json"))
        body = json.dumps(_strategic(rnd)).encode()
    elif kind == "apply":
        method, path = "PATCH", rnd.choice([item, item, item + "/status", item + "/scale"])
        headers.append(("content-type", "application/apply-patch+yaml"))
        manager = rnd.choice([None, "", "fuzz", "x" * 129, "bad\u0000", "\u2603", "a b"])
        if manager is not None:
            query.append(("fieldManager", manager))
        if rnd.random() < 0.4:
            query.append(("force", rnd.choice(["true", "false", "yes", ""])))
        obj = _object(rnd, base, name)
        body = json.dumps(obj).encode() if rnd.random() < 0.7 else rnd.choice([b"kind: [", b"- a\n- b", b"{a: 1", b"\t\tx"])
    elif kind == "selector":
        method = rnd.choice(["GET", "GET", "DELETE"])
        query += [("labelSelector", rnd.choice(_LABEL_SELECTORS))] if rnd.random() < 0.7 else []
        query += [("fieldSelector", rnd.choice(_FIELD_SELECTORS))] if rnd.random() < 0.7 else []
        if rnd.random() < 0.3:
            query.append(("watch", "true"))
            query.append(("timeoutSeconds", "1"))
    elif kind == "query":
        method = rnd.choice(["GET", "GET", "GET", "DELETE", "POST", "PATCH"])
        path = rnd.choice([base, base, item])
        query += _query(rnd)
        if method in ("POST", "PATCH"):
            body = json.dumps(_object(rnd, base, name)).encode()
            headers.append(("content-type", "application/json" if method == "POST" else "application/merge-patch+json"))
    elif kind == "content_type":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else item
        headers.append(("content-type", rnd.choice(_CONTENT_TYPES)))
        if rnd.random() < 0.5:
            headers.append(("accept", rnd.choice(_ACCEPTS)))
        body = rnd.choice([json.dumps(_object(rnd, base, name)).encode(), b"kind: ConfigMap\n", b"\x0a\x02\x08\x01", b""])
        if rnd.random() < 0.2:
            body = _laughs(rnd.choice([4, 9]))
    elif kind == "chunked":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else item
        headers.append(("content-type", "application/merge-patch+json" if method == "PATCH" else "application/json"))
        whole = json.dumps(_object(rnd, base, name)).encode()
        cuts = sorted(rnd.randrange(len(whole) + 1) for _ in range(rnd.randrange(5)))
        pieces, last = [], 0
        for cut in cuts:
            pieces.append(whole[last:cut])
            last = cut
        pieces.append(whole[last:])
        chunks = tuple(p for p in pieces if p)
    elif kind == "protobuf":
        method = rnd.choice(["POST", "PUT", "PATCH"])
        path = base if method == "POST" else item
        headers.append(("content-type", "application/vnd.kubernetes.protobuf"))
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(64)))
        body = rnd.choice([b"k8s\x00" + junk, junk, b"k8s\x00\x0a\x00\x12\xff\xff\xff\xff\x0f", b"k8s\x00"])
    elif kind == "credentials":
        credentials = rnd.choice(["none", "bogus"])
        method = rnd.choice(["GET", "POST", "DELETE"])
        path = rnd.choice([base, item, "/api", "/apis", "/version", "/healthz", "/openapi/v2", "/_faults"])
        if rnd.random() < 0.3:
            headers.append(("impersonate-user", rnd.choice(["system:admin", "", "\u2603"])))
            headers.append(("impersonate-group", "system:masters"))
    elif kind == "watch":
        path = rnd.choice([base, f"/api/v1/watch/namespaces/{NAMESPACE}/configmaps", base.replace("/api/v1/", "/api/v1/watch/", 1)])
        query.append(("watch", rnd.choice(["true", "1", "false", "yes"])))
        query += _query(rnd)
        query.append(("timeoutSeconds", rnd.choice(["1", "0", "-5", "abc", "99999999999999999999"])))
    return HostileRequest(method, path, tuple(query), tuple(headers), body, chunks, credentials, kind)


_ANONYMOUS_PATHS = {"/healthz", "/livez", "/readyz", "/version"}


def judge(request: HostileRequest, status: int, body: bytes, content_type: str, *, socket: bool = True) -> str | None:
    """What is wrong with ``status``/``body`` as the answer to ``request``, or ``None``;
    ``socket=False`` for the memory transport, where a request without credentials is the admin."""
    if status >= 500:
        try:
            answer = json.loads(body)
        except ValueError:
            return f"{status} that is not a Status: {body[:200]!r}"
        if status == 504 and answer.get("reason") == "Timeout" and any(
            c.get("reason") == "ResourceVersionTooLarge" for c in (answer.get("details") or {}).get("causes", [])
        ):
            return None
        if status == 500 and answer.get("message") == "etcdserver: request is too large" and len(request.body) > 1_500_000:
            return None
        if status == 500 and "shardSelector" in dict(request.query) and "shard" in (answer.get("message") or ""):
            return None
        if (status == 500 and ("content-type", "application/apply-patch+yaml") in request.headers
                and (answer.get("message") or "").startswith("failed to create typed patch object (")):
            # Real kube-apiserver 1.36.2 answers a server-side apply whose body does not fit the
            # type's schema (a string for an integer, a list for a map) 500 with this message.
            return None
        return f"{status} for a client's error: {answer.get('message')!r}"
    if request.credentials == "bogus" and status != 401:
        return f"{status} for a token the server never issued (expected 401)"
    if socket and request.credentials == "none" and status < 400 and request.path.rstrip("/") not in _ANONYMOUS_PATHS:
        return f"{status} for system:anonymous on {request.path} (it may read only {sorted(_ANONYMOUS_PATHS)})"
    if request.method == "HEAD":
        return None
    if status >= 400 and (request.path.startswith("/api/") or request.path.startswith("/apis/")) and status != 431:
        if "json" not in content_type:
            return f"{status} answered as {content_type!r}, not a Status"
        try:
            answer = json.loads(body)
        except ValueError:
            return f"{status} whose body is not JSON: {body[:200]!r}"
        if not isinstance(answer, dict) or answer.get("kind") != "Status" or answer.get("code") != status:
            return f"{status} whose body is not a Status with that code: {body[:200]!r}"
        if answer.get("status") != "Failure":
            return f"{status} Status that is not a Failure: {body[:200]!r}"
    return None
