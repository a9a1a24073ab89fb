"""Workloads: defaults, validation, the scale subresource, Pods."""

from __future__ import annotations

import httpx

from .test_api import assert_status

DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
MERGE = {"content-type": "application/merge-patch+json"}
SMP = {"content-type": "application/strategic-merge-patch+json"}


def deployment(name: str = "web", labels: dict[str, str] | None = None, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": labels or {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "app:1"}]},
            },
            **spec,
        },
    }


async def test_deployment_defaults_generation_and_scale(client: httpx.AsyncClient) -> None:
    created = (await client.post(DEPLOYS, json=deployment())).json()
    spec = created["spec"]
    assert spec["replicas"] == 1 and spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    assert spec["template"]["metadata"] == {"labels": {"app": "web"}}
    pod = spec["template"]["spec"]
    assert (pod["restartPolicy"], pod["dnsPolicy"], pod["schedulerName"]) == ("Always", "ClusterFirst", "default-scheduler")
    assert pod["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    assert created["status"] == {} and created["metadata"]["generation"] == 1
    await client.patch(f"{DEPLOYS}/web", json={"metadata": {"labels": {"x": "y"}}}, headers=MERGE)
    side = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:latest"}]}}}}
    patched = (await client.patch(f"{DEPLOYS}/web", json=side, headers=SMP)).json()
    assert [c["name"] for c in patched["spec"]["template"]["spec"]["containers"]] == ["side", "c"]
    assert patched["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    assert patched["metadata"]["generation"] == 2
    status = await client.patch(f"{DEPLOYS}/web/status", json={"status": {"replicas": 1}, "spec": {"replicas": 9}}, headers=MERGE)
    assert status.json()["spec"]["replicas"] == 1 and status.json()["status"] == {"replicas": 1}
    scale = (await client.get(f"{DEPLOYS}/web/scale")).json()
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 1} and scale["status"] == {"replicas": 1, "selector": "app=web"}
    scaled = (await client.patch(f"{DEPLOYS}/web/scale", json={"spec": {"replicas": 4}}, headers=MERGE)).json()
    assert scaled["spec"] == {"replicas": 4}
    after = (await client.get(f"{DEPLOYS}/web")).json()
    assert after["spec"]["replicas"] == 4 and after["metadata"]["generation"] == 3
    r = await client.patch(f"{DEPLOYS}/web/scale", json={"spec": {"replicas": -1}}, headers=MERGE)
    assert_status(r, 422, "Invalid")
    assert r.json()["details"]["kind"] == "Scale" and r.json()["details"]["group"] == "autoscaling"


async def test_deployment_validation(client: httpx.AsyncClient) -> None:
    body = deployment("bad", labels={"app": "other"})
    body["spec"]["template"]["spec"]["containers"] = []  # type: ignore[index]
    r = await client.post(DEPLOYS, json=body)
    assert_status(r, 422, "Invalid")
    causes = {(c["reason"], c["field"]) for c in r.json()["details"]["causes"]}
    assert causes == {
        ("FieldValueInvalid", "spec.template.metadata.labels"),
        ("FieldValueRequired", "spec.template.spec.containers"),
    }
    r = await client.post(DEPLOYS, json=deployment("neg", replicas=-1))
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["spec.replicas"]
    await client.post(DEPLOYS, json=deployment())
    change = {"spec": {"selector": {"matchLabels": {"app": "web", "x": "y"}}, "template": {"metadata": {"labels": {"app": "web", "x": "y"}}}}}
    r = await client.patch(f"{DEPLOYS}/web", json=change, headers=MERGE)
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["spec.selector"]


async def test_other_workloads(client: httpx.AsyncClient) -> None:
    sts = deployment("db")
    sts["kind"] = "StatefulSet"
    created = (await client.post("/apis/apps/v1/namespaces/default/statefulsets", json=sts)).json()
    assert created["spec"]["podManagementPolicy"] == "OrderedReady"
    assert created["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert created["status"] == {"replicas": 0, "availableReplicas": 0}
    job = {"metadata": {"name": "once"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    r = await client.post("/apis/batch/v1/namespaces/default/jobs", json=job)
    assert_status(r, 422, "Invalid")
    job["spec"]["template"]["spec"]["restartPolicy"] = "Never"  # type: ignore[index]
    created = (await client.post("/apis/batch/v1/namespaces/default/jobs", json=job)).json()
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert created["spec"]["template"]["metadata"]["labels"]["job-name"] == "once"
    assert (created["spec"]["completions"], created["spec"]["backoffLimit"]) == (1, 6)
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    created = (await client.post("/api/v1/namespaces/default/pods", json=pod)).json()
    assert created["status"]["phase"] == "Pending" and created["spec"]["enableServiceLinks"] is True
    created["spec"]["containers"][0]["image"] = "y"
    assert (await client.put("/api/v1/namespaces/default/pods/p", json=created)).status_code == 200
    created = (await client.get("/api/v1/namespaces/default/pods/p")).json()
    created["spec"]["hostname"] = "other"
    assert_status(await client.put("/api/v1/namespaces/default/pods/p", json=created), 422, "Invalid")
