"""Deterministic simulation: one seed fixes the workload, the faults and the scheduling.

:func:`simulate` runs a plugin against the embedded API server under virtual time, with
trio's run order fixed by the seed (see :mod:`engine.testing._determinism`), applies the
seed's workload and fault schedule, and checks the engine's guarantees at every step:

* runs: no two runs of one key at once, across replicas too (fencing; except, for
  ``renew_deadline``, after a history rewind brought back an older Lease); a run the engine
  cancelled as superseded, at shutdown or on a lost lease is never counted as an error and
  writes no failure status (unless it failed, and began writing that status, before it was
  cancelled); a graceful stop lets runs finish for the grace period (drains)
  before it cancels them;
* wake-ups: no key waits in a queue while a worker of its controller is idle; every
  accepted trigger is followed by a run of its key; a dependent starts a run within
  ``Simulation.prompt`` seconds of its dependency becoming Ready;
* the plugin's own invariants, at every step;
* least privilege (unless ``rbac=False``): each replica runs as the plugin's ServiceAccount
  bound to the Role ``python -m engine manifests`` derives for it, and any request the server
  refuses with 403 is a violation naming the verb and resource (no fault answers 403);
* at the end: no Warning event from a superseded, shutdown or fenced run, and, once the
  faults stopped, every object converges within ``bound`` seconds (counted from the end of
  the longest rate-limited backoff then pending).

* from outside the engine (the server's :class:`~engine.apiserver.RequestLog`, its storage's
  change feed, and events as emitted, through a tap ahead of the sinks): no write by a
  replica after it lost its lease beyond a write in flight landing within
  ``LATE_WRITE_BOUND``; a watched change every predicate passes (committed, or made by a
  history rewind) leads to a trigger of its key from each directly watching controller's
  handler within ``WATCH_BOUND`` of when the replica could read its kind again, and a key
  added again while its deletion is owed fails at once; the replica's memory sink keeps
  receiving within ``SINK_BOUND`` whatever another sink does, and a sink's failure never
  escapes into the event dispatcher (a sink violation, not a crash); a run cancelled inside a shield
  gets a write to the server or reports the cut; no status write arrives with no run of its
  key in progress (one in flight may land up to ``LATE_WRITE_BOUND`` after its run ended); a
  trigger not followed by a run while its key is idle and a started worker free is reported
  at the next quiet moment. Once converged, a seed waits for every change still owed a
  trigger to get it, or for its bound to pass.

A plugin's webhooks are registered once (unless ``webhooks=False``), served in process by the
live replicas behind one :class:`~engine.testing._webhook_service.WebhookService`; a workload
write an admission webhook refuses is traced as ``refused``. With the simulation's
:class:`~engine.testing.AdmissionOracle` objects, nothing the validating webhooks must refuse
may be stored while they are registered: each such write is judged against the webhook call
that allowed it and what the server had sent the answering replica
(:mod:`engine.testing._admission_check`); what no webhook could have refused is traced as
``admitted``.

In scale-out mode (``scale_out=True``) the replicas are members of a scale-out ring
(:class:`~engine.kube.HashRing`) instead of leader-election candidates, and the faults
``scale-up``, ``scale-down``, ``crash`` and ``partition`` act on them. The run check above
then covers ring replicas (two runs of one key on two replicas; an object deleted and
re-created under its name, known to two replicas by two uids, is traced as the known limit
it is), and two more hold: every write of a key's object (a key some replica ran) arrives
while the writing replica's gate owned that key's range (placed by the uid the server
reports) or was still handing it over, as its ring announced it; one that arrived before the
handover returned or a fence revoked the range may land up to ``LATE_WRITE_BOUND`` after
(in flight), as for a lost lease; and every range a crashed or cut-off replica owned is
owned again by a live, connected replica within :data:`OWNED_AGAIN_BOUND` (the clock
restarting while the API server is faulty or a member joins or reconnects), before the run
ends even when everything converged sooner. Triggers of keys a replica
does not own are parked by its gate and owe no run there.

The first violation ends the run; :class:`SimulationResult` then holds it, the one-line
replay command and the trace.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import trio
import trio.testing

from engine import (
    CancelCause,
    Controller,
    Event,
    EventType,
    ObjectRef,
    Outcome,
    OutcomeKind,
    OwnershipGate,
    Run,
    RunObserver,
    Trigger,
)
from engine._keyspace import KeyRanges, fnv1a64
from engine._text import summarize
from engine.kube import (
    AdmissionWebhook,
    Client,
    HashRing,
    KubeError,
    NotFoundError,
    WebhookServer,
    install_crds,
    join_selectors,
)
from engine.kube.lowlevel import resource_version_number, resource_version_of

from ..apiserver import Change, Fault, ObjectStorage, RequestLog, RequestRecord, ServedRequest, StorageSnapshot
from ._admission_check import AdmissionCheck
from ._determinism import deterministic_scheduling
from ._harness import (
    DRIVER_USER_AGENT,
    PluginHarness,
    open_plugin_test,
    register_in_process,
    webhook_configuration_name,
)
from ._schedule import RING_FAULTS, FaultKind, ScheduledFault, plan_faults
from ._simulation import ClusterState, Simulation, Step
from ._target import KubeTarget, open_embedded_target
from ._trace import Trace, TraceEntry
from ._webhook_service import WebhookCall, WebhookService

__all__ = ["simulate", "simulate_seeds", "SimulationResult", "DEFAULT_DURATION", "DEFAULT_BOUND", "DEFAULT_SEED_TIMEOUT"]

DEFAULT_DURATION = 60.0
"""Seconds of virtual time with workload and faults."""
DEFAULT_BOUND = 300.0
"""Seconds of virtual time within which everything must converge once the faults stopped."""
DEFAULT_SEED_TIMEOUT = 300.0
"""Seconds of wall time one seed may take before it is reported as hung."""
GRACE_PERIOD = 5.0
EPOCH = 1_700_000_000.0
REPLICA = "replica-"
_QUIET = frozenset({OutcomeKind.SUPERSEDED, OutcomeKind.SHUTDOWN, OutcomeKind.LEADERSHIP_LOST, OutcomeKind.HANDOVER})
_NOT_FAILURES = frozenset(
    {CancelCause.SUPERSEDED, CancelCause.SHUTDOWN, CancelCause.LEADERSHIP_LOST, CancelCause.HANDOVER}
)
_TICK = 1.0
_RESYNC = 120.0
REWIND_RESYNC_BOUND = 600.0
"""Seconds the writes stay held after a history rewind for the replicas to list again: long
enough for a watcher backing off through the faults drawn before it (a throttle of 20-odd
429s answered one per backoff) to reach the server and notice."""
_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LATE_WRITE_BOUND = 5.0
"""Seconds a write that arrived before its replica lost its lease may land after the loss
(it was in flight, held up by latency); a later landing is a violation."""
WATCH_BOUND = 60.0
"""Seconds within which a watched change that passes a controller's predicates must lead to a
trigger of its key on each live replica that watches it."""
SINK_BOUND = 10.0
"""Seconds within which a healthy sink must have received an event emitted before."""
_ROUTINE = frozenset({"Lease", "Event"})
RING_LEASE_DURATION = 8.0
"""Scale-out mode: the member Leases' duration (short, as the simulation's timings are)."""
RING_RENEW_DEADLINE = 5.0
RING_RETRY_PERIOD = 1.0
RING_HANDOVER_GRACE = 3.0
OWNED_AGAIN_BOUND = RING_LEASE_DURATION + 3 * RING_RETRY_PERIOD
"""Scale-out mode: seconds within which every range a crashed or cut-off replica owned is
owned again by another live replica (``docs/scale-out.md``: the lease duration, one retry
period to notice, the claim-then-check; one more retry period for the jitter). The clock
stops while a fault of the API server is active or no other replica runs."""
RING_REPLICAS = 2
"""Scale-out mode: the replicas that start; ``scale-up`` adds one, up to :data:`MAX_RING_REPLICAS`."""
MAX_RING_REPLICAS = 4
DIRECT_TRANSPORT = True
"""Whether the replicas and the driver reach the embedded server through its direct transport
(requests handed to its handler, no HTTP encoding: most of a seed's cost otherwise) rather
than HTTP/1.1 over memory streams. Replays are exact either way, but a seed's run differs
between the two."""


@attrs.frozen
class SimulationResult:
    """How one seed went."""

    seed: int
    violation: str | None
    """The first guarantee broken, or ``None``."""
    replay: str
    """The command that replays this seed."""
    trace: tuple[TraceEntry, ...]
    digest: str
    """SHA-256 of the trace: the same seed gives the same digest."""
    faults: tuple[str, ...]
    """The fault schedule, described."""
    steps: int
    """Workload steps applied."""
    runs: int
    """Runs finished, over every replica."""
    virtual_seconds: float
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.violation is None

    def report(self, last: int = 40) -> str:
        """The seed, the violation, the replay command and the last ``last`` trace entries."""
        head = f"seed {self.seed}: " + ("ok" if self.violation is None else f"VIOLATION: {self.violation}")
        lines = [head, f"replay: {self.replay}", "faults: " + (", ".join(self.faults) or "none")]
        if self.violation is not None:
            lines.append(f"last {min(last, len(self.trace))} of {len(self.trace)} trace entries (virtual seconds):")
            lines.extend(f"  {e}" for e in self.trace[-last:])
        return "\n".join(lines)


def _replay_command(
    plugin: str | None, simulation: str | None, seed: int, kinds: frozenset[FaultKind], duration: float, bound: float,
    rbac: bool = True, scale_out: bool = False, webhooks: bool = True,
) -> str:
    parts = ["python -m engine simulate"]
    if plugin is not None:
        parts.append(f"--plugin {plugin}")
    if simulation is not None:
        parts.append(f"--simulation {simulation}")
    parts.append(f"--seed {seed}")
    if kinds != frozenset(FaultKind):
        parts.append("--faults " + (",".join(sorted(k.value for k in kinds)) or "none"))
    if duration != DEFAULT_DURATION:
        parts.append(f"--duration {duration:g}")
    if bound != DEFAULT_BOUND:
        parts.append(f"--bound {bound:g}")
    if not rbac:
        parts.append("--no-rbac")
    if scale_out:
        parts.append("--scale-out")
    if not webhooks:
        parts.append("--no-webhooks")
    return " ".join(parts)


class _Notifier:
    """A notification endpoint as an event sink; after a ``sink-outage`` it hangs for good."""

    name = "notifications"

    def __init__(self) -> None:
        self.down = False

    async def deliver(self, event: Event) -> None:
        """Deliver, or hang while the endpoint is down. Cancellation: abandons the delivery."""
        if self.down:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()


_State = tuple[Any, Any]
"""What a controller's predicates look at: (generation, deletionTimestamp)."""


def _state(obj: Mapping[str, Any]) -> _State:
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), meta.get("deletionTimestamp"))


@attrs.define(eq=False)
class _Owed:
    """A watched change that a replica's controller must hear of from its own watch handler."""

    at: float
    """When the change was committed (or the history rewind that made it)."""
    since: float
    """When the bound started: ``at``, or when the replica had listed again after it."""
    change: str
    base: _State | None
    """The object's state before the change, as the handler last heard of it."""
    rv: int = 0
    """The resourceVersion of the change (a history rewind: of the object as restored, or of
    the storage); a handler that saw an object at least this recent heard of it."""
    key: int | None = None
    """The object's key-space position (scale-out mode: a replica owes only while its ring
    has an interest in it; its sharded informers hold nothing else)."""


def _objects(store: ObjectStorage) -> dict[tuple[str, str], dict[Any, Any]]:
    return {key: dict(store.objects_of(key)) for key in store.storage_keys()}


def _informed(rep: _Replica) -> set[tuple[str, str, str]]:
    """``(path, label selector, field selector)`` of the collections the informers of
    ``rep`` list and watch."""
    cluster = rep.harness.cluster if rep.harness is not None else None
    if cluster is None:
        return set()
    return {(i.resource.path(namespace=i.namespace), join_selectors(i.watcher.label_selector) or "",
             join_selectors(i.watcher.field_selector) or "") for i in cluster.informers}


def _leads(rep: _Replica) -> bool:
    h = rep.harness
    return h is not None and (h.manager.leader_election is None or h.manager.leader_election.is_leader)


@attrs.define(eq=False)
class _Replica(RunObserver):
    """One life of one replica slot, and what the checks remember about it."""

    sim: _Simulator
    slot: int
    identity: str
    harness: PluginHarness | None = None
    stop_at: float | None = None
    """When the simulator asked it to stop gracefully."""
    done: trio.Event = attrs.field(factory=trio.Event)
    wait_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    running: dict[tuple[str, ObjectRef], Run] = attrs.field(factory=dict)
    last_trigger: dict[tuple[str, ObjectRef], tuple[int, Trigger]] = attrs.field(factory=dict)
    last_start: dict[tuple[str, ObjectRef], int] = attrs.field(factory=dict)
    started_under: dict[tuple[str, ObjectRef], int] = attrs.field(factory=dict)
    """Scale-out mode: the key (its uid's hash, as the gate knew it) each run started under."""
    waiting: dict[tuple[str, ObjectRef], tuple[ObjectRef, ...]] = attrs.field(factory=dict)
    pending: dict[tuple[str, ObjectRef], tuple[float, ObjectRef]] = attrs.field(factory=dict)
    failure_status: set[str] = attrs.field(factory=set)
    failed_before_cancel: set[str] = attrs.field(factory=set)
    quiet_runs: set[str] = attrs.field(factory=set)
    events_seen: int = 0
    lost_at: float | None = None
    """When the engine reported its lease lost (its ``on_lost`` callback)."""
    emitted: list[tuple[float, Event]] = attrs.field(factory=list)
    """Every event as emitted (the recorder's tap), independent of the sinks."""
    cancelled_at: dict[str, float] = attrs.field(factory=dict)
    """Run id -> when a trigger superseded it."""
    ended: dict[tuple[str, ObjectRef], Run] = attrs.field(factory=dict)
    """The last run of each key that ended."""
    watches: dict[tuple[str, str, str], ServedRequest] = attrs.field(factory=dict)
    """The collections it watched, by ``(path, label selector, field selector)``."""
    ring: HashRing | None = None
    """Scale-out mode: its ring membership."""
    webhook_server: WebhookServer | None = None
    """The server of the plugin's webhooks in this replica (an endpoint of their Service while
    the replica is alive)."""
    started_at: float = math.inf
    """When it started (joined the ring, in scale-out mode), or reached the API server again
    after a partition: either way it reads every member Lease afresh then, and honours each
    that changed since it last looked for a whole lease duration from that moment."""
    may_run: list[tuple[float, KeyRanges, int]] = attrs.field(factory=list)
    """Scale-out mode: what its gate owns or is still handing over, after each change the ring
    announced (``on_change``), with when and the simulation's :attr:`serial` then (runs that
    started at that very instant before the change have a serial no greater)."""

    def ring_changed(self) -> None:
        ring = self.ring
        if ring is None:
            return
        stats = ring.statistics()
        ranges = stats.owned | stats.releasing
        if not self.may_run or self.may_run[-1][1] != ranges:
            self.may_run.append((trio.current_time(), ranges, self.sim.serial))
        self.sim.check_exclusive(self)
        self.sim.covered(self)

    def may_run_at(self, at: float) -> KeyRanges:
        ranges = KeyRanges.nothing()
        for when, held, _ in self.may_run:
            if when > at:
                break
            ranges = held
        return ranges

    def given_up_at(self, key: int, at: float) -> int | None:
        """If the range of ``key`` was held just before the instant ``at`` and given up at
        that very instant, the :attr:`serial` of the change that gave it up, else ``None``."""
        before = KeyRanges.nothing()
        for when, held, serial in self.may_run:
            if when < at:
                before = held
            elif when == at and key in before and key not in held:
                return serial
            elif when > at:
                break
        return None

    def tap(self, event: Event) -> None:
        self.emitted.append((trio.current_time(), event))
        if self.lost_at is not None and trio.current_time() > self.lost_at:
            self.sim.fail(f"{self.identity} emitted {event.type.value} {event.reason} about {event.involved} "
                          f"{trio.current_time() - self.lost_at:.3f}s after it lost its lease (no fencing)")

    def lose(self, reason: str) -> None:
        self.lost_at = trio.current_time()
        self.sim.trace.add(self.identity, "lease", f"lost: {reason}")
        self.sim.forget_obligations(self.identity)

    @property
    def alive(self) -> bool:
        h = self.harness
        return h is not None and h.running and not h.manager.stopping

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        sim = self.sim
        sim.serial += 1
        self.last_trigger[(controller.name, trigger.ref)] = (sim.serial, trigger)
        text = f"{controller.name} {trigger.ref} #{trigger.sequence} {trigger.reason or ''}".rstrip()
        if superseded is not None:
            text += f"; supersedes {superseded.id}"
            self.cancelled_at.setdefault(superseded.id, trio.current_time())
        sim.trace.add(self.identity, "trigger", text)
        kind, _, change = (trigger.reason or "").partition(" ")
        if kind == trigger.ref.kind and change in ("added", "modified", "deleted"):
            sim.learn_direct(self, controller.name, trigger.ref)
            sim.discharge(self.identity, controller.name, trigger.ref, change, trigger.revision)

    def on_run_started(self, controller: Controller, run: Run) -> None:
        sim = self.sim
        sim.serial += 1
        key = (controller.name, run.key)
        self.last_start[key] = sim.serial
        self.waiting.pop(key, None)
        self.pending.pop(key, None)
        self.running[key] = run
        if self.ring is not None and (known := self.ring.gate.key_of(run.key)) is not None:
            self.started_under[key] = known
        sim.run_keys.add((run.key.kind, run.key.group, run.key.namespace or None, run.key.name))
        sim.place(self.identity, run)
        sim.trace.add(self.identity, "start", f"{run.id} {run.key} trigger #{run.trigger.sequence} attempt {run.attempt}")
        other = sim.in_progress.get(key)
        if other is not None and other[0] != self.identity and not sim.check_overlap:
            sim.trace.add(self.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does "
                          "(the overlap check is off)")
        elif other is not None:
            since = sim.restored_lease_window()
            if other[0] == self.identity:
                sim.fail(f"two runs of {run.key} at once on one replica: {self.identity} {other[1]} and {run.id} "
                         "(the queue handed out a key that was still processing)")
            elif since is None and not sim.recreated(other, (self.identity, run.id)):
                sim.fail(f"two runs of {run.key} at once across replicas: {other[0]} {other[1]} and {self.identity} "
                         f"{run.id} (no fencing)")
            elif since is None:
                sim.trace.add(self.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does: "
                              "they know the name by different uids (an object re-created under its name: a known limit "
                              "of scale-out)")
            else:
                sim.trace.add(self.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does, "
                              f"{since:.3f}s after a history rewind brought back an older Lease (allowed for renew_deadline)")
        sim.in_progress[key] = (self.identity, run.id)

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        sim = self.sim
        key = (controller.name, run.key)
        self.running.pop(key, None)
        self.ended[key] = run
        self._check_shielded(run)
        if sim.in_progress.get(key) == (self.identity, run.id):
            del sim.in_progress[key]
        sim.placed.pop((self.identity, run.id), None)
        cause = f" cause {run.cause.value}" if run.cause is not None else ""
        error = f": {type(outcome.error).__name__}" if outcome.error is not None else ""
        sim.trace.add(self.identity, "end", f"{run.id} {run.key} {outcome.kind.value}{cause}{error}")
        if outcome.kind in _QUIET:
            self.quiet_runs.add(run.id)
        if run.cause in _NOT_FAILURES and outcome.is_failure:
            sim.fail(f"run {self.identity} {run.id} of {run.key} was cancelled ({run.cause.value}) but counted as "
                     f"{outcome.kind.value}: an error metric for a run that did not fail")
        if outcome.kind in _QUIET and run.id in self.failure_status and run.id not in self.failed_before_cancel:
            sim.fail(f"run {self.identity} {run.id} of {run.key} wrote a failure status and ended "
                     f"{outcome.kind.value}: a run the engine cancelled must not report failure")
        if outcome.kind is OutcomeKind.SHUTDOWN and self.stop_at is not None and run.finished_at is not None:
            ran = run.finished_at - self.stop_at
            if ran < sim.grace_period - 1e-6:
                sim.fail(f"run {self.identity} {run.id} of {run.key} was cancelled {ran:.3f}s after the graceful stop, "
                         f"before the grace period of {sim.grace_period:g}s ended (no drain)")
        if outcome.kind is OutcomeKind.DEPENDENCY_NOT_READY:
            self.waiting[key] = outcome.dependencies

    def _check_shielded(self, run: Run) -> None:
        """A run cancelled inside a ``shield`` gets its final write to the server, or reports
        (its shield timed out) that it did not."""
        if not run.shields_at_cancel or run.cause is None or run.forced or run.finished_at is None:
            return
        sim = self.sim
        if any(scope.cancelled_caught for scope in run.shields_at_cancel):
            sim.trace.add(self.identity, "shield", f"{run.id} {run.key}: its shielded write did not finish in time "
                          "(the run reports it)")
            return
        since = self.cancelled_at.get(run.id, self.stop_at if run.cause is CancelCause.SHUTDOWN else self.lost_at)
        if since is None:
            return
        if not any(since <= r.answered_at <= run.finished_at for r in sim.log.writes(actor=self.identity, since=since)
                   if r.served.kind not in _ROUTINE):
            sim.fail(f"run {self.identity} {run.id} of {run.key} was cancelled ({run.cause.value}) inside a shielded "
                     f"write at {since - sim.trace.origin:.3f}s, but no write of it reached the server before it "
                     f"ended at {run.finished_at - sim.trace.origin:.3f}s, and it did not report a cut write")

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        sim = self.sim
        sim.trace.add(self.identity, "ready", str(ref))
        now = trio.current_time()
        for key, dependencies in self.waiting.items():
            if ref in dependencies and key not in self.pending:
                self.pending[key] = (now, ref)

    def object_run(self, kind: str, namespace: str | None, name: str | None) -> Run | None:
        for (_, ref), run in self.running.items():
            if ref.kind == kind and ref.name == name and (ref.namespace or None) == (namespace or None):
                return run
        return None


@attrs.define(eq=False)
class _Unowned:
    """Ranges a crashed or cut-off replica owned, not yet seen owned by another live replica."""

    since: float
    """When the clock of :data:`OWNED_AGAIN_BOUND` (re)started."""
    at: float
    """When the replica crashed or was cut off."""
    victim: str
    what: str
    remaining: KeyRanges


@attrs.define(eq=False)
class _Simulator:
    simulation: Simulation
    seed: int
    kinds: frozenset[FaultKind]
    duration: float
    bound: float
    rbac: bool = True
    """Whether the replicas run as the plugin's ServiceAccount under its generated Role."""
    scale_out: bool = False
    """Whether the replicas run as members of a scale-out ring instead of with leader election."""
    webhooks: bool = True
    """Whether the plugin's webhooks are registered, served by the live replicas."""
    webhook_service: WebhookService | None = None
    webhook_calls: list[WebhookCall] = attrs.field(factory=list)
    """The webhook calls of the last ``_RESYNC`` seconds."""
    admission: AdmissionCheck | None = None
    """The admission check, while the plugin's validating webhooks are registered and the
    simulation has oracles for them."""
    check_overlap: ClassVar[bool] = True
    """Whether two runs of one key on two replicas are a violation; tests turn it off to show
    that the outside-view checks catch a bug alone."""
    retired: set[int] = attrs.field(factory=set)
    """Scale-out mode: the slots a ``scale-down`` stopped for good."""
    cut_off: dict[str, Fault] = attrs.field(factory=dict)
    """Scale-out mode: the replicas partitioned from the API server now, with their fault."""
    unowned: list[_Unowned] = attrs.field(factory=list)
    crashed: set[str] = attrs.field(factory=set)
    """Scale-out mode: the replicas a ``crash`` ended (their tasks may still be unwinding)."""
    disturbed_at: float = -math.inf
    """When the API server's last fault (other than a partition) was applied, plus how long
    one request of it may be held up (latency, a throttle's Retry-After, a restart's downtime);
    or when a replica last joined, left, crashed or was cut off."""
    run_keys: set[tuple[str, str, str | None, str]] = attrs.field(factory=set)
    """``(kind, group, namespace, name)`` of every key any replica ran."""
    uids: dict[tuple[str, str, str | None, str], str] = attrs.field(factory=dict)
    """The last uid the store had for each object, deleted ones too."""
    grace_period: float = GRACE_PERIOD
    trace: Trace = attrs.field(factory=Trace)
    violation: str | None = None
    serial: int = 0
    in_progress: dict[tuple[str, ObjectRef], tuple[str, str]] = attrs.field(factory=dict)
    placed: dict[tuple[str, str], int] = attrs.field(factory=dict)
    """Where each running run's key was in the key space when it started (ring replicas), by
    replica and run: an object re-created under its name moves its key to the new uid's place
    while the run for the old one may still be ending."""
    replicas: list[_Replica] = attrs.field(factory=list)
    current: dict[int, _Replica] = attrs.field(factory=dict)
    generations: dict[int, int] = attrs.field(factory=dict)
    restarting: set[int] = attrs.field(factory=set)
    restart_scopes: dict[int, trio.CancelScope] = attrs.field(factory=dict)
    notifier: _Notifier = attrs.field(factory=_Notifier)
    steps: list[Step] = attrs.field(factory=list)
    plan: list[ScheduledFault] = attrs.field(factory=list)
    applied: int = 0
    settling: bool = False
    snapshots: dict[int, StorageSnapshot] = attrs.field(factory=dict)
    """The snapshots taken for the plan's history rewinds, by the fault's index in the plan."""
    watched: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """``(replica identity, path, label selector, field selector)`` of every collection a
    replica has watched."""
    listed: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """The same of every collection a replica has listed (its informers' lists among others)."""
    resyncing: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """After a history rewind: the watched collections not listed again yet."""
    unsynced: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    """The watched collections a replica did not list again in time after a history rewind:
    its cache may hold what the rewind undid, so what its handlers hear of is not what the
    server's changes say until it lists them again; they owe nothing until then."""
    writable: trio.Event = attrs.field(factory=trio.Event)
    """Set while writes are accepted (cleared from a history rewind until the replicas resynced)."""
    rewinds_pending: int = 0
    rewound_at: float | None = None
    log: RequestLog = attrs.field(init=False)
    """The embedded server's request log: the outside view the checks read."""
    direct: dict[str, set[tuple[str, str, str]]] = attrs.field(factory=dict)
    """Controller -> the watches (path, label selector, field selector) its direct handler may
    be on: those that held every object it was seen triggered for by a watch of its own kind."""
    obligations: dict[tuple[str, str, ObjectRef], _Owed] = attrs.field(factory=dict)
    """``(replica, controller, key)`` -> a watched change that must lead to a trigger of the
    key from the controller's own watch handler."""
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _nursery: trio.Nursery | None = None
    _target: KubeTarget | None = None
    _driver: Client | None = None
    _state: ClusterState | None = None

    def __attrs_post_init__(self) -> None:
        self.writable.set()
        master = random.Random(self.seed)
        workload_rng = random.Random(master.getrandbits(64))
        fault_rng = random.Random(master.getrandbits(64))
        self.steps = self.simulation.steps(workload_rng, self.duration)
        kinds = self.kinds - {FaultKind.LEASE_LOSS} if self.scale_out else self.kinds - RING_FAULTS
        self.plan = plan_faults(fault_rng, kinds, self.duration)

    @property
    def leader_election(self) -> bool:
        return not self.scale_out and any(f.kind is FaultKind.LEASE_LOSS for f in self.plan)

    # ----- verdicts -----

    def fail(self, message: str) -> None:
        """Record the first violation and end the simulation. Not a checkpoint."""
        if self.violation is None:
            self.violation = message
            self.trace.add("sim", "VIOLATE", message)
            self.trace.closed = True
            self._scope.cancel(reason="invariant violated")

    def check(self) -> None:
        """The checks that hold at every step."""
        assert self._state is not None
        for invariant in self.simulation.invariants:
            problem = invariant(self._state)
            if problem is not None:
                self.fail(f"plugin invariant {getattr(invariant, '__name__', 'invariant')}: {problem}")
        now = trio.current_time()
        self.check_notifications()
        self.check_sinks()
        self.check_owned_again()
        for rep in self.replicas:
            self._check_events(rep)
            if not rep.alive:
                continue
            for key, (since, ref) in rep.pending.items():
                if rep.ring is not None and not rep.ring.gate.owns(key[1]):
                    continue  # parked here: its owner runs it
                if now - since > self.simulation.prompt:
                    self.fail(f"{key[1]} did not run within {self.simulation.prompt:g}s of its dependency {ref} "
                              f"becoming Ready on {rep.identity} (waited {now - since:.1f}s)")

    def check_exclusive(self, rep: _Replica) -> None:
        """Scale-out mode, at every change a ring announced: no two replicas (crashed ones
        aside: their tasks are gone) own or hand over one key at once, by their gates' word.
        Runs of a key are instants apart in virtual time, so two replicas running one key's
        reconciles at the same moment is rare even when their ranges overlap; this catches the
        overlap itself (after a history rewind it is allowed, as two runs are, for
        ``renew_deadline``)."""
        if rep.ring is None or rep.identity in self.crashed or not rep.may_run:
            return
        mine = rep.may_run[-1][1]
        for other in self.current.values():
            if other is rep or other.ring is None or other.identity in self.crashed or not other.may_run:
                continue
            if other.harness is None or not other.harness.running:
                continue
            both = mine & other.may_run[-1][1]
            if both and self.restored_lease_window() is None:
                self.fail(f"{rep.identity} and {other.identity} both own (or hand over) {100 * both.share:.2g}% of the "
                          "key space at once (no fencing)")
                return

    def place(self, identity: str, run: Run) -> None:
        """Remember where ``run`` (starting on ``identity``) found its key in the key space."""
        rep = self._replica_named(identity)
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

    def _ring_members(self) -> list[_Replica]:
        """The live ring replicas that can reach the API server."""
        return [r for r in self.current.values() if r.alive and r.ring is not None and r.identity not in self.cut_off
                and r.identity not in self.crashed]

    def covered(self, rep: _Replica) -> None:
        """``rep``'s ring changed: what it owns now is owned again (by another replica, or by
        a cut-off one once reconnected: it rejoined, or it never lost its Lease)."""
        if rep.ring is None or not rep.alive or rep.identity in self.cut_off or rep.identity in self.crashed:
            return
        owned = rep.ring.gate.owned
        for item in list(self.unowned):
            item.remaining = item.remaining - owned
            if not item.remaining:
                self.unowned.remove(item)
                self.trace.add("sim", "owned", f"what {item.victim} owned when it {item.what} is owned again, "
                               f"{trio.current_time() - item.at:.3f}s later")

    def check_owned_again(self) -> None:
        """Scale-out mode: every range a crashed or cut-off replica owned is owned again by
        a live replica that can reach the API server within :data:`OWNED_AGAIN_BOUND`; the
        clock starts again while no such replica runs, when a replica joins, leaves, crashes,
        is cut off or reconnects (the assignment moves again), and while a fault of the API server is
        active or may still hold a request up (members' renewals and reads fail or wait then)."""
        if not self.unowned or self._target is None:
            return
        now = trio.current_time()
        partitions = set(map(id, self.cut_off.values()))
        disturbed = any(id(f) not in partitions for f in self._target.faults.active) or self.rewinds_pending
        for rep in self._ring_members():
            self.covered(rep)
        for item in self.unowned:
            others = self._ring_members()
            if disturbed or not others:
                item.since = now
            # A member that joined (or reconnected) first observes the victim's Lease then: it
            # honours it for a whole lease duration from that moment (no clock comparison across
            # members).
            item.since = max(item.since, self.disturbed_at, *(r.started_at for r in others))
            if now - item.since > OWNED_AGAIN_BOUND:
                self.fail(f"{100 * item.remaining.share:.1f}% of the key space that {item.victim} owned when it "
                          f"{item.what} at {item.at - self.trace.origin:.3f}s was owned by no live replica "
                          f"{now - item.since:.3f}s later (bound {OWNED_AGAIN_BOUND:g}s)")
                return

    def learn_direct(self, rep: _Replica, controller: str, ref: ObjectRef) -> None:
        obj = self.log.stored(ref.kind, ref.group, ref.namespace, ref.name)
        if obj is None:
            return
        holding = {key for key, w in rep.watches.items()
                   if w.kind == ref.kind and w.group == ref.group and self.log.matches_watch(w, obj)}
        if not holding:
            return  # listed before its watch started (a replica starting): nothing to learn
        known = self.direct.get(controller)
        self.direct[controller] = holding if known is None else known & holding

    def discharge(self, identity: str, controller: str, ref: ObjectRef, change: str, revision: str | None) -> None:
        """A trigger of ``ref`` from ``controller``'s own watch handler (``change`` is the
        informer's ``added``, ``modified`` or ``deleted``; ``revision`` the resourceVersion of
        the object it saw) pays what it owes for ``ref`` once the handler caught up with it
        (``revision`` at least the owed change's; an older event, delivered late, pays
        nothing; a deletion found by a relist carries the cached object's older revision). But
        ``added`` of a revision past a deletion that is still owed means the informer dropped
        the object without a word (a modification would be the two seen together)."""
        key = (identity, controller, ref)
        owed = self.obligations.get(key)
        if owed is None:
            return
        try:
            seen = int(revision) if revision is not None else None
        except ValueError:
            seen = None
        deletion = owed.change.startswith("deletion")
        if change == "added" and owed.change.partition(" (")[0] == "deletion" and (seen is None or seen > owed.rv):
            del self.obligations[key]
            self.fail(f"{identity} {controller}: {ref} was added again, but the {owed.change} of it at "
                      f"{owed.at - self.trace.origin:.3f}s never reached its watch handler (a lost notification)")
        elif seen is None or seen >= owed.rv or (change == "deleted" and deletion):
            del self.obligations[key]

    def _cannot_read(self, identity: str, served: ServedRequest) -> None:
        """``identity`` was refused a list or watch of a kind: what it owes for that kind
        starts its bound again (a replica the server does not answer cannot hear of changes)."""
        now = trio.current_time()
        for (who, _, ref), owed in self.obligations.items():
            if who == identity and ref.kind == served.kind and ref.group == served.group:
                owed.since = now

    def forget_obligations(self, identity: str) -> None:
        """``identity`` stopped leading, or did not list again after a history rewind: what its
        informers owe is void."""
        for key in [k for k in self.obligations if k[0] == identity]:
            del self.obligations[key]

    def check_notifications(self) -> None:
        """Every watched change owed a trigger got it within :data:`WATCH_BOUND`, on each
        replica that is still alive."""
        now = trio.current_time()
        leading = {r.identity for r in self.current.values() if r.alive and _leads(r)}
        listing = {w[0] for w in self.resyncing}
        interest = {r.identity: r.ring.interest for r in self.current.values() if r.ring is not None}
        for key, owed in list(self.obligations.items()):
            identity, controller, ref = key
            if identity not in leading or (identity in interest and owed.key not in interest[identity]):
                del self.obligations[key]
            elif identity in listing:
                owed.since = now
            elif now - owed.since > WATCH_BOUND:
                self.fail(f"{identity} {controller}: {owed.change} of {ref} at {owed.at - self.trace.origin:.3f}s "
                          f"passed the predicates of its watch handler but led to no trigger of {ref} from that "
                          f"handler within {WATCH_BOUND:g}s (a lost notification)")

    def check_sinks(self) -> None:
        """Each live replica's own memory sink received, within :data:`SINK_BOUND`, every
        event emitted (as the recorder's tap saw it) that the recorder did not drop, whatever
        another sink does."""
        now = trio.current_time()
        for rep in self.replicas:
            h = rep.harness
            if h is None or not rep.alive:
                continue
            due = sum(1 for at, _ in rep.emitted if now - at > SINK_BOUND)
            drops = h.manager.events.drops()
            dropped = sum(n for (sink, _), n in drops.items() if sink in ("*", "memory"))
            if len(h.events) + dropped < due:
                down = " while the notification endpoint is down" if self.notifier.down else ""
                self.fail(f"{rep.identity}: its memory sink received {len(h.events)} of {due} events emitted more than "
                          f"{SINK_BOUND:g}s ago{down} (a stuck sink holds up the others)")

    def check_triggers_ran(self) -> None:
        """At a moment when every task waits: a trigger that is not followed by a run of its
        key, while the key is not running and its controller has a free worker, is lost."""
        for rep in self.replicas:
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
                self.fail(f"{rep.identity} {name}: trigger #{trig.sequence} ({trig.reason}) of {ref} at "
                          f"{trig.observed_at - self.trace.origin:.3f}s never led to a run, and {min(controller.max_concurrent, controller.live_workers) - busy} "
                          "worker(s) are free (lost wake-up)")

    def check_quiescent(self) -> None:
        """Checks for a moment when every task waits: no ready key beside an idle worker."""
        self.check_triggers_ran()
        for rep in self.replicas:
            if not rep.alive:
                continue
            assert rep.harness is not None
            for controller in rep.harness.manager.controllers:
                stats = controller.queue.statistics()
                if stats.depth and not stats.shut_down and controller.live_workers > controller.active_workers:
                    self.fail(f"{rep.identity} {controller.name}: {stats.depth} key(s) queued while "
                              f"{controller.live_workers - controller.active_workers} worker(s) idle (lost wake-up)")

    def _check_events(self, rep: _Replica) -> None:
        for _, event in rep.emitted[rep.events_seen:]:
            if event.type is EventType.WARNING and event.run_id in rep.quiet_runs:
                self.fail(f"{rep.identity} emitted Warning {event.reason} about {event.involved} from run "
                          f"{event.run_id}, which the engine cancelled (a failure event for a run that did not fail)")
        rep.events_seen = len(rep.emitted)

    def check_wakeups(self) -> None:
        """Every trigger a live replica accepted was followed by a run of its key."""
        for rep in self.replicas:
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
                self.fail(f"{rep.identity} {name}: trigger #{trig.sequence} ({trig.reason}) of {ref} at "
                          f"{trig.observed_at - self.trace.origin:.3f}s was never followed by a run (lost wake-up)")

    # ----- the API -----

    def on_request(self, served: ServedRequest) -> None:
        actor = served.user_agent.split("/", 1)[0] or "?"
        if served.verb == "watch" and served.status == 200 and actor.startswith(REPLICA):
            self.watched.add((actor, served.path, *served.selectors))
            watcher = next((r for r in self.replicas if r.identity == actor), None)
            if watcher is not None:
                watcher.watches[(served.path, *served.selectors)] = served
        if served.verb == "list" and served.status < 300:
            if actor.startswith(REPLICA):
                self.listed.add((actor, served.path, *served.selectors))
            self.resyncing.discard((actor, served.path, *served.selectors))
            self.unsynced.discard((actor, served.path, *served.selectors))
        if served.verb in ("list", "watch") and served.status >= 300 and self.obligations:
            self._cannot_read(actor, served)
        if served.status == 403 and actor.startswith(REPLICA) and not self._denied_by_webhook(served):
            self._forbidden(actor, served)
        if served.verb in ("get", "list", "watch"):
            return
        name = served.name if served.kind != "Event" else None  # Event names carry a wall-clock suffix
        where = f"{served.namespace}/{name or ''}" if served.namespace else str(name or "")
        sub = f"/{served.subresource}" if served.subresource else ""
        failure = False
        if served.subresource == "status" and served.verb in ("patch", "update") and actor.startswith(REPLICA):
            try:
                body = json.loads(served.body or b"null")
            except ValueError:
                body = None
            status = body.get("status") if isinstance(body, Mapping) else None
            failure = isinstance(status, Mapping) and self.simulation.failure_status(status)
            rep = next((r for r in self.replicas if r.identity == actor), None)
            run = rep.object_run(served.kind, served.namespace, served.name) if rep is not None else None
            if failure and run is not None and rep is not None:
                if run.cause is None or run.shields & run.shields_at_cancel:
                    # Written from a shield the run entered before the engine cancelled it: it
                    # failed, and began reporting so, before the cancellation.
                    rep.failed_before_cancel.add(run.id)
                if served.status < 300:
                    rep.failure_status.add(run.id)
        record = self.log.records[-1] if self.log.records and self.log.records[-1].served is served else None
        if record is not None and record.ok:
            if actor.startswith(REPLICA) and served.kind not in _ROUTINE:
                self._check_fenced(record)
                self._check_within_run(record)
                self._check_released(record)
        routine = served.kind in ("Lease", "Event") and served.status < 300
        if not routine:
            self.trace.add("api", "write", f"{actor} {served.verb} {served.kind} {where}{sub} -> {served.status}"
                           + (" (failure status)" if failure else ""))

    def _forbidden(self, actor: str, served: ServedRequest) -> None:
        """A replica was refused a request (no fault answers 403): its plugin's generated Role
        lacks a rule the plugin needs."""
        assert self._target is not None and self._target.api is not None
        plural = next((rt.plural for rt in self._target.api.store.types()
                       if rt.kind == served.kind and rt.group == served.group), served.kind.lower())
        resource = f"{plural}.{served.group}" if served.group else plural
        sub = f"/{served.subresource}" if served.subresource else ""
        where = f' in namespace "{served.namespace}"' if served.namespace else ""
        name = f" {served.name}" if served.name else ""
        self.fail(f"{actor} was refused {served.verb} {resource}{sub}{name}{where} (403 Forbidden): the Role "
                  f"`python -m engine manifests` generates for {self.simulation.plugin.name} does not grant it")

    def _replica_named(self, identity: str) -> _Replica | None:
        return next((r for r in self.replicas if r.identity == identity), None)

    def _describe(self, record: RequestRecord) -> str:
        served = record.served
        where = f"{served.namespace}/{served.name or ''}" if served.namespace else str(served.name or "")
        return f"{served.verb} {served.kind} {where}" + (f"/{served.subresource}" if served.subresource else "")

    def _check_fenced(self, record: RequestRecord) -> None:
        """No write by a replica after it lost its lease: by its own report (``on_lost``), or
        as the server saw the Lease (it no longer held it). A write that arrived before the
        loss and landed after it was in flight: traced, and allowed for :data:`LATE_WRITE_BOUND`."""
        rep = self._replica_named(record.actor)
        if rep is None or rep.harness is None or rep.harness.manager.leader_election is None:
            return
        what = self._describe(record)
        if rep.lost_at is not None and record.answered_at > rep.lost_at:
            late = record.answered_at - rep.lost_at
            if record.received_at > rep.lost_at:
                self.fail(f"{rep.identity} wrote ({what}) {record.received_at - rep.lost_at:.3f}s after it lost its "
                          "lease (no fencing)")
            elif late > LATE_WRITE_BOUND:
                self.fail(f"{rep.identity}'s write ({what}) landed {late:.3f}s after it lost its lease, beyond the "
                          f"{LATE_WRITE_BOUND:g}s a write in flight may take")
            else:
                self.trace.add(rep.identity, "late", f"{what} was in flight when the lease was lost; landed {late:.3f}s later")
            return
        if record.lease is None and self.restored_lease_window(record.received_at) is None:
            self.fail(f"{rep.identity} wrote ({what}) at {record.received_at - self.trace.origin:.3f}s without holding "
                      "the Lease, as the server saw it (no fencing)")

    def _check_released(self, record: RequestRecord) -> None:
        """Scale-out mode: a write of a key's object by a ring replica arrives while that
        replica's gate owns the key's range or is still handing it over (as the ring announced
        it), not after the handover returned or a fence revoked it; one that arrived before and
        landed after was in flight: traced, and allowed for :data:`LATE_WRITE_BOUND`."""
        served = record.served
        rep = self._replica_named(record.actor)
        if rep is None or rep.ring is None or record.name is None:
            return
        ident = (served.kind, served.group, served.namespace or None, record.name)
        if ident not in self.run_keys:
            return
        uid = record.uid or self.uids.get(ident)
        if uid is None:
            return
        key = fnv1a64(uid)
        what = self._describe(record)
        ref = ObjectRef(served.kind, record.name, served.namespace or None, served.group)
        # The keys the replica knows the name by: now, and when each run of it in progress
        # started (the gate may have learnt a new uid since, while the run writes on).
        known = {rep.ring.gate.key_of(ref)} | {rep.started_under.get(k) for k in rep.running if k[1] == ref}
        received = rep.may_run_at(record.received_at)
        own = next((k for k in sorted(k for k in known if k is not None) if k != key and k in received), None)
        if own is not None:
            # docs/scale-out.md, known limits: the replica knows the name by an older uid (an
            # object deleted and re-created under its name); a run of the old object writes
            # the new one by name.
            self.trace.add(rep.identity, "recreated", f"{what}: written under the key of an older uid of that name, "
                           "which it owned (an object re-created under its name: a known limit)")
            key = own
        given_up = rep.given_up_at(key, record.received_at)
        # Given up at the very instant the write arrived, with no run of the key started there
        # since: the write is one of a run that ended then (sent before the run's cancellation
        # took effect), in flight as any other.
        in_flight = given_up is not None and max(
            (n for (_, r), n in rep.last_start.items() if r == ref), default=-1) <= given_up
        if in_flight or key in rep.may_run_at(record.received_at):
            gone = record.received_at if in_flight else next(
                (when for when, held, _ in rep.may_run if when > record.received_at and key not in held), None)
            if gone is not None and record.answered_at > gone:
                late = record.answered_at - gone
                if late > LATE_WRITE_BOUND:
                    self.fail(f"{rep.identity}'s write ({what}) landed {late:.3f}s after it gave up the range of its "
                              f"key, beyond the {LATE_WRITE_BOUND:g}s a write in flight may take")
                else:
                    self.trace.add(rep.identity, "late", f"{what} was in flight when the range of its key was given "
                                   f"up; landed {late:.3f}s later")
            return
        held_before = [when for when, held, _ in rep.may_run if when <= record.received_at and key in held]
        if not held_before:
            self.fail(f"{rep.identity} wrote ({what}) at {record.received_at - self.trace.origin:.3f}s, an object "
                      "whose key it never owned")
            return
        gone = next(when for when, held, _ in rep.may_run if when > held_before[-1] and key not in held)
        self.fail(f"{rep.identity} wrote ({what}) {record.received_at - gone:.3f}s after it gave up (released or "
                  "was fenced from) the range of its key")

    def _check_within_run(self, record: RequestRecord) -> None:
        """A status write of a key's object comes from a run of that key in progress: none
        arrives after the run ended. One that arrived before its run ended and landed after
        it was in flight (a cancelled request cannot be called back): traced, and allowed for
        :data:`LATE_WRITE_BOUND`."""
        served = record.served
        if served.subresource != "status":
            return
        rep = self._replica_named(record.actor)
        if rep is None or rep.object_run(served.kind, served.namespace, served.name) is not None:
            return
        ended = [run for (_, ref), run in rep.ended.items() if ref.kind == served.kind and ref.name == served.name
                 and (ref.namespace or None) == (served.namespace or None) and run.finished_at is not None]
        last = max(ended, key=lambda run: run.finished_at or 0.0, default=None)
        what = self._describe(record)
        if last is not None and last.finished_at is not None and record.received_at <= last.finished_at:
            late = record.answered_at - last.finished_at
            if late <= LATE_WRITE_BOUND:
                self.trace.add(rep.identity, "late", f"{what} was in flight when run {last.id} ended; landed {late:.3f}s later")
                return
            self.fail(f"{rep.identity}'s status write ({what}) landed {late:.3f}s after run {last.id} of its key ended, "
                      f"beyond the {LATE_WRITE_BOUND:g}s a write in flight may take")
            return
        ended_text = f"run {last.id} ended at {(last.finished_at or 0) - self.trace.origin:.3f}s" if last else "no run of it"
        self.fail(f"{rep.identity}'s status write ({what}) arrived at {record.received_at - self.trace.origin:.3f}s "
                  f"with no run of its key in progress ({ended_text}): a write of a run after the run ended")

    def on_change(self, change: Change) -> None:
        """A store listener: a committed change of an object that a leading replica watches,
        and that every predicate passes (created, deleted, a new generation or deletion
        timestamp), is owed a trigger of its key by each controller whose own handler watches
        it (see :meth:`check_notifications`)."""
        obj = change.obj
        meta = obj.get("metadata") or {}
        if meta.get("uid") and isinstance(obj.get("kind"), str) and isinstance(meta.get("name"), str):
            self.uids[(obj["kind"], change.key[0], meta.get("namespace") or None, meta["name"])] = meta["uid"]
        before = _state(change.old) if change.old is not None else None
        after = None if change.type == "DELETED" else _state(obj)
        self._owe(change.key[0], obj, [o for o in (change.old, obj) if o is not None], before, after, "", change.rv)

    def on_restore(self, before: Mapping[tuple[str, str], Mapping[Any, Any]]) -> None:
        """After a history rewind: each object the rewind made vanish, brought back or gave
        another generation or deletion timestamp is owed a trigger as a change (the replicas
        list again and must tell their handlers), counted from when they listed again."""
        if self._target is None or self._target.api is None:
            return
        store = self._target.api.store
        after = _objects(store)
        for owed in self.obligations.values():
            owed.rv = 0  # resourceVersions went back: what the relist shows pays it
        for storage_key in sorted(set(before) | set(after)):
            old_objects, new_objects = before.get(storage_key, {}), after.get(storage_key, {})
            for key in sorted(set(old_objects) | set(new_objects)):
                old, new = old_objects.get(key), new_objects.get(key)
                if old is new:
                    continue
                sample = new if new is not None else old
                assert sample is not None
                rv = (resource_version_number(resource_version_of(new)) or 0) if new is not None else store.resource_version
                self._owe(storage_key[0], sample, [o for o in (old, new) if o is not None],
                          _state(old) if old is not None else None, _state(new) if new is not None else None,
                          " (history rewind)", rv)

    def _owe(self, group: str, obj: Mapping[str, Any], shapes: list[Mapping[str, Any]],
             before: _State | None, after: _State | None, note: str, rv: int) -> None:
        if before == after:
            return
        meta = obj.get("metadata") or {}
        kind, name = obj.get("kind"), meta.get("name")
        if not isinstance(kind, str) or not isinstance(name, str):
            return
        ref = ObjectRef(kind, name, meta.get("namespace") or None, group)
        uid = meta.get("uid")
        position = fnv1a64(uid) if isinstance(uid, str) and uid else None
        owing = [k for k in self.obligations if k[2] == ref]
        for key in owing:
            if self.obligations[key].base == after:
                del self.obligations[key]  # back as the handler last heard it: nothing to tell
        if before is None:
            change = "creation"
        elif after is None:
            change = "deletion"
        elif before[1] != after[1]:
            change = "deletion request"
        else:
            change = f"generation {after[0]}"
        now = trio.current_time()
        for rep in self.current.values():
            if rep.harness is None or not rep.alive or not _leads(rep):
                continue
            if rep.ring is not None and position not in rep.ring.interest:
                continue
            holding = {key for key, w in rep.watches.items() if w.kind == kind and w.group == group
                       and (rep.identity, *key) not in self.unsynced
                       and any(self.log.matches_watch(w, shape) for shape in shapes)}
            for controller in sorted(c for c, watches in self.direct.items() if watches & holding):
                key = (rep.identity, controller, ref)
                if key not in owing:  # else it still owes an earlier change, from an earlier state
                    self.obligations[key] = _Owed(now, now, change + note, before, rv, position)

    # ----- replicas -----

    async def start(self, slot: int) -> None:
        """Start a new life of replica ``slot``. A start that fails on an API error (the
        plugin's setup could not discover its types, say) is retried as a crash-looping pod
        would be: after 1, 2, 4, then every 8 seconds."""
        assert self._nursery is not None
        for attempt in itertools.count():
            self.generations[slot] = self.generations.get(slot, 0) + 1
            rep = _Replica(self, slot, f"{REPLICA}{slot + 1}.{self.generations[slot]}")
            self.replicas.append(rep)
            self.current[slot] = rep
            try:
                await self._nursery.start(self._replica, rep)
                return
            except KubeError as exc:
                rep.done.set()
                delay = float(min(8, 2**attempt))
                self.trace.add(rep.identity, "replica", f"start failed ({summarize(exc)}); again in {delay:g}s")
            await trio.sleep(delay)

    async def _replica(self, rep: _Replica, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert self._target is not None
        sim = self.simulation

        def member(client: Client, gate: OwnershipGate, identity: str) -> HashRing:
            ring = HashRing(
                client, gate, name=f"engine-{sim.plugin.name}", namespace=sim.namespace, plugins=[sim.plugin.name],
                identity=identity, lease_duration=RING_LEASE_DURATION, renew_deadline=RING_RENEW_DEADLINE,
                retry_period=RING_RETRY_PERIOD, handover_grace=RING_HANDOVER_GRACE, rng=random.Random(identity),
            )
            rep.ring = ring
            ring.on_change.append(rep.ring_changed)
            return ring

        async with open_plugin_test(
            sim.plugin, self._target, identity=rep.identity, namespace=sim.namespace, config=sim.config,
            leader_election=self.leader_election, sinks=[self.notifier], observers=[rep],
            grace_period=self.grace_period, start_timeout=math.inf, rbac=self.rbac,
            scale_out=member if self.scale_out else None, webhooks=False,
        ) as harness:
            rep.harness = harness
            if self.webhook_service is not None:
                rep.webhook_server = WebhookServer(sim.plugin.webhooks, cluster=harness.cluster,
                                                   client=harness.replica_client)
            rep.started_at = trio.current_time()
            harness.manager.events.add_tap(rep.tap)
            if harness.manager.leader_election is not None:
                harness.manager.leader_election.on_lost(rep.lose)
            mode = " (leader election)" if self.leader_election else f" (ring member {rep.ring.member})" if rep.ring else ""
            self.trace.add(rep.identity, "replica", "started" + mode)
            task_status.started()
            with rep.wait_scope:
                await harness.wait_stopped()
            if harness.running:
                rep.stop_at = trio.current_time()
                self.trace.add(rep.identity, "replica", "stopping gracefully")
                report = await harness.stop("simulated restart", timeout=math.inf)
                assert report is not None
                self.trace.add(rep.identity, "replica", f"stopped: drained for {report.drain_seconds:.3f}s, "
                               f"{report.cancelled_runs} run(s) cancelled")
            else:
                lost = harness.manager.leadership_lost
                self.trace.add(rep.identity, "replica", f"stopped by itself: {lost or harness.report}")
        rep.done.set()

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
                     for rep in self.replicas if rep.harness is not None]
        deadlines += [rep.ring.renew_deadline for rep in self.replicas if rep.ring is not None]
        return since if since <= max(deadlines, default=0.0) else None

    def stop(self, rep: _Replica) -> None:
        rep.wait_scope.cancel()

    def schedule_restart(self, rep: _Replica, after: float) -> None:
        """Mark ``rep``'s slot as restarting now (so a fault drawn in the same instant sees it) and
        start :meth:`restart_later` for it."""
        assert self._nursery is not None and rep.slot not in self.restarting
        self.restarting.add(rep.slot)
        self._nursery.start_soon(self.restart_later, rep, after)

    async def restart_later(self, rep: _Replica, after: float) -> None:
        """Start ``rep``'s slot again ``after`` seconds once it stopped. Cancelled (see
        :meth:`_faults_over`) when the faults stop while it still runs: a lease loss whose
        fault the end of the faults cleared before the leader lost its lease."""
        scope = self.restart_scopes[rep.slot] = trio.CancelScope()
        try:
            with scope:
                await rep.done.wait()
                await trio.sleep(after)
                if self.current.get(rep.slot) is rep:
                    await self.start(rep.slot)
        finally:
            self.restart_scopes.pop(rep.slot, None)
            self.restarting.discard(rep.slot)

    # ----- the run -----

    async def main(self) -> None:
        self.trace.origin = trio.current_time()
        with self._scope:
            try:
                await self._run()
            except BaseException as raised:
                group = _errors_of(raised)
                escaped = self._sink_failure(group)
                if escaped is not None:
                    self.fail(escaped)
                    return
                exc: BaseException = group
                while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                    exc = exc.exceptions[0]
                detail = "".join(traceback.format_exception_only(exc)).strip()
                where = traceback.extract_tb(exc.__traceback__)[-1:]
                at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
                self.fail(f"the simulation crashed: {detail}{at}")

    def _sink_failure(self, error: BaseException) -> str | None:
        """What to report when ``error`` (the simulation's crash) is an event sink's failure
        that escaped from a delivery made outside the sink's own worker (where the recorder
        would have counted it): the dispatcher, and every sink with it, stopped."""
        if isinstance(error, BaseExceptionGroup):
            return next((m for e in error.exceptions if (m := self._sink_failure(e)) is not None), None)
        sinks = {id(sink): (rep, sink) for rep in self.replicas if rep.harness is not None
                 for sink in rep.harness.manager.events.sinks}
        caller = None
        for frame, _ in traceback.walk_tb(error.__traceback__):
            owner = frame.f_locals.get("self")
            if frame.f_code.co_name == "deliver" and id(owner) in sinks and caller != "_drain_sink":
                rep, sink = sinks[id(owner)]
                return (f"{rep.identity}: event sink {sink.name} failed ({summarize(error)}) in a delivery made by the "
                        "event dispatcher itself, which stopped delivering to every sink (a failing sink holds up "
                        "the others)")
            caller = frame.f_code.co_name
        return None

    async def _run(self) -> None:
        sim = self.simulation
        async with open_embedded_target(
            namespace=sim.namespace, seed=self.seed, wall_clock=lambda: EPOCH + trio.current_time()
        ) as target:
            assert target.api is not None
            target.direct = DIRECT_TRANSPORT
            self._target = target
            self.log = RequestLog(target.api.store)
            target.api.add_request_observer(self.log)
            target.api.add_request_observer(self.on_request)
            target.api.store.add_listener(self.on_change)
            self._state = ClusterState(target.api.store, sim.namespace, requests=self.log)
            async with target.client(user_agent=DRIVER_USER_AGENT) as driver:
                self._driver = driver
                await install_crds(driver, sim.plugin.crds)
                if self.webhooks and sim.plugin.webhooks:
                    await self._register_webhooks(driver)
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    for f in self.plan:
                        self.trace.add("sim", "plan", f"at {f.at:.3f}s: {f.describe()}")
                    for slot in range(RING_REPLICAS if self.scale_out else 2 if self.leader_election else 1):
                        await self.start(slot)
                    nursery.start_soon(self._monitor)
                    await self._drive()
                    await self._faults_over()
                    await self._settle()
                    await self._finish()
                    nursery.cancel_scope.cancel(reason="simulation finished")

    async def _register_webhooks(self, driver: Client) -> None:
        """Register the plugin's webhooks once, served by the live replicas through a
        :class:`~engine.testing._webhook_service.WebhookService`, and, when the simulation
        has oracles for them, start the admission check."""
        assert self._target is not None and self._target.api is not None
        api, plugin = self._target.api, self.simulation.plugin
        service = WebhookService(webhook_configuration_name(plugin), self._webhook_endpoints)
        if not await register_in_process(driver, api, plugin, service):
            return
        self.webhook_service = service
        service.observers.append(self._webhook_called)
        self.trace.add("sim", "webhooks", f"{len(plugin.webhooks)} registered, served by the live replicas")
        policies = {w.path: w.failure_policy for w in plugin.webhooks
                    if isinstance(w, AdmissionWebhook) and not w.mutating}
        if not self.simulation.admission or not policies:
            return
        check = self.admission = AdmissionCheck(api.store, self.simulation.admission, policies, origin=self.trace.origin)
        service.observers.append(check.asked)
        api.add_request_observer(check.served)
        api.add_watch_observer(check.delivered)
        api.store.add_listener(self._admitted)

    def _webhook_called(self, call: WebhookCall) -> None:
        self.webhook_calls.append(call)
        while self.webhook_calls[0].asked_at < call.asked_at - _RESYNC:
            del self.webhook_calls[0]

    def _denied_by_webhook(self, served: ServedRequest) -> bool:
        """Whether an admission webhook denied the write ``served`` (its 403 is then no
        missing permission): the answered Status says so, and a call of a webhook served by a
        replica denied that object while the write was being answered."""
        try:
            message = json.loads(served.reply or b"null").get("message", "")
        except (ValueError, AttributeError):
            return False
        if not (isinstance(message, str) and message.startswith("admission webhook ")
                and " denied the request" in message):
            return False
        return any(
            call.response is not None and not call.allowed and call.asked_at >= served.received_at
            and (call.request.get("kind") or {}).get("kind") == served.kind
            and call.request.get("name") == served.name and call.request.get("namespace") == served.namespace
            for call in self.webhook_calls
        )

    def _webhook_endpoints(self) -> list[tuple[str, WebhookServer]]:
        """The webhook servers of the live replicas that the API server can reach, by slot."""
        return [(rep.identity, rep.webhook_server) for _, rep in sorted(self.current.items())
                if rep.webhook_server is not None and rep.alive and rep.identity not in self.cut_off
                and rep.identity not in self.crashed]

    def _admitted(self, change: Change) -> None:
        assert self.admission is not None
        violation, note = self.admission.committed(change)
        if violation is not None:
            self.fail(violation)
        elif note is not None:
            self.trace.add("sim", "admitted", note)

    async def _monitor(self) -> None:
        while True:
            await trio.sleep(_TICK)
            await trio.testing.wait_all_tasks_blocked()
            self.check_quiescent()
            self.check()

    async def _drive(self) -> None:
        timeline: list[tuple[float, int, Step | ScheduledFault | int]] = [(s.at, 0, s) for s in self.steps]
        timeline += [(f.at, 1, f) for f in self.plan]
        timeline += [(at, 2, i) for i, f in enumerate(self.plan) if (at := f.snapshot_at) is not None]
        timeline.sort(key=lambda item: (item[0], item[1]))
        for at, _, item in timeline:
            await trio.sleep_until(self.trace.origin + at)
            if isinstance(item, Step):
                await self._step(item)
            elif isinstance(item, int):
                self._take_snapshot(item)
            else:
                self._fault(item)
            self.check()
        await trio.sleep_until(self.trace.origin + self.duration)

    def _take_snapshot(self, index: int) -> None:
        assert self._target is not None and self._target.api is not None
        snapshot = self._target.api.snapshot()
        self.snapshots[index] = snapshot
        self.trace.add("sim", "fault", f"snapshot at resourceVersion {snapshot.resource_version} taken, for the "
                       f"{self.plan[index].kind.value} at {self.plan[index].at:.3f}s")

    async def _step(self, step: Step) -> None:
        assert self._driver is not None
        await self.writable.wait()
        client = self._driver
        manifest = dict(step.manifest)
        resource = await client.resource_for(manifest)
        meta = dict(manifest.get("metadata") or {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = self.simulation.namespace
        manifest["metadata"] = meta
        self.trace.add("sim", "step", step.describe())
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
                self.trace.add("sim", "refused", f"{step.describe()}: {summarize(exc)}")
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
        assert self._target is not None and self._nursery is not None
        faults = self._target.faults
        kind = fault.kind
        note = ""
        if kind in RING_FAULTS:
            # Another member crashing, cut off, joining or leaving moves the assignment again.
            self.disturbed_at = max(self.disturbed_at, trio.current_time())
        elif kind is not FaultKind.SINK_OUTAGE:
            self.disturbed_at = trio.current_time() + max(fault.seconds, fault.retry_after, fault.jitter)
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
            self._nursery.start_soon(self._lasting, faults.delay_watch(fault.seconds, client=REPLICA), float(fault.count))
        elif kind is FaultKind.APISERVER_RESTART:
            dropped = faults.drop_watches(client=REPLICA, abrupt=True)
            down = faults.fail(503, count=None, client=REPLICA)
            self._nursery.start_soon(self._lasting, down, fault.seconds, dropped)
            note = f"{dropped} watch(es) cut"
        elif kind is FaultKind.HISTORY_REWIND:
            api = self._target.api
            assert api is not None
            snapshot = self.snapshots.pop(next(i for i, f in enumerate(self.plan) if f is fault))
            lost = api.store.resource_version - snapshot.resource_version
            down = faults.fail(503, count=None, client=REPLICA)
            writes = faults.fail(503, count=None, client=REPLICA, verbs=_WRITES)
            waiting = [rep for rep in self.replicas if not rep.done.is_set()]
            before = _objects(api.store)
            api.restore(snapshot)
            self.log.mark_restore()
            self.rewound_at = trio.current_time()
            live = {r.identity for r in self.current.values() if r.alive}
            self.resyncing |= {w for w in self.watched if w[0] in live}
            # A replica that listed before the rewind holds its resourceVersion even before
            # its first watch is in place (bundles seed 20130).
            informed = {(r.identity, *c) for r in self.current.values() if r.alive for c in _informed(r)}
            self.resyncing |= self.listed & informed
            self.on_restore(before)
            self.rewinds_pending += 1
            if self.writable.is_set():
                self.writable = trio.Event()
            self._nursery.start_soon(self._rewound, down, writes, waiting, fault.seconds)
            note = f"back to resourceVersion {snapshot.resource_version} ({lost} change(s) undone), watches cut"
        elif kind is FaultKind.RUNNER_RESTART:
            rep = self.current[fault.target % len(self.current)]
            if rep.alive and rep.slot not in self.restarting:
                self.stop(rep)
                self.schedule_restart(rep, fault.seconds)
                note = f"{rep.identity}"
            else:
                note = "skipped: that replica is not running"
        elif kind is FaultKind.LEASE_LOSS:
            leader = next((r for r in self.current.values() if r.alive and r.harness is not None
                           and r.harness.manager.leader_election is not None
                           and r.harness.manager.leader_election.is_leader), None)
            if leader is None:
                note = "skipped: no leader"
            else:
                failing = faults.fail(500, count=None, resource="leases", client=f"{leader.identity}/")
                self._nursery.start_soon(self._lasting, failing, fault.seconds)
                if leader.slot in self.restarting:
                    note = f"leader {leader.identity} (its restart is already pending)"
                else:
                    self.schedule_restart(leader, fault.seconds)
                    note = f"leader {leader.identity}"
        elif kind in RING_FAULTS:
            note = self._ring_fault(fault)
        elif kind is FaultKind.SINK_OUTAGE:
            self.notifier.down = True
        elif kind is FaultKind.REORDER:
            self._nursery.start_soon(self._reorder, fault)
        self.trace.add("sim", "fault", fault.describe() + (f": {note}" if note else ""))

    def _ring_fault(self, fault: ScheduledFault) -> str:
        """Scale-out mode: a replica joins, leaves, crashes or is cut off; the note to trace."""
        assert self._target is not None and self._nursery is not None
        kind = fault.kind
        # A scaled-down replica is stopping, not gone yet: it no longer counts (two scale-downs
        # in one instant must still leave a replica).
        alive = [r for _, r in sorted(self.current.items())
                 if r.alive and r.slot not in self.restarting and r.slot not in self.retired]
        if kind is FaultKind.SCALE_UP:
            if len([s for s in self.current if s not in self.retired]) >= MAX_RING_REPLICAS:
                return f"skipped: {MAX_RING_REPLICAS} replicas already"
            slot = max(self.current, default=-1) + 1
            placeholder = self.current[slot] = _Replica(self, slot, f"{REPLICA}{slot + 1}.0")
            placeholder.done.set()
            self.restarting.add(slot)
            self._nursery.start_soon(self._scale_up, slot)
            return f"slot {slot}"
        if not alive:
            return "skipped: no replica is running"
        rep = alive[fault.target % len(alive)]
        if kind is FaultKind.SCALE_DOWN:
            if len(alive) < 2:
                return "skipped: the last replica stays"
            self.retired.add(rep.slot)
            self.stop(rep)
            return rep.identity
        assert rep.ring is not None and rep.harness is not None
        owned = rep.ring.gate.owned
        if kind is FaultKind.CRASH:
            self.crashed.add(rep.identity)
            rep.harness.crash()
            self.schedule_restart(rep, fault.seconds)
            self._nursery.start_soon(self._crashed, rep)
            what = "crashed"
        else:
            if rep.identity in self.cut_off:
                return f"skipped: {rep.identity} is cut off already"
            cut = self._target.faults.fail(503, count=None, client=f"{rep.identity}/")
            self.cut_off[rep.identity] = cut
            self._nursery.start_soon(self._healed, rep, cut, fault.seconds)
            what = "was cut off"
        now = trio.current_time()
        if owned:
            self.unowned.append(_Unowned(now, now, rep.identity, what, owned))
        return f"{rep.identity}, owning {100 * owned.share:.1f}% of the key space"

    async def _scale_up(self, slot: int) -> None:
        try:
            await self.start(slot)
        finally:
            self.restarting.discard(slot)

    async def _crashed(self, rep: _Replica) -> None:
        """A crashed process's runs are gone with it: once its tasks ended, none is in progress."""
        await rep.done.wait()
        for key, (who, _) in list(self.in_progress.items()):
            if who == rep.identity:
                del self.in_progress[key]
        for run in [run for run in self.placed if run[0] == rep.identity]:
            del self.placed[run]

    async def _healed(self, rep: _Replica, cut: Fault, seconds: float) -> None:
        assert self._target is not None
        with trio.move_on_after(seconds):
            while cut in self._target.faults.active:
                await trio.sleep(_TICK / 10)
        self._target.faults.remove(cut)
        self.cut_off.pop(rep.identity, None)
        rep.started_at = trio.current_time()
        self.trace.add("sim", "fault", f"partition of {rep.identity} healed")

    async def _lasting(self, fault: Fault, seconds: float, expire: int = 0) -> None:
        assert self._target is not None
        await trio.sleep(seconds)
        faults = self._target.faults
        faults.remove(fault)
        if expire:
            faults.expire_next_watch(count=expire, client=REPLICA)
        self.trace.add("sim", "fault", f"{fault.kind} ended" + (f"; the next {expire} watch(es) get 410" if expire else ""))

    async def _reorder(self, fault: ScheduledFault) -> None:
        """For ``fault.seconds``: hold up each replica write (one latency fault of one request at
        a time) for its own time, drawn from ``fault.seed``, up to ``fault.jitter``; until the
        faults stop. A write that arrives while the next delay is being set goes through."""
        assert self._target is not None
        faults = self._target.faults
        rng = random.Random(fault.seed)
        end = trio.current_time() + fault.seconds
        held = None
        while not self.settling and trio.current_time() < end:
            if held is None or held not in faults.active:
                held = faults.add_latency(rng.uniform(0.0, fault.jitter), count=1, client=REPLICA, verbs=_WRITES)
            await trio.sleep(_TICK / 20)
        if held is not None:
            faults.remove(held)
        self.trace.add("sim", "fault", "reorder ended")

    async def _rewound(self, down: Fault, writes: Fault, waiting: list[_Replica], seconds: float) -> None:
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
        assert self._target is not None
        faults = self._target.faults
        await trio.sleep(seconds)
        faults.remove(down)
        self.trace.add("sim", "fault", f"{down.kind} ended; writes wait for the replicas to list again")
        deadline = trio.current_time() + REWIND_RESYNC_BOUND
        while True:
            live = {r.identity for r in self.current.values() if r.alive}
            self.resyncing = {w for w in self.resyncing if w[0] in live}
            listing = {w[0] for w in self.resyncing}
            waiting = [r for r in waiting if not r.done.is_set() and (r.identity not in live or r.identity in listing)]
            if not waiting or trio.current_time() >= deadline:
                break
            await trio.sleep(_TICK / 10)
        for who in sorted(listing):
            self.forget_obligations(who)
        left = ", ".join(f"{who} {path}" + (f"?{labels}" if labels else "") for who, path, labels, _ in sorted(self.resyncing))
        stopping = ", ".join(sorted(r.identity for r in waiting if r.identity not in listing))
        self.unsynced |= self.resyncing
        self.resyncing.clear()
        faults.remove(writes)
        self.rewinds_pending -= 1
        if not self.rewinds_pending:
            self.writable.set()
        self.trace.add("sim", "fault", "writes accepted again" + (f" (not listed again in time: {left})" if left else "")
                       + (f" (still stopping or starting: {stopping})" if stopping else ""))

    async def _faults_over(self) -> None:
        assert self._target is not None
        self._target.faults.clear()
        self.settling = True
        self.trace.add("sim", "fault", "faults stop" + (" (the notification endpoint stays down)" if self.notifier.down else ""))
        for slot, scope in sorted(self.restart_scopes.items()):
            rep = self.current[slot]
            if rep.alive:
                scope.cancel(reason="faults stopped")
                self.trace.add("sim", "fault", f"{rep.identity} kept running: its restart is called off")
        for slot, rep in sorted(self.current.items()):
            if not rep.alive and slot not in self.restarting and slot not in self.retired:
                await rep.done.wait()
                await self.start(slot)

    async def _settle(self) -> None:
        assert self._state is not None
        # A key that failed often during the faults waits out its backoff (up to the rate
        # limiter's cap, 1000 s by default) before its next run: the bound starts after it.
        backoff = max((c.queue.statistics().last_delay_ends_in for rep in self.current.values() if rep.alive
                       and rep.harness is not None for c in rep.harness.manager.controllers), default=0.0)
        if backoff > 0:
            self.trace.add("sim", "settle", f"the last rate-limited retry is due in {backoff:.3f}s")
        deadline = trio.current_time() + backoff + self.bound
        while True:
            problems = self.simulation.convergence(self._state) if not self.restarting else ["a replica is restarting"]
            if not problems:
                self.trace.add("sim", "settle", "converged")
                await self._owed_paid()
                await self._owned_again()
                return
            if trio.current_time() >= deadline:
                shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
                after = f" and a backoff of {backoff:.1f}s" if backoff > 0 else ""
                self.fail(f"not converged {self.bound:g}s after the faults stopped{after}: {shown}")
                await trio.sleep_forever()
            await trio.sleep(_TICK)

    async def _owned_again(self) -> None:
        """Scale-out mode, once converged: wait until every range a crashed or cut-off replica
        owned is owned again (:meth:`check_owned_again` fails at its bound): a range that holds
        no object the convergence check looks at is not let off because everything converged."""
        if not self.unowned:
            return
        self.trace.add("sim", "settle", f"{len(self.unowned)} lost range(s) not owned again yet")
        deadline = trio.current_time() + 2 * OWNED_AGAIN_BOUND
        while self.unowned and self.violation is None:
            if trio.current_time() >= deadline:
                item = self.unowned[0]
                self.fail(f"{100 * item.remaining.share:.1f}% of the key space that {item.victim} owned when it "
                          f"{item.what} at {item.at - self.trace.origin:.3f}s was still owned by no live replica "
                          f"{2 * OWNED_AGAIN_BOUND:g}s after everything converged")
                return
            await trio.sleep(_TICK / 10)

    async def _owed_paid(self) -> None:
        """Once converged: wait until every watched change still owed a trigger got it, or
        its :data:`WATCH_BOUND` passed (the monitor then reports it): a change dropped late in
        the faults is not let off because everything converged before its bound."""
        if not self.obligations:
            return
        self.trace.add("sim", "settle", f"{len(self.obligations)} watched change(s) still owed a trigger")
        deadline = trio.current_time() + 2 * WATCH_BOUND
        while self.obligations and self.violation is None:
            if trio.current_time() >= deadline:
                (identity, controller, ref), owed = next(iter(self.obligations.items()))
                self.fail(f"{identity} {controller}: {owed.change} of {ref} at {owed.at - self.trace.origin:.3f}s "
                          f"still had no trigger from its watch handler {2 * WATCH_BOUND:g}s after everything "
                          "converged, its replica being refused reads all along")
                return
            await trio.sleep(_TICK)
            self.check_notifications()

    async def _finish(self) -> None:
        await trio.testing.wait_all_tasks_blocked()
        self.check_quiescent()
        self.check_wakeups()
        self.check()
        for rep in list(self.current.values()):
            if rep.alive:
                self.stop(rep)
        for rep in list(self.current.values()):
            await rep.done.wait()
        for rep in self.replicas:
            self._check_events(rep)
        self.trace.add("sim", "end", f"{sum(len(r.harness.runs) for r in self.replicas if r.harness)} runs")

    def result(self, replay: str, wall: float, virtual: float) -> SimulationResult:
        return SimulationResult(
            seed=self.seed, violation=self.violation, replay=replay, trace=tuple(self.trace.entries),
            digest=self.trace.digest(), faults=tuple(f"{f.describe()} at {f.at:.1f}s" for f in self.plan),
            steps=self.applied, runs=sum(len(r.harness.runs) for r in self.replicas if r.harness is not None),
            virtual_seconds=virtual, wall_seconds=wall,
        )


def _errors_of(raised: BaseException) -> Exception:
    """The errors in what ended the simulation's run; raises ``raised`` again when it holds
    none (only cancellations, or ``KeyboardInterrupt``). Cancellations that come with errors
    (the run's scope cancelled by a violation while a task failed) are those of the scope
    being left, and are dropped with it."""
    if isinstance(raised, Exception):
        return raised
    if isinstance(raised, BaseExceptionGroup):
        errors, _ = raised.split(Exception)
        if errors is not None:
            return errors
    raise raised


def _admission_refused(exc: KubeError) -> bool:
    """Whether the server refused a write for its admission webhooks: one denied it, or one
    could not be called under ``failurePolicy: Fail`` (an expected outcome of a workload)."""
    text = str(exc)
    return 'admission webhook "' in text or 'failed calling webhook "' in text


class _SeedTimeout(trio.abc.Instrument):
    """Reports a seed past its wall-clock limit as a violation (the simulation then ends as on
    any violation). A seed hangs when the engine keeps busy at one virtual instant (a
    controller that triggers itself without end): the mock clock jumps only when every task
    waits, so virtual time, and the simulation's deadlines with it, would never come. Checked
    once per scheduler pass, before trio polls for I/O."""

    def __init__(self, runner: _Simulator, seconds: float) -> None:
        self._runner = runner
        self._seconds = seconds
        self._deadline = time.perf_counter() + seconds
        self._fired = False

    def before_io_wait(self, timeout: float) -> None:
        if self._fired or time.perf_counter() < self._deadline:
            return
        self._fired = True
        trio.lowlevel.current_trio_token().run_sync_soon(self._report)

    def _report(self) -> None:
        self._runner.fail(
            f"the seed hung: it did not end within {self._seconds:g}s of wall time (virtual time stuck at "
            f"{trio.current_time() - self._runner.trace.origin:.3f}s: something keeps the engine busy at one "
            "virtual instant, such as a controller that triggers itself without end)"
        )


def simulate(
    simulation: Simulation,
    seed: int,
    *,
    faults: Iterable[FaultKind] | None = None,
    duration: float = DEFAULT_DURATION,
    bound: float = DEFAULT_BOUND,
    plugin: str | None = None,
    simulation_ref: str | None = None,
    rbac: bool = True,
    scale_out: bool = False,
    webhooks: bool = True,
    seed_timeout: float | None = DEFAULT_SEED_TIMEOUT,
) -> SimulationResult:
    """Simulate ``simulation`` for one ``seed``; return how it went (never raises for a
    violation: see :attr:`SimulationResult.violation`).

    ``faults`` limits the fault kinds (default: all); the workload and faults run for
    ``duration`` seconds of virtual time, then the faults stop and everything must converge
    within ``bound`` seconds. ``plugin`` is how the replay command names the plugin (default:
    its name, or none when ``simulation_ref`` is given); ``simulation_ref`` (``module:attr``)
    is how it names the simulation, as ``--simulation``. With ``rbac`` (the default) the
    replicas run as the plugin's ServiceAccount under its generated Role (see
    :func:`~engine.testing.open_plugin_test`), and a 403 answered to one is a violation. With
    ``scale_out`` the replicas are members of a scale-out ring (:class:`~engine.kube.HashRing`,
    short timings: :data:`RING_LEASE_DURATION`) instead of leader-election candidates, two at
    first, and the fault kinds ``scale-up``, ``scale-down``, ``crash`` and ``partition`` act
    on them (``lease-loss`` is not drawn); every write of a key's object must come while its
    replica owned the key's range, and every range a crashed or cut-off replica owned must be
    owned again within :data:`OWNED_AGAIN_BOUND`. With ``webhooks`` (the default) the plugin's
    webhooks are registered, served by the live replicas, and the simulation's admission
    oracles are checked. A seed still running after ``seed_timeout`` seconds of wall time
    (``None``: no limit) ends as a violation that says it hung, with its replay command.
    Runs its own ``trio.run`` under ``MockClock``: call it from synchronous code,
    not from inside trio. The same arguments give the same trace, entry for entry (up to a
    seed that hung, which ends where the wall clock stopped it).
    """
    if duration <= 0 or bound <= 0:
        raise ValueError("duration and bound must be > 0")
    kinds = frozenset(FaultKind) if faults is None else frozenset(faults)
    runner = _Simulator(simulation, seed, kinds, duration, bound, rbac, scale_out=scale_out, webhooks=webhooks)
    clock = trio.testing.MockClock(autojump_threshold=0)
    wall = time.perf_counter()
    if seed_timeout is not None and not seed_timeout > 0:
        raise ValueError("seed_timeout must be > 0 or None")
    instruments = [] if seed_timeout is None else [_SeedTimeout(runner, seed_timeout)]
    with deterministic_scheduling(seed):
        trio.run(runner.main, clock=clock, instruments=instruments)
    named = plugin if plugin is not None or simulation_ref is not None else simulation.plugin.name
    replay = _replay_command(named, simulation_ref, seed, kinds, duration, bound, rbac, scale_out, webhooks)
    return runner.result(replay, time.perf_counter() - wall, clock.current_time())


def simulate_seeds(
    simulation: Simulation,
    seeds: Sequence[int] | range,
    *,
    budget: float | None = None,
    keep_going: bool = False,
    on_result: Callable[[SimulationResult], None] | None = None,
    jobs: int = 1,
    **options: Any,
) -> list[SimulationResult]:
    """:func:`simulate` each seed in order; stop at the first violation (unless
    ``keep_going``) or once ``budget`` seconds of wall time are spent (the seeds in progress
    finish). ``on_result`` is called with each seed's result as soon as it and every earlier
    seed are known. Returns the results of the seeds that ran, in seed order.

    With ``jobs`` > 1, seeds run in that many forked worker processes, at most ``2 * jobs``
    ahead of the first unfinished one; the results (and the seeds they stop at) are those a
    sequential run gives, since each seed's run depends on the seed alone. Raises
    ``ValueError`` when ``jobs`` < 1."""
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    if jobs == 1:
        return _sequential(simulation, seeds, budget, keep_going, on_result, options)
    return _parallel(simulation, seeds, budget, keep_going, on_result, jobs, options)


def _sequential(
    simulation: Simulation, seeds: Iterable[int], budget: float | None, keep_going: bool,
    on_result: Callable[[SimulationResult], None] | None, options: Mapping[str, Any],
) -> list[SimulationResult]:
    results: list[SimulationResult] = []
    start = time.perf_counter()
    for seed in seeds:
        if budget is not None and results and time.perf_counter() - start >= budget:
            break
        result = simulate(simulation, seed, **options)
        results.append(result)
        if on_result is not None:
            on_result(result)
        if not result.ok and not keep_going:
            break
    return results


_WORKER_SIMULATION: list[Simulation] = []


def _worker_init(simulation: Simulation) -> None:
    import logging

    _WORKER_SIMULATION[:] = [simulation]
    logging.disable(logging.CRITICAL)


def _worker_run(seed: int, options: Mapping[str, Any]) -> SimulationResult:
    return simulate(_WORKER_SIMULATION[0], seed, **options)


def _parallel(
    simulation: Simulation, seeds: Iterable[int], budget: float | None, keep_going: bool,
    on_result: Callable[[SimulationResult], None] | None, jobs: int, options: Mapping[str, Any],
) -> list[SimulationResult]:
    import collections
    import concurrent.futures
    import multiprocessing

    results: list[SimulationResult] = []
    start = time.perf_counter()
    pending: collections.deque[concurrent.futures.Future[SimulationResult]] = collections.deque()
    todo = iter(seeds)
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init,
                                                initargs=(simulation,)) as pool:
        try:
            while True:
                while len(pending) < 2 * jobs and (budget is None or time.perf_counter() - start < budget
                                                   or not (results or pending)):
                    seed = next(todo, None)
                    if seed is None:
                        break
                    pending.append(pool.submit(_worker_run, seed, dict(options)))
                if not pending:
                    return results
                result = pending.popleft().result()
                results.append(result)
                if on_result is not None:
                    on_result(result)
                if not result.ok and not keep_going:
                    return results
        finally:
            for future in pending:
                future.cancel()
