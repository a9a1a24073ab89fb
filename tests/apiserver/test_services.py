"""Services: defaults, ClusterIP and NodePort allocation, kept allocations, validation."""

from __future__ import annotations

import ipaddress

import httpx

from .test_api import assert_status

SVCS = "/api/v1/namespaces/default/services"


def service(name: str, **spec: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}], **spec}}


async def test_cluster_ips_are_allocated_and_kept(client: httpx.AsyncClient) -> None:
    a = (await client.post(SVCS, json=service("a"))).json()
    b = (await client.post(SVCS, json=service("b"))).json()
    for svc in (a, b):
        spec = svc["spec"]
        assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
        assert spec["clusterIPs"] == [spec["clusterIP"]] and spec["ipFamilies"] == ["IPv4"]
        assert spec["ports"] == [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]
        assert (spec["type"], spec["sessionAffinity"], spec["internalTrafficPolicy"]) == ("ClusterIP", "None", "Cluster")
        assert svc["status"] == {"loadBalancer": {}}
    assert a["spec"]["clusterIP"] != b["spec"]["clusterIP"]
    headless = (await client.post(SVCS, json=service("h", clusterIP="None"))).json()
    assert headless["spec"]["clusterIPs"] == ["None"]
    taken = await client.post(SVCS, json=service("c", clusterIP=a["spec"]["clusterIP"]))
    assert_status(taken, 422, "Invalid")
    replaced = service("a")
    replaced["metadata"] = a["metadata"]
    kept = (await client.put(f"{SVCS}/a", json=replaced)).json()
    assert kept["spec"]["clusterIP"] == a["spec"]["clusterIP"]
    kept["spec"]["clusterIP"] = kept["spec"]["clusterIPs"][0] = "10.96.0.77"
    assert_status(await client.put(f"{SVCS}/a", json=kept), 422, "Invalid")
    node = (await client.post(SVCS, json=service("np", type="NodePort"))).json()
    assert 30000 <= node["spec"]["ports"][0]["nodePort"] <= 32767
    assert node["spec"]["externalTrafficPolicy"] == "Cluster"


async def test_ports_merge_by_port_and_names_are_unique(client: httpx.AsyncClient) -> None:
    await client.post(SVCS, json=service("web"))
    smp = {"content-type": "application/strategic-merge-patch+json"}
    added = (await client.patch(f"{SVCS}/web", json={"spec": {"ports": [{"name": "m", "port": 9090}]}}, headers=smp)).json()
    assert [p["port"] for p in added["spec"]["ports"]] == [9090, 80]
    r = await client.patch(f"{SVCS}/web", json={"spec": {"ports": [{"name": "http", "port": 81}]}}, headers=smp)
    assert_status(r, 422, "Invalid")
    assert r.json()["details"]["causes"] == [
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "http"', "field": "spec.ports[2].name"}
    ]
