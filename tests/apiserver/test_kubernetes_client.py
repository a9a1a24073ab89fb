"""Compatibility with the official kubernetes Python client (sync, urllib3), server in a thread."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.apiserver import ApiServer, ApiServerError

kubernetes = pytest.importorskip("kubernetes")


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.2).run_in_thread() as api:
        yield api


def core(api: ApiServer, tmp_path: Path) -> object:
    from kubernetes import client, config

    path = tmp_path / "kubeconfig"
    api.write_kubeconfig(path)
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def test_list_and_watch(server: ApiServer, tmp_path: Path) -> None:
    from kubernetes import client, watch

    v1 = core(server, tmp_path)
    assert {n.metadata.name for n in v1.list_namespace().items} >= {"default", "kube-system"}  # type: ignore[attr-defined]
    for name in ("a", "b"):
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"app": "x"}), data={"k": name})
        v1.create_namespaced_config_map("default", body)  # type: ignore[attr-defined]
    listed = v1.list_namespaced_config_map("default", label_selector="app=x", limit=1)  # type: ignore[attr-defined]
    assert [c.metadata.name for c in listed.items] == ["a"] and listed.metadata._continue
    rv = listed.metadata.resource_version

    def change() -> None:
        v1.patch_namespaced_config_map("b", "default", {"data": {"k": "changed"}})  # type: ignore[attr-defined]

    events = []
    w = watch.Watch()
    changer = threading.Thread(target=change)
    changer.start()
    for event in w.stream(v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10):  # type: ignore[attr-defined]
        events.append((event["type"], event["object"].metadata.name, event["object"].data))
        w.stop()
    changer.join()
    assert events == [("MODIFIED", "b", {"k": "changed"})]
    with pytest.raises(client.ApiException) as info:
        v1.read_namespaced_config_map("missing", "default")  # type: ignore[attr-defined]
    assert info.value.status == 404 and json.loads(info.value.body)["reason"] == "NotFound"


def test_watch_from_start_and_admin_faults(server: ApiServer, tmp_path: Path) -> None:
    from kubernetes import client, watch

    v1 = core(server, tmp_path)
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))  # type: ignore[attr-defined]
    w = watch.Watch()
    names = []
    for event in w.stream(v1.list_namespaced_config_map, "default", timeout_seconds=10):  # type: ignore[attr-defined]
        names.append(event["object"].metadata.name)
        w.stop()
    assert names == ["c"]
    request = urllib.request.Request(
        f"{server.url}/_faults",
        data=json.dumps({"type": "fail", "status": 500, "count": 1, "resource": "configmaps"}).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {server.admin_token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    with pytest.raises(client.ApiException) as info:
        v1.list_namespaced_config_map("default")  # type: ignore[attr-defined]
    assert info.value.status == 500
    assert v1.list_namespaced_config_map("default").items  # type: ignore[attr-defined]


def test_run_in_thread_needs_sockets() -> None:
    with pytest.raises(ApiServerError, match=r"^run_in_thread needs listen=True: other threads reach the server by socket$"):
        with ApiServer(listen=False).run_in_thread():
            pass
