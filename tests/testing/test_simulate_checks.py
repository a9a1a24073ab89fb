"""The simulator's outside-view checks, each shown catching a planted one-line bug at a known
seed, and the mutation mechanism of :mod:`tests.testing.mutations`; plus the request log and
``simulate_seeds(..., jobs=2)`` giving the sequential results."""

from __future__ import annotations

import json

import attrs
import pytest
import trio

from engine.apiserver import RequestLog
from engine.testing import FaultKind, simulate, simulate_seeds, simulation_for

from .mutations import MUTATIONS, Mutation, caught_at, hunt, planted


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


# Each check below is shown catching its planted bug (tests/testing/mutations.py) at the seed
# given; ``python -m tests.testing.mutations NAME`` shows it is the first seed that does.


def test_a_cut_shielded_write_that_the_run_does_not_report_is_caught() -> None:
    result = caught_at("shield-does-not-shield", 3)
    assert result.violation == (
        "run replica-1.1 sources-6 of Source.bundles.engine.dev/sim/s2 was cancelled (superseded) inside a shielded "
        "write at 12.102s, but no write of it reached the server before it ended at 12.102s, and it did not report "
        "a cut write")


def test_a_trigger_that_never_runs_is_reported_at_once_with_its_key_and_sequence() -> None:
    result = caught_at("dirty-key-not-redelivered", 0)
    assert result.violation == (
        "replica-1.1 bundles: trigger #6 (source revision changed) of Bundle.bundles.engine.dev/sim/b1 at 0.576s never "
        "led to a run, and 4 worker(s) are free (lost wake-up)")


def test_a_sink_that_holds_up_the_others_is_caught_by_the_sink_check() -> None:
    result = caught_at("sink-delivered-inline", 0)
    assert result.violation == (
        "replica-1.1: its memory sink received 25 of 26 events emitted more than 10s ago while the notification "
        "endpoint is down (a stuck sink holds up the others)")


def test_a_failing_sink_whose_error_reaches_the_dispatcher_is_a_sink_violation_not_a_crash() -> None:
    with planted(_mutation("sink-delivered-inline")):
        result = simulate(simulation_for("bundles"), 3)
    assert result.violation == (
        "replica-1.1: event sink kubernetes failed (ServerError: 503 ServiceUnavailable: injected fault: answering 503 "
        "ServiceUnavailable) in a delivery made by the event dispatcher itself, which stopped delivering to every "
        "sink (a failing sink holds up the others)")


def test_a_relist_that_drops_a_vanished_object_silently_is_a_lost_notification() -> None:
    result = caught_at("relist-drops-vanished-silently", 11)
    assert result.violation == (
        "replica-1.1 sources: Source.bundles.engine.dev/sim/s1 was added again, but the deletion (history rewind) of "
        "it at 50.533s never reached its watch handler (a lost notification)")


def test_a_change_still_owed_a_trigger_when_everything_converged_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.testing._simulation._settling import Settler

    result = caught_at("relist-drops-vanished-silently", 22)
    assert result.violation == (
        "replica-1.1 sources: deletion (history rewind) of Source.bundles.engine.dev/sim/s3 at 29.657s passed the "
        "predicates of its watch handler but led to no trigger of Source.bundles.engine.dev/sim/s3 from that handler "
        "within 60s (a lost notification)")

    async def converged_is_enough(self: Settler) -> None:
        return None

    monkeypatch.setattr(Settler, "_owed_paid", converged_is_enough)
    assert caught_at("relist-drops-vanished-silently", 22).ok, "the seed converges before the change's bound"


def test_the_relist_bug_is_caught_with_every_fault() -> None:
    # Caught at Source s3's deletion at 51.082s until the watcher told the history rewind at
    # 18.6s at once (it waited 3 s for a "too large" answer before), at Bundle b1's since.
    with planted(_mutation("relist-drops-vanished-silently")):
        result = simulate(simulation_for("bundles"), 74)
    assert result.violation == (
        "replica-1.1 bundles: Bundle.bundles.engine.dev/sim/b1 was added again, but the deletion of it at 35.641s "
        "never reached its watch handler (a lost notification)")
    assert len(result.faults) > 10


def test_a_copy_written_from_a_stale_cache_breaks_a_plugin_invariant() -> None:
    result = caught_at("copy-written-from-the-cache", 0)
    assert result.violation == (
        "plugin invariant every_copy_has_its_source: copies whose source is gone: team-ns0/src1, team-ns1/src1, "
        "team-ns2/src1")



def test_an_unshielded_copy_write_overtaken_by_the_next_runs_is_caught_going_back() -> None:
    result = caught_at("copy-write-unshielded", 38)
    assert result.violation == (
        "plugin invariant no_copy_goes_back_to_older_data: copy team-ns0/src2 written with value 6353 by "
        "replica-1.1 at 7.230 (sent at 6.354), after value 6783 sent later (at 6.784) was written at 6.982")
    assert "reorder" in " ".join(result.faults)



def test_an_unshielded_status_write_overtaken_by_the_next_runs_breaks_status_is_the_last_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.testing._simulation._audit import RequestAudit

    monkeypatch.setattr(RequestAudit, "check_cut", False)
    result = caught_at("status-write-unshielded", 5)
    assert result.violation == (
        "plugin invariant status_is_the_last_written: Source s1 shows (None, 'True', 'ArtifactReady', 'revision r9 "
        "with 3 objects'), but the last status written (replica-1.3 at 58.896, sent at 56.928; one sent earlier "
        "landed after it) was (None, 'True', 'ArtifactReady', 'revision r8 with 2 objects')")


def test_a_copy_write_failure_the_mirror_swallows_is_a_failure_not_requeued() -> None:
    result = caught_at("copy-write-failure-swallowed", 2)
    assert result.violation == (
        "run replica-1.1 mirror-22 of ConfigMap/sim/src1 ended as a success, but the server failed its write PATCH "
        "/api/v1/namespaces/team-ns3/configmaps/src1 (503) and the run did not write it again: a failure not requeued")
    assert simulate(simulation_for("mirror"), 2).ok, "the mirror as it is fails that run, and runs the key again"


def test_an_unshielded_status_write_is_caught_landing_after_its_cancelled_run() -> None:
    result = caught_at("status-write-unshielded", 0)
    assert result.violation == (
        "replica-1.1's status write (patch Source sim/s0/status) sent at 11.479s was in flight when the engine "
        "cancelled run sources-5 of its key (superseded) outside any shield, and landed 0.000s after the run ended (a "
        "final write left unshielded)")


def test_a_bundle_status_write_left_unshielded_is_caught_landing_after_its_cancelled_run() -> None:
    result = caught_at("bundle-status-write-unshielded", 10)
    assert result.violation == (
        "replica-1.1's status write (patch Bundle sim/b1/status) sent at 8.403s was in flight when the engine cancelled "
        "run bundles-6 of its key (shutdown) outside any shield, and landed 1.735s after the run ended (a final write "
        "left unshielded)")
    assert simulate(simulation_for("bundles"), 10).ok, "shielded, the write lands before its run ends"


def test_a_rule_missing_from_the_generated_role_is_a_violation_naming_verb_and_resource() -> None:
    simulation = simulation_for("bundles")
    assert simulation.plugin.rules, "bundles declares what applying its Sources' ConfigMaps needs"
    undeclared = attrs.evolve(simulation, plugin=attrs.evolve(simulation.plugin, rules=()))
    result = simulate(undeclared, 0, duration=20)
    assert result.violation == (
        'replica-1.1 was refused patch configmaps s0-cm1 in namespace "sim" (403 Forbidden): the Role '
        "`python -m engine manifests` generates for bundles does not grant it")
    assert result.replay == "python -m engine simulate --plugin bundles --seed 0 --duration 20"
    as_admin = simulate(undeclared, 0, duration=20, rbac=False)
    assert as_admin.ok, as_admin.report()
    assert as_admin.replay == "python -m engine simulate --plugin bundles --seed 0 --duration 20 --no-rbac"


# Scale-out mode: each check shown catching a planted bug of the ring or the ownership gate.

OVERLAP_1 = ("two runs of Source.bundles.engine.dev/sim/s0 at once across replicas: replica-1.1 sources-1 and "
             "replica-2.1 sources-1 (no fencing)")
WRITE_3 = ("replica-1.1 wrote (patch Bundle sim/b1/status) 0.750s after it gave up (released or was fenced from) the "
           "range of its key")
TAKEOVER_0 = ("32.9% of the key space that replica-2.1 owned when it crashed at 9.004s was owned by no live replica "
              "11.492s later (bound 11s)")


def test_a_ring_that_gains_ranges_others_still_hold_is_caught_owning_them_on_two_replicas() -> None:
    result = caught_at("ring-gains-over-others-claims", 0)
    assert result.violation == "replica-2.1 and replica-1.1 both own (or hand over) 52% of the key space at once (no fencing)"
    assert result.replay.endswith("--scale-out")


def test_the_run_overlap_check_covers_ring_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.testing._simulation._checks import Checks

    monkeypatch.setattr(Checks, "check_exclusive", lambda self, rep: None)
    result = caught_at("ring-gains-over-others-claims", 1)
    assert result.violation == OVERLAP_1


def test_a_gate_whose_release_returns_before_its_runs_ended_is_caught_writing_after_the_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.testing._simulation._checks import Checks

    monkeypatch.setattr(Checks, "check_overlap", False)  # the outside view alone catches it
    result = caught_at("gate-release-returns-at-once", 3)
    assert result.violation == WRITE_3


def test_a_ring_that_honours_a_crashed_members_lease_too_long_leaves_its_ranges_unowned_past_the_bound() -> None:
    result = caught_at("ring-honours-dead-leases-twice-as-long", 0)
    assert result.violation == TAKEOVER_0


def test_a_range_lost_late_and_never_taken_over_is_caught_after_everything_converged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.testing._simulation._settling import Settler

    result = caught_at("ring-never-takes-over-dead-leases", 3)
    assert result.violation == ("49.1% of the key space that replica-2.1 owned when it crashed at 15.209s was owned "
                                "by no live replica 11.984s later (bound 11s)")
    assert any(e.what == "settle" and e.text == "converged" for e in result.trace)

    async def converged_is_enough(self: Settler) -> None:
        pass

    monkeypatch.setattr(Settler, "_owned_again", converged_is_enough)
    assert caught_at("ring-never-takes-over-dead-leases", 3).ok


def test_a_ring_member_back_from_a_partition_on_stale_caches_is_caught() -> None:
    """A partition hangs the cut-off replica's running watches: a member that rejoins without
    listing its caches again waits on them, and misses what they held back."""
    result = caught_at("ring-rejoins-on-stale-caches", 0)
    assert result.violation == (
        "replica-2.1 mirror: deletion request of ConfigMap/sim/src1 at 31.966s passed the predicates of its watch "
        "handler but led to no trigger of ConfigMap/sim/src1 from that handler within 60s (a lost notification)")


# Admission: nothing a validating webhook must refuse is stored while the webhooks are registered.

SKIPPED_0 = ("Bundle sim/b1 was stored though b1 depends on itself, with no validating webhook call allowing it while "
             "the webhooks were registered (the server skipped the webhook)")
DIRECT_7 = ("Bundle sim/b1 was stored though dependency cycle: b1 -> b3 -> b2 -> b1: replica-2.1's validating webhook "
            "allowed it at 4.556s; the server had sent it b3, b2 as stored (a webhook that accepts what it must refuse)")


def test_a_server_that_skips_validating_webhooks_on_update_is_caught_storing_what_they_refuse() -> None:
    result = caught_at("validating-webhooks-skipped-on-update", 0)
    assert result.violation == SKIPPED_0


def test_a_cycle_check_that_follows_direct_dependencies_only_is_caught_letting_a_longer_cycle_through() -> None:
    result = caught_at("cycle-check-sees-direct-dependencies-only", 7)
    assert result.violation == DIRECT_7


def test_without_the_admission_check_neither_admission_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.testing._simulation._audit import RequestAudit

    monkeypatch.setattr(RequestAudit, "admitted", lambda self, change: None)
    assert caught_at("validating-webhooks-skipped-on-update", 0).ok
    assert caught_at("cycle-check-sees-direct-dependencies-only", 7).ok


def test_the_workloads_webhook_writes_are_refused_or_defaulted_and_can_be_turned_off() -> None:
    simulation = simulation_for("bundles")
    result = simulate(simulation, 0, duration=30)
    assert result.ok, result.report()
    refused = [e.text for e in result.trace if e.what == "refused"]
    assert any("denied the request: dependency cycle: " in r for r in refused), refused
    off = simulate(simulation, 0, duration=30, webhooks=False)
    assert off.ok, off.report()
    assert not any(e.what in ("refused", "webhooks") for e in off.trace)
    assert off.replay == "python -m engine simulate --plugin bundles --seed 0 --duration 30 --no-webhooks"


def test_a_403_is_taken_for_a_webhook_denial_only_when_the_answer_says_so() -> None:
    """A replica refused by RBAC while a webhook happened to deny the same object is still a
    missing permission: the answered Status, not the timing alone, tells the two apart."""
    from engine.apiserver._api import ServedRequest
    from engine.testing._simulation._seed import _Simulator
    from engine.testing._webhook_service import WebhookCall

    audit = _Simulator(simulation_for("bundles"), 0, frozenset(), 1.0, 1.0).oracle.audit
    review = {"kind": {"group": "bundles.engine.dev", "version": "v1alpha1", "kind": "Bundle"},
              "name": "b1", "namespace": "sim"}
    audit.webhook_calls.append(WebhookCall("/validate/bundles", review, "replica-1.1", 5.0, 5.1,
                                               {"allowed": False, "status": {"code": 403}}))

    def refused(message: str) -> ServedRequest:
        reply = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": "Forbidden",
                            "code": 403}).encode()
        return ServedRequest("PATCH", "/apis/bundles.engine.dev/v1alpha1/namespaces/sim/bundles/b1", "patch",
                             "replica-1.1", "bundles.engine.dev", "Bundle", "sim", "b1", None, 403, b"{}",
                             received_at=4.9, reply=reply)

    assert audit._denied_by_webhook(refused(
        'admission webhook "validate.bundles.engine.dev" denied the request: dependency cycle: b1 -> b1'))
    assert not audit._denied_by_webhook(refused(
        'bundles.bundles.engine.dev "b1" is forbidden: User "system:serviceaccount:sim:bundles" cannot patch '
        'resource "bundles" in API group "bundles.engine.dev" in the namespace "sim"'))


def test_a_task_error_reaching_the_run_with_a_violations_cancellation_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A violation cancels the run while a task's error still propagates: the two reach the
    simulation as one group with the cancellations (bundles seed 2 under ``sink-delivered-inline``
    showed it, until the watcher's history check moved that seed's schedule)."""
    from engine.testing._simulation._seed import _Simulator

    async def run(self: _Simulator) -> None:
        async def fails() -> None:
            raise ValueError("boom")  # before its first checkpoint, so the cancellation cannot stop it

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fails)
            self.oracle.verdict.fail("planted violation")
            await trio.sleep_forever()

    monkeypatch.setattr(_Simulator, "_run", run)
    result = simulate(simulation_for("bundles"), 0)
    assert result.violation == "planted violation"


def test_what_ends_a_simulation_run_is_reported_by_its_errors_never_raised_with_its_cancellations() -> None:
    from engine.testing._simulation._seed import _errors_of

    error = ValueError("boom")
    assert _errors_of(error) is error
    both = BaseExceptionGroup("run", [KeyboardInterrupt(), ExceptionGroup("nursery", [error])])
    errors = _errors_of(both)
    assert isinstance(errors, ExceptionGroup) and errors.exceptions[0].exceptions[0] is error  # type: ignore[union-attr]
    with pytest.raises(KeyboardInterrupt):
        _errors_of(KeyboardInterrupt())
    with pytest.raises(BaseExceptionGroup):
        _errors_of(BaseExceptionGroup("run", [KeyboardInterrupt()]))


async def test_after_a_rewind_writes_stay_held_until_each_replica_listed_again_or_is_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A replica stopping gracefully across a rewind never lists again: the writes stay held
    until it is gone, as well as until the live ones listed again (mirror seed 10608 was a
    stopping replica's run whose retried finalizer removal landed once every live replica had
    listed again). Anyone's write moves the server's counter, so none is let through early
    (mirror scale-out seed 1191 did not converge when one replica's were)."""
    from types import SimpleNamespace

    from engine.apiserver._faults import Faults, RequestInfo
    from engine.testing._simulation._replica import REPLICA
    from engine.testing._simulation._seed import _Simulator

    simulator = _Simulator(simulation_for("mirror"), 0, frozenset(), 1.0, 1.0)
    driver, oracle = simulator.faults, simulator.oracle
    faults = Faults()
    driver.target = SimpleNamespace(faults=faults)  # type: ignore[assignment]
    listing, stopping, synced, gone = (
        SimpleNamespace(identity=f"replica-{n}.1", alive=alive, done=trio.Event())
        for n, alive in ((1, True), (2, False), (3, True), (4, False))
    )
    gone.done.set()
    oracle.roster.current = {0: listing, 1: stopping, 2: synced}  # type: ignore[dict-item]
    oracle.notifications.resyncing = {(listing.identity, "/api/v1/configmaps", "", "")}
    oracle.checks.rewinds_pending = 1
    driver.writable = trio.Event()

    def held(who: SimpleNamespace) -> bool:
        write = RequestInfo("patch", "configmaps", "", f"{who.identity}/test")
        return any(f.scope.matches(write) for f in faults.active)

    writes = faults.fail(503, count=None, client=REPLICA, verbs={"patch"})
    down = faults.fail(503, count=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver._rewound, down, writes, [listing, stopping, synced, gone], 3.0)
        await trio.sleep(3.5)
        assert held(synced) and not driver.writable.is_set()
        oracle.notifications.resyncing.clear()
        await trio.sleep(1.0)
        assert held(synced) and held(stopping) and not driver.writable.is_set()
        stopping.done.set()
        await trio.sleep(1.0)
        assert not faults.active and driver.writable.is_set()
    assert oracle.verdict.trace.entries[-1].text == "writes accepted again"
