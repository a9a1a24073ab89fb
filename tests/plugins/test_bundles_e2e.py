"""End-to-end over real HTTP: ``python -m engine run`` in a subprocess with the bundles plugin
against the embedded API server on a socket (wire compatibility, signals, CLI flags).

The other failures of DESIGN.md (seed 1, seed 3) and leader election run in-process under
virtual time: see ``test_bundles.py`` and ``test_leader_election.py``."""

from __future__ import annotations

import signal

import trio

from .._e2e import API, bundle, cluster, configmap, ready_at, runner, source, watch
from .._webhook import WebhookReceiver


async def test_seed2_sigterm_during_health_checks_is_not_a_failure_and_restart_converges() -> None:
    receiver = WebhookReceiver()
    grace = 2.0
    async with cluster() as (api, client, kubeconfig, nursery):
        await nursery.start(receiver.serve)
        sources = await client.resource(API, "Source")
        bundles = await client.resource(API, "Bundle")
        await client.create(sources, source("repo", "r1", [configmap("app", revision="r1")]))
        for name in ("a", "b"):
            await client.create(bundles, bundle(name, "repo", wait="1h"))
        args = ("--plugin", "bundles", "--event-webhook", receiver.url, "--grace-period", str(grace))
        async with runner(kubeconfig, *args) as run:
            with trio.fail_after(30):
                await run.wait_for(lambda r: len(r.messages("checking health")) >= 2)
            t0 = trio.current_time()
            run.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(grace + 10):
                code = await run.proc.wait()
            elapsed = trio.current_time() - t0
        assert code == 0
        assert elapsed <= grace + 3, f"exit took {elapsed:.2f}s"
        failures = [b for b in receiver.bodies if b["severity"] == "error"]
        assert failures == [], failures
        events = await client.list(await client.resource("events.k8s.io/v1", "Event"), namespace="e2e")
        assert [e for e in events.items if e.get("type") == "Warning"] == []
        for name in ("a", "b"):
            obj = await client.get(bundles, name, namespace="e2e")
            assert "ReconciliationFailed" not in str(obj.get("status")), "no failure status was written"
            await client.patch(bundles, name, {"spec": {"healthCheckWait": "0s"}}, namespace="e2e")
        bundle_watch = await watch(nursery, client, API, "Bundle")
        async with runner(kubeconfig, *args):
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: all(ready_at(w.get("e2e", n), "r1") for n in "ab"))


async def test_shards_split_the_work_between_replicas() -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        sources = await client.resource(API, "Source")
        bundles = await client.resource(API, "Bundle")
        for shard in ("a", "b"):
            src = source(f"src-{shard}", "r1", [configmap(f"cm-{shard}")])
            src["metadata"]["labels"] = {"sharding.engine.dev/key": shard}
            await client.create(sources, src)
            for i in range(3):
                b = bundle(f"{shard}{i}", f"src-{shard}")
                b["metadata"]["labels"] = {"sharding.engine.dev/key": shard}
                await client.create(bundles, b)
        bundle_watch = await watch(nursery, client, API, "Bundle")
        names = [f"{s}{i}" for s in "ab" for i in range(3)]
        async with runner(kubeconfig, "--plugin", "bundles", "--shard", "a", "--no-cluster-events") as run_a, \
                runner(kubeconfig, "--plugin", "bundles", "--shard", "b", "--no-cluster-events") as run_b:
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: all(ready_at(w.get("e2e", n), "r1") for n in names))
        for run, mine in ((run_a, "a"), (run_b, "b")):
            reconciled = {e.get("name") for e in run.messages("applied revision")}
            assert reconciled == {f"{mine}{i}" for i in range(3)}, reconciled
