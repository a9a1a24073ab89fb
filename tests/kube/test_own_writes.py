"""Own writes are not news: a controller that applies a ConfigMap it owns and then writes its
status is run once per change, whether the watch echo of its writes comes after the write's
answer or before it; anyone else's change supersedes the run at once."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from engine import ECHO_WAIT, Controller, Manager, OutcomeKind, RunContext
from engine.apiserver import ApiServer
from engine.kube import Client, Cluster, Informer, PatchType, install_crds
from engine.testing import KubeTarget, PluginHarness, open_plugin_test

from ..testing.test_harness import WIDGET_CRD


class HoldConfigMapWrites(httpx.AsyncBaseTransport):
    """Passes requests on; while :attr:`hold` is set, the answer to a ConfigMap write waits
    (after the server committed it) until the ConfigMap informer holds what was written, and
    0.1 s more: the watch echo reaches the controller before the write's answer reaches the run."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.hold = False
        self.held = 0
        self.configmaps: Informer | None = None
        self.paused: trio.Event | None = None
        """Set (once) when an answer is held, which then waits for :attr:`resume`."""
        self.resume = trio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if not (self.hold and request.method != "GET" and "/configmaps/" in request.url.path):
            return response
        await response.aread()
        rv = response.json()["metadata"]["resourceVersion"]
        name = request.url.path.rsplit("/", 1)[1]
        assert self.configmaps is not None
        store = self.configmaps.store
        while (store.get(request.url.path.split("/")[4], name) or {}).get("metadata", {}).get("resourceVersion") != rv:
            await trio.sleep(0.01)
        await trio.sleep(0.1)
        self.held += 1
        if self.paused is not None:
            self.paused.set()
            await self.resume.wait()
        return response


async def _setup(client: Client, manager: Manager, namespace: str, gates: dict[str, trio.Event]) -> Cluster:
    """A controller of Widgets that server-side-applies a ConfigMap it owns, waits on the
    widget's gate if there is one, then writes the widget's status; it watches Widgets (every
    event, no predicate) and owns ConfigMaps."""
    cluster = Cluster(client, manager, namespace=namespace)
    widgets = await cluster.informer("test.dev/v1", "Widget")
    configmaps = await cluster.informer("v1", "ConfigMap")

    async def reconcile(ctx: RunContext) -> None:
        widget = widgets.store.get(ctx.ref.namespace, ctx.ref.name)
        if widget is None:
            return
        meta = widget["metadata"]
        await client.apply(configmaps.resource, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{meta['name']}-config", "namespace": meta["namespace"], "ownerReferences": [
                {"apiVersion": "test.dev/v1", "kind": "Widget", "name": meta["name"], "uid": meta["uid"],
                 "controller": True}]},
            "data": {"size": str(widget["spec"]["size"])},
        }, field_manager="widgets", force=True)
        gate = gates.get(meta["name"])
        if gate is not None:
            await gate.wait()
        with ctx.shield(5):
            await client.patch_status(widgets.resource, meta["name"], {"status": {
                "observedGeneration": meta["generation"], "size": widget["spec"]["size"]}},
                namespace=meta["namespace"], patch_type=PatchType.MERGE)

    controller = manager.add_controller(Controller("widgets", reconcile))
    cluster.watches(controller, widgets)
    cluster.owns(controller, configmaps, owner_kind="Widget", owner_api_version="test.dev/v1")
    return cluster


def widget(name: str, size: int) -> str:
    return f"apiVersion: test.dev/v1\nkind: Widget\nmetadata: {{name: {name}}}\nspec: {{size: {size}}}\n"


async def _settle(h: PluginHarness) -> None:
    """Wait (in virtual time) until nothing runs and nothing is queued for a while."""
    while True:
        count = len(h.runs)
        await trio.sleep(5)
        if len(h.runs) == count and not any(c.running for c in h.manager.controllers):
            return


async def _open(kube_target: KubeTarget, transport: HoldConfigMapWrites | None, gates: dict[str, trio.Event]) -> Any:
    async with kube_target.client(user_agent="setup") as setup:
        await install_crds(setup, [WIDGET_CRD])
    kwargs: dict[str, Any] = {} if transport is None else {"transport": transport}
    return kube_target.client(user_agent="widgets", **kwargs)


async def test_apply_owned_configmap_then_status_runs_once_per_change(kube_target: KubeTarget) -> None:
    gates: dict[str, trio.Event] = {}
    manager = Manager(handle_signals=False, grace_period=5.0)
    async with await _open(kube_target, None, gates) as client:
        await _setup(client, manager, kube_target.namespace, gates)
        async with open_plugin_test(manager, kube_target) as h:
            for i in range(5):
                await h.apply(widget(f"w{i}", i))
            await _settle(h)
            for i in range(5):
                assert h.outcomes(name=f"w{i}") == [OutcomeKind.SUCCEEDED], h.triggers
            await h.patch("Widget", "w0", {"spec": {"size": 10}})
            await _settle(h)
            assert h.outcomes(name="w0") == [OutcomeKind.SUCCEEDED] * 2
            assert (await h.get("ConfigMap", "w0-config") or {})["data"] == {"size": "10"}
            assert len(h.runs) == 6


async def test_the_echo_seen_before_the_writes_answer_neither_supersedes_nor_adds_a_run(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    gates: dict[str, trio.Event] = {}
    manager = Manager(handle_signals=False, grace_period=5.0)
    transport = HoldConfigMapWrites(kube_api.memory_transport())
    async with await _open(kube_target, transport, gates) as client:
        cluster = await _setup(client, manager, kube_target.namespace, gates)
        transport.configmaps = next(i for i in cluster.informers if i.resource.kind == "ConfigMap")
        transport.hold = True
        async with open_plugin_test(manager, kube_target) as h:
            for i in range(5):
                await h.apply(widget(f"w{i}", i))
            await _settle(h)
            for i in range(5):
                assert h.outcomes(name=f"w{i}") == [OutcomeKind.SUCCEEDED], h.triggers
            assert transport.held == 5
            await h.patch("Widget", "w3", {"spec": {"size": 30}})
            await _settle(h)
            assert transport.held == 6
            assert h.outcomes(name="w3") == [OutcomeKind.SUCCEEDED] * 2
            assert len(h.runs) == 6


async def test_anothers_change_during_the_run_supersedes_it_at_once(kube_target: KubeTarget) -> None:
    gates = {"w0": trio.Event()}
    manager = Manager(handle_signals=False, grace_period=5.0)
    async with await _open(kube_target, None, gates) as client:
        await _setup(client, manager, kube_target.namespace, gates)
        async with open_plugin_test(manager, kube_target) as h:
            await h.apply(widget("w0", 1))
            while not any(c.running for c in h.manager.controllers):
                await trio.sleep(0.01)
            await trio.sleep(1)
            changed_at = trio.current_time()
            await h.patch("ConfigMap", "w0-config", {"data": {"size": "tampered"}})
            await h.wait_runs(1, name="w0")
            first = h.runs_for(name="w0")[0]
            assert first.kind is OutcomeKind.SUPERSEDED
            assert first.finished_at - changed_at < ECHO_WAIT  # not held as a possible echo of its own write
            gates.pop("w0")
            await _settle(h)
            assert h.outcomes(name="w0") == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED], (h.outcomes(name="w0"), h.triggers)
            assert (await h.get("ConfigMap", "w0-config") or {})["data"] == {"size": "1"}


@pytest.mark.parametrize("answer_after", [0.3, None], ids=["answered", "slow-write"])
async def test_anothers_change_while_a_write_is_in_flight_supersedes_once_the_answer_is_in(
    answer_after: float | None, kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """A change by someone else while the run's write is in flight waits for the write's answer
    (it might be the echo), and supersedes the run as soon as it is in; a write slower than
    ``ECHO_WAIT`` does not delay it longer than that."""
    gates = {"w0": trio.Event()}
    manager = Manager(handle_signals=False, grace_period=5.0)
    transport = HoldConfigMapWrites(kube_api.memory_transport())
    async with await _open(kube_target, transport, gates) as client:
        cluster = await _setup(client, manager, kube_target.namespace, gates)
        transport.configmaps = next(i for i in cluster.informers if i.resource.kind == "ConfigMap")
        transport.hold = True
        async with open_plugin_test(manager, kube_target) as h:
            transport.paused = trio.Event()
            await h.apply(widget("w0", 1))
            await transport.paused.wait()
            await h.patch("ConfigMap", "w0-config", {"data": {"size": "x"}})
            changed_at = trio.current_time()
            if answer_after is not None:
                await trio.sleep(answer_after)
                assert h.runs_for(name="w0") == [], "not superseded while the write is in flight"
                transport.resume.set()
            await h.wait_runs(1, name="w0")
            transport.resume.set()
            first = h.runs_for(name="w0")[0]
            assert first.kind is OutcomeKind.SUPERSEDED
            expected = changed_at + (ECHO_WAIT if answer_after is None else answer_after)
            assert first.finished_at - expected < 0.05
            gates.pop("w0")
            await _settle(h)
            assert h.outcomes(name="w0") == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED], (h.outcomes(name="w0"), h.triggers)


@pytest.mark.kube_embedded(reason="injects latency into one of the server's answers")
async def test_a_change_answered_by_a_write_that_changed_nothing_is_still_news(kube_target: KubeTarget) -> None:
    """The run's status write changes nothing (the status is already so) and is handled just
    after someone else changed the widget's spec: its answer carries the resourceVersion of that
    change. The change is news all the same: the widget ends up observed at its new generation."""
    gates: dict[str, trio.Event] = {}
    manager = Manager(handle_signals=False, grace_period=5.0)
    async with await _open(kube_target, None, gates) as client:
        await _setup(client, manager, kube_target.namespace, gates)
        async with open_plugin_test(manager, kube_target) as h:
            await h.apply(widget("w0", 1))
            await _settle(h)
            h.faults.add_latency(0.4, verbs={"patch"}, resource="widgets", client="widgets", count=1)
            await h.patch("ConfigMap", "w0-config", {"data": {"size": "tampered"}})
            await trio.sleep(0.1)
            changed = await h.patch("Widget", "w0", {"spec": {"size": 2}})
            await _settle(h)
            # The second run's status write was in ctx.shield and its last step: it ends as a success.
            assert h.outcomes(name="w0") == [OutcomeKind.SUCCEEDED] * 3, [(r.kind.value, r.trigger.reason, r.trigger.revision, r.started_at, r.finished_at) for r in h.runs]
            assert h.runs_for(name="w0")[2].trigger.revision == changed["metadata"]["resourceVersion"]
            status = (await h.get("Widget", "w0") or {})["status"]
            assert status == {"observedGeneration": changed["metadata"]["generation"], "size": 2}
