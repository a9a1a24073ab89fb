"""The script: the recorded steps in order, plus the steps the recording holds out that the
recorded ones depend on (written here, marked ``authored``), plus request and expectation fixes.

There is one recording per Kubernetes version (:data:`RECORDINGS`): the same 205 requests,
answered by a real kube-apiserver of that version. ``steps(version)`` holds that version's
answers as the expectations; a run takes the version of its target's ``/version``. The
published recording is 205 of the 326 steps that were run against the real server; the
121 held-out steps include setup that later steps rely on (the first namespace, ``cm1``, the
``widgets`` and ``shapes`` CRDs, ``sel-a``, ``gz2``, ``sp2``, the ``d-*`` objects of the delete
responses...). The authored steps recreate that state as the recorded answers show it; their
only expectation is their HTTP status (they are checked as ``setup`` tests). A few recorded
request bodies were captured after the recorder had mutated them for a later step
(``cm.update_with_rv``, ``lease.update``); :data:`FIXES` restores them from the recorded answers.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

DATA = Path(__file__).parent / "data"

RECORDINGS: dict[str, Path] = {
    "1.32": DATA / "real-kube-apiserver-1.32.json",
    "1.36": DATA / "real-kube-apiserver-1.36.json",
}
"""``major.minor`` -> the recording of a real kube-apiserver of that version (1.32.6, 1.36.2)."""

LATEST = "1.36"
"""The version the embedded server answers as."""

NS = "/api/v1/namespaces/diffapi-{run}"
NSX = "/api/v1/namespaces/diffapi-{run}-x"
GROUP = "g{run}.diffapi.test"
CRX = f"/apis/{GROUP}/v1/namespaces/diffapi-{{run}}-x"


@attrs.frozen
class Step:
    """One scripted request and the answer expected of it."""

    name: str
    request: dict[str, Any]
    response: dict[str, Any]
    authored: bool = False
    """Written here (a held-out setup step): only ``response["status"]`` is expected."""
    bind: dict[str, str] = attrs.field(factory=dict)
    """``{placeholder or $var: dotted path in the answer}``: bind after the step runs."""
    wait_for: str | None = None
    """For authored steps: repeat the request (for up to 30 s) until this holds of the answer:
    :data:`ESTABLISHED` (the CRD's ``Established`` condition is true) or :data:`SERVED` (the
    answer is not 404: a real server serves a new CRD's resources only once it is established,
    and its handlers learn of that a moment later)."""

    @property
    def group(self) -> str:
        return self.name.split(".")[0]


def _req(
    method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, ctype: str | None = None
) -> dict[str, Any]:
    if body is not None and ctype is None:
        ctype = "application/json"
    return {"method": method, "path": path, "query": query or {}, "content_type": ctype, "body": body}


def _cm(name: str, data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}, "data": data}


def _setup(name: str, request: dict[str, Any], status: int, **kw: Any) -> Step:
    return Step(name=f"{name}", request=request, response={"status": status}, authored=True, **kw)


MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
RELEASE = {"metadata": {"finalizers": None}}

WIDGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "shortNames": ["wd"],
            "kind": "Widget",
            "listKind": "WidgetList",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}
"""As the recorded answer of ``cleanup.crd_delete`` shows it."""

SHAPES_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"shapes.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {"plural": "shapes", "singular": "shape", "kind": "Shape", "listKind": "ShapeList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["name"],
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.size <= 5 || self.mode == 'slow'",
                                        "message": "size above 5 needs mode slow",
                                    }
                                ],
                                "properties": {
                                    "name": {"type": "string", "pattern": "^[a-z]+$"},
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                                    "enabled": {"type": "boolean", "default": True},
                                    "ports": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["port"],
                                        "items": {
                                            "type": "object",
                                            "required": ["port"],
                                            "properties": {
                                                "port": {"type": "integer"},
                                                "proto": {"type": "string", "default": "TCP"},
                                            },
                                        },
                                    },
                                    "nested": {
                                        "type": "object",
                                        "properties": {
                                            "inner": {"type": "object", "properties": {"flag": {"type": "boolean"}}},
                                            "level": {"type": "integer", "default": 1},
                                        },
                                    },
                                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "tags": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
                                    "target": {"x-kubernetes-int-or-string": True},
                                    "labelsMap": {"type": "object", "additionalProperties": {"type": "string"}},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string", "enum": ["Pending", "Ready"]},
                                    "count": {"type": "integer", "minimum": 0},
                                    "conditions": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["type", "status"],
                                            "properties": {
                                                "type": {"type": "string"},
                                                "status": {"type": "string"},
                                                "reason": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}
"""Reconstructed from the recorded answers of the ``schema.*`` steps (defaults, pruning, enum
values, bounds, pattern, list-map keys, the CEL rule's message)."""

ESTABLISHED = "Established"
SERVED = "served"


def _crd_ready(name: str, plural: str, collection: str) -> list[Step]:
    """Wait until the CRD ``name`` is Established and its ``plural`` are served at ``collection``."""
    return [
        _setup(
            f"setup.{name}_crd_established",
            _req("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}"),
            200,
            wait_for=ESTABLISHED,
        ),
        _setup(f"setup.{name}_served", _req("GET", collection), 200, wait_for=SERVED),
    ]

# (anchor, "before" | "after", steps)
AUTHORED: list[tuple[str, str, list[Step]]] = [
    (
        "cm.create_in_missing_ns",
        "before",
        [
            _setup(
                "setup.ns_create",
                _req(
                    "POST",
                    "/api/v1/namespaces",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "diffapi-{run}", "labels": {"diffapi-run": "{run}"}},
                    },
                ),
                201,
            ),
        ],
    ),
    (
        "cm.create_generate_name",
        "before",
        [
            _setup(
                "setup.cm1_create",
                _req("POST", f"{NS}/configmaps", _cm("cm1", {"a": "1"}, labels={"role": "basic"})),
                201,
                bind={"uid-2": "metadata.uid", "rv-4": "metadata.resourceVersion"},
            )
        ],
    ),
    (
        "cm.patch_json",
        "before",
        [
            _setup(
                "setup.cm1_data_b",
                _req("PATCH", f"{NS}/configmaps/cm1", {"data": {"a": None, "b": "2"}}, ctype=MERGE),
                200,
            )
        ],
    ),
    (
        "crd.established",
        "before",
        [
            _setup(
                "setup.widgets_crd",
                _req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS_CRD),
                201,
            ),
            *_crd_ready("widgets", "widgets", f"/apis/{GROUP}/v1/namespaces/diffapi-{{run}}/widgets"),
        ],
    ),
    (
        "list.setup_sel-b",
        "before",
        [
            _setup(
                "setup.sel_a",
                _req(
                    "POST",
                    f"{NS}/configmaps",
                    _cm("sel-a", {"n": "sel-a"}, labels={"suite": "sel", "app": "web", "tier": "fe"}),
                ),
                201,
            )
        ],
    ),
    (
        "watch.bookmark",
        "before",
        [
            _setup(
                "setup.watch_list_rv",
                _req("GET", f"{NS}/configmaps"),
                200,
                bind={"$list-rv": "metadata.resourceVersion"},
            ),
            # A write after the list (of a kind no step lists): a real server's watch cache
            # sends a BOOKMARK only with a resourceVersion newer than the watch's, which it
            # learns from etcd's progress notifications once anything was written; without one,
            # whether the BOOKMARK comes depends on the server's own lease renewals.
            _setup(
                "setup.watch_progress",
                _req("POST", f"{NS}/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "progress"}}),
                201,
            ),
        ],
    ),
    (
        "gc.foreground_dependent_create",
        "before",
        [
            _setup(
                "setup.gc_owner_foreground",
                _req("POST", f"{NS}/configmaps", _cm("owner-foreground", {"o": "1"})),
                201,
                bind={"uid-16": "metadata.uid"},
            )
        ],
    ),
    (
        "gc.orphan_dependent_after",
        "before",
        [
            _setup(
                "setup.gc_orphan_dependent",
                _req(
                    "POST",
                    f"{NS}/configmaps",
                    _cm(
                        "dep-orphan",
                        {"d": "1"},
                        ownerReferences=[
                            {
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "name": "owner-orphan",
                                "uid": "uid-18",
                                "blockOwnerDeletion": True,
                            }
                        ],
                    ),
                ),
                201,
            ),
            _setup(
                "setup.gc_orphan_delete_owner",
                _req(
                    "DELETE",
                    f"{NS}/configmaps/owner-orphan",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Orphan"},
                ),
                200,
            ),
        ],
    ),
    (
        "ssa.apply_force",
        "before",
        [
            _setup(
                "setup.ssa_apply_a",
                _req(
                    "PATCH",
                    f"{NS}/configmaps/ssa1",
                    _cm("ssa1", {"k": "v"}, labels={"owner": "a"}),
                    query={"fieldManager": "mgr-a"},
                    ctype=APPLY,
                ),
                201,
            )
        ],
    ),
    (
        "ssa.update_by_put_manager",
        "before",
        [
            _setup(
                "setup.ssa_apply_b_drops_k",
                _req(
                    "PATCH",
                    f"{NS}/configmaps/ssa1",
                    _cm("ssa1", {"other": "o"}),
                    query={"fieldManager": "mgr-b", "force": "true"},
                    ctype=APPLY,
                ),
                200,
            )
        ],
    ),
    (
        "ssa.apply_cr_status",
        "before",
        [
            _setup(
                "setup.widget_size_7",
                _req(
                    "PATCH",
                    f"/apis/{GROUP}/v1/namespaces/diffapi-{{run}}/widgets/w1",
                    {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 7}},
                    query={"fieldManager": "mgr-a", "force": "true"},
                    ctype=APPLY,
                ),
                200,
            )
        ],
    ),
    (
        "apps.deploy_patch_labels_only",
        "before",
        [
            _setup(
                "setup.deploy_replicas_3",
                _req(
                    "PATCH",
                    "/apis/apps/v1/namespaces/diffapi-{run}-x/deployments/web",
                    {"spec": {"replicas": 3}},
                    ctype=MERGE,
                ),
                200,
            )
        ],
    ),
    (
        "cleanup.ns_get_terminating",
        "before",
        [_setup("setup.ns_delete", _req("DELETE", NS), 200)],
    ),
    (
        "cleanup.create_in_terminating_ns",
        "after",
        [
            _setup(
                "setup.ns_finalize",
                _req(
                    "PUT",
                    f"{NS}/finalize",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "diffapi-{run}"},
                        "spec": {"finalizers": []},
                    },
                ),
                200,
            )
        ],
    ),
    (
        "table.setup_gz1",
        "before",
        _crd_ready("gizmos", "gizmos", f"{CRX}/gizmos"),
    ),
    (
        "table.cr_get",
        "before",
        [
            _setup(
                "setup.gz2",
                _req(
                    "POST",
                    f"{CRX}/gizmos",
                    {
                        "apiVersion": f"{GROUP}/v1",
                        "kind": "Gizmo",
                        "metadata": {"name": "gz2"},
                        "spec": {"color": "blue"},
                    },
                ),
                201,
            )
        ],
    ),
    (
        "schema.create_defaults_pruning",
        "before",
        [
            _setup(
                "setup.shapes_crd",
                _req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", SHAPES_CRD),
                201,
            ),
            *_crd_ready("shapes", "shapes", f"{CRX}/shapes"),
        ],
    ),
    (
        "schema.get_after_status",
        "before",
        [
            _setup(
                "setup.shape_status_pending",
                _req("PATCH", f"{CRX}/shapes/s1/status", {"status": {"phase": "Pending"}}, ctype=MERGE),
                200,
            )
        ],
    ),
    (
        "fsel.setup_sp1",
        "before",
        [
            *_crd_ready("sprockets", "sprockets", f"{CRX}/sprockets"),
            _setup(
                "setup.sprockets_list_rv",
                _req("GET", f"{CRX}/sprockets"),
                200,
                bind={"$sprockets-rv": "metadata.resourceVersion"},
            ),
        ],
    ),
    (
        "fsel.cr_selectable_field",
        "before",
        [
            _setup(
                "setup.sp2",
                _req(
                    "POST",
                    f"{CRX}/sprockets",
                    {
                        "apiVersion": f"{GROUP}/v1",
                        "kind": "Sprocket",
                        "metadata": {"name": "sp2"},
                        "spec": {"color": "blue", "size": 2},
                    },
                ),
                201,
            )
        ],
    ),
    (
        "delresp.cm_with_finalizer",
        "before",
        [
            *[
                _setup(f"setup.{name}", _req("POST", f"{NSX}/configmaps", _cm(name, {"k": name}, **meta)), 201)
                for name, meta in [
                    ("d-fin", {"finalizers": ["diffapi.test/hold"]}),
                    ("d-orphan", {}),
                    ("d-od", {"finalizers": ["diffapi.test/hold"]}),
                    ("d-both", {}),
                    ("d-dry", {}),
                    ("d-grace", {}),
                    ("d-coll1", {"labels": {"del": "batch"}}),
                    ("d-coll2", {"labels": {"del": "batch"}}),
                    ("d-fg", {}),
                    ("d-inv", {}),
                ]
            ],
            _setup(
                "setup.gz1_hold",
                _req("PATCH", f"{CRX}/gizmos/gz1", {"metadata": {"finalizers": ["diffapi.test/hold"]}}, ctype=MERGE),
                200,
            ),
        ],
    ),
    (
        "delresp.cr_plain",
        "before",
        [
            _setup(
                "setup.d_inv_invalid_policy",
                _req(
                    "DELETE",
                    f"{NSX}/configmaps/d-inv",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Sideways"},
                ),
                422,
            ),
        ],
    ),
    (
        "delresp.cm_with_finalizer",
        "after",
        [
            _setup(
                "setup.d_fg_delete_foreground",
                _req(
                    "DELETE",
                    f"{NSX}/configmaps/d-fg",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
                ),
                200,
            ),
        ],
    ),
    (
        "delresp.cr_delete_again",
        "after",
        [
            _setup(
                "setup.sp1_hold",
                _req("PATCH", f"{CRX}/sprockets/sp1", {"metadata": {"finalizers": ["diffapi.test/hold"]}}, ctype=MERGE),
                200,
            ),
            _setup(
                "setup.sp1_delete_foreground",
                _req(
                    "DELETE",
                    f"{CRX}/sprockets/sp1",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
                ),
                200,
            ),
        ],
    ),
    (
        "delresp.all_released",
        "before",
        [_setup("setup.release_d_fin", _req("PATCH", f"{NSX}/configmaps/d-fin", RELEASE, ctype=MERGE), 200)],
    ),
    (
        "nslife.list_in_terminating",
        "before",
        [
            _setup(
                "setup.nslife_update_in_terminating",
                _req(
                    "PATCH", "/api/v1/namespaces/diffapi-{run}-life/configmaps/keep", {"data": {"k": "v2"}}, ctype=MERGE
                ),
                200,
            )
        ],
    ),
    (
        "nslife.get_gone",
        "before",
        [
            _setup(
                "setup.nslife_finalize",
                _req(
                    "PUT",
                    "/api/v1/namespaces/diffapi-{run}-life/finalize",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "diffapi-{run}-life"},
                        "spec": {"finalizers": []},
                    },
                ),
                200,
            )
        ],
    ),
]


def _fix_update_with_rv(request: dict[str, Any]) -> None:
    request["body"]["data"] = {"a": "2"}
    request["body"]["metadata"]["resourceVersion"] = "rv-4"


def _fix_lease_update(request: dict[str, Any]) -> None:
    request["body"]["spec"]["holderIdentity"] = "b"


def _fix_duplicate_field(request: dict[str, Any]) -> None:
    request["raw"] = (
        '{"apiVersion": "g{run}.diffapi.test/v1", "kind": "Shape", "metadata": {"name": "s3"},'
        ' "spec": {"name": "dup", "size": 1, "size": 2}}'
    )


def _fix_sprockets_watch(request: dict[str, Any]) -> None:
    request["query"]["resourceVersion"] = "$sprockets-rv"


FIXES: dict[str, Callable[[dict[str, Any]], None]] = {
    "cm.update_with_rv": _fix_update_with_rv,
    "lease.update": _fix_lease_update,
    "schema.create_duplicate_field_strict": _fix_duplicate_field,
    "fsel.watch_cr_selectable_field": _fix_sprockets_watch,
}
"""Request fixes: bodies the recorder mutated after sending them, a body given only as a
description (a duplicate JSON key), and a watch from ``rv-1`` (the run's first object, which a
re-run does not share) that means "from before the sprockets were created"."""


def _empty_details(response: dict[str, Any]) -> None:
    response["status_obj"]["details"] = {}


def _bookmark_seen(response: dict[str, Any]) -> None:
    response["watch"]["bookmark_seen"] = True


def _retry_after(response: dict[str, Any]) -> None:
    response["status_obj"]["details"]["retryAfterSeconds"] = 1


def _bad_request(response: dict[str, Any]) -> None:
    response["status"] = 400
    response["status_obj"] = {"status": "Failure", "reason": "BadRequest", "code": 400, "message": ""}


CORRECTIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "cm.patch_json_test_failed": _empty_details,
    "cm.patch_plain_json_ctype": _empty_details,
    "watch.bookmark": _bookmark_seen,
    "limits.list_rv_future_not_older_than": _retry_after,
    "limits.get_rv_future": _retry_after,
    "limits.cr_1_6mb": _bad_request,
}
"""Expectation fixes: where the suite, run against a real kube-apiserver 1.32.6, got another
answer than the recording keeps (``suite-vs-real-1.32.md``), the real server's answer wins. The
recorder dropped empty ``details`` and ``retryAfterSeconds``; a watch with
``allowWatchBookmarks`` gets a BOOKMARK 2 s before its ``timeoutSeconds`` end; the 1.6 MB custom
object is refused with 400 ``BadRequest``."""


HOOKS_NS = "diffapi-{run}-hooks"
_VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
_REFUSED = "https://127.0.0.1:1/refused"
"""A webhook endpoint nothing listens on, on the real server's host as on the embedded one."""


def _guard(name: str, policy: str, **change: Any) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration whose one webhook calls :data:`_REFUSED` for the
    ConfigMaps labelled ``diffapi-webhook: <name>`` only (no other step's objects match)."""
    hook: dict[str, Any] = {
        "name": f"{name}.diffapi.test",
        "clientConfig": {"url": _REFUSED},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"diffapi-webhook": name}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": policy,
        "timeoutSeconds": 5,
    }
    hook.update(change)
    hook = {k: v for k, v in hook.items() if v is not None}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [hook],
    }


def _labelled(name: str, label: str) -> dict[str, Any]:
    return _cm(name, {"k": "v"}, labels={"diffapi-webhook": label})


_HOOKS_CM = f"/api/v1/namespaces/{HOOKS_NS}/configmaps"

WEBHOOK_STEPS: list[Step] = [
    _setup("webhook.ns_create", _req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOOKS_NS}}), 201),
    # 422 Invalid, "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"
    _setup("webhook.config_without_side_effects", _req("POST", _VWC, _guard("diffapi-{run}-x", "Fail", sideEffects=None)), 422),
    # 422 Invalid, "webhooks[0].clientConfig.url: Invalid value: ...: 'https' is the only allowed URL scheme"
    _setup("webhook.config_http_url", _req("POST", _VWC, _guard("diffapi-{run}-x", "Fail", clientConfig={"url": "http://127.0.0.1:1/x"})), 422),
    # 422 Invalid, "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"
    _setup("webhook.config_timeout_too_long", _req("POST", _VWC, _guard("diffapi-{run}-x", "Fail", timeoutSeconds=31)), 422),
    _setup("webhook.config_fail", _req("POST", _VWC, _guard("diffapi-{run}-fail", "Fail")), 201),
    _setup("webhook.config_ignore", _req("POST", _VWC, _guard("diffapi-{run}-ignore", "Ignore")), 201),
    # 500 InternalError, 'Internal error occurred: failed calling webhook "diffapi-{run}-fail.diffapi.test":
    # failed to call webhook: Post "https://127.0.0.1:1/refused?timeout=5s": dial tcp 127.0.0.1:1: connect: connection refused'
    _setup("webhook.refused_fail", _req("POST", _HOOKS_CM, _labelled("c-fail", "diffapi-{run}-fail")), 500),
    # the same on a dry run: sideEffects None webhooks are called for dry-run requests
    _setup("webhook.refused_fail_dry_run", _req("POST", _HOOKS_CM, _labelled("c-fail", "diffapi-{run}-fail"), query={"dryRun": "All"}), 500),
    _setup("webhook.refused_ignore", _req("POST", _HOOKS_CM, _labelled("c-ignore", "diffapi-{run}-ignore")), 201),
    _setup("webhook.not_selected", _req("POST", _HOOKS_CM, _labelled("c-other", "other")), 201),
    _setup("webhook.not_stored", _req("GET", f"{_HOOKS_CM}/c-fail"), 404),
    # 422 Invalid, "spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook"
    _setup(
        "webhook.crd_conversion_without_client_config",
        _req(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"hooks.{GROUP}"},
                "spec": {
                    "group": GROUP,
                    "names": {"plural": "hooks", "singular": "hook", "kind": "Hook"},
                    "scope": "Namespaced",
                    "versions": [
                        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}},
                        {"name": "v2", "served": True, "storage": False, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    ],
                    "conversion": {"strategy": "Webhook"},
                },
            },
        ),
        422,
    ),
    _setup("webhook.config_fail_delete", _req("DELETE", f"{_VWC}/diffapi-{{run}}-fail"), 200),
    _setup("webhook.config_ignore_delete", _req("DELETE", f"{_VWC}/diffapi-{{run}}-ignore"), 200),
    _setup("webhook.after_delete", _req("POST", _HOOKS_CM, _labelled("c-fail", "diffapi-{run}-fail")), 201),
]
"""Admission and conversion webhook steps. No recording of a real server holds them: each
expects only its HTTP status, and the answers in the comments (status, reason, message) are
taken from the Kubernetes documentation and kube-apiserver 1.32's source
(``admission/plugin/webhook``, ``ValidateValidatingWebhookConfiguration``,
``ValidateCustomResourceDefinition``), not from a real server's answers. The webhook endpoint
is one nothing listens on, so the steps need no webhook reachable from the cluster."""


TEARDOWN: list[dict[str, Any]] = [
    _req("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")
    for plural in ("widgets", "gizmos", "shapes", "sprockets")
] + [
    _req("DELETE", f"{_VWC}/diffapi-{{run}}-{name}") for name in ("fail", "ignore")
] + [
    request
    for ns in ("diffapi-{run}", "diffapi-{run}-x", "diffapi-{run}-life", HOOKS_NS)
    for request in (
        _req("DELETE", f"/api/v1/namespaces/{ns}"),
        _req(
            "PUT",
            f"/api/v1/namespaces/{ns}/finalize",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": []}},
        ),
    )
]
"""Best effort after a run, so that a real cluster keeps nothing (errors are ignored)."""


def recording_version(major: str, minor: str) -> str:
    """The key of :data:`RECORDINGS` for a server whose ``/version`` says ``major`` and
    ``minor`` (a distribution's ``"36+"`` is 36); ``KeyError`` when there is no recording of it."""
    version = f"{major}.{minor.rstrip('+')}"
    if version not in RECORDINGS:
        raise KeyError(f"no recording of kube-apiserver {version} (recordings: {', '.join(RECORDINGS)})")
    return version


@functools.cache
def steps(version: str = LATEST) -> tuple[Step, ...]:
    """Every step, in the order they run, expecting the answers of kube-apiserver ``version``
    (a key of :data:`RECORDINGS`). The versions differ in answers only: the requests and the
    step names are the same in every recording."""
    recorded = json.loads(RECORDINGS[version].read_text())
    before: dict[str, list[Step]] = {}
    after: dict[str, list[Step]] = {}
    for anchor, where, authored in AUTHORED:
        group = anchor.split(".")[0]
        named = [attrs.evolve(s, name=f"{group}.authored_{s.name.removeprefix('setup.')}") for s in authored]
        (before if where == "before" else after).setdefault(anchor, []).extend(named)
    names = {entry["name"] for entry in recorded}
    missing = (set(before) | set(after) | set(FIXES) | set(CORRECTIONS)) - names
    assert not missing, f"anchors not in the recording: {missing}"
    out: list[Step] = []
    for entry in recorded:
        request = copy.deepcopy(entry["request"])
        if entry["name"] in FIXES:
            FIXES[entry["name"]](request)
        out.extend(before.get(entry["name"], []))
        response = copy.deepcopy(entry["response"])
        if entry["name"] in CORRECTIONS:
            CORRECTIONS[entry["name"]](response)
        out.append(Step(name=entry["name"], request=request, response=response))
        out.extend(after.get(entry["name"], []))
    out.extend(WEBHOOK_STEPS)
    return tuple(out)
