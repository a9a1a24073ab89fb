"""The fault driver: the seed's workload and fault schedule played against the embedded server and the fleet, and their end."""

from __future__ import annotations

import random
from collections.abc import Mapping

import attrs
import trio

from engine._text import summarize
from engine.kube import Client, KubeError, NotFoundError

from ...apiserver import Fault, StorageSnapshot
from .._schedule import RING_FAULTS, FaultKind, ScheduledFault
from .._target import KubeTarget
from ._checks import Unowned
from ._fleet import TICK, Fleet
from ._notifications import stored_objects
from ._oracle import Oracle
from ._replica import MAX_RING_REPLICAS, REPLICA, Replica
from ._spec import Simulation, Step

__all__ = ["FaultDriver", "REWIND_RESYNC_BOUND"]

REWIND_RESYNC_BOUND = 600.0
"""Seconds the writes stay held after a history rewind for the replicas to list again: long
enough for a watcher backing off through the faults drawn before it (a throttle of 20-odd
429s answered one per backoff) to reach the server and notice."""
PARTITION_WATCH_DELAY = 3600.0
"""Seconds a partitioned replica's watch events are held back: its running watches hang, as
on connections whose packets are dropped, until the partition heals."""
_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def _admission_refused(exc: KubeError) -> bool:
    """Whether the server refused a write for its admission webhooks: one denied it, or one
    could not be called under ``failurePolicy: Fail`` (an expected outcome of a workload)."""
    text = str(exc)
    return 'admission webhook "' in text or 'failed calling webhook "' in text


@attrs.define(eq=False)
class FaultDriver:
    """Plays one seed's timeline: workload steps through the driver's own client (never
    faulted), snapshots for history rewinds, and faults of the API server, of the replicas
    (restarts, lease losses, scale-out's joins, leaves, crashes and partitions) and of their
    notification endpoint; then stops the faults and brings the fleet back up."""

    simulation: Simulation
    oracle: Oracle
    fleet: Fleet
    steps: list[Step]
    plan: list[ScheduledFault]
    duration: float
    target: KubeTarget | None = None
    nursery: trio.Nursery | None = None
    driver: Client | None = None
    """The simulation's own client, which applies the workload."""
    applied: int = 0
    """Workload steps applied."""
    settling: bool = False
    """Set once the faults stopped."""
    snapshots: dict[int, StorageSnapshot] = attrs.field(factory=dict)
    """The snapshots taken for the plan's history rewinds, by the fault's index in the plan."""
    writable: trio.Event = attrs.field(factory=trio.Event)
    """Set while writes are accepted (cleared from a history rewind until the replicas resynced)."""

    def __attrs_post_init__(self) -> None:
        self.writable.set()

    async def drive(self) -> None:
        timeline: list[tuple[float, int, Step | ScheduledFault | int]] = [(s.at, 0, s) for s in self.steps]
        timeline += [(f.at, 1, f) for f in self.plan]
        timeline += [(at, 2, i) for i, f in enumerate(self.plan) if (at := f.snapshot_at) is not None]
        timeline.sort(key=lambda item: (item[0], item[1]))
        for at, _, item in timeline:
            await trio.sleep_until(self.oracle.trace.origin + at)
            if isinstance(item, Step):
                await self._step(item)
            elif isinstance(item, int):
                self._take_snapshot(item)
            else:
                self._fault(item)
            self.oracle.checks.check()
        await trio.sleep_until(self.oracle.trace.origin + self.duration)

    def _take_snapshot(self, index: int) -> None:
        assert self.target is not None and self.target.api is not None
        snapshot = self.target.api.snapshot()
        self.snapshots[index] = snapshot
        self.oracle.trace.add("sim", "fault", f"snapshot at resourceVersion {snapshot.resource_version} taken, for the "
                              f"{self.plan[index].kind.value} at {self.plan[index].at:.3f}s")

    async def _step(self, step: Step) -> None:
        assert self.driver is not None
        await self.writable.wait()
        client = self.driver
        manifest = dict(step.manifest)
        resource = await client.resource_for(manifest)
        meta = dict(manifest.get("metadata") or {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = self.simulation.namespace
        manifest["metadata"] = meta
        self.oracle.trace.add("sim", "step", step.describe())
        if step.action == "delete":
            try:
                await client.delete(resource, meta["name"], namespace=meta.get("namespace"))
            except NotFoundError:
                pass
        else:
            try:
                await client.apply(resource, manifest, field_manager="engine-simulation", force=True)
            except KubeError as exc:
                if not _admission_refused(exc):
                    raise
                self.oracle.trace.add("sim", "refused", f"{step.describe()}: {summarize(exc)}")
                self.applied += 1
                return
            if isinstance(manifest.get("status"), Mapping) and "status" in resource.subresources:
                await client.apply(
                    resource, {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], "metadata": meta,
                               "status": manifest["status"]},
                    field_manager="engine-simulation", force=True, subresource="status",
                )
        self.applied += 1

    def _fault(self, fault: ScheduledFault) -> None:
        assert self.target is not None and self.nursery is not None
        faults = self.target.faults
        kind = fault.kind
        note = ""
        if kind in RING_FAULTS:
            # Another member crashing, cut off, joining or leaving moves the assignment again.
            self.oracle.checks.disturbed_at = max(self.oracle.checks.disturbed_at, trio.current_time())
        elif kind is not FaultKind.SINK_OUTAGE:
            self.oracle.checks.disturbed_at = trio.current_time() + max(fault.seconds, fault.retry_after, fault.jitter)
        if kind is FaultKind.WATCH_DROP or kind is FaultKind.WATCH_DROP_ABRUPT:
            note = f"{faults.drop_watches(client=REPLICA, abrupt=kind is FaultKind.WATCH_DROP_ABRUPT)} watch(es) dropped"
        elif kind is FaultKind.EXPIRE:
            dropped = faults.drop_watches(client=REPLICA)
            if dropped:
                faults.expire_next_watch(count=dropped, client=REPLICA)
            note = f"{dropped} watch(es) dropped, resumed into 410"
        elif kind is FaultKind.ERRORS:
            faults.fail(fault.status, count=fault.count, client=REPLICA)
        elif kind is FaultKind.THROTTLE:
            faults.throttle(count=fault.count, retry_after=fault.retry_after, client=REPLICA)
        elif kind is FaultKind.LATENCY:
            faults.add_latency(fault.seconds, count=fault.count, client=REPLICA)
        elif kind is FaultKind.STALE_WATCH:
            self.nursery.start_soon(self._lasting, faults.delay_watch(fault.seconds, client=REPLICA), float(fault.count))
        elif kind is FaultKind.APISERVER_RESTART:
            dropped = faults.drop_watches(client=REPLICA, abrupt=True)
            down = faults.fail(503, count=None, client=REPLICA)
            self.nursery.start_soon(self._lasting, down, fault.seconds, dropped)
            note = f"{dropped} watch(es) cut"
        elif kind is FaultKind.HISTORY_REWIND:
            api = self.target.api
            assert api is not None
            snapshot = self.snapshots.pop(next(i for i, f in enumerate(self.plan) if f is fault))
            lost = api.store.resource_version - snapshot.resource_version
            down = faults.fail(503, count=None, client=REPLICA)
            writes = faults.fail(503, count=None, client=REPLICA, verbs=_WRITES)
            waiting = [rep for rep in self.oracle.roster.replicas if not rep.done.is_set()]
            before = stored_objects(api.store)
            api.restore(snapshot)
            self.oracle.notifications.log.mark_restore()
            self.oracle.checks.rewound_at = trio.current_time()
            live = {r.identity for r in self.oracle.roster.current.values() if r.alive}
            self.oracle.notifications.resyncing |= {w for w in self.oracle.notifications.watched if w[0] in live}
            # A replica that listed before the rewind holds its resourceVersion even before
            # its first watch is in place (bundles seed 20130).
            informed = {(r.identity, *c) for r in self.oracle.roster.current.values() if r.alive for c in r.informed()}
            self.oracle.notifications.resyncing |= self.oracle.notifications.listed & informed
            self.oracle.notifications.on_restore(api.store, before)
            self.oracle.checks.rewinds_pending += 1
            if self.writable.is_set():
                self.writable = trio.Event()
            self.nursery.start_soon(self._rewound, down, writes, waiting, fault.seconds)
            note = f"back to resourceVersion {snapshot.resource_version} ({lost} change(s) undone), watches cut"
        elif kind is FaultKind.RUNNER_RESTART:
            rep = self.oracle.roster.current[fault.target % len(self.oracle.roster.current)]
            if rep.alive and rep.slot not in self.fleet.restarting:
                self.fleet.stop(rep)
                self.fleet.schedule_restart(rep, fault.seconds)
                note = f"{rep.identity}"
            else:
                note = "skipped: that replica is not running"
        elif kind is FaultKind.LEASE_LOSS:
            leader = next((r for r in self.oracle.roster.current.values() if r.alive and r.harness is not None
                           and r.harness.manager.leader_election is not None
                           and r.harness.manager.leader_election.is_leader), None)
            if leader is None:
                note = "skipped: no leader"
            else:
                failing = faults.fail(500, count=None, resource="leases", client=f"{leader.identity}/")
                self.nursery.start_soon(self._lasting, failing, fault.seconds)
                if leader.slot in self.fleet.restarting:
                    note = f"leader {leader.identity} (its restart is already pending)"
                else:
                    self.fleet.schedule_restart(leader, fault.seconds)
                    note = f"leader {leader.identity}"
        elif kind in RING_FAULTS:
            note = self._ring_fault(fault)
        elif kind is FaultKind.SINK_OUTAGE:
            self.oracle.roster.notifier.down = True
        elif kind is FaultKind.REORDER:
            self.nursery.start_soon(self._reorder, fault)
        self.oracle.trace.add("sim", "fault", fault.describe() + (f": {note}" if note else ""))

    def _ring_fault(self, fault: ScheduledFault) -> str:
        """Scale-out mode: a replica joins, leaves, crashes or is cut off; the note to trace."""
        assert self.target is not None and self.nursery is not None
        kind = fault.kind
        # A scaled-down replica is stopping, not gone yet: it no longer counts (two scale-downs
        # in one instant must still leave a replica).
        alive = [r for _, r in sorted(self.oracle.roster.current.items())
                 if r.alive and r.slot not in self.fleet.restarting and r.slot not in self.fleet.retired]
        if kind is FaultKind.SCALE_UP:
            if len([s for s in self.oracle.roster.current if s not in self.fleet.retired]) >= MAX_RING_REPLICAS:
                return f"skipped: {MAX_RING_REPLICAS} replicas already"
            slot = max(self.oracle.roster.current, default=-1) + 1
            placeholder = self.oracle.roster.current[slot] = Replica(slot, f"{REPLICA}{slot + 1}.0")
            placeholder.done.set()
            self.fleet.restarting.add(slot)
            self.nursery.start_soon(self.fleet.scale_up, slot)
            return f"slot {slot}"
        if not alive:
            return "skipped: no replica is running"
        rep = alive[fault.target % len(alive)]
        if kind is FaultKind.SCALE_DOWN:
            if len(alive) < 2:
                return "skipped: the last replica stays"
            self.fleet.retired.add(rep.slot)
            self.fleet.stop(rep)
            return rep.identity
        assert rep.ring is not None and rep.harness is not None
        owned = rep.ring.gate.owned
        if kind is FaultKind.CRASH:
            self.oracle.roster.crashed.add(rep.identity)
            rep.harness.crash()
            self.fleet.schedule_restart(rep, fault.seconds)
            self.nursery.start_soon(self._crashed, rep)
            what = "crashed"
        else:
            if rep.identity in self.oracle.roster.cut_off:
                return f"skipped: {rep.identity} is cut off already"
            cut = self.target.faults.fail(503, count=None, client=f"{rep.identity}/")
            hung = self.target.faults.delay_watch(PARTITION_WATCH_DELAY, client=f"{rep.identity}/")
            self.oracle.roster.cut_off[rep.identity] = cut
            self.oracle.roster.hung[rep.identity] = hung
            self.nursery.start_soon(self._healed, rep, cut, hung, fault.seconds)
            what = "was cut off"
        now = trio.current_time()
        if owned:
            self.oracle.checks.unowned.append(Unowned(now, now, rep.identity, what, owned))
        return f"{rep.identity}, owning {100 * owned.share:.1f}% of the key space"

    async def _crashed(self, rep: Replica) -> None:
        """A crashed process's runs are gone with it: once its tasks ended, none is in progress."""
        await rep.done.wait()
        self.oracle.checks.forget_runs(rep.identity)

    async def _healed(self, rep: Replica, cut: Fault, hung: Fault, seconds: float) -> None:
        assert self.target is not None
        with trio.move_on_after(seconds):
            while cut in self.target.faults.active:
                await trio.sleep(TICK / 10)
        self.target.faults.remove(cut)
        self.target.faults.remove(hung)
        self.oracle.roster.cut_off.pop(rep.identity, None)
        self.oracle.roster.hung.pop(rep.identity, None)
        rep.started_at = trio.current_time()
        self.oracle.trace.add("sim", "fault", f"partition of {rep.identity} healed")

    async def _lasting(self, fault: Fault, seconds: float, expire: int = 0) -> None:
        assert self.target is not None
        await trio.sleep(seconds)
        faults = self.target.faults
        faults.remove(fault)
        if expire:
            faults.expire_next_watch(count=expire, client=REPLICA)
        self.oracle.trace.add("sim", "fault", f"{fault.kind} ended" + (f"; the next {expire} watch(es) get 410" if expire else ""))

    async def _reorder(self, fault: ScheduledFault) -> None:
        """For ``fault.seconds``: hold up each replica write (one latency fault of one request at
        a time) for its own time, drawn from ``fault.seed``, up to ``fault.jitter``; until the
        faults stop. A write that arrives while the next delay is being set goes through."""
        assert self.target is not None
        faults = self.target.faults
        rng = random.Random(fault.seed)
        end = trio.current_time() + fault.seconds
        held = None
        while not self.settling and trio.current_time() < end:
            if held is None or held not in faults.active:
                held = faults.add_latency(rng.uniform(0.0, fault.jitter), count=1, client=REPLICA, verbs=_WRITES)
            await trio.sleep(TICK / 20)
        if held is not None:
            faults.remove(held)
        self.oracle.trace.add("sim", "fault", "reorder ended")

    async def _rewound(self, down: Fault, writes: Fault, waiting: list[Replica], seconds: float) -> None:
        """After a history rewind: down for ``seconds``, then reads only (``writes`` holds the
        replicas' writes, and the workload's wait) until each replica that had not stopped at
        the rewind (``waiting``) listed again each collection it watches, or is gone; at most
        :data:`REWIND_RESYNC_BOUND` seconds.

        Writes after a restore reuse resourceVersions that clients saw before it; a client
        whose resourceVersion the server's counter has passed again when it reconnects cannot
        tell that history went back (as with an etcd restore without ``--bump-revision``), and
        anyone's write moves that counter, so the simulation holds every write until each
        replica has had the chance to notice. A run in flight across the rewind decided on
        writes the rewind may have undone: a replica that notices lists again, which triggers
        every key and supersedes such a run before writes are accepted again. A replica
        stopping gracefully never lists again, so the writes wait until it is gone (mirror seed
        10608: its draining run's retried finalizer removal let a source go while the copies
        the run had deleted were back).
        """
        assert self.target is not None
        faults = self.target.faults
        await trio.sleep(seconds)
        faults.remove(down)
        self.oracle.trace.add("sim", "fault", f"{down.kind} ended; writes wait for the replicas to list again")
        deadline = trio.current_time() + REWIND_RESYNC_BOUND
        while True:
            live = {r.identity for r in self.oracle.roster.current.values() if r.alive}
            self.oracle.notifications.resyncing = {w for w in self.oracle.notifications.resyncing if w[0] in live}
            listing = {w[0] for w in self.oracle.notifications.resyncing}
            waiting = [r for r in waiting if not r.done.is_set() and (r.identity not in live or r.identity in listing)]
            if not waiting or trio.current_time() >= deadline:
                break
            await trio.sleep(TICK / 10)
        for who in sorted(listing):
            self.oracle.notifications.forget_obligations(who)
        left = ", ".join(f"{who} {path}" + (f"?{labels}" if labels else "")
                         for who, path, labels, _ in sorted(self.oracle.notifications.resyncing))
        stopping = ", ".join(sorted(r.identity for r in waiting if r.identity not in listing))
        self.oracle.notifications.unsynced |= self.oracle.notifications.resyncing
        self.oracle.notifications.resyncing.clear()
        faults.remove(writes)
        self.oracle.checks.rewinds_pending -= 1
        if not self.oracle.checks.rewinds_pending:
            self.writable.set()
        self.oracle.trace.add("sim", "fault", "writes accepted again" + (f" (not listed again in time: {left})" if left else "")
                              + (f" (still stopping or starting: {stopping})" if stopping else ""))

    async def faults_over(self) -> None:
        assert self.target is not None
        self.target.faults.clear()
        self.settling = True
        down = " (the notification endpoint stays down)" if self.oracle.roster.notifier.down else ""
        self.oracle.trace.add("sim", "fault", "faults stop" + down)
        for slot, scope in sorted(self.fleet.restart_scopes.items()):
            rep = self.oracle.roster.current[slot]
            if rep.alive:
                scope.cancel(reason="faults stopped")
                self.oracle.trace.add("sim", "fault", f"{rep.identity} kept running: its restart is called off")
        for slot, rep in sorted(self.oracle.roster.current.items()):
            if not rep.alive and slot not in self.fleet.restarting and slot not in self.fleet.retired:
                await rep.done.wait()
                await self.fleet.start(slot)
