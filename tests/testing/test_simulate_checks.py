"""The simulator's outside-view checks, each shown catching a planted one-line bug at a known
seed, and the mutation mechanism of :mod:`tests.testing.mutations`; plus the request log and
``simulate_seeds(..., jobs=2)`` giving the sequential results."""

from __future__ import annotations

import pytest

from engine.apiserver import RequestLog
from engine.testing import FaultKind, simulate_seeds, simulation_for

from .mutations import MUTATIONS, Mutation, hunt, planted


def _mutation(name: str) -> Mutation:
    return next(m for m in MUTATIONS if m.name == name)


def test_a_planted_line_is_in_place_only_inside_the_block() -> None:
    from engine._manager import Manager

    original = Manager._lose_leadership
    with planted(_mutation("runs-not-cancelled-on-lease-loss")):
        assert Manager._lose_leadership is not original
    assert Manager._lose_leadership is original
    wrong = Mutation("x", "none", "engine._manager", "Manager._lose_leadership", "no such line", "pass")
    with pytest.raises(ValueError, match=r"^x: 'no such line' occurs 0 times in engine._manager.Manager._lose_leadership$"):
        with planted(wrong):
            pass


def test_a_replica_that_keeps_running_after_losing_its_lease_is_caught_writing() -> None:
    result = hunt(_mutation("runs-not-cancelled-on-lease-loss"), seeds=5)
    assert result is not None and result.seed == 4
    assert result.violation == "replica-1.1 wrote (patch Bundle sim/b1/status) 3.871s after it lost its lease (no fencing)"


def test_a_clean_engine_passes_the_new_checks_and_jobs_give_the_sequential_results() -> None:
    simulation = simulation_for("mirror")
    sequential = simulate_seeds(simulation, range(3), duration=20)
    parallel = simulate_seeds(simulation, range(3), duration=20, jobs=2)
    assert all(r.ok for r in sequential), sequential[0].report()
    assert [(r.seed, r.digest, r.violation) for r in parallel] == [(r.seed, r.digest, r.violation) for r in sequential]
    with pytest.raises(ValueError, match=r"^jobs must be >= 1$"):
        simulate_seeds(simulation, range(1), jobs=0)


def test_jobs_stop_at_the_first_violation_as_a_sequential_run_does() -> None:
    simulation = simulation_for("bundles")
    with planted(_mutation("runs-not-cancelled-on-lease-loss")):
        faults = (FaultKind.LEASE_LOSS, FaultKind.LATENCY)
        results = simulate_seeds(simulation, range(8), jobs=2, faults=faults)
    assert [r.seed for r in results] == [0, 1, 2, 3, 4]
    assert [r.ok for r in results] == [True, True, True, True, False]


async def test_the_request_log_knows_who_held_which_lease() -> None:
    from engine.apiserver import ApiServer
    from engine.testing._target import open_embedded_target

    async with open_embedded_target(namespace="t") as target:
        api = target.api
        assert isinstance(api, ApiServer)
        log = RequestLog(api.store)
        api.add_request_observer(log)
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": "t"},
                 "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
        async with target.client(user_agent="a/test") as client:
            resource = await client.resource_for(lease)
            await client.create(resource, lease, namespace="t")
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "t"}}
            await client.create(await client.resource_for(cm), cm, namespace="t")
        writes = list(log.writes(actor="a"))
        assert [(w.served.kind, w.name, w.ok) for w in writes] == [("Lease", "l", True), ("ConfigMap", "c", True)]
        held = writes[1].lease
        assert held is not None and (held.namespace, held.name, held.until) == ("t", "l", writes[0].answered_at + 15)
        assert log.holding("a", writes[0].answered_at + 16) is None
        log.mark_restore()
        assert log.holding("a") is None
