"""``v1`` Services: defaults, ClusterIP and NodePort allocation, validation.

As the real server: ``type`` defaults to ``ClusterIP``, ``sessionAffinity`` to ``None``, ports to
``protocol: TCP`` and ``targetPort: <port>``; a ``ClusterIP``, ``NodePort`` or ``LoadBalancer``
Service gets a cluster IP from ``10.96.0.0/12`` (``clusterIPs``, ``ipFamilies: [IPv4]``,
``ipFamilyPolicy: SingleStack``, ``internalTrafficPolicy: Cluster``) unless it asks for one
(``None`` makes it headless); ``NodePort`` and ``LoadBalancer`` ports get node ports from
30000-32767. An update that omits the allocated values keeps them; changing ``clusterIP`` is
422. Validation: ports need a unique name when there are several, a port number and a known
protocol; ``(port, protocol)`` pairs are unique.
"""

from __future__ import annotations

import ipaddress
import random
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
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
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
            if name in names:
                causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
            names.add(str(name))
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            causes.append(("FieldValueInvalid", f"{where}.port", f"Invalid value: {number}: must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol", "TCP")
        if protocol not in ("TCP", "UDP", "SCTP"):
            causes.append(("FieldValueNotSupported", f"{where}.protocol", f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"'))
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
