"""Workloads: Pods and the types that hold a pod template (``apps/v1`` Deployments,
ReplicaSets, StatefulSets, DaemonSets; ``batch/v1`` Jobs and CronJobs).

Defaults are the ones the real API server applies when it decodes an object (the
``SetDefaults_*`` functions of ``pkg/apis/core/v1``, ``apps/v1`` and ``batch/v1``) for the fields
clients commonly read; validation covers the rules users hit first (selector and template
labels, required containers and images, non-negative replicas, immutable selectors, restart
policies). There is no controller: nothing writes ``status`` except clients, as on a cluster
without kube-controller-manager (``observedGeneration`` stays where a client left it).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ._objects import Obj, meta
from ._resources import ResourceType
from ._schema import compact_json
from ._status import CauseSpec, invalid_causes

__all__ = [
    "default_pod_spec",
    "default_template",
    "canonicalize",
    "prepare_create",
    "validate",
    "selector_string",
    "WORKLOADS",
]

WORKLOADS = frozenset(
    {
        ("", "pods"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }
)
"""The storage keys this module defaults and validates."""

_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_MODE_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
_DIGEST_OR_TAG = re.compile(r":[^/]+$")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    tag = _DIGEST_OR_TAG.search(image)
    if tag is None or tag.group(0) == ":latest":
        return "Always"
    return "IfNotPresent"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in _PROBE_DEFAULTS.items():
        probe.setdefault(key, value)
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"].setdefault("scheme", "HTTP")


def _default_container(container: Any) -> None:
    if not isinstance(container, dict):
        return
    container.setdefault("resources", {})
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _pull_policy(container["image"]))
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in container.get("env") or []:
        field_ref = _dict(_dict(env).get("valueFrom")).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(container.get(probe))


def default_pod_spec(spec: Any) -> None:
    """Fill a PodSpec's defaults in place (containers, volumes and the pod-level fields)."""
    if not isinstance(spec, dict):
        return
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        for kind in _MODE_VOLUMES:
            if isinstance(volume.get(kind), dict):
                volume[kind].setdefault("defaultMode", 420)
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")


def default_template(template: Any) -> None:
    """Fill a PodTemplateSpec's defaults in place (``metadata``, ``{}`` when the request has
    none, as a 1.36 server answers templates, and the pod spec's defaults)."""
    if not isinstance(template, dict):
        return
    template.setdefault("metadata", {})
    default_pod_spec(template.get("spec"))


def _default_deployment(spec: dict[str, Any]) -> None:
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def _default_statefulset(spec: dict[str, Any]) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    retention.setdefault("whenDeleted", "Retain")
    retention.setdefault("whenScaled", "Retain")
    for claim in spec.get("volumeClaimTemplates") or []:
        if isinstance(claim, dict):
            claim.setdefault("apiVersion", "v1")
            claim.setdefault("kind", "PersistentVolumeClaim")
            claim_spec = claim.setdefault("spec", {})
            if isinstance(claim_spec, dict):
                claim_spec.setdefault("volumeMode", "Filesystem")
            claim.setdefault("status", {"phase": "Pending"})


def _default_daemonset(spec: dict[str, Any]) -> None:
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)


def _default_job_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("parallelism", 1)
    if "completions" not in spec and spec.get("completionMode", "NonIndexed") == "NonIndexed":
        spec["completions"] = spec["parallelism"] if spec["parallelism"] == 1 else None
        if spec["completions"] is None:
            del spec["completions"]
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", None)
    if spec["manualSelector"] is None:
        del spec["manualSelector"]
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    default_template(spec.get("template"))


def _default_cronjob(spec: dict[str, Any]) -> None:
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    job_template = spec.setdefault("jobTemplate", {})
    if isinstance(job_template, dict):
        job_template.setdefault("metadata", {})
        job_spec = job_template.setdefault("spec", {})
        if isinstance(job_spec, dict):
            default_template(job_spec.get("template"))


def canonicalize(rt: ResourceType, obj: Obj) -> None:
    """Apply the decoding defaults of ``rt``'s objects in place."""
    key = rt.storage_key
    if key == ("", "pods"):
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        if isinstance(spec, dict):
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            spec.setdefault("priority", 0)
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if key == ("apps", "deployments"):
        _default_deployment(spec)
    elif key == ("apps", "replicasets"):
        spec.setdefault("replicas", 1)
    elif key == ("apps", "statefulsets"):
        _default_statefulset(spec)
    elif key == ("apps", "daemonsets"):
        _default_daemonset(spec)
    elif key == ("batch", "jobs"):
        _default_job_spec(spec)
        return
    elif key == ("batch", "cronjobs"):
        _default_cronjob(spec)
        return
    default_template(spec.get("template"))


_INITIAL_STATUS: dict[tuple[str, str], dict[str, Any]] = {
    ("", "pods"): {"phase": "Pending", "qosClass": "BestEffort"},
    ("apps", "deployments"): {},
    ("apps", "replicasets"): {"replicas": 0},
    ("apps", "statefulsets"): {"replicas": 0, "availableReplicas": 0},
    ("apps", "daemonsets"): {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
    ("batch", "jobs"): {},
    ("batch", "cronjobs"): {},
}


def prepare_create(rt: ResourceType, obj: Obj) -> None:
    """The status a new object starts with (``PrepareForCreate``), in place."""
    obj["status"] = copy.deepcopy(_INITIAL_STATUS.get(rt.storage_key, {}))
    if rt.storage_key == ("batch", "jobs"):
        _job_selector(obj)


def _job_selector(obj: Obj) -> None:
    spec = _dict(obj.get("spec"))
    if spec.get("manualSelector") or not isinstance(spec.get("template"), dict):
        return
    uid = str(meta(obj).get("uid", ""))
    name = str(meta(obj).get("name", ""))
    labels = {"batch.kubernetes.io/controller-uid": uid}
    spec["selector"] = {"matchLabels": dict(labels)}
    template_meta = spec["template"].setdefault("metadata", {})
    template_labels = dict(_dict(template_meta.get("labels")))
    template_labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    template_meta["labels"] = template_labels


def selector_string(selector: Any) -> str:
    """A LabelSelector as its string form (``app=web,tier in (a,b)``), as ``Scale`` answers it."""
    selector = _dict(selector)
    parts = [f"{k}={v}" for k, v in sorted(_dict(selector.get("matchLabels")).items())]
    for expression in selector.get("matchExpressions") or []:
        expression = _dict(expression)
        key, op = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        if op == "In":
            parts.append(f"{key} in ({values})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(sorted(parts))


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        expression = _dict(expression)
        key, op, values = str(expression.get("key")), expression.get("operator"), expression.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _validate_containers(spec: dict[str, Any], path: str, causes: list[CauseSpec]) -> None:
    containers = spec.get("containers")
    if not containers:
        causes.append(("FieldValueRequired", f"{path}.containers", "Required value"))
        return
    seen: set[str] = set()
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        container = _dict(container)
        name = container.get("name")
        where = f"{path}.containers[{i}]"
        if not name:
            causes.append(("FieldValueRequired", f"{where}.name", "Required value"))
        elif name in seen:
            causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
        else:
            seen.add(str(name))
        if not container.get("image"):
            causes.append(("FieldValueRequired", f"{where}.image", "Required value"))
        for j, port in enumerate(container.get("ports") or []):
            number = _dict(port).get("containerPort")
            if not isinstance(number, int) or not 0 < number < 65536:
                causes.append(
                    (
                        "FieldValueInvalid" if number is not None else "FieldValueRequired",
                        f"{where}.ports[{j}].containerPort",
                        f"Invalid value: {number}: must be between 1 and 65535, inclusive",
                    )
                )


def _validate_pod_spec(spec: Any, path: str, causes: list[CauseSpec], restart: tuple[str, ...]) -> None:
    spec = _dict(spec)
    _validate_containers(spec, path, causes)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in restart:
        allowed = ", ".join(f'"{p}"' for p in restart)
        causes.append(("FieldValueNotSupported", f"{path}.restartPolicy", f'Unsupported value: "{policy}": supported values: {allowed}'))


def _nonnegative(spec: dict[str, Any], field: str, causes: list[CauseSpec]) -> None:
    value = spec.get(field)
    if isinstance(value, int) and value < 0:
        causes.append(("FieldValueInvalid", f"spec.{field}", f"Invalid value: {value}: must be greater than or equal to 0"))


def _validate_templated(spec: dict[str, Any], causes: list[CauseSpec], restart: tuple[str, ...], *, needs_selector: bool = True) -> None:
    selector = spec.get("selector")
    template = _dict(spec.get("template"))
    if needs_selector:
        if not isinstance(selector, dict):
            causes.append(("FieldValueRequired", "spec.selector", "Required value"))
        elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
            causes.append(("FieldValueInvalid", "spec.selector", "Invalid value: empty selector is invalid for deployment"))
        else:
            labels = _dict(_dict(template.get("metadata")).get("labels"))
            if not _selector_matches(selector, labels):
                causes.append(
                    (
                        "FieldValueInvalid",
                        "spec.template.metadata.labels",
                        f"Invalid value: {compact_json(labels)}: `selector` does not match template `labels`",
                    )
                )
    _validate_pod_spec(template.get("spec"), "spec.template.spec", causes, restart)


def _selector_json(selector: Any) -> str:
    """A ``LabelSelector`` as 1.36 prints it in a field error: its JSON, fields in the API's
    order, empty ones left out."""
    if not isinstance(selector, dict):
        return "null"
    ordered = {k: selector[k] for k in ("matchLabels", "matchExpressions") if selector.get(k)}
    if isinstance(ordered.get("matchExpressions"), list):
        ordered["matchExpressions"] = [
            {k: e[k] for k in ("key", "operator", "values") if k in e} if isinstance(e, dict) else e
            for e in ordered["matchExpressions"]
        ]
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))


def validate(rt: ResourceType, obj: Obj, old: Obj | None) -> list[CauseSpec]:
    """The causes for what is wrong with ``obj`` (``old`` is the object an update replaces)."""
    key = rt.storage_key
    causes: list[CauseSpec] = []
    spec = _dict(obj.get("spec"))
    if key == ("", "pods"):
        _validate_pod_spec(spec, "spec", causes, ("Always", "OnFailure", "Never"))
        if old is not None:
            old_spec = _dict(old.get("spec"))
            changed = {k for k in set(spec) | set(old_spec) if spec.get(k) != old_spec.get(k)}
            allowed = {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"}
            containers_images_only = _images_only_changed(spec, old_spec)
            if changed - allowed - ({"containers", "initContainers"} if containers_images_only else set()):
                causes.append(("FieldValueForbidden", "spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))
        return causes
    if key in (("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("apps", "daemonsets")):
        for field in ("replicas", "revisionHistoryLimit", "minReadySeconds"):
            _nonnegative(spec, field, causes)
        _validate_templated(spec, causes, ("Always",))
        if key == ("apps", "deployments"):
            strategy = _dict(spec.get("strategy"))
            if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
                causes.append(("FieldValueForbidden", "spec.strategy.rollingUpdate", "Forbidden: may not be specified when strategy `type` is 'Recreate'"))
        if old is not None and spec.get("selector") != _dict(old.get("spec")).get("selector"):
            shown = _selector_json(spec.get("selector"))
            causes.append(("FieldValueInvalid", "spec.selector", f"Invalid value: {shown}: field is immutable"))
    elif key == ("batch", "jobs"):
        for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
            _nonnegative(spec, field, causes)
        _validate_templated(spec, causes, ("OnFailure", "Never"), needs_selector=False)
        template_spec = _dict(_dict(spec.get("template")).get("spec"))
        if "restartPolicy" not in template_spec or template_spec.get("restartPolicy") == "Always":
            causes.append(("FieldValueRequired" if "restartPolicy" not in template_spec else "FieldValueNotSupported", "spec.template.spec.restartPolicy", 'Unsupported value: "Always": supported values: "OnFailure", "Never"'))
        if old is not None:
            old_spec = _dict(old.get("spec"))
            if spec.get("selector") != old_spec.get("selector"):
                causes.append(("FieldValueInvalid", "spec.selector", "Invalid value: field is immutable"))
            if spec.get("template") != old_spec.get("template") and not spec.get("suspend"):
                causes.append(("FieldValueInvalid", "spec.template", "Invalid value: field is immutable"))
    elif key == ("batch", "cronjobs"):
        if not spec.get("schedule"):
            causes.append(("FieldValueRequired", "spec.schedule", "Required value"))
        job_spec = _dict(_dict(spec.get("jobTemplate")).get("spec"))
        template_spec = _dict(_dict(job_spec.get("template")).get("spec"))
        _validate_containers(template_spec, "spec.jobTemplate.spec.template.spec", causes)
        policy = template_spec.get("restartPolicy")
        if policy not in ("OnFailure", "Never"):
            causes.append(("FieldValueRequired" if policy is None else "FieldValueNotSupported", "spec.jobTemplate.spec.template.spec.restartPolicy", 'Unsupported value: "Always": supported values: "OnFailure", "Never"'))
    return causes


def _images_only_changed(spec: dict[str, Any], old_spec: dict[str, Any]) -> bool:
    for field in ("containers", "initContainers"):
        new, old = spec.get(field) or [], old_spec.get(field) or []
        if len(new) != len(old):
            return False
        for a, b in zip(new, old, strict=True):
            if {k: v for k, v in _dict(a).items() if k != "image"} != {k: v for k, v in _dict(b).items() if k != "image"}:
                return False
    return True


def check(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Raise 422 Invalid when :func:`validate` finds something wrong."""
    causes = validate(rt, obj, old)
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)
