"""Leader election between replicas of the bundles plugin, in-process (under virtual time on the
embedded server): graceful handover, takeover after a crash (kill -9: the Lease is not
released), no overlap. Timings are those the subprocess version used (3 s lease, 2 s renew
deadline, 0.5 s retry). The Lease and the objects are in the test's namespace, which the
replicas alone watch."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from engine.kube import Client, Informer, LeaderElector
from engine.plugins.bundles import plugin
from engine.testing import KubeTarget, PluginHarness, open_plugin_test

from .._e2e import bundle, configmap, source

RETRY, RENEW_DEADLINE, LEASE_DURATION = 0.5, 2.0, 3.0


def replica(target: KubeTarget, **kwargs: Any) -> Any:
    def elector(client: Client, identity: str) -> LeaderElector:
        return LeaderElector(client, name="engine-bundles", namespace=target.namespace, identity=identity,
                             lease_duration=LEASE_DURATION, renew_deadline=RENEW_DEADLINE, retry_period=RETRY)

    return open_plugin_test(plugin, target, watch_namespace=target.namespace, leader_election=elector,
                            cluster_events=False, rbac=True, **kwargs)


def reconciles(h: PluginHarness) -> list[tuple[float, float]]:
    return [(r.started_at, r.finished_at) for r in h.runs_for(name="tick")]


async def test_standby_takes_over_after_graceful_shutdown_and_after_a_crash_never_overlapping(
    kube_target: KubeTarget, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="engine.kube.leader")
    tick = bundle("tick", "repo", namespace=None)
    tick["spec"]["interval"] = "200ms"
    async with replica(kube_target, manifests=[source("repo", "r1", [configmap("x")], namespace=None), tick]) as first:
        await first.wait_leading(timeout=10)
        async with replica(kube_target) as second:
            await first.wait_runs(3, name="tick", timeout=10)
            assert not second.manager.started and second.runs == []
            await first.stop()
            stopped = trio.current_time()
            await second.wait_leading(timeout=10)
            assert trio.current_time() - stopped <= RETRY, "a released Lease is taken at the next retry"
            await second.wait_runs(3, name="tick", timeout=10)
            assert max(end for _, end in reconciles(first)) <= min(start for start, _ in reconciles(second))

            async with replica(kube_target) as third:
                await trio.sleep(5 * LEASE_DURATION)
                assert third.runs == [], "a live leader keeps its Lease"
                second.crash()
                crashed = trio.current_time()
                await third.wait_leading(timeout=30)
                took_over = trio.current_time() - crashed
                assert LEASE_DURATION - RETRY <= took_over <= LEASE_DURATION + 2 * RETRY, took_over
                await third.wait_runs(2, name="tick", timeout=10)
                assert max(end for _, end in reconciles(second)) <= min(start for start, _ in reconciles(third))
                lease = await third.get("coordination.k8s.io/v1/Lease", "engine-bundles")
                assert lease is not None and lease["spec"]["holderIdentity"] == third.identity
                assert lease["spec"]["leaseTransitions"] == 2
    assert "watching lease" not in caplog.text, "the standbys' RBAC allows watching the Lease"


def own_lists(informer: Informer) -> int:
    """The lists an informer made of its own accord: not counting the relists a server forced
    (410 Gone, or its history found to have gone back)."""
    stats = informer.statistics()
    return stats.lists - stats.gone - stats.resets


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_a_warm_standby_caches_before_it_leads_and_runs_after_a_crash_without_a_new_list(
    kube_target: KubeTarget, warm: bool,
) -> None:
    tick = bundle("tick", "repo", namespace=None)
    tick["spec"]["interval"] = "200ms"
    async with replica(kube_target, manifests=[source("repo", "r1", [configmap("x")], namespace=None), tick]) as first:
        await first.wait_leading(timeout=10)
        async with replica(kube_target, enable_warmup=warm) as second:
            assert second.cluster is not None
            informers = second.cluster.informers
            await first.wait_runs(3, name="tick", timeout=10)
            await trio.sleep(2 * RETRY)
            if warm:
                with trio.fail_after(30):
                    await second.cluster.wait_synced()
                assert second.manager.warming and all(own_lists(i) == 1 for i in informers)
            else:
                assert not second.manager.warming and all(own_lists(i) == 0 for i in informers)
            assert second.manager.standby and second.runs == [] and second.events == []
            first.crash()
            await second.wait_leading(timeout=30)
            await second.wait_runs(1, name="tick", timeout=10)
            assert all(own_lists(i) == 1 for i in informers), \
                "warm: no list after leading; cold: the one list after leading"
            elector = second.manager.leader_election
            assert isinstance(elector, LeaderElector)
            leading_since = elector.statistics().leading_since
            assert leading_since is not None
            assert min(r.started_at for r in second.runs) >= leading_since
            assert max(end for _, end in reconciles(first)) <= min(start for start, _ in reconciles(second))
