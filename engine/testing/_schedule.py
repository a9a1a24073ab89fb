"""The fault schedule of one simulation: which faults, when, for how long, all from the seed."""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable

import attrs

__all__ = ["FaultKind", "ScheduledFault", "plan_faults", "parse_fault_kinds", "RING_FAULTS"]


class FaultKind(enum.Enum):
    """The faults a simulation injects (``--faults`` takes their values, comma-separated)."""

    WATCH_DROP = "watch-drop"
    """Every replica watch ends cleanly (as a server-side watch timeout)."""
    WATCH_DROP_ABRUPT = "watch-drop-abrupt"
    """Every replica watch's connection is cut mid-response."""
    EXPIRE = "expire"
    """Watches are dropped and the next ones answer 410 Expired: informers relist."""
    ERRORS = "errors"
    """A burst of 500 or 503 answers."""
    THROTTLE = "throttle"
    """A burst of 429 answers with ``Retry-After``."""
    LATENCY = "latency"
    """A spike of request latency."""
    STALE_WATCH = "stale-watch"
    """For a while, watches deliver events late (a stale cache), then catch up."""
    APISERVER_RESTART = "apiserver-restart"
    """The API server restarts: connections cut, 503 for a few seconds, and its watch history
    is gone (every resumed watch gets 410 and relists)."""
    HISTORY_REWIND = "history-rewind"
    """The API server restarts on an etcd restored from a snapshot taken earlier in the run:
    connections cut, 503 for a few seconds, every object as it was at the snapshot (the ones
    created since gone, the ones deleted since back) and resourceVersions going backwards to
    the snapshot's, so informers must notice and relist from scratch."""
    RUNNER_RESTART = "runner-restart"
    """A replica stops gracefully at a random moment and starts again a little later."""
    LEASE_LOSS = "lease-loss"
    """Two replicas run with leader election; the leader's lease requests fail past the renew
    deadline, so it loses the lease and the other takes over."""
    SINK_OUTAGE = "sink-outage"
    """The notification endpoint (an event sink) stops answering, and stays down to the end:
    no reconcile may wait for it."""
    REORDER = "reorder"
    """For a few seconds each replica write is held up for its own random time, so writes
    land in another order than they were sent (a run cut while its write is in flight, and
    the next run's write overtaking it)."""
    SCALE_UP = "scale-up"
    """Scale-out mode only: a replica joins the ring (a new slot starts)."""
    SCALE_DOWN = "scale-down"
    """Scale-out mode only: a replica stops gracefully for good (it hands its ranges over and
    leaves the ring); the last replica is never taken away."""
    CRASH = "crash"
    """Scale-out mode only: a replica dies abruptly (no drain, no handover, its member Lease
    left to expire) and its slot starts again a little later, as a new member."""
    PARTITION = "partition"
    """Scale-out mode only: a replica is cut from the API server (every request of it fails,
    and its running watches hang, delivering nothing they held back within the run) for a while, long enough, often, for its member Lease to expire while it still runs;
    then it is reconnected."""


RING_FAULTS = frozenset({FaultKind.SCALE_UP, FaultKind.SCALE_DOWN, FaultKind.CRASH, FaultKind.PARTITION})
"""The fault kinds that only a scale-out simulation draws (they act on ring members)."""


def parse_fault_kinds(text: str | None) -> frozenset[FaultKind]:
    """``"all"`` (or ``None``), ``"none"``, or comma-separated :class:`FaultKind` values.

    Raises ``ValueError`` naming the known kinds for an unknown one.
    """
    if text is None or text.strip() == "all":
        return frozenset(FaultKind)
    if text.strip() in ("", "none"):
        return frozenset()
    kinds = set()
    for part in (p.strip() for p in text.split(",")):
        try:
            kinds.add(FaultKind(part))
        except ValueError:
            known = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"unknown fault {part!r} (known: all, none, {known})") from None
    return frozenset(kinds)


@attrs.frozen
class ScheduledFault:
    """One fault of the schedule."""

    at: float
    """When it starts, in seconds of virtual time."""
    kind: FaultKind
    seconds: float = 0.0
    """How long it lasts (for the kinds that last)."""
    count: int = 0
    """How many requests it affects (bursts)."""
    status: int = 0
    """The HTTP status (errors)."""
    retry_after: float = 0.0
    """``Retry-After`` seconds (throttle)."""
    target: int = 0
    """Which replica slot it aims at, where it aims at one."""
    rewind: float = 0.0
    """For ``history-rewind``: how many seconds before ``at`` the restored snapshot is taken."""
    jitter: float = 0.0
    """For ``reorder``: the longest a write is held up, in seconds."""
    seed: int = 0
    """For ``reorder``: the seed of the writes' delays."""

    @property
    def snapshot_at(self) -> float | None:
        """When the snapshot a ``history-rewind`` restores is taken, else ``None``."""
        return self.at - self.rewind if self.kind is FaultKind.HISTORY_REWIND else None

    def describe(self) -> str:
        detail = {
            FaultKind.ERRORS: f"{self.count} x {self.status}",
            FaultKind.THROTTLE: f"{self.count} x 429, Retry-After {self.retry_after:g}s",
            FaultKind.LATENCY: f"+{self.seconds:.2f}s on {self.count} requests",
            FaultKind.STALE_WATCH: f"events {self.seconds:.1f}s late for {self.count}s",
            FaultKind.APISERVER_RESTART: f"down {self.seconds:.1f}s",
            FaultKind.HISTORY_REWIND: f"back to {self.at - self.rewind:.1f}s, down {self.seconds:.1f}s",
            FaultKind.RUNNER_RESTART: f"replica slot {self.target}, back after {self.seconds:.1f}s",
            FaultKind.LEASE_LOSS: f"lease requests fail for {self.seconds:.1f}s",
            FaultKind.REORDER: f"writes held up 0 to {self.jitter:.2f}s each for {self.seconds:.1f}s",
            FaultKind.SCALE_DOWN: f"replica slot {self.target}",
            FaultKind.CRASH: f"replica slot {self.target}, back after {self.seconds:.1f}s",
            FaultKind.PARTITION: f"replica slot {self.target}, cut off for {self.seconds:.1f}s",
        }.get(self.kind, "")
        return f"{self.kind.value}" + (f" ({detail})" if detail else "")


def plan_faults(rng: random.Random, kinds: Iterable[FaultKind], duration: float) -> list[ScheduledFault]:
    """The faults of one run, sorted by time: each enabled kind is picked with probability
    one half and then happens one to three times (lease loss and sink outage once) at
    uniform moments of ``[1, 0.9 * duration)``; a history rewind restores a snapshot taken at a
    uniform moment between the previous rewind (or 0.5 s) and half a second before it. Rewinds
    are drawn after the others, and reorders after them, so the other kinds' faults of a seed
    are the same with or without them; the scale-out kinds (:data:`RING_FAULTS`) are drawn last of all."""
    plan: list[ScheduledFault] = []
    last = {FaultKind.HISTORY_REWIND: 1, FaultKind.REORDER: 2, **{k: 3 for k in RING_FAULTS}}
    for kind in sorted(kinds, key=lambda k: (last.get(k, 0), k.value)):
        if rng.random() < 0.5:
            continue
        once = kind in (FaultKind.LEASE_LOSS, FaultKind.SINK_OUTAGE)
        moments = [rng.uniform(1.0, max(1.0, 0.9 * duration)) for _ in range(1 if once else rng.randint(1, 3))]
        if kind is FaultKind.HISTORY_REWIND:
            plan.extend(_rewinds(rng, sorted(moments)))
            continue
        for at in moments:
            if kind is FaultKind.ERRORS:
                plan.append(ScheduledFault(at, kind, count=rng.randint(3, 25), status=rng.choice((500, 503))))
            elif kind is FaultKind.THROTTLE:
                plan.append(ScheduledFault(at, kind, count=rng.randint(3, 25), retry_after=rng.choice((1.0, 2.0, 5.0))))
            elif kind is FaultKind.LATENCY:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(0.2, 3.0), count=rng.randint(3, 20)))
            elif kind is FaultKind.STALE_WATCH:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(0.5, 8.0), count=rng.randint(5, 30)))
            elif kind is FaultKind.APISERVER_RESTART:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(0.5, 5.0)))
            elif kind is FaultKind.RUNNER_RESTART:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(0.0, 10.0), target=rng.randint(0, 1)))
            elif kind is FaultKind.LEASE_LOSS:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(12.0, 25.0)))
            elif kind is FaultKind.SCALE_DOWN:
                plan.append(ScheduledFault(at, kind, target=rng.randint(0, 3)))
            elif kind is FaultKind.CRASH:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(0.0, 20.0), target=rng.randint(0, 3)))
            elif kind is FaultKind.PARTITION:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(2.0, 25.0), target=rng.randint(0, 3)))
            elif kind is FaultKind.REORDER:
                plan.append(ScheduledFault(at, kind, seconds=rng.uniform(5.0, 20.0), jitter=rng.uniform(0.5, 3.0),
                                           seed=rng.getrandbits(32)))
            else:
                plan.append(ScheduledFault(at, kind))
    plan.sort(key=lambda f: (f.at, f.kind.value))
    return plan


def _rewinds(rng: random.Random, moments: list[float]) -> list[ScheduledFault]:
    """History rewinds at ``moments`` (sorted), each restoring a snapshot taken after the
    previous one happened: restoring a snapshot from before an earlier restore would bring
    back resourceVersions that name different versions of an object in the two histories,
    which no client can tell apart. A moment too close to the previous one is left out."""
    rewinds: list[ScheduledFault] = []
    floor = 0.5
    for at in moments:
        if at - 0.5 < floor:
            continue
        snapshot_at = rng.uniform(floor, at - 0.5)
        rewinds.append(ScheduledFault(at, FaultKind.HISTORY_REWIND, seconds=rng.uniform(0.5, 5.0), rewind=at - snapshot_at))
        floor = at
    return rewinds
