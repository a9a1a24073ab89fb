"""One life of one simulated replica, as the checks remember it, and the fleet as they see it."""

from __future__ import annotations

import math

import attrs
import trio

from engine import Event, ObjectRef, Run, Trigger
from engine._keyspace import KeyRanges
from engine.kube import HashRing, WebhookServer, join_selectors

from ...apiserver import Fault, ServedRequest
from .._harness import PluginHarness

__all__ = [
    "Replica", "Roster", "Notifier", "REPLICA", "ROUTINE", "RING_LEASE_DURATION", "RING_RENEW_DEADLINE",
    "RING_RETRY_PERIOD", "RING_HANDOVER_GRACE", "RING_REPLICAS", "MAX_RING_REPLICAS", "CUT_KEPT",
]

REPLICA = "replica-"
"""What every replica's identity (and user agent) starts with."""
ROUTINE = frozenset({"Lease", "Event"})
"""The kinds a replica writes for its own bookkeeping, not for a key it runs."""
RING_LEASE_DURATION = 8.0
"""Scale-out mode: the member Leases' duration (short, as the simulation's timings are)."""
RING_RENEW_DEADLINE = 5.0
RING_RETRY_PERIOD = 1.0
RING_HANDOVER_GRACE = 3.0
RING_REPLICAS = 2
"""Scale-out mode: the replicas that start; ``scale-up`` adds one, up to :data:`MAX_RING_REPLICAS`."""
MAX_RING_REPLICAS = 4
CUT_KEPT = 60.0
"""Seconds a run cancelled outside any shield is remembered (:attr:`Replica.cut_unshielded`)."""


class Notifier:
    """A notification endpoint as an event sink; after a ``sink-outage`` it hangs for good."""

    name = "notifications"

    def __init__(self) -> None:
        self.down = False

    async def deliver(self, event: Event) -> None:
        """Deliver, or hang while the endpoint is down. Cancellation: abandons the delivery."""
        if self.down:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class Replica:
    """One life of one replica slot, and what the checks remember about it (the fleet starts
    and stops it; its :class:`~engine.testing._simulation._observer.ReplicaObserver` and the
    checks fill the rest in)."""

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
    cut_unshielded: list[Run] = attrs.field(factory=list)
    """The runs of the last :data:`CUT_KEPT` seconds that the engine cancelled (not forced)
    while no shield of theirs was open: a status write of one may not land after it ended."""
    unretried: dict[str, dict[str, str]] = attrs.field(factory=dict)
    """By run id, while the run lasts: the paths of the writes the server failed (a 5xx, a 429,
    no answer) that the run has not written since, with what happened
    (:class:`~engine.testing._simulation._attempts.RunWrites` notes them)."""
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
    announced (``on_change``), with when and the checks' ``serial`` then (runs that
    started at that very instant before the change have a serial no greater)."""

    def may_run_at(self, at: float) -> KeyRanges:
        ranges = KeyRanges.nothing()
        for when, held, _ in self.may_run:
            if when > at:
                break
            ranges = held
        return ranges

    def given_up_at(self, key: int, at: float) -> int | None:
        """If the range of ``key`` was held just before the instant ``at`` and given up at
        that very instant, the checks' ``serial`` of the change that gave it up, else ``None``."""
        before = KeyRanges.nothing()
        for when, held, serial in self.may_run:
            if when < at:
                before = held
            elif when == at and key in before and key not in held:
                return serial
            elif when > at:
                break
        return None

    @property
    def alive(self) -> bool:
        h = self.harness
        return h is not None and h.running and not h.manager.stopping

    def object_run(self, kind: str, namespace: str | None, name: str | None) -> Run | None:
        for (_, ref), run in self.running.items():
            if ref.kind == kind and ref.name == name and (ref.namespace or None) == (namespace or None):
                return run
        return None

    def leads(self) -> bool:
        h = self.harness
        return h is not None and (h.manager.leader_election is None or h.manager.leader_election.is_leader)

    def informed(self) -> set[tuple[str, str, str]]:
        """``(path, label selector, field selector)`` of the collections its informers list
        and watch."""
        cluster = self.harness.cluster if self.harness is not None else None
        if cluster is None:
            return set()
        return {(i.resource.path(namespace=i.namespace), join_selectors(i.options.label_selector) or "",
                 join_selectors(i.options.field_selector) or "") for i in cluster.informers}


@attrs.define(eq=False)
class Roster:
    """The replicas as the checks see them: every life, the current one of each slot, which
    are cut off from the API server or crashed, and the notification endpoint they share."""

    replicas: list[Replica] = attrs.field(factory=list)
    current: dict[int, Replica] = attrs.field(factory=dict)
    cut_off: dict[str, Fault] = attrs.field(factory=dict)
    """Scale-out mode: the replicas partitioned from the API server now, with their fault."""
    hung: dict[str, Fault] = attrs.field(factory=dict)
    """Scale-out mode: the same replicas' watch delays (their running watches hang, and deliver
    what they held back once the partition heals)."""
    crashed: set[str] = attrs.field(factory=set)
    """Scale-out mode: the replicas a ``crash`` ended (their tasks may still be unwinding)."""
    notifier: Notifier = attrs.field(factory=Notifier)

    def named(self, identity: str) -> Replica | None:
        return next((r for r in self.replicas if r.identity == identity), None)

    def ring_members(self) -> list[Replica]:
        """The live ring replicas that can reach the API server."""
        return [r for r in self.current.values() if r.alive and r.ring is not None and r.identity not in self.cut_off
                and r.identity not in self.crashed]
