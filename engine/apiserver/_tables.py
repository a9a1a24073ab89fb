"""Server-side printing and metadata-only reads: what ``Accept: ...;as=Table`` and
``as=PartialObjectMetadata[List]`` answer.

A client asks for a conversion in its ``Accept`` header (``application/json;as=Table;g=meta.k8s.io;v=v1``,
kubectl sends a list of alternatives); the first alternative the server can answer wins, and when
none can the answer is 406. Tables have the real server's columns: the built-in printers' for
built-in types (``Name, Data, Age`` for ConfigMaps...), ``Name, Created At`` for types without a
printer, and for custom resources ``Name`` then the CRD version's ``additionalPrinterColumns``
(JSONPath, type, format, priority; ``Age`` when it declares none). Each row carries the object as
``PartialObjectMetadata`` (``includeObject=Metadata``, the default), whole (``Object``) or not at
all (``None``). Ages are computed against the server's wall clock.

Simplified: the Pod, Job, CronJob and Ingress printers show the common cases only; watches are
never converted.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ._errors import RequestRejected
from ._jsonpath import JsonPathError, compile_path
from ._objects import Obj, meta
from ._resources import BUILTIN_TYPES, ResourceType
from ._workloads import selector_string

__all__ = ["Conversion", "negotiate", "as_table", "include_option", "as_partial", "as_partial_list", "human_duration"]

META_GROUP = "meta.k8s.io"
_KINDS = ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")
_VERSIONS = ("v1", "v1beta1")


@attrs.frozen
class Conversion:
    """What a request's ``Accept`` header asks the answer to be converted to."""

    kind: str
    """``Table``, ``PartialObjectMetadata`` or ``PartialObjectMetadataList``."""
    version: str
    """``v1`` or ``v1beta1`` of ``meta.k8s.io``."""

    @property
    def api_version(self) -> str:
        return f"{META_GROUP}/{self.version}"


def _not_acceptable() -> RequestRejected:
    return RequestRejected(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf",
    )


def negotiate(accept: str | None) -> Conversion | None:
    """The conversion ``accept`` asks for, ``None`` for the object as is; raises
    :class:`RequestRejected` 406 when every alternative asks for a conversion the server does not
    make."""
    if not accept:
        return None
    alternatives = [a.strip() for a in accept.split(",") if a.strip()]
    for alternative in alternatives:
        media, *raw = [p.strip() for p in alternative.split(";")]
        params = dict(p.split("=", 1) for p in raw if "=" in p)
        if "as" not in params:
            return None
        if (
            params["as"] in _KINDS
            and params.get("g") == META_GROUP
            and params.get("v") in _VERSIONS
            and media in ("application/json", "application/yaml", "*/*", "application/*")
        ):
            return Conversion(params["as"], params["v"])
    raise _not_acceptable()


# ----- cells -----


def human_duration(seconds: float) -> str:
    """A duration as the real server's printers write ages (``5m``, ``3h12m``, ``2d``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def _since(text: Any, now: float) -> str:
    when = _parse_time(text)
    return "<unknown>" if when is None else human_duration(now - when)


def _age(obj: Obj, now: float) -> str:
    return _since(meta(obj).get("creationTimestamp"), now)


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _labels(value: Any) -> str:
    pairs = ",".join(f"{k}={v}" for k, v in sorted(_d(value).items()))
    return pairs or "<none>"


def _pod_spec(obj: Obj) -> dict[str, Any]:
    return _d(_d(_d(obj.get("spec")).get("template")).get("spec"))


def _containers(spec: dict[str, Any]) -> list[str]:
    containers = [_d(c) for c in _l(spec.get("containers"))]
    return [",".join(str(c.get("name", "")) for c in containers), ",".join(str(c.get("image", "")) for c in containers)]


def _selector(obj: Obj) -> str:
    selector = _d(obj.get("spec")).get("selector")
    return selector_string(selector) if selector else "<none>"


Column = tuple[str, str, str, int]
"""``(name, type, format, priority)``."""

_NAME: Column = ("Name", "string", "name", 0)
_AGE: Column = ("Age", "string", "", 0)
_TEMPLATE: list[Column] = [("Containers", "string", "", 1), ("Images", "string", "", 1)]


def _configmap(obj: Obj, now: float) -> list[Any]:
    return [len(_d(obj.get("data"))) + len(_d(obj.get("binaryData"))), _age(obj, now)]


def _secret(obj: Obj, now: float) -> list[Any]:
    return [str(obj.get("type") or ""), len(_d(obj.get("data"))), _age(obj, now)]


def _namespace(obj: Obj, now: float) -> list[Any]:
    return [str(_d(obj.get("status")).get("phase") or ""), _age(obj, now)]


def _lease(obj: Obj, now: float) -> list[Any]:
    return [str(_d(obj.get("spec")).get("holderIdentity") or ""), _age(obj, now)]


def _webhook_configuration(obj: Obj, now: float) -> list[Any]:
    return [len(_l(obj.get("webhooks"))), _age(obj, now)]


def _service_account(obj: Obj, now: float) -> list[Any]:
    return [len(_l(obj.get("secrets"))), _age(obj, now)]


def _event(obj: Obj, now: float) -> list[Any]:
    first = _since(obj.get("firstTimestamp"), now) if obj.get("firstTimestamp") else _since(obj.get("eventTime"), now)
    last = _since(obj.get("lastTimestamp"), now) if obj.get("lastTimestamp") else first
    count = _int(obj.get("count"))
    series = _d(obj.get("series"))
    if series:
        last = _since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = _d(obj.get("involvedObject"))
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _d(obj.get("source"))
    component = source.get("component") or obj.get("reportingComponent") or ""
    host = source.get("host") or obj.get("reportingInstance") or ""
    origin = f"{component}, {host}" if host else str(component)
    return [
        last,
        str(obj.get("type") or ""),
        str(obj.get("reason") or ""),
        target,
        str(involved.get("fieldPath") or ""),
        origin,
        str(obj.get("message") or "").strip(),
        first,
        count,
        str(meta(obj).get("name", "")),
    ]


def _deployment(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ready = f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}"
    cells = [ready, _int(status.get("updatedReplicas")), _int(status.get("availableReplicas")), _age(obj, now)]
    return cells + _containers(_pod_spec(obj)) + [_selector(obj)]


def _replica_set(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    cells = [
        _int(spec.get("replicas")),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(obj, now),
    ]
    return cells + _containers(_pod_spec(obj)) + [_selector(obj)]


def _stateful_set(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ready = f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}"
    return [ready, _age(obj, now)] + _containers(_pod_spec(obj))


def _daemon_set(obj: Obj, now: float) -> list[Any]:
    status = _d(obj.get("status"))
    counts = [
        _int(status.get(f))
        for f in (
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
        )
    ]
    node_selector = _labels(_pod_spec(obj).get("nodeSelector"))
    return counts + [node_selector, _age(obj, now)] + _containers(_pod_spec(obj)) + [_selector(obj)]


def _ports(spec: dict[str, Any]) -> str:
    parts = []
    for port in _l(spec.get("ports")):
        port = _d(port)
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            parts.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            parts.append(f"{port.get('port')}/{protocol}")
    return ",".join(parts) or "<none>"


def _service(obj: Obj, now: float) -> list[Any]:
    spec = _d(obj.get("spec"))
    kind = str(spec.get("type") or "ClusterIP")
    cluster_ip = str(spec.get("clusterIP") or "<none>")
    external = ",".join(str(ip) for ip in _l(spec.get("externalIPs")))
    if kind == "ExternalName":
        external = str(spec.get("externalName") or "")
    elif kind == "LoadBalancer":
        ingress = _l(_d(_d(obj.get("status")).get("loadBalancer")).get("ingress"))
        addresses = [str(_d(i).get("ip") or _d(i).get("hostname") or "") for i in ingress] + (
            [external] if external else []
        )
        external = ",".join(a for a in addresses if a) or "<pending>"
    return [kind, cluster_ip, external or "<none>", _ports(spec), _age(obj, now), _labels(spec.get("selector"))]


def _pod(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    statuses = [_d(s) for s in _l(status.get("containerStatuses"))]
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(_int(s.get("restartCount")) for s in statuses)
    reason = str(status.get("reason") or status.get("phase") or "")
    if meta(obj).get("deletionTimestamp"):
        reason = "Terminating"
    gates = _l(spec.get("readinessGates"))
    return [
        f"{ready}/{len(_l(spec.get('containers')))}",
        reason,
        str(restarts),
        _age(obj, now),
        str(status.get("podIP") or "<none>"),
        str(spec.get("nodeName") or "<none>"),
        str(status.get("nominatedNodeName") or "<none>"),
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _job(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    conditions = {_d(c).get("type"): _d(c).get("status") for c in _l(status.get("conditions"))}
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif spec.get("suspend"):
        state = "Suspended"
    else:
        state = "Running"
    completions = spec.get("completions")
    succeeded = _int(status.get("succeeded"))
    done = (
        f"{succeeded}/{completions}"
        if isinstance(completions, int)
        else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    )
    start, end = _parse_time(status.get("startTime")), _parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration((end if end is not None else now) - start)
    return [state, done, duration, _age(obj, now)] + _containers(_pod_spec(obj)) + [_selector(obj)]


def _cron_job(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    job_spec = _d(_d(spec.get("jobTemplate")).get("spec"))
    last = status.get("lastScheduleTime")
    template = _d(_d(job_spec.get("template")).get("spec"))
    selector = job_spec.get("selector")
    return [
        str(spec.get("schedule") or ""),
        str(spec.get("timeZone") or "<none>"),
        bool(spec.get("suspend")),
        len(_l(status.get("active"))),
        _since(last, now) if last else "<none>",
        _age(obj, now),
        *_containers(template),
        selector_string(selector) if selector else "<none>",
    ]


def _ingress(obj: Obj, now: float) -> list[Any]:
    spec = _d(obj.get("spec"))
    hosts = [str(_d(r).get("host")) for r in _l(spec.get("rules")) if _d(r).get("host")]
    ingress = _l(_d(_d(obj.get("status")).get("loadBalancer")).get("ingress"))
    address = ",".join(str(_d(i).get("ip") or _d(i).get("hostname") or "") for i in ingress)
    return [
        str(spec.get("ingressClassName") or "<none>"),
        ",".join(hosts) or "*",
        address,
        "80, 443" if spec.get("tls") else "80",
        _age(obj, now),
    ]


def _role_binding(obj: Obj, now: float) -> list[Any]:
    ref = _d(obj.get("roleRef"))
    subjects = [_d(s) for s in _l(obj.get("subjects"))]

    def names(kind: str) -> str:
        found = [
            f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount" else str(s.get("name"))
            for s in subjects
            if s.get("kind") == kind
        ]
        return ", ".join(found)

    return [
        f"{ref.get('kind')}/{ref.get('name')}",
        _age(obj, now),
        names("User"),
        names("Group"),
        names("ServiceAccount"),
    ]


Printer = tuple[list[Column], Callable[[Obj, float], list[Any]]]

_BINDING_COLUMNS: list[Column] = [
    _NAME,
    ("Role", "string", "", 0),
    _AGE,
    ("Users", "string", "", 1),
    ("Groups", "string", "", 1),
    ("ServiceAccounts", "string", "", 1),
]

_PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "configmaps"): ([_NAME, ("Data", "string", "", 0), _AGE], _configmap),
    ("", "secrets"): ([_NAME, ("Type", "string", "", 0), ("Data", "string", "", 0), _AGE], _secret),
    ("", "namespaces"): ([_NAME, ("Status", "string", "", 0), _AGE], _namespace),
    ("coordination.k8s.io", "leases"): ([_NAME, ("Holder", "string", "", 0), _AGE], _lease),
    **{
        ("admissionregistration.k8s.io", plural): ([_NAME, ("Webhooks", "integer", "", 0), _AGE], _webhook_configuration)
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    },
    ("", "serviceaccounts"): ([_NAME, ("Secrets", "string", "", 0), _AGE], _service_account),
    ("", "events"): (
        [
            ("Last Seen", "string", "", 0),
            ("Type", "string", "", 0),
            ("Reason", "string", "", 0),
            ("Object", "string", "", 0),
            ("Subobject", "string", "", 1),
            ("Source", "string", "", 1),
            ("Message", "string", "", 0),
            ("First Seen", "string", "", 1),
            ("Count", "string", "", 1),
            ("Name", "string", "name", 1),
        ],
        _event,
    ),
    ("apps", "deployments"): (
        [_NAME, ("Ready", "string", "", 0), ("Up-to-date", "string", "", 0), ("Available", "string", "", 0), _AGE]
        + _TEMPLATE
        + [("Selector", "string", "", 1)],
        _deployment,
    ),
    ("apps", "replicasets"): (
        [_NAME, ("Desired", "integer", "", 0), ("Current", "integer", "", 0), ("Ready", "integer", "", 0), _AGE]
        + _TEMPLATE
        + [("Selector", "string", "", 1)],
        _replica_set,
    ),
    ("apps", "statefulsets"): ([_NAME, ("Ready", "string", "", 0), _AGE] + _TEMPLATE, _stateful_set),
    ("apps", "daemonsets"): (
        [_NAME]
        + [(n, "integer", "", 0) for n in ("Desired", "Current", "Ready", "Up-to-date", "Available")]
        + [("Node Selector", "string", "", 0), _AGE]
        + _TEMPLATE
        + [("Selector", "string", "", 1)],
        _daemon_set,
    ),
    ("", "services"): (
        [
            _NAME,
            ("Type", "string", "", 0),
            ("Cluster-IP", "string", "", 0),
            ("External-IP", "string", "", 0),
            ("Port(s)", "string", "", 0),
            _AGE,
            ("Selector", "string", "", 1),
        ],
        _service,
    ),
    ("", "pods"): (
        [
            _NAME,
            ("Ready", "string", "", 0),
            ("Status", "string", "", 0),
            ("Restarts", "string", "", 0),
            _AGE,
            ("IP", "string", "", 1),
            ("Node", "string", "", 1),
            ("Nominated Node", "string", "", 1),
            ("Readiness Gates", "string", "", 1),
        ],
        _pod,
    ),
    ("batch", "jobs"): (
        [_NAME, ("Status", "string", "", 0), ("Completions", "string", "", 0), ("Duration", "string", "", 0), _AGE]
        + _TEMPLATE
        + [("Selector", "string", "", 1)],
        _job,
    ),
    ("batch", "cronjobs"): (
        [
            _NAME,
            ("Schedule", "string", "", 0),
            ("Timezone", "string", "", 0),
            ("Suspend", "boolean", "", 0),
            ("Active", "integer", "", 0),
            ("Last Schedule", "string", "", 0),
            _AGE,
        ]
        + _TEMPLATE
        + [("Selector", "string", "", 1)],
        _cron_job,
    ),
    ("networking.k8s.io", "ingresses"): (
        [
            _NAME,
            ("Class", "string", "", 0),
            ("Hosts", "string", "", 0),
            ("Address", "string", "", 0),
            ("Ports", "string", "", 0),
            _AGE,
        ],
        _ingress,
    ),
    ("rbac.authorization.k8s.io", "rolebindings"): (_BINDING_COLUMNS, _role_binding),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (_BINDING_COLUMNS, _role_binding),
}


def _created_at(obj: Obj, now: float) -> list[Any]:
    when = _parse_time(meta(obj).get("creationTimestamp"))
    text = (
        datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if when is not None
        else "0001-01-01T00:00:00Z"
    )
    return [text]


_DEFAULT: Printer = ([_NAME, ("Created At", "date", "", 0)], _created_at)

def _controller_revision(obj: Obj, now: float) -> list[Any]:
    owner = next((_d(o) for o in _l(meta(obj).get("ownerReferences")) if _d(o).get("controller")), None)
    controller = "<none>"
    if owner is not None:
        group = str(owner.get("apiVersion", "")).rpartition("/")[0]
        kind = str(owner.get("kind", "")).lower()
        controller = f"{kind}.{group}/{owner.get('name', '')}" if group else f"{kind}/{owner.get('name', '')}"
    return [controller, _int(obj.get("revision")), _age(obj, now)]


def _endpoints(obj: Obj, now: float) -> list[Any]:
    addresses: list[str] = []
    for subset in (_d(s) for s in _l(obj.get("subsets"))):
        ports = [_d(p).get("port") for p in _l(subset.get("ports"))] or [None]
        for address in (_d(a) for a in _l(subset.get("addresses"))):
            addresses.extend(f"{address.get('ip', '')}:{port}" if port else str(address.get("ip", "")) for port in ports)
    shown = ",".join(addresses[:3]) + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")
    return [shown or "<none>", _age(obj, now)]


def _pod_template(obj: Obj, now: float) -> list[Any]:
    template = _d(obj.get("template"))
    return [*_containers(_d(template.get("spec"))), _labels(_d(template.get("metadata")).get("labels"))]


def _replication_controller(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    cells = [_int(spec.get("replicas")), _int(status.get("replicas")), _int(status.get("readyReplicas")), _age(obj, now)]
    return cells + _containers(_pod_spec(obj)) + [_labels(spec.get("selector"))]


def _resource_quota(obj: Obj, now: float) -> list[Any]:
    status = _d(obj.get("status"))
    hard, used = _d(status.get("hard")), _d(status.get("used"))
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        text = f"{name}: {used.get(name, '0')}/{hard[name]}"
        (limits if name.split(".")[0] == "limits" and "." in name else requests).append(text)
    return [_age(obj, now), ", ".join(requests), ", ".join(limits)]


_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _access_modes(modes: Any) -> str:
    return ",".join(_ACCESS_MODES[m] for m in _ACCESS_MODES if m in _l(modes))


def _storage_class(obj: Obj) -> str:
    spec = _d(obj.get("spec"))
    legacy = _d(meta(obj).get("annotations")).get("volume.beta.kubernetes.io/storage-class")
    return str(legacy if legacy is not None else spec.get("storageClassName") or "")


def _claim(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    bound = bool(spec.get("volumeName"))
    return [
        str(status.get("phase") or ""),
        str(spec.get("volumeName") or ""),
        str(_d(status.get("capacity")).get("storage", "")) if bound else "",
        _access_modes(status.get("accessModes")) if bound else "",
        _storage_class(obj),
        str(spec.get("volumeAttributesClassName") or "<unset>"),
        _age(obj, now),
        str(spec.get("volumeMode") or "<unset>"),
    ]


def _volume(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ref = _d(spec.get("claimRef"))
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else ""
    return [
        str(_d(spec.get("capacity")).get("storage", "")),
        _access_modes(spec.get("accessModes")),
        str(spec.get("persistentVolumeReclaimPolicy") or ""),
        str(status.get("phase") or ""),
        claim,
        _storage_class(obj),
        str(spec.get("volumeAttributesClassName") or "<unset>"),
        str(status.get("reason") or ""),
        _age(obj, now),
        str(spec.get("volumeMode") or "<unset>"),
    ]


def _node(obj: Obj, now: float) -> list[Any]:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ready = next((_d(c) for c in _l(status.get("conditions")) if _d(c).get("type") == "Ready"), None)
    state = "Unknown" if ready is None or ready.get("status") == "Unknown" else ("Ready" if ready.get("status") == "True" else "NotReady")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = _d(meta(obj).get("labels"))
    roles = sorted(
        {k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")}
        | ({str(labels["kubernetes.io/role"])} if labels.get("kubernetes.io/role") else set())
    )
    info = _d(status.get("nodeInfo"))
    addresses = [_d(a) for a in _l(status.get("addresses"))]

    def address(kind: str) -> str:
        return next((str(a.get("address")) for a in addresses if a.get("type") == kind), "<none>")

    return [
        state,
        ",".join(r for r in roles if r) or "<none>",
        _age(obj, now),
        str(info.get("kubeletVersion") or ""),
        address("InternalIP"),
        address("ExternalIP"),
        str(info.get("osImage") or "<unknown>"),
        str(info.get("kernelVersion") or "<unknown>"),
        str(info.get("containerRuntimeVersion") or "<unknown>"),
    ]


def _network_policy(obj: Obj, now: float) -> list[Any]:
    selector = _d(obj.get("spec")).get("podSelector")
    return [selector_string(selector) or "<none>", _age(obj, now)]


def _ingress_class(obj: Obj, now: float) -> list[Any]:
    spec = _d(obj.get("spec"))
    params = _d(spec.get("parameters"))
    shown = "<none>"
    if params:
        group = params.get("apiGroup") or ""
        kind = f"{params.get('kind', '')}.{group}" if group else str(params.get("kind", ""))
        shown = f"{kind}/{params.get('name', '')}"
    return [str(spec.get("controller") or ""), shown, _age(obj, now)]


_PRINTERS.update(
    {
        ("apps", "controllerrevisions"): (
            [_NAME, ("Controller", "string", "", 0), ("Revision", "integer", "", 0), _AGE],
            _controller_revision,
        ),
        ("", "endpoints"): ([_NAME, ("Endpoints", "string", "", 0), _AGE], _endpoints),
        ("", "limitranges"): ([_NAME, ("Created At", "date", "", 0)], _created_at),
        ("", "podtemplates"): (
            [_NAME, ("Containers", "string", "", 0), ("Images", "string", "", 0), ("Pod Labels", "string", "", 0)],
            _pod_template,
        ),
        ("", "replicationcontrollers"): (
            [_NAME, ("Desired", "integer", "", 0), ("Current", "integer", "", 0), ("Ready", "integer", "", 0), _AGE]
            + _TEMPLATE
            + [("Selector", "string", "", 1)],
            _replication_controller,
        ),
        ("", "resourcequotas"): (
            [_NAME, _AGE, ("Request", "string", "", 0), ("Limit", "string", "", 0)],
            _resource_quota,
        ),
        ("", "persistentvolumeclaims"): (
            [_NAME]
            + [(n, "string", "", 0) for n in ("Status", "Volume", "Capacity", "Access Modes", "StorageClass")]
            + [("VolumeAttributesClass", "string", "", 0), _AGE, ("VolumeMode", "string", "", 1)],
            _claim,
        ),
        ("", "persistentvolumes"): (
            [_NAME]
            + [(n, "string", "", 0) for n in ("Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim")]
            + [(n, "string", "", 0) for n in ("StorageClass", "VolumeAttributesClass", "Reason")]
            + [_AGE, ("VolumeMode", "string", "", 1)],
            _volume,
        ),
        ("", "nodes"): (
            [_NAME, ("Status", "string", "", 0), ("Roles", "string", "", 0), _AGE, ("Version", "string", "", 0)]
            + [(n, "string", "", 1) for n in ("Internal-IP", "External-IP", "OS-Image", "Kernel-Version")]
            + [("Container-Runtime", "string", "", 1)],
            _node,
        ),
        ("networking.k8s.io", "networkpolicies"): (
            [_NAME, ("Pod-Selector", "string", "", 0), _AGE],
            _network_policy,
        ),
        ("networking.k8s.io", "ingressclasses"): (
            [_NAME, ("Controller", "string", "", 0), ("Parameters", "string", "", 0), _AGE],
            _ingress_class,
        ),
    }
)



# ----- custom resources -----


def _go_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _cell(kind: str, value: Any, now: float) -> Any:
    if value is None:
        return None
    if kind == "string":
        return _go_text(value)
    if kind == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return int(value)
        return None
    if kind == "number":
        if isinstance(value, bool):
            return None
        return float(value) if isinstance(value, (int, float)) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        if isinstance(value, str):
            when = _parse_time(value)
            return "<invalid>" if when is None else human_duration(now - when)
        return None
    return None


def _custom_printer(rt: ResourceType) -> Printer:
    columns = [dict(c) for c in rt.printer_columns if isinstance(c, dict)] or [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    definitions: list[Column] = [("Name", "string", "name", 0)]
    paths = []
    for column in columns:
        definitions.append(
            (
                str(column.get("name", "")),
                str(column.get("type", "")),
                str(column.get("format", "")),
                _int(column.get("priority")),
            )
        )
        try:
            paths.append(compile_path(str(column.get("jsonPath", ""))))
        except JsonPathError:
            paths.append(lambda obj: [])
    kinds = [d[1] for d in definitions[1:]]

    def cells(obj: Obj, now: float) -> list[Any]:
        out = []
        for kind, path in zip(kinds, paths, strict=True):
            found = path(obj)
            out.append(_cell(kind, found[0], now) if found else None)
        return out

    return definitions, cells


def _printer(rt: ResourceType) -> Printer:
    if rt not in BUILTIN_TYPES:
        return _custom_printer(rt)
    return _PRINTERS.get(rt.storage_key, _DEFAULT)


# ----- answers -----


def _partial(obj: Obj, version: str) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": dict(meta(obj))}


def as_partial(obj: Obj, conversion: Conversion) -> dict[str, Any]:
    """``obj`` as ``PartialObjectMetadata``; 406 when a list was asked for."""
    if conversion.kind != "PartialObjectMetadata":
        raise RequestRejected(
            406, "NotAcceptable", "you requested PartialObjectMetadataList, but the requested object is not a list"
        )
    return _partial(obj, conversion.version)


def as_partial_list(objects: Iterable[Obj], list_meta: dict[str, Any], conversion: Conversion) -> dict[str, Any]:
    """A list as ``PartialObjectMetadataList``; 406 when a single object was asked for."""
    if conversion.kind != "PartialObjectMetadataList":
        raise RequestRejected(
            406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested object is a list"
        )
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": conversion.api_version,
        "metadata": list_meta,
        "items": [_partial(o, conversion.version) for o in objects],
    }


def include_option(include_object: str | None) -> str:
    """The ``includeObject`` a Table request asks for (``Metadata`` when absent); raises
    :class:`RequestRejected` 400 for an unknown one."""
    include = include_object or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise RequestRejected(
            400,
            "BadRequest",
            f'includeObject: Unsupported value: "{include}": supported values: "Metadata", "None", "Object"',
        )
    return include


def as_table(
    rt: ResourceType,
    rows: Iterable[tuple[Obj, Obj]],
    list_meta: dict[str, Any],
    conversion: Conversion,
    *,
    now: float,
    include_object: str | None = None,
    no_headers: bool = False,
) -> dict[str, Any]:
    """A ``Table`` of ``rows``: ``(stored, answered)`` pairs of each object as stored (what the
    printers read) and as the request's version answers it (what ``includeObject=Object``
    embeds); with ``no_headers``, ``columnDefinitions`` is ``null``, as the real server
    serializes it. Raises :class:`RequestRejected` 400 for an unknown ``includeObject``."""
    include = include_option(include_object)
    definitions, cells = _printer(rt)
    out_rows = []
    for stored, answered in rows:
        values = cells(stored, now)
        if definitions[0][2] == "name":
            values = [str(meta(stored).get("name", "")), *values]
        row: dict[str, Any] = {"cells": values}
        if include == "Metadata":
            row["object"] = _partial(answered, conversion.version)
        elif include == "Object":
            row["object"] = answered
        out_rows.append(row)
    table: dict[str, Any] = {"kind": "Table", "apiVersion": conversion.api_version, "metadata": list_meta}
    table["columnDefinitions"] = None if no_headers else [
        {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}
        for name, kind, fmt, priority in definitions
    ]
    table["rows"] = out_rows
    return table
