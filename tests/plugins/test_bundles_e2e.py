"""End-to-end: the runner in a subprocess with the bundles plugin against the embedded API
server, one test per failure of DESIGN.md."""

from __future__ import annotations

import signal

import trio

from .._e2e import API, bundle, cluster, configmap, ready_at, runner, source, watch
from .._webhook import WebhookReceiver


async def test_seed1_rapid_revisions_with_a_stale_cache_end_ready_at_the_final_revision() -> None:
    """50 Source revisions 10 ms apart while health checks run and watch delivery to the
    runner is delayed (a stale cache): every Bundle ends Ready at the final revision."""
    async with cluster() as (api, client, kubeconfig, nursery):
        sources = await client.resource(API, "Source")
        bundles = await client.resource(API, "Bundle")
        await client.create(sources, source("repo", "r0", [configmap("app", revision="r0")]))
        for name in ("a", "b", "c"):
            await client.create(bundles, bundle(name, "repo", wait="300ms"))
        bundle_watch = await watch(nursery, client, API, "Bundle")
        api.faults.delay_watch(0.3, client="engine-runner")
        async with runner(kubeconfig, "--plugin", "bundles", "--no-cluster-events") as run:
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: all(ready_at(w.get("e2e", n), "r0") for n in "abc"))
            for i in range(1, 51):
                await client.patch(sources, "repo", {"spec": {"revision": f"r{i}", "artifact": [
                    configmap("app", revision=f"r{i}")]}}, namespace="e2e")
                await trio.sleep(0.010)
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: all(ready_at(w.get("e2e", n), "r50") for n in "abc"))
            cm = await client.get(await client.resource("v1", "ConfigMap"), "app", namespace="e2e")
            assert cm["data"]["revision"] == "r50"
            assert run.proc.returncode is None


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


async def test_seed3_blackholed_webhook_does_not_delay_a_dependent() -> None:
    receiver = WebhookReceiver()
    receiver.mode = "blackhole"
    async with cluster() as (api, client, kubeconfig, nursery):
        await nursery.start(receiver.serve)
        sources = await client.resource(API, "Source")
        bundles = await client.resource(API, "Bundle")
        await client.create(sources, source("infra", "i1", [configmap("infra-settings")]))
        await client.create(sources, source("apps", "a1", [configmap("frontend")]))
        bundle_watch = await watch(nursery, client, API, "Bundle")
        cm_watch = await watch(nursery, client, "v1", "ConfigMap")
        async with runner(kubeconfig, "--plugin", "bundles", "--event-webhook", receiver.url, "--no-cluster-events"):
            await client.create(bundles, bundle("apps", "apps", depends_on=("infra",)))
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: "DependencyNotReady" in str((w.get("e2e", "apps") or {}).get("status")))
            await client.create(bundles, bundle("infra", "infra", wait="500ms"))
            with trio.fail_after(30):
                await bundle_watch.wait_until(lambda w: ready_at(w.get("e2e", "infra"), "i1"))
            ready_seen = trio.current_time()
            with trio.fail_after(30):
                await cm_watch.wait_until(lambda w: w.get("e2e", "frontend") is not None)
            started = trio.current_time()
            assert started - ready_seen < 1.0, f"the dependent started {started - ready_seen:.2f}s after its dependency was Ready"
            with trio.fail_after(10):
                await receiver.connected.wait()  # events were being posted to the black hole


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
