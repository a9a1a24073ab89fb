"""The embedded server replays ``data/real-kube-apiserver-1.36-sharded.json`` (KEP-5866).

The recording holds the answers of a real kube-apiserver 1.36.2 with the
``ShardedListAndWatch`` gate on (steps of server ``on``) and off (``gateoff.*``). Uids decide
which shard an object is in, so the replay creates every object of the recording's namespace
with the uid the real server gave it (the objects of held-out setup steps too, taken from the
recorded lists): the answers then compare item by item. What is compared: the status, the
list kind, the order of the list metadata's members, ``continue`` present or not,
``remainingItemCount``, ``shardInfo``, the item names, error messages and codes and that the
error ``Status`` has no ``reason``; for watches the ``ADDED``/``MODIFIED``/``DELETED`` sequence
by name, the ``k8s.io/initial-events-end`` bookmark and that no event carries ``shardInfo``.

Steps keyed on ``object.metadata.namespace`` depend on the namespace names, whose random run
suffix the recording hides: they are checked by what the recording states of them (the
shards partition the objects, a namespace lies wholly in one shard, the one its FNV-1a hash
names). Not replayed: ``server.*`` (version, readyz, metrics, OpenAPI), ``setup.crd.established``
and ``old132.*`` (a 1.32 server's ``kube-system``).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine._keyspace import fnv1a64
from engine.apiserver import ApiServer
from engine.apiserver._storage import ObjectStorage

DATA = Path(__file__).parent / "data" / "real-kube-apiserver-1.36-sharded.json"
RUN = "r7shard0"
NS = f"kep5866-{RUN}"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.kep5866.example.com"},
    "spec": {
        "group": "kep5866.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}
CM_PATH = f"/api/v1/namespaces/{NS}/configmaps"
CR_PATH = f"/apis/kep5866.example.com/v1/namespaces/{NS}/widgets"
BY_NAMESPACE = ("list.cm.cluster.", "list.namespaces.", "watch.cm.cluster.")
NOT_REPLAYED = ("server.", "setup.", "gateoff.server.", "gateoff.setup.")


def _recording() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = json.loads(DATA.read_text())["steps"]
    return steps


STEPS = {s["name"]: s for s in _recording()}


def _sub(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("{run}", RUN)
    if isinstance(value, dict):
        return {k: _sub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sub(v) for v in value]
    return value


# ----- projections: what is compared -----


def _project(status: int, body: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status}
    if not isinstance(body, dict):
        return out
    if body.get("kind") == "Status":
        out.update(message=body.get("message"), code=body.get("code"), reason="reason" in body, details="details" in body)
        return out
    meta = body.get("metadata") or {}
    out.update(
        kind=body.get("kind"),
        members=list(meta),
        has_continue=bool(meta.get("continue")),
        remaining=meta.get("remainingItemCount"),
        shard_info=meta.get("shardInfo"),
    )
    if "items" in body:
        out["items"] = [(i["metadata"].get("namespace"), i["metadata"]["name"]) for i in body["items"]]
    elif "rows" in body:
        out["items"] = [r["object"]["metadata"]["name"] for r in body["rows"]]
    return out


def _project_watch(status: int, events: list[dict[str, Any]], error: Any = None) -> dict[str, Any]:
    if status != 200:
        return _project(status, error)
    seq: list[Any] = []
    for event in events:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "BOOKMARK":
            annotations = meta.get("annotations") or {}
            if annotations.get("k8s.io/initial-events-end") == "true":
                seq.append(("BOOKMARK", "initial-events-end", sorted(meta)))
            continue
        seq.append((event.get("type"), meta.get("namespace"), meta.get("name")))
    shard_info = any("shardInfo" in json.dumps(e) for e in events)
    return {"status": status, "events": seq, "shard_info_anywhere": shard_info}


def _expected(step: dict[str, Any]) -> dict[str, Any]:
    response = _sub(step["response"])
    if "events" in response:
        return _project_watch(response["status"], [e["event"] for e in response["events"]])
    return _project(response["status"], response.get("body"))


# ----- the replay -----


class _Uids:
    """Hands the recorded uids to the objects the replay creates (in order of creation)."""

    def __init__(self) -> None:
        self.pending: collections.deque[str] = collections.deque()
        self.original = ObjectStorage._new_uid

    @property
    def patched(self) -> Any:
        uids = self

        def new_uid(storage: ObjectStorage) -> str:
            return uids.pending.popleft() if uids.pending else uids.original(storage)

        return new_uid


class _Replay:
    def __init__(self, client: httpx.AsyncClient, uids: _Uids) -> None:
        self.client = client
        self.uids = uids
        self.rvs: dict[str, str] = {}
        self.tokens: dict[str, str] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.bodies: dict[str, Any] = {}

    async def create(self, path: str, obj: dict[str, Any], uid: str | None = None) -> None:
        if uid:
            self.uids.pending.append(uid)
        body = {k: v for k, v in obj.items() if k != "metadata"}
        meta = obj["metadata"]
        body["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
        response = await self.client.post(path, json=body)
        assert response.status_code == 201, response.text
        if uid:
            assert response.json()["metadata"]["uid"] == uid

    def request_query(self, step: dict[str, Any]) -> dict[str, str]:
        query = dict(_sub(step["request"].get("query") or {}))
        if query.get("resourceVersion") in self.rvs:
            query["resourceVersion"] = self.rvs[query["resourceVersion"]]
        if query.get("continue") in self.tokens:
            query["continue"] = self.tokens[query["continue"]]
        return query

    def learn(self, step: dict[str, Any], body: Any) -> None:
        recorded = (step["response"].get("body") or {}).get("metadata") or {}
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            return
        if recorded.get("resourceVersion") and meta.get("resourceVersion"):
            self.rvs.setdefault(recorded["resourceVersion"], meta["resourceVersion"])
        if recorded.get("continue") and meta.get("continue"):
            self.tokens[recorded["continue"]] = meta["continue"]

    async def materialize(self, step: dict[str, Any]) -> None:
        """Create the objects of ``step``'s recorded list that held-out setup steps made."""
        path = _sub(step["request"]["path"])
        for item in _sub(step["response"]["body"].get("items") or []):
            if (await self.client.get(f"{path}/{item['metadata']['name']}")).status_code == 404:
                await self.create(path, item, item["metadata"]["uid"])

    async def step(self, step: dict[str, Any]) -> None:
        request = step["request"]
        path = _sub(request["path"])
        headers = dict(request.get("headers") or {})
        query = self.request_query(step)
        if step["name"] in ("deletecollection.cm.before", "old132.list.cm.kube-system.no_selector"):
            await self.materialize(step)
        response = await self.client.request(request["method"], path, params=query or None, headers=headers)
        body = response.json()
        self.learn(step, body)
        self.bodies[step["name"]] = body
        self.results[step["name"]] = _project(response.status_code, body)

    async def watch(self, step: dict[str, Any], ready: trio.Event) -> None:
        request = step["request"]
        events: list[dict[str, Any]] = []
        async with self.client.stream("GET", _sub(request["path"]), params=self.request_query(step)) as response:
            ready.set()
            if response.status_code != 200:
                body = json.loads(await response.aread())
                self.results[step["name"]] = _project_watch(response.status_code, [], body)
                return
            async for line in response.aiter_lines():
                if line.strip():
                    events.append(json.loads(line))
        self.results[step["name"]] = _project_watch(200, events)

    async def act(self, actions: list[dict[str, Any]]) -> None:
        for action in actions:
            path = _sub(action["path"])
            if action["method"] == "POST":
                await self.create(path, _sub(action["response_body"]), action["uid"])
            elif action["method"] == "PATCH":
                answer = action["response_body"] or {}
                patch = {"data": answer["data"]} if "data" in answer else {"spec": answer.get("spec")}
                r = await self.client.patch(path, json=patch, headers={"content-type": "application/merge-patch+json"})
                assert r.status_code == 200, r.text
            else:
                r = await self.client.delete(path)
                assert r.status_code == 200, r.text

    async def watch_group(self, names: list[str], actions: list[dict[str, Any]]) -> None:
        async with trio.open_nursery() as nursery:
            for name in names:
                ready = trio.Event()
                nursery.start_soon(self.watch, STEPS[name], ready)
                await ready.wait()
            await trio.sleep(1.5)
            await self.act(actions)


async def _setup_on(replay: _Replay) -> None:
    cluster_cms = _sub(STEPS["list.cm.cluster.no_selector"]["response"]["body"]["items"])
    namespaces = sorted({i["metadata"]["namespace"] for i in cluster_cms} - {"kube-system"})
    for ns in namespaces:
        r = await replay.client.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
        assert r.status_code == 201, r.text
    for item in cluster_cms:
        ns = item["metadata"]["namespace"]
        if ns == "kube-system":
            continue
        await replay.create(f"/api/v1/namespaces/{ns}/configmaps", item, item["metadata"]["uid"] if ns == NS else None)
    r = await replay.client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD)
    assert r.status_code == 201, r.text
    widgets = [
        *_sub(STEPS["list.cr.uid.lower_half"]["response"]["body"]["items"]),
        *_sub(STEPS["list.cr.uid.upper_half"]["response"]["body"]["items"]),
    ]
    for item in sorted(widgets, key=lambda i: i["metadata"]["name"]):
        await replay.create(CR_PATH, item, item["metadata"]["uid"])


async def _setup_off(replay: _Replay) -> None:
    r = await replay.client.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code == 201, r.text
    for item in _sub(STEPS["gateoff.list.cm.uid.lower_half"]["response"]["body"]["items"]):
        await replay.create(CM_PATH, item, item["metadata"]["uid"])


def _groups(names: list[str]) -> list[tuple[list[str], list[dict[str, Any]]]]:
    """Consecutive watch steps, grouped with the actions that ran while they were open."""
    groups: list[tuple[list[str], list[dict[str, Any]]]] = []
    for name in names:
        actions = STEPS[name].get("actions_during_watch")
        if isinstance(actions, list):
            if groups and groups[-1][1] == actions:
                groups[-1][0].append(name)
            else:
                groups.append(([name], actions))
        elif isinstance(actions, str) and groups:
            groups[-1][0].append(name)
        else:
            groups.append(([name], []))
    return groups


async def _replay(gate: bool) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    uids = _Uids()
    ObjectStorage._new_uid = uids.patched  # type: ignore[method-assign]
    try:
        async with ApiServer(
            listen=False, seed=7, controllers=False, feature_gates={"ShardedListAndWatch": gate}
        ) as api, httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=60) as client:
            replay = _Replay(client, uids)
            if gate:
                await _setup_on(replay)
                names = [s["name"] for s in _recording() if s["server"] == "on" and not s["name"].startswith(NOT_REPLAYED)]
            else:
                await _setup_off(replay)
                names = [
                    s["name"]
                    for s in _recording()
                    if s["name"].startswith(("gateoff.", "old132.")) and not s["name"].startswith(NOT_REPLAYED)
                ]
            pending_watches: list[str] = []
            for name in names + [""]:
                step = STEPS.get(name)
                if step is not None and step["request"].get("query", {}).get("watch") == "true":
                    pending_watches.append(name)
                    continue
                for group, actions in _groups(pending_watches):
                    await replay.watch_group(group, actions)
                pending_watches = []
                if step is None:
                    break
                if name.startswith("setup.") or name.startswith("gateoff.setup."):
                    continue
                if step["request"]["method"] == "POST":
                    await replay.create(_sub(step["request"]["path"]), _sub(step["response"]["body"]), step["response"]["body"]["metadata"]["uid"])
                    continue
                await replay.step(step)
            return replay.results, replay.bodies
    finally:
        ObjectStorage._new_uid = uids.original  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def transcripts() -> Iterator[dict[bool, tuple[dict[str, dict[str, Any]], dict[str, Any]]]]:
    """Both replays (gate on, gate off), run once under a mock clock."""
    out = {}
    for gate in (True, False):
        out[gate] = trio.run(_replay, gate, clock=trio.testing.MockClock(autojump_threshold=0))
    yield out


def _replayed(prefixes: tuple[str, ...] = ()) -> list[str]:
    names = []
    for s in _recording():
        name = s["name"]
        if name.startswith(NOT_REPLAYED) or s["request"]["method"] == "POST":
            continue
        if prefixes and not name.startswith(prefixes):
            continue
        if not prefixes and name.startswith(BY_NAMESPACE):
            continue
        names.append(name)
    return names


@pytest.mark.parametrize("name", _replayed())
def test_step_answers_as_recorded(transcripts: Any, name: str) -> None:
    results, _ = transcripts[not name.startswith(("gateoff.", "old132."))]
    assert results[name] == _expected(STEPS[name])


def _shard_of(namespace: str, selector: str) -> bool:
    start = int(selector.split("'")[1], 16)
    end = int(selector.split("'")[3], 16)
    return start <= fnv1a64(namespace) < end


@pytest.mark.parametrize("name", _replayed(BY_NAMESPACE))
def test_namespace_keyed_step_partitions_as_recorded(transcripts: Any, name: str) -> None:
    results, bodies = transcripts[True]
    got, expected = results[name], _expected(STEPS[name])
    selector = _sub(STEPS[name]["request"]["query"].get("shardSelector", ""))
    if name.startswith("watch."):
        assert got["status"] == 200 and not got["shard_info_anywhere"]
        creates = [e for e in got["events"] if e[0] == "ADDED"]
        assert creates, got
        for event in got["events"]:
            if event[0] in ("ADDED", "DELETED"):
                assert _shard_of(event[1], selector), event
        wanted = {_sub(a["path"]).split("/")[4] for a in STEPS[name]["actions_during_watch"]}
        assert {e[1] for e in got["events"] if e[0] == "DELETED"} == {ns for ns in wanted if _shard_of(ns, selector)}
        return
    assert {k: v for k, v in got.items() if k != "items"} == {k: v for k, v in expected.items() if k != "items"}
    if not selector:
        return
    if "namespace_key" in name or ".namespace." in name:
        for namespace, _ in got["items"]:
            assert _shard_of(namespace or "", selector)
        unsharded = bodies["list.cm.cluster.no_selector"]["items"] if "list.cm" in name else None
        if unsharded is not None:
            mine = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in unsharded}
            inside = {k for k in mine if _shard_of(k[0], selector)}
            assert set(got["items"]) == inside
    else:
        uids = {i["metadata"]["name"]: i["metadata"]["uid"] for i in bodies[name]["items"]}
        assert all(_shard_of_uid(uid, selector) for uid in uids.values())


def _shard_of_uid(uid: str, selector: str) -> bool:
    start = int(selector.split("'")[1], 16)
    end = int(selector.split("'")[3], 16)
    return start <= fnv1a64(uid) < end
