"""The pieces of ``bench/fault_campaign.py`` that judge a campaign, break a replica's network and
schedule faults: each check over the replicas' run records, the server's objects and exits, the
run log plugin's records, the proxy, and ``--overlap``'s lanes and gate."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from bench import fault_campaign
from bench.operators.run_log import RunLog
from engine import ObjectRef, Outcome, OutcomeKind, Run, Trigger
from engine._logging import JSONFormatter

pytestmark = pytest.mark.timeout(30)


def _run(logs: fault_campaign.Logs, pid: int, rid: str, obj: str, start: float, end: float | None) -> None:
    logs._take({"msg": "run started", "pid": pid, "reconcileID": rid, "controller": "bundles", "object": obj, "ts": start})
    if end is not None:
        logs._take({"msg": "run ended", "pid": pid, "reconcileID": rid, "controller": "bundles", "object": obj,
                    "ts": end, "outcome": "success"})


def _joined(campaign: fault_campaign.Campaign, slot: fault_campaign.Replica, generation: int, ts: float) -> None:
    campaign.logs._take({"_file": slot.log_name(generation), "msg": "joined ring campaign", "ts": ts, "level": "info"})


def test_runs_of_one_object_on_two_replicas_at_once_are_found(tmp_path: Path) -> None:
    logs = fault_campaign.Logs(tmp_path)
    _run(logs, 1, "bundles-1", "Bundle/a", 10.0, 12.0)
    _run(logs, 2, "bundles-1", "Bundle/a", 12.5, 13.0)  # after: fine
    _run(logs, 1, "bundles-2", "Bundle/b", 10.0, 12.0)
    _run(logs, 2, "bundles-2", "Bundle/b", 11.0, 11.5)  # inside: an overlap
    _run(logs, 1, "bundles-3", "Bundle/c", 10.0, 10.5)
    _run(logs, 1, "bundles-4", "Bundle/c", 10.6, 11.0)  # one replica twice: fine
    found = logs.overlaps({})
    assert len(found) == 1 and found[0].startswith("bundles Bundle/b: pid 2 started at 11.000")


def test_an_exited_replicas_unfinished_run_ends_at_its_exit(tmp_path: Path) -> None:
    logs = fault_campaign.Logs(tmp_path)
    _run(logs, 1, "bundles-1", "Bundle/a", 10.0, None)
    _run(logs, 2, "bundles-1", "Bundle/a", 20.0, 21.0)
    assert logs.overlaps({1: 19.0}) == []
    assert len(logs.overlaps({1: 20.5})) == 1
    assert len(logs.overlaps({})) == 1


def test_the_run_log_plugin_writes_the_records_the_campaign_reads(tmp_path: Path) -> None:
    path = tmp_path / "replica-0-1.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(JSONFormatter())
    logger = logging.getLogger("engine.campaign.runs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        observer = RunLog()
        ref = ObjectRef("Bundle", "a", "ns", "bundles.engine.dev")
        run = Run(7, "bundles", ref, Trigger(ref, 1, reason="test"), 1, 0.0, trio.CancelScope())
        observer.on_run_started(None, run)  # type: ignore[arg-type]
        observer.on_run_finished(None, run, Outcome(OutcomeKind.SUCCEEDED))  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
        handler.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["msg"] for r in records] == ["run started", "run ended"]
    logs = fault_campaign.Logs(tmp_path)
    logs.refresh()
    assert logs.open_runs == {}
    assert [(s, e, pid) for (s, e, pid) in logs.intervals[("bundles", str(ref))]] == [
        (records[0]["ts"], records[1]["ts"], records[0]["pid"])
    ]


async def test_the_proxy_holds_releases_and_cuts_a_replicas_connections() -> None:
    async def echo(stream: trio.SocketStream) -> None:
        async for data in stream:
            await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, echo, 0)
        upstream = listeners[0].socket.getsockname()[1]
        proxy = fault_campaign.Proxy(upstream)
        port = await nursery.start(proxy.serve)
        conn = await trio.open_tcp_stream("127.0.0.1", port)
        await conn.send_all(b"one")
        assert await conn.receive_some(10) == b"one"

        proxy.hold()
        await conn.send_all(b"two")
        late = await trio.open_tcp_stream("127.0.0.1", port)
        await late.send_all(b"three")
        with trio.move_on_after(0.5) as held:
            await conn.receive_some(10)
        assert held.cancelled_caught
        proxy.release()
        with trio.fail_after(5):
            assert await conn.receive_some(10) == b"two"
            assert await late.receive_some(10) == b"three"

        proxy.hold()  # two faults hold the network; the first to end gives it back to neither
        proxy.hold()
        await conn.send_all(b"four")
        proxy.release()
        with trio.move_on_after(0.5) as still:
            await conn.receive_some(10)
        assert still.cancelled_caught
        proxy.release()
        with trio.fail_after(5):
            assert await conn.receive_some(10) == b"four"

        proxy.cut()
        with trio.fail_after(5):
            try:
                assert await conn.receive_some(10) == b""
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()


def test_a_replica_that_runs_nothing_after_a_fault_is_stuck(tmp_path: Path) -> None:
    args = fault_campaign.parser().parse_args(["--bound", "10", "--stuck-window", "5"])
    campaign = fault_campaign.Campaign(args, None, tmp_path)  # type: ignore[arg-type]
    slots = []
    for index, pid in enumerate((11, 12, 13)):
        slot = fault_campaign.Replica(index, None, tmp_path, tmp_path, args)  # type: ignore[arg-type]
        slot.lives.append((pid, 0.0))
        _joined(campaign, slot, 1, 1.0)
        slots.append(slot)
    slots[2].lives.append((14, 105.0))  # started after the fault: not judged for it
    campaign.replicas = slots
    for pid, ts in [(11, 101.0), (12, 95.0), (12, 115.0), (13, 104.0)]:
        _run(campaign.logs, pid, f"r-{ts}", "Bundle/a", ts, ts + 0.1)
    fault = {"kind": "partition", "n": 1, "start": 90.0, "end": 100.0}
    campaign.check_stuck(fault, {13: 120.0})
    assert campaign.violations == [
        "stuck: replica 1 pid 12 started no run in the 10.0 s after partition #1 ended at 100.000"
    ]
    campaign.violations.clear()
    campaign.check_stuck(fault, {13: 108.0})  # pid 13 exited within the window: not judged either
    assert len(campaign.violations) == 1


def test_a_change_must_converge_within_the_bound_after_the_faults_that_began_before_its_deadline(tmp_path: Path) -> None:
    args = fault_campaign.parser().parse_args(["--bound", "10"])
    campaign = fault_campaign.Campaign(args, None, tmp_path)  # type: ignore[arg-type]
    campaign.faults = [
        {"kind": "early", "start": -30.0, "end": -25.0},  # over before the change, and more than the bound before
        {"kind": "partition", "start": 5.0, "end": 20.0},  # began before the deadline: moves it to 30
        {"kind": "flood", "start": 35.0, "end": 50.0},  # began after that deadline: moves nothing
    ]
    assert campaign.deadline({"at": 0.0, "done": 40.0}) == (30.0, 20.0, "partition")
    assert campaign.deadline({"at": 0.0, "done": 8.0}) == (30.0, 20.0, "partition")
    assert campaign.deadline({"at": 0.0, "done": None}) == (30.0, 20.0, "partition")
    assert campaign.deadline({"at": 22.0, "done": None}) == (32.0, 22.0, "none")
    assert campaign.deadline({"at": 30.0, "done": None}) == (60.0, 50.0, "flood")


def test_the_quiet_time_after_a_fault_ends_where_the_next_fault_begins(tmp_path: Path) -> None:
    args = fault_campaign.parser().parse_args(["--bound", "60", "--stuck-window", "15"])
    campaign = fault_campaign.Campaign(args, None, tmp_path)  # type: ignore[arg-type]
    slot = fault_campaign.Replica(0, None, tmp_path, tmp_path, args)  # type: ignore[arg-type]
    slot.lives.append((11, 0.0))
    _joined(campaign, slot, 1, 1.0)
    campaign.replicas = [slot]
    _run(campaign.logs, 11, "r-1", "Bundle/a", 50.0, 50.1)
    first = {"kind": "flood", "n": 1, "start": 0.0, "end": 10.0}
    campaign.faults = [first, {"kind": "partition", "n": 1, "start": 20.0, "end": 40.0}]
    campaign.check_stuck(first, {})  # judged until the partition began, 10 s: too short to judge
    assert campaign.violations == []
    campaign.faults[1]["start"] = 30.0  # 20 s of quiet, and no run in it
    campaign.check_stuck(first, {})
    assert campaign.violations == ["stuck: replica 0 pid 11 started no run in the 20.0 s after flood #1 ended at 10.000"]


def test_a_late_change_is_reported_with_what_the_logs_say_about_its_objects_and_the_ring(tmp_path: Path) -> None:
    args = fault_campaign.parser().parse_args(["--bound", "10"])
    campaign = fault_campaign.Campaign(args, None, tmp_path)  # type: ignore[arg-type]
    logs = campaign.logs
    bundle, source = "Bundle.bundles.engine.dev/campaign/b-001", "Source.bundles.engine.dev/campaign/s-001"

    def line(file: str, ts: float, msg: str, **extra: object) -> None:
        logs._take({"_file": file, "ts": ts, "msg": msg, "level": "info", **extra})

    def run(file: str, pid: int, rid: str, obj: str, start: float, end: float, outcome: str) -> None:
        logs._take({"_file": file, "msg": "run started", "pid": pid, "reconcileID": rid, "controller": "bundles",
                    "object": obj, "ts": start})
        logs._take({"_file": file, "msg": "run ended", "pid": pid, "reconcileID": rid, "controller": "bundles",
                    "object": obj, "ts": end, "outcome": outcome, "cause": None})

    run("replica-0-1.log", 11, "b-1", bundle, 80.0, 80.5, "success")  # more than the bound before: not shown
    run("replica-0-1.log", 11, "b-2", bundle, 101.0, 101.4, "error")
    line("replica-0-1.log", 101.4, "reconciler error", object=bundle, retryIn=81.9)
    line("replica-1-1.log", 102.0, "gained 16.0% of the key space; now own 49.0%")
    line("replica-2-1.log", 103.0, "watch of configmaps/v1 expired (410 Gone); listing again")
    line("replica-2-1.log", 104.0, "mirrored into 2 namespaces", object="ConfigMap/campaign/m-001")  # another object
    run("replica-1-1.log", 12, "s-1", "Bundle.bundles.engine.dev/campaign/b-002", 105.0, 105.2, "success")
    run("replica-1-1.log", 12, "b-3", bundle, 180.0, 180.5, "success")
    line("replica-1-1.log", 190.0, "gained 1.0% of the key space; now own 50.0%")  # after it converged
    campaign.changes = [
        {"what": "bundle", "i": 1, "n": 4, "at": 100.0, "done": 181.0},  # 81 s: late
        {"what": "bundle", "i": 2, "n": 2, "at": 104.0, "done": 105.5},  # in time
        {"what": "mirror", "i": 3, "n": 2, "at": 150.0, "done": None},  # never
    ]
    report = campaign.report(Counter(), 0.0, 200.0, [])
    assert [v.split(" changed")[0].split(" (changed")[0] for v in report["violations"]] == [
        "converge: bundle 1 value 4", "converge: mirror 3 value 2",
    ]
    late, never = report["stalls"]
    assert late["change"] == {"what": "bundle", "i": 1, "n": 4, "at": 100.0, "done": 181.0}
    assert late["objects"] == [bundle, source]
    assert late["timeline"] == [
        f"replica-0-1.log run bundles {bundle} 101.000..101.400 error",
        f"replica-0-1.log 101.400 reconciler error {bundle} retryIn=81.9",
        "replica-1-1.log 102.000 gained 16.0% of the key space; now own 49.0%",
        "replica-2-1.log 103.000 watch of configmaps/v1 expired (410 Gone); listing again",
        f"replica-1-1.log run bundles {bundle} 180.000..180.500 success",
    ]
    assert never["objects"] == ["ConfigMap/campaign/m-003"]
    assert never["timeline"] == ["replica-1-1.log 190.000 gained 1.0% of the key space; now own 50.0%"]


def _campaign(tmp_path: Path, *argv: str, replicas: int = 3) -> fault_campaign.Campaign:
    args = fault_campaign.parser().parse_args(list(argv))
    campaign = fault_campaign.Campaign(args, None, tmp_path)  # type: ignore[arg-type]
    for index in range(replicas):
        slot = fault_campaign.Replica(index, None, tmp_path, tmp_path, args)  # type: ignore[arg-type]
        slot.lives.append((11 + index, 0.0))
        _joined(campaign, slot, 1, 1.0)
        campaign.replicas.append(slot)
    return campaign


def test_a_replica_is_judged_after_the_last_fault_that_reached_it_and_not_cut_short_by_another_replicas(
    tmp_path: Path,
) -> None:
    campaign = _campaign(tmp_path, "--bound", "20", "--stuck-window", "8")
    kill = {"kind": "apiserver-kill", "n": 1, "start": 90.0, "end": 100.0}
    partition = {"kind": "partition", "n": 1, "start": 95.0, "end": 110.0, "replica": 1}
    flood = {"kind": "flood", "n": 1, "start": 104.0, "end": 150.0, "replica": 2}
    campaign.faults = [kill, partition, flood]
    _run(campaign.logs, 12, "r-1", "Bundle/a", 125.0, 125.1)  # replica 1, after its partition
    # replica 0: 100..120, its window not cut by the others' partition and flood; replica 1 is
    # still partitioned at 100 (judged after 110); replica 2's window ends at its flood (4 s: too short)
    assert campaign.check_stuck(kill, {}) == 1
    assert campaign.violations == ["stuck: replica 0 pid 11 started no run in the 20.0 s after apiserver-kill #1 "
                                   "ended at 100.000"]
    campaign.violations.clear()
    assert campaign.check_stuck(partition, {}) == 2  # replicas 0 and 1 (2 is flooded at 110)
    assert campaign.violations == ["stuck: replica 0 pid 11 started no run in the 20.0 s after partition #1 "
                                   "ended at 110.000"]
    campaign.violations.clear()
    _run(campaign.logs, 11, "r-2", "Bundle/b", 115.0, 115.1)
    assert campaign.check_stuck(kill, {}) == 1 and campaign.check_stuck(partition, {}) == 2
    assert campaign.violations == []


def test_a_process_that_joins_its_ring_after_a_fault_is_judged_from_its_join_plus_the_handover_grace(
    tmp_path: Path,
) -> None:
    campaign = _campaign(tmp_path, "--bound", "60", "--stuck-window", "15", "--handover-grace", "3", replicas=1)
    slot = campaign.replicas[0]
    kill = {"kind": "apiserver-kill", "n": 1, "start": 90.0, "end": 100.0}
    nxt = {"kind": "etcd-compact", "n": 1, "start": 120.0, "end": 130.0}
    campaign.faults = [kill, nxt]
    slot.lives.append((21, 99.0))  # started just before the kill ended
    _joined(campaign, slot, 2, 112.0)
    _run(campaign.logs, 21, "r-1", "Bundle/a", 119.0, 119.1)
    # judged from 115 to 120: too short; a running process's window would have been 100..120
    assert campaign.check_stuck(kill, {11: 99.0}) == 0
    assert campaign.violations == []
    nxt["start"] = 140.0  # 115..140: 25 s, judged, and the run at 119 is in it
    assert campaign.check_stuck(kill, {11: 99.0}) == 1
    assert campaign.violations == []
    campaign.logs.starts[21].clear()
    campaign.check_stuck(kill, {11: 99.0})
    assert campaign.violations == ["stuck: replica 0 pid 21 started no run in the 25.0 s after apiserver-kill #1 "
                                   "ended at 100.000 (it joined its ring at 112.000)"]


def test_a_process_that_never_joins_its_ring_is_stuck_once_it_had_the_bound_to(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, "--bound", "60", "--stuck-window", "15", replicas=1)
    slot = campaign.replicas[0]
    kill = {"kind": "apiserver-kill", "n": 1, "start": 90.0, "end": 100.0}
    campaign.faults = [kill]
    slot.lives.append((21, 99.0))
    assert campaign.check_stuck(kill, {11: 99.0}) == 1  # 99..160: 61 s and no join
    assert campaign.violations == ["stuck: replica 0 pid 21 started at 99.000 had not joined its ring by 160.000"]
    campaign.violations.clear()
    campaign.faults.append({"kind": "etcd-compact", "n": 1, "start": 150.0, "end": 155.0})
    assert campaign.check_stuck(kill, {11: 99.0}) == 0  # 99..150: not yet the bound
    assert campaign.violations == []


async def test_a_partition_holds_a_replica_only_once_it_joined_its_ring(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    campaign = _campaign(tmp_path, "--partition-seconds", "5,5", replicas=1)
    slot = campaign.replicas[0]
    slot.generation = 2
    held: list[float] = []
    slot.proxy = SimpleNamespace(hold=lambda: held.append(trio.current_time()), release=lambda: None)  # type: ignore[assignment]
    log = tmp_path / slot.log_name(2)
    log.write_text("")

    async def join() -> None:
        await trio.sleep(30)
        log.write_text(json.dumps({"msg": "joined ring campaign", "ts": 1.0, "level": "info"}) + "\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join)
        begun = trio.current_time()
        detail = await campaign.fault("partition", slot)
    assert held and held[0] - begun >= 30
    assert detail["waited_join"] >= 30 and detail["seconds"] == 5.0


async def test_a_server_fault_ends_once_a_configmap_and_a_lease_write_both_go_through(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    campaign = _campaign(tmp_path, replicas=0)
    campaign.configmaps, campaign.leases = "configmaps", "leases"  # type: ignore[assignment]
    written: list[tuple[str, float]] = []

    async def patch(resource: str, name: str, body: object, **_: object) -> None:
        if resource == "leases" and trio.current_time() < 10:
            raise RuntimeError("Timeout: request did not complete within requested timeout")
        written.append((resource, trio.current_time()))

    campaign.client = SimpleNamespace(patch=patch)  # type: ignore[assignment]
    await campaign.wait_writable()
    assert trio.current_time() >= 10
    assert written[-2:] == [("configmaps", pytest.approx(trio.current_time())), ("leases", trio.current_time())]


async def test_the_gate_holds_a_fault_until_the_changes_before_the_last_fault_ended_converged(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fault_campaign, "time", SimpleNamespace(time=trio.current_time))
    campaign = _campaign(tmp_path, "--bound", "10", "--poll-interval", "1")
    t0 = trio.current_time()
    late = {"what": "bundle", "i": 1, "n": 2, "at": t0 - 1, "done": None}
    fresh = {"what": "bundle", "i": 2, "n": 2, "at": t0 + 1, "done": None}  # after the fault: not waited for
    campaign.changes = [late, fresh]
    campaign.last_end = t0

    async def converge(after: float) -> None:
        await trio.sleep(after)
        late["done"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(converge, 3.0)
        await campaign.gate()
    assert 3.0 <= trio.current_time() - t0 < 3.5

    late["done"] = None  # never converges: the gate opens once its bound passed
    campaign.last_end = t1 = trio.current_time()
    await campaign.gate()
    assert 12.0 <= trio.current_time() - t1 < 12.5

    late["done"], late["at"] = None, trio.current_time() - 0.5  # another fault ends while the gate waits
    campaign.last_end = t2 = trio.current_time()

    async def another_fault_ends() -> None:
        await trio.sleep(5.0)
        campaign.last_end = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(another_fault_ends)
        await campaign.gate()
    assert 17.0 <= trio.current_time() - t2 < 17.5


async def test_overlap_runs_flood_and_partition_beside_the_serial_faults_each_on_a_replica_of_its_own(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fault_campaign, "time", SimpleNamespace(time=trio.current_time))
    campaign = _campaign(tmp_path, "--overlap", "--gap", "1,3", "--seed", "5", "--cycles", "4")
    durations = {"flood": 100.0, "partition": 20.0}

    async def fault(kind: str, chosen: fault_campaign.Replica | None = None) -> dict[str, Any]:
        await trio.sleep(durations.get(kind, 5.0))
        return {} if chosen is None else {"replica": chosen.index}

    monkeypatch.setattr(campaign, "fault", fault)
    kinds: Counter[str] = Counter()
    await campaign.overlapping(list(fault_campaign.KINDS), kinds)
    faults = campaign.faults
    assert kinds == Counter({k: 4 for k in fault_campaign.KINDS})

    def apart(f: dict[str, Any], g: dict[str, Any]) -> bool:
        return bool(f["end"] <= g["start"] or g["end"] <= f["start"])

    serial = [f for f in faults if f["kind"] not in fault_campaign.CONCURRENT_KINDS]
    assert all(apart(f, g) for f in serial for g in serial if f is not g)  # one at a time
    held = [f for f in faults if f["kind"] in fault_campaign.REPLICA_KINDS]
    assert all(apart(f, g) for f in held for g in held if f is not g and f["replica"] == g["replica"])
    assert all("replica" not in f for f in faults if f["kind"] not in fault_campaign.REPLICA_KINDS)
    flood = next(f for f in faults if f["kind"] == "flood")
    assert len(flood["during"]) > 2  # the serial faults ran while it held its replica
    lanes = [{k for k in fault_campaign.KINDS if k not in fault_campaign.CONCURRENT_KINDS}, {"flood"}, {"partition"}]
    for f in faults:  # no lane more than a cycle ahead of another
        for lane in lanes:
            assert f["cycle"] == 1 or any(g["kind"] in lane and g["cycle"] == f["cycle"] - 1 and g["start"] <= f["start"]
                                          for g in faults)
    partitions = sorted(f["start"] for f in faults if f["kind"] == "partition")
    floods = sorted(f["start"] for f in faults if f["kind"] == "flood")
    assert partitions[3] > floods[2]


def test_a_status_seen_older_than_before_is_a_regression(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    campaign._monotonic("Bundle b-001 lastAppliedRevision", 3, 1.0)
    campaign._monotonic("Bundle b-001 lastAppliedRevision", 3, 2.0)
    campaign._monotonic("Bundle b-001 lastAppliedRevision", 4, 3.0)
    assert campaign.violations == []
    campaign._monotonic("Bundle b-001 lastAppliedRevision", 2, 4.0)
    assert campaign.violations == ["regress: Bundle b-001 lastAppliedRevision went from 4 back to 2 at 4.000"]


def test_a_slow_killed_or_failed_exit_is_a_violation(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, "--grace-period", "5")
    ok = {"replica": 0, "pid": 11, "seconds": 14.9, "code": 0, "killed": False}
    campaign.check_exit(ok)
    assert campaign.violations == []
    for bad in ({"seconds": 15.1}, {"code": 1}, {"killed": True, "code": -9}):
        campaign.check_exit({**ok, **bad})
    assert [v.split(" exited")[0] for v in campaign.violations] == ["exit: replica 0 pid 11"] * 3


def test_a_warning_event_that_reports_a_shutdown_as_a_failure_is_a_violation(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    obj = {"kind": "Bundle", "namespace": "campaign", "name": "b-001"}
    events = [
        {"type": "Warning", "reason": "ReconcileFailed", "message": "etcdserver: request timed out", "involvedObject": obj},
        {"type": "Normal", "reason": "Released", "message": "handed over on shutdown", "involvedObject": obj},
        {"type": "Warning", "reason": "ReconcileFailed", "message": "run cancelled: handover", "involvedObject": obj},
    ]
    report = campaign.report(Counter(), 0.0, 10.0, events)
    assert report["violations"] == ["events: Warning ReconcileFailed on Bundle campaign/b-001: run cancelled: handover"]
    assert report["warning_events"] == {"ReconcileFailed": 2}
