"""The simulator's admission check on its own: a write the oracle refuses is a violation when the
answering replica had been sent everything the verdict rests on, and is traced, not flagged,
when no webhook could have refused it (a concurrent write, a stale cache, a failed read, a
failed call under ``failurePolicy: Ignore``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import trio
import trio.testing

from engine.apiserver import ApiServer
from engine.apiserver._api import ServedRequest
from engine.apiserver._faults import RequestInfo
from engine.apiserver._storage import Change
from engine.kube import Client, Config
from engine.plugins.bundles import plugin
from engine.plugins.bundles._crds import API_VERSION, GROUP
from engine.plugins.bundles._simulation import simulation
from engine.testing._admission_check import AdmissionCheck
from engine.testing._webhook_service import WebhookCall

PATH = "/validate/validate.bundles.engine.dev"


def _bundle(name: str, *depends: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Bundle", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"sourceRef": {"name": "r"}, "dependsOn": [{"name": d} for d in depends]}}


class _World:
    def __init__(self, api: ApiServer, policy: str = "Fail") -> None:
        self.api = api
        self.check = AdmissionCheck(api.store, simulation.admission, {PATH: policy})
        self.rt = next(t for t in api.store.types() if t.kind == "Bundle")
        self.verdicts: list[tuple[str | None, str | None]] = []
        api.store.add_listener(self._committed)

    def _committed(self, change: Change) -> None:
        verdict = self.check.committed(change)
        if verdict != (None, None):
            self.verdicts.append(verdict)

    def store(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.api.store.commit(self.rt, "ADDED", obj, self.api.store.lookup(self.rt, meta["namespace"], meta["name"]))

    def send(self, replica: str, obj: dict[str, Any]) -> None:
        self.check.delivered(RequestInfo("watch", "bundles", GROUP, f"{replica}/engine"), "MODIFIED", obj)

    def ask(self, replica: str | None, obj: dict[str, Any], **answer: Any) -> WebhookCall:
        request = {"kind": {"group": GROUP, "version": "v1alpha1", "kind": "Bundle"}, "name": obj["metadata"]["name"],
                   "namespace": "ns", "operation": "CREATE", "object": obj}
        call = WebhookCall(PATH, request, replica, trio.current_time())
        self.check.asked(call)
        call.answered_at = trio.current_time()
        if "failure" in answer:
            call.failure = answer["failure"]
        else:
            call.response = {"uid": "1", "allowed": True, **answer}
        return call


@contextlib.asynccontextmanager
async def _world(policy: str = "Fail") -> AsyncIterator[_World]:
    async with ApiServer(listen=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            for crd in plugin.crds:
                await client.apply(crds, crd, field_manager="test", force=True)
            await trio.sleep(1)
        yield _World(api, policy)


async def test_a_cycle_the_replica_had_been_sent_is_a_violation(autojump_clock: trio.testing.MockClock) -> None:
    async with _world() as w:
        w.store(_bundle("b", "a"))
        w.send("replica-1.1", _bundle("b", "a"))
        await trio.sleep(1)
        w.ask("replica-1.1", _bundle("a", "b"))
        w.store(_bundle("a", "b"))
        assert w.verdicts == [(
            "Bundle ns/a was stored though dependency cycle: a -> b -> a: replica-1.1's validating webhook allowed it at "
            "2.000s; the server had sent it b as stored (a webhook that accepts what it must refuse)", None)]


async def test_what_no_webhook_could_refuse_is_traced_not_flagged(autojump_clock: trio.testing.MockClock) -> None:
    async with _world() as w:
        # Concurrent: each asked before the other was stored.
        w.ask("replica-1.1", _bundle("a", "b"))
        w.ask("replica-2.1", _bundle("b", "a"))
        w.store(_bundle("b", "a"))
        w.store(_bundle("a", "b"))
        # A stale cache: c -> d stored, never sent to replica-1.1 (its watch is late).
        w.store(_bundle("d", "c"))
        await trio.sleep(1)
        w.ask("replica-1.1", _bundle("c", "d"))
        w.store(_bundle("c", "d"))
        # Sent within SETTLE of the call: still on its way to the cache.
        w.store(_bundle("f", "e"))
        w.send("replica-1.1", _bundle("f", "e"))
        await trio.sleep(0.25)
        w.ask("replica-1.1", _bundle("e", "f"))
        w.store(_bundle("e", "f"))
        assert w.verdicts == [
            (None, "Bundle ns/a stored though dependency cycle: a -> b -> a: a write stored after its webhook was asked "
                   "(at 1.000s) closed it (concurrent writes, each admitted before the other was stored)"),
            (None, "Bundle ns/c stored though dependency cycle: c -> d -> c: replica-1.1, whose webhook allowed it at "
                   "2.000s, may not have held d as stored then (a stale cache)"),
            (None, "Bundle ns/e stored though dependency cycle: e -> f -> e: replica-1.1, whose webhook allowed it at "
                   "2.250s, may not have held f as stored then (a stale cache)"),
        ]


async def test_a_warning_excuses_only_while_the_replicas_reads_are_troubled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _world() as w:
        w.store(_bundle("b", "a"))
        w.send("replica-1.1", _bundle("b", "a"))
        await trio.sleep(1)
        warning = "dependency cycles through other Bundles were not checked: they could not be read in time"
        w.check.troubled["replica-1.1"] = [trio.current_time()]
        w.ask("replica-1.1", _bundle("a", "b"), warnings=[warning])
        w.store(_bundle("a", "b"))
        w.check.troubled.clear()
        w.ask("replica-1.1", _bundle("a", "b", "x"), warnings=[warning])
        w.store(_bundle("a", "b", "x"))
        assert w.verdicts[0][1] is not None and w.verdicts[0][1].endswith(f"while its reads were refused or held up ({warning})")
        assert w.verdicts[1][0] is not None and w.verdicts[1][0].endswith("(a webhook that accepts what it must refuse)")


async def test_only_a_refused_or_held_up_read_troubles_a_replica(autojump_clock: trio.testing.MockClock) -> None:
    async with _world() as w:
        now = trio.current_time()

        def served(verb: str, status: int, received_at: float) -> ServedRequest:
            return ServedRequest("GET" if verb in ("get", "list") else "PATCH", "/apis/x", verb, "replica-1.1/engine",
                                 GROUP, "Bundle", "ns", None, None, status, b"", received_at=received_at)

        w.check.served(served("patch", 503, now))
        w.check.served(served("patch", 200, now - 1))
        assert w.check.troubled.get("replica-1.1", []) == []
        w.check.served(served("list", 503, now))
        w.check.served(served("get", 200, now - 1))
        assert w.check.troubled["replica-1.1"] == [now, now]


async def test_a_write_no_webhook_allowed_is_a_violation_unless_failure_policy_ignore_let_it_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _world() as w:
        w.store(_bundle("a", "a"))
        w.store(_bundle("ok", "a"))
        w.ask(None, _bundle("c", "c"), failure='no endpoints available for service "engine-test-bundles"')
        w.store(_bundle("c", "c"))
        assert [v for v, _ in w.verdicts] == [
            "Bundle ns/a was stored though a depends on itself, with no validating webhook call allowing it while the "
            "webhooks were registered (the server skipped the webhook)",
            "Bundle ns/c was stored though c depends on itself, with no validating webhook call allowing it while the "
            "webhooks were registered (the server skipped the webhook)",
        ]
    async with _world("Ignore") as w:
        w.ask(None, _bundle("c", "c"), failure='no endpoints available for service "engine-test-bundles"')
        w.store(_bundle("c", "c"))
        assert w.verdicts == [(None, 'Bundle ns/c stored while its validating webhook could not be called (no endpoints '
                                     'available for service "engine-test-bundles"; failurePolicy Ignore), though c depends '
                                     'on itself')]


async def test_only_a_list_that_held_every_object_counts_as_sent(autojump_clock: trio.testing.MockClock) -> None:
    """A watcher's one-item list asking whether the server still knows its resourceVersion
    (bundles seed 20130) sent one object at most, not the namespace: the others may be stale."""
    async with _world() as w:

        def listed(limit: int | None, continued: bool = False) -> None:
            w.check.served(ServedRequest("GET", "/apis/x", "list", "replica-1.1/engine", GROUP, "Bundle", "ns", None,
                                         None, 200, b"", received_at=trio.current_time(), limit=limit,
                                         continued=continued))

        w.store(_bundle("a"))
        w.store(_bundle("b", "x"))
        w.store(_bundle("c", "y"))
        listed(1)
        listed(1, continued=True)
        listed(500, continued=True)
        await trio.sleep(1)
        w.ask("replica-1.1", _bundle("x", "b"))
        w.store(_bundle("x", "b"))
        listed(4)
        await trio.sleep(1)
        w.ask("replica-1.1", _bundle("y", "c"))
        w.store(_bundle("y", "c"))
        assert w.verdicts == [
            (None, "Bundle ns/x stored though dependency cycle: x -> b -> x: replica-1.1, whose webhook allowed it at "
                   "2.000s, may not have held b as stored then (a stale cache)"),
            ("Bundle ns/y was stored though dependency cycle: y -> c -> y: replica-1.1's validating webhook allowed it "
             "at 3.000s; the server had sent it c as stored (a webhook that accepts what it must refuse)", None),
        ]
