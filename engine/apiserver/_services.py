"""``v1`` Services: defaults, ClusterIP and NodePort allocation, validation.

As the real server: ``type`` defaults to ``ClusterIP``, ``sessionAffinity`` to ``None``, ports to
``protocol: TCP`` and ``targetPort: <port>``; a ``ClusterIP``, ``NodePort`` or ``LoadBalancer``
Service gets a cluster IP from ``10.96.0.0/12`` (``clusterIPs``, ``ipFamilies: [IPv4]``,
``ipFamilyPolicy: SingleStack``, ``internalTrafficPolicy: Cluster``) unless it asks for one
(``None`` makes it headless); ``NodePort`` and ``LoadBalancer`` ports get node ports from
30000-32767. An update that omits the allocated values keeps them; changing ``clusterIP`` is
422. Validation, cause by cause as the real server reports it: ports need a unique name (a
DNS label) when there are several, a port number in 1-65535, a known protocol and a
``targetPort`` that is a port number or an IANA service name; a ``ClusterIP`` Service has no
``nodePort``; ``(port, protocol)`` pairs are unique.
"""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Iterable
from typing import Any

from ._objects import Obj, meta
from ._resources import ResourceType
from ._status import CauseSpec, invalid_causes

__all__ = ["canonicalize", "allocate", "keep_allocated", "validate", "SERVICES"]

SERVICES = ("", "services")

_NETWORK = ipaddress.ip_network("10.96.0.0/12")
_NODE_PORTS = range(30000, 32768)
_WITH_IP = ("ClusterIP", "NodePort", "LoadBalancer")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def canonicalize(obj: Obj) -> None:
    """Apply the decoding defaults in place."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            if not port.get("protocol"):
                port["protocol"] = "TCP"
            if "port" in port and port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port["port"]
    if spec["type"] == "ExternalName":
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if spec.get("sessionAffinity") == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}})


def _used(services: Iterable[Obj]) -> tuple[set[str], set[int]]:
    ips: set[str] = set()
    ports: set[int] = set()
    for svc in services:
        spec = _dict(svc.get("spec"))
        ips.update(str(ip) for ip in spec.get("clusterIPs") or [] if ip != "None")
        ports.update(int(p["nodePort"]) for p in spec.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("nodePort"), int))
    return ips, ports


def allocate(obj: Obj, services: Iterable[Obj], rng: random.Random) -> None:
    """Give a new Service its cluster IP and node ports, in place; raises 422 Invalid when a
    requested one is taken or out of range."""
    spec = _dict(obj.get("spec"))
    if spec.get("type") == "ExternalName":
        return
    used_ips, used_ports = _used(services)
    name = str(meta(obj).get("name", ""))
    requested = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
    if requested == "None":
        spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
    elif requested:
        try:
            address = ipaddress.ip_address(str(requested))
        except ValueError:
            raise _invalid(name, "spec.clusterIPs[0]", f'Invalid value: "{requested}": must be a valid IP address') from None
        if address not in _NETWORK:
            raise _invalid(name, "spec.clusterIPs", f'Invalid value: []string{{"{requested}"}}: failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {_NETWORK}')
        if str(address) in used_ips:
            raise _invalid(name, "spec.clusterIPs", f'Invalid value: []string{{"{requested}"}}: failed to allocate IP {requested}: provided IP is already allocated')
        spec["clusterIP"], spec["clusterIPs"] = str(address), [str(address)]
    else:
        while True:
            address = _NETWORK[rng.randrange(2, _NETWORK.num_addresses - 1)]
            if str(address) not in used_ips:
                break
        spec["clusterIP"], spec["clusterIPs"] = str(address), [str(address)]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec.get("type") in ("NodePort", "LoadBalancer") and spec.get("allocateLoadBalancerNodePorts", True):
        for port in spec.get("ports") or []:
            if not isinstance(port, dict):
                continue
            if isinstance(port.get("nodePort"), int):
                if port["nodePort"] in used_ports:
                    raise _invalid(name, "spec.ports[0].nodePort", f"Invalid value: {port['nodePort']}: provided port is already allocated")
                used_ports.add(port["nodePort"])
                continue
            while True:
                candidate = rng.choice(_NODE_PORTS)
                if candidate not in used_ports:
                    break
            port["nodePort"] = candidate
            used_ports.add(candidate)


def keep_allocated(obj: Obj, old: Obj) -> None:
    """On update, keep the allocated values the new object leaves out, in place."""
    spec, old_spec = _dict(obj.get("spec")), _dict(old.get("spec"))
    if spec.get("type", "ClusterIP") in _WITH_IP and old_spec.get("type", "ClusterIP") in _WITH_IP:
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if not spec.get(field) and old_spec.get(field):
                spec[field] = old_spec[field]
    old_ports = {(p.get("port"), p.get("protocol", "TCP")): p for p in old_spec.get("ports") or [] if isinstance(p, dict)}
    for port in spec.get("ports") or []:
        if isinstance(port, dict) and "nodePort" not in port:
            previous = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if previous is not None and "nodePort" in previous and spec.get("type") in ("NodePort", "LoadBalancer"):
                port["nodePort"] = previous["nodePort"]


def _invalid(name: str, field: str, message: str) -> Any:
    reason = "FieldValueInvalid"
    return invalid_causes(_SERVICE_RT, name, [(reason, field, message)])


_SERVICE_RT = ResourceType("", "v1", "services", "service", "Service", True)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and"
    " end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is"
    " '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_PORT_RANGE = "must be between 1 and 65535, inclusive"
_SERVICE_NAME = re.compile(r"[-a-z0-9]+")


def _port_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _target_port_problem(target: Any) -> str | None:
    """Why ``target`` is no valid ``targetPort`` (a port number or an IANA service name), or
    ``None``."""
    if target is None:
        return None
    if isinstance(target, int) and not isinstance(target, bool):
        return None if _port_number(target) else _PORT_RANGE
    text = str(target)
    if len(text) > 15:
        return "must be no more than 15 characters"
    if not _SERVICE_NAME.fullmatch(text):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if not any(c.isalpha() for c in text):
        return "must contain at least one letter (a-z)"
    if "--" in text:
        return "must not contain consecutive hyphens"
    if text.startswith("-") or text.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


def validate(obj: Obj, old: Obj | None) -> list[CauseSpec]:
    """The causes for what is wrong with the Service ``obj``."""
    spec = _dict(obj.get("spec"))
    causes: list[CauseSpec] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        causes.append(("FieldValueNotSupported", "spec.type", f'Unsupported value: "{kind}": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'))
    ports = spec.get("ports") or []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(("FieldValueRequired", "spec.ports", "Required value"))
    if kind == "ExternalName" and not spec.get("externalName"):
        causes.append(("FieldValueRequired", "spec.externalName", "Required value"))
    names: set[str] = set()
    pairs: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports if isinstance(ports, list) else []):
        port = _dict(port)
        where = f"spec.ports[{i}]"
        name = port.get("name")
        if len(ports) > 1 and not name:
            causes.append(("FieldValueRequired", f"{where}.name", "Required value"))
        elif name:
            if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name) or len(name) > 63:
                causes.append(("FieldValueInvalid", f"{where}.name", f'Invalid value: "{name}": {_DNS_LABEL_MESSAGE}'))
            if name in names:
                causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
            names.add(str(name))
        number = port.get("port")
        if not _port_number(number):
            causes.append(("FieldValueInvalid", f"{where}.port", f"Invalid value: {number}: {_PORT_RANGE}"))
        protocol = port.get("protocol", "TCP")
        if protocol not in ("TCP", "UDP", "SCTP"):
            causes.append(("FieldValueNotSupported", f"{where}.protocol", f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"'))
        target = port.get("targetPort")
        problem = _target_port_problem(target)
        if problem is not None:
            shown = f'"{target}"' if isinstance(target, str) else target
            causes.append(("FieldValueInvalid", f"{where}.targetPort", f"Invalid value: {shown}: {problem}"))
        if kind == "ClusterIP" and port.get("nodePort"):
            causes.append(("FieldValueForbidden", f"{where}.nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'"))
        pair = (number, protocol)
        if pair in pairs:
            causes.append(("FieldValueDuplicate", f"{where}", f"Duplicate value: core.ServicePort{{Port:{number}, Protocol:\"{protocol}\"}}"))
        pairs.add(pair)
    if old is not None:
        old_spec = _dict(old.get("spec"))
        old_ip, new_ip = old_spec.get("clusterIP"), spec.get("clusterIP")
        if old_ip and new_ip and old_ip != new_ip and kind != "ExternalName":
            causes.append(("FieldValueInvalid", "spec.clusterIPs[0]", f'Invalid value: []string{{"{new_ip}"}}: may not change once set'))
    return causes


def check(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Raise 422 Invalid when :func:`validate` finds something wrong."""
    causes = validate(obj, old)
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)
