"""Leader election between runner processes: handover, takeover after kill -9, no overlap."""

from __future__ import annotations

import signal

import trio

from .._e2e import API, Runner, bundle, cluster, configmap, runner, source

LEASE = ("--leader-elect", "--leader-elect-lease-duration", "3", "--leader-elect-renew-deadline", "2",
         "--leader-elect-retry-period", "0.5", "--no-cluster-events", "--plugin", "bundles")
RETRY, LEASE_DURATION = 0.5, 3.0


def reconciles(run: Runner) -> list[float]:
    return [float(e["ts"]) for e in run.messages("applied revision")]


async def test_standby_takes_over_after_graceful_shutdown_and_after_kill_9_never_overlapping() -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        await client.create(await client.resource(API, "Source"), source("repo", "r1", [configmap("x")]))
        b = bundle("tick", "repo")
        b["spec"]["interval"] = "200ms"
        await client.create(await client.resource(API, "Bundle"), b)

        async with runner(kubeconfig, *LEASE) as first:
            with trio.fail_after(20):
                await first.wait_for(lambda r: len(reconciles(r)) >= 3)
            async with runner(kubeconfig, *LEASE, ready="waiting for leadership") as second:
                with trio.fail_after(20):
                    await first.wait_for(lambda r: len(reconciles(r)) >= 8)
                assert reconciles(second) == [], "the standby does not reconcile"
                first.proc.send_signal(signal.SIGTERM)
                with trio.fail_after(20):
                    assert await first.proc.wait() == 0
                stopped = trio.current_time()
                with trio.fail_after(20):
                    await second.wait_for(lambda r: any("running" in line for line in r.stdout))
                took_over = trio.current_time() - stopped
                assert took_over <= RETRY + 1.5, f"graceful handover took {took_over:.2f}s"
                with trio.fail_after(20):
                    await second.wait_for(lambda r: len(reconciles(r)) >= 3)
                assert max(reconciles(first)) < min(reconciles(second)), "two leaders reconciled at once"

                async with runner(kubeconfig, *LEASE, ready="waiting for leadership") as third:
                    second.proc.kill()
                    await second.proc.wait()
                    killed = trio.current_time()
                    with trio.fail_after(30):
                        await third.wait_for(lambda r: any("running" in line for line in r.stdout))
                    took_over = trio.current_time() - killed
                    assert took_over <= LEASE_DURATION + RETRY + 1.5, f"takeover after kill -9 took {took_over:.2f}s"
                    with trio.fail_after(20):
                        await third.wait_for(lambda r: len(reconciles(r)) >= 2)
                    assert max(reconciles(second)) < min(reconciles(third)), "two leaders reconciled at once"
                    lease = await client.get(await client.resource("coordination.k8s.io/v1", "Lease"),
                                             "engine-bundles", namespace="default")
                    assert lease["spec"]["leaseTransitions"] >= 2
