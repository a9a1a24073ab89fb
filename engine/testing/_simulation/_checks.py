"""The checks that hold at every step and at quiet moments: runs, wake-ups, sinks, events, key-space ownership, the plugin's invariants."""

from __future__ import annotations

import math
from typing import ClassVar

import attrs
import trio

from engine import EventType, ObjectRef, Run
from engine._keyspace import KeyRanges

from .._target import KubeTarget
from ._notifications import Notifications
from ._replica import RING_LEASE_DURATION, RING_RETRY_PERIOD, Replica, Roster
from ._spec import ClusterState, Simulation
from ._verdict import Verdict

__all__ = ["Checks", "Unowned", "GRACE_PERIOD", "SINK_BOUND", "OWNED_AGAIN_BOUND"]

GRACE_PERIOD = 5.0
"""Seconds a replica stopping gracefully lets its runs finish (drain) before it cancels them."""
SINK_BOUND = 10.0
"""Seconds within which a healthy sink must have received an event emitted before."""
OWNED_AGAIN_BOUND = RING_LEASE_DURATION + 3 * RING_RETRY_PERIOD
"""Scale-out mode: seconds within which every range a crashed or cut-off replica owned is
owned again by another live replica (``docs/scale-out.md``: the lease duration, one retry
period to notice, the claim-then-check; one more retry period for the jitter). The clock
stops while a fault of the API server is active or no other replica runs."""


@attrs.define(eq=False)
class Unowned:
    """Ranges a crashed or cut-off replica owned, not yet seen owned by another live replica."""

    since: float
    """When the clock of :data:`OWNED_AGAIN_BOUND` (re)started."""
    at: float
    """When the replica crashed or was cut off."""
    victim: str
    what: str
    remaining: KeyRanges


@attrs.define(eq=False)
class Checks:
    """The guarantees checked at every step (:meth:`check`), at quiet moments
    (:meth:`check_quiescent`) and at the end (:meth:`check_wakeups`), with what they keep: the
    runs in progress across replicas, the key-space ranges lost and not yet owned again, and
    what the faults tell them (a history rewind, a disturbance)."""

    simulation: Simulation
    verdict: Verdict
    roster: Roster
    notifications: Notifications
    state: ClusterState | None = None
    target: KubeTarget | None = None
    grace_period: float = GRACE_PERIOD
    check_overlap: ClassVar[bool] = True
    """Whether two runs of one key on two replicas are a violation; tests turn it off to show
    that the outside-view checks catch a bug alone."""
    serial: int = 0
    """Counts triggers and run starts (and ring changes see it): orders them within an instant."""
    in_progress: dict[tuple[str, ObjectRef], tuple[str, str]] = attrs.field(factory=dict)
    placed: dict[tuple[str, str], int] = attrs.field(factory=dict)
    """Where each running run's key was in the key space when it started (ring replicas), by
    replica and run: an object re-created under its name moves its key to the new uid's place
    while the run for the old one may still be ending."""
    run_keys: set[tuple[str, str, str | None, str]] = attrs.field(factory=set)
    """``(kind, group, namespace, name)`` of every key any replica ran."""
    unowned: list[Unowned] = attrs.field(factory=list)
    disturbed_at: float = -math.inf
    """When the API server's last fault (other than a partition) was applied, plus how long
    one request of it may be held up (latency, a throttle's Retry-After, a restart's downtime);
    or when a replica last joined, left, crashed or was cut off."""
    rewinds_pending: int = 0
    """History rewinds whose writes are still held."""
    rewound_at: float | None = None
    """When the last history rewind happened."""

    def check(self) -> None:
        """The checks that hold at every step."""
        assert self.state is not None
        for invariant in self.simulation.invariants:
            problem = invariant(self.state)
            if problem is not None:
                self.verdict.fail(f"plugin invariant {getattr(invariant, '__name__', 'invariant')}: {problem}")
        now = trio.current_time()
        self.notifications.check_notifications()
        self.check_sinks()
        self.check_owned_again()
        for rep in self.roster.replicas:
            self.check_events(rep)
            if not rep.alive:
                continue
            for key, (since, ref) in rep.pending.items():
                if rep.ring is not None and not rep.ring.gate.owns(key[1]):
                    continue  # parked here: its owner runs it
                if now - since > self.simulation.prompt:
                    self.verdict.fail(f"{key[1]} did not run within {self.simulation.prompt:g}s of its dependency {ref} "
                                      f"becoming Ready on {rep.identity} (waited {now - since:.1f}s)")

    def check_exclusive(self, rep: Replica) -> None:
        """Scale-out mode, at every change a ring announced: no two replicas (crashed ones
        aside: their tasks are gone) own or hand over one key at once, by their gates' word.
        Runs of a key are instants apart in virtual time, so two replicas running one key's
        reconciles at the same moment is rare even when their ranges overlap; this catches the
        overlap itself (after a history rewind it is allowed, as two runs are, for
        ``renew_deadline``)."""
        if rep.ring is None or rep.identity in self.roster.crashed or not rep.may_run:
            return
        mine = rep.may_run[-1][1]
        for other in self.roster.current.values():
            if other is rep or other.ring is None or other.identity in self.roster.crashed or not other.may_run:
                continue
            if other.harness is None or not other.harness.running:
                continue
            both = mine & other.may_run[-1][1]
            if both and self.restored_lease_window() is None:
                self.verdict.fail(f"{rep.identity} and {other.identity} both own (or hand over) {100 * both.share:.2g}% of the "
                                  "key space at once (no fencing)")
                return

    def place(self, identity: str, run: Run) -> None:
        """Remember where ``run`` (starting on ``identity``) found its key in the key space."""
        rep = self.roster.named(identity)
        where = rep.ring.gate.key_of(run.key) if rep is not None and rep.ring is not None else None
        if where is not None:
            self.placed[(identity, run.id)] = where

    def recreated(self, one: tuple[str, str], other: tuple[str, str]) -> bool:
        """Whether two runs of one key on two ring replicas (each given as replica and run)
        were started for different uids of its name (an object deleted and re-created under
        its name: docs/scale-out.md, known limits): the places their keys had when each run
        started differ. The run for the older uid keeps the place it started at, though its
        replica learned the new uid since (its trigger superseded that run, which may still
        be ending)."""
        a, b = self.placed.get(one), self.placed.get(other)
        return a is not None and b is not None and a != b

    def covered(self, rep: Replica) -> None:
        """``rep``'s ring changed: what it owns now is owned again (by another replica, or by
        a cut-off one once reconnected: it rejoined, or it never lost its Lease)."""
        if rep.ring is None or not rep.alive or rep.identity in self.roster.cut_off or rep.identity in self.roster.crashed:
            return
        owned = rep.ring.gate.owned
        for item in list(self.unowned):
            item.remaining = item.remaining - owned
            if not item.remaining:
                self.unowned.remove(item)
                self.verdict.trace.add("sim", "owned", f"what {item.victim} owned when it {item.what} is owned again, "
                                       f"{trio.current_time() - item.at:.3f}s later")

    def check_owned_again(self) -> None:
        """Scale-out mode: every range a crashed or cut-off replica owned is owned again by
        a live replica that can reach the API server within :data:`OWNED_AGAIN_BOUND`; the
        clock starts again while no such replica runs, when a replica joins, leaves, crashes,
        is cut off or reconnects (the assignment moves again), and while a fault of the API server is
        active or may still hold a request up (members' renewals and reads fail or wait then)."""
        if not self.unowned or self.target is None:
            return
        now = trio.current_time()
        partitions = set(map(id, [*self.roster.cut_off.values(), *self.roster.hung.values()]))
        disturbed = any(id(f) not in partitions for f in self.target.faults.active) or self.rewinds_pending
        for rep in self.roster.ring_members():
            self.covered(rep)
        for item in self.unowned:
            others = self.roster.ring_members()
            if disturbed or not others:
                item.since = now
            # A member that joined (or reconnected) first observes the victim's Lease then: it
            # honours it for a whole lease duration from that moment (no clock comparison across
            # members).
            item.since = max(item.since, self.disturbed_at, *(r.started_at for r in others))
            if now - item.since > OWNED_AGAIN_BOUND:
                self.verdict.fail(f"{100 * item.remaining.share:.1f}% of the key space that {item.victim} owned when it "
                                  f"{item.what} at {item.at - self.verdict.trace.origin:.3f}s was owned by no live replica "
                                  f"{now - item.since:.3f}s later (bound {OWNED_AGAIN_BOUND:g}s)")
                return

    def check_sinks(self) -> None:
        """Each live replica's own memory sink received, within :data:`SINK_BOUND`, every
        event emitted (as the recorder's tap saw it) that the recorder did not drop, whatever
        another sink does."""
        now = trio.current_time()
        for rep in self.roster.replicas:
            h = rep.harness
            if h is None or not rep.alive:
                continue
            due = sum(1 for at, _ in rep.emitted if now - at > SINK_BOUND)
            drops = h.manager.events.drops()
            dropped = sum(n for (sink, _), n in drops.items() if sink in ("*", "memory"))
            if len(h.events) + dropped < due:
                down = " while the notification endpoint is down" if self.roster.notifier.down else ""
                self.verdict.fail(f"{rep.identity}: its memory sink received {len(h.events)} of {due} events emitted more than "
                                  f"{SINK_BOUND:g}s ago{down} (a stuck sink holds up the others)")

    def check_triggers_ran(self) -> None:
        """At a moment when every task waits: a trigger that is not followed by a run of its
        key, while the key is not running and its controller has a free worker, is lost."""
        for rep in self.roster.replicas:
            if not rep.alive or rep.harness is None:
                continue
            for (name, ref), (index, trig) in rep.last_trigger.items():
                if rep.last_start.get((name, ref), -1) > index or (name, ref) in rep.running:
                    continue
                if rep.ring is not None and not rep.ring.gate.owns(ref):
                    continue  # parked: it runs where it is owned (and here again if its range is gained)
                controller = rep.harness.manager.controller(name)
                busy = sum(1 for (n, _) in rep.running if n == name)
                if busy >= min(controller.max_concurrent, controller.live_workers):
                    continue  # no free worker (or its workers have not started: caches still syncing)
                self.verdict.fail(f"{rep.identity} {name}: trigger #{trig.sequence} ({trig.reason}) of {ref} at "
                                  f"{trig.observed_at - self.verdict.trace.origin:.3f}s never led to a run, and {min(controller.max_concurrent, controller.live_workers) - busy} "
                                  "worker(s) are free (lost wake-up)")

    def check_quiescent(self) -> None:
        """Checks for a moment when every task waits: no ready key beside an idle worker."""
        self.check_triggers_ran()
        for rep in self.roster.replicas:
            if not rep.alive:
                continue
            assert rep.harness is not None
            for controller in rep.harness.manager.controllers:
                stats = controller.queue.statistics()
                if stats.depth and not stats.shut_down and controller.live_workers > controller.active_workers:
                    self.verdict.fail(f"{rep.identity} {controller.name}: {stats.depth} key(s) queued while "
                                      f"{controller.live_workers - controller.active_workers} worker(s) idle (lost wake-up)")

    def check_events(self, rep: Replica) -> None:
        for _, event in rep.emitted[rep.events_seen:]:
            if event.type is EventType.WARNING and event.run_id in rep.quiet_runs:
                self.verdict.fail(f"{rep.identity} emitted Warning {event.reason} about {event.involved} from run "
                                  f"{event.run_id}, which the engine cancelled (a failure event for a run that did not fail)")
        rep.events_seen = len(rep.emitted)

    def check_wakeups(self) -> None:
        """Every trigger a live replica accepted was followed by a run of its key."""
        for rep in self.roster.replicas:
            if not rep.alive:
                continue
            assert rep.harness is not None
            for (name, ref), (index, trig) in rep.last_trigger.items():
                if rep.last_start.get((name, ref), -1) > index:
                    continue
                if rep.ring is not None and not rep.ring.gate.owns(ref):
                    continue
                controller = rep.harness.manager.controller(name)
                if controller.queue.is_processing(ref):
                    continue
                stats = controller.queue.statistics()
                if stats.depth and controller.active_workers >= controller.max_concurrent:
                    continue
                self.verdict.fail(f"{rep.identity} {name}: trigger #{trig.sequence} ({trig.reason}) of {ref} at "
                                  f"{trig.observed_at - self.verdict.trace.origin:.3f}s was never followed by a run (lost wake-up)")

    def restored_lease_window(self, at: float | None = None) -> float | None:
        """Seconds since the last history rewind (at ``at``, default now) if fewer than the
        replicas' ``renew_deadline``, else ``None``. A restore of the server's storage can bring back an older Lease record
        (released, or held by an earlier leader) while the current leader still leads: a standby
        may take it over before that leader's renewals fail for ``renew_deadline``. No
        Lease-based election can fence that window (client-go's neither)."""
        if self.rewound_at is None:
            return None
        since = (trio.current_time() if at is None else at) - self.rewound_at
        deadlines = [float(getattr(rep.harness.manager.leader_election, "renew_deadline", 0.0))
                     for rep in self.roster.replicas if rep.harness is not None]
        deadlines += [rep.ring.renew_deadline for rep in self.roster.replicas if rep.ring is not None]
        return since if since <= max(deadlines, default=0.0) else None

    def forget_runs(self, identity: str) -> None:
        """``identity`` crashed and its tasks ended: its runs are gone with it, none is in progress."""
        for key, (who, _) in list(self.in_progress.items()):
            if who == identity:
                del self.in_progress[key]
        for run in [run for run in self.placed if run[0] == identity]:
            del self.placed[run]
