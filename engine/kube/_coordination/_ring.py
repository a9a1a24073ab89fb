"""Scale-out: replicas divide a controller's objects over a hash ring of member Leases.

Each replica (a :class:`HashRing` member) holds a ``coordination.k8s.io/v1`` Lease of its own,
labelled ``ring.engine.dev/name=<ring>``, renews it, and reads the ring's Leases (every retry
period, and when its watch on them shows another member's claims or membership change) to
know the members. The 64-bit key space (FNV-1a of ``metadata.uid``, :mod:`engine._keyspace`) is divided
among live members by consistent hashing (:func:`ring_ranges`); the member's
:class:`engine.OwnershipGate` runs only the keys of the ranges it owns.

The handover protocol (the full argument is in ``docs/scale-out.md``):

* **Claims.** A member writes the ranges it *holds* (owns, is releasing, or is about to
  claim) into its Lease (annotation ``ring.engine.dev/held``). Its gate never owns a key
  outside what its Lease says, as last written.
* **Gaining.** A member takes a range of its assignment only when no other member's Lease
  holds any part of it, by claim-then-check: it writes the claim, then reads every member
  Lease again (a quorum read) and gains only what nobody else holds. Of two members racing
  for one range at most one sees no other claim (each wrote before it read).
* **Losing.** A range assigned elsewhere is released through the gate (runs finish within the
  handover grace, the rest end as ``HANDOVER``) and only then removed from the Lease.
* **Crashes.** A member that has not renewed within ``renew_deadline`` of the start of its
  last successful renewal revokes everything (fencing). Others honour a member's claims
  until ``lease_duration`` after they last *observed* its Lease change, by their own clock:
  since ``renew_deadline < lease_duration``, the fenced member stopped first. A range is
  therefore unowned for at most ``lease_duration`` (plus one ``retry_period`` to notice)
  after its owner crashed.
* **Rejoining.** A fenced member rejoins under a new Lease once it can write again. Its
  caches missed what others wrote while it was cut off (their watches may still hang on
  connections that would deliver old events later): every informer lists again, from a
  read begun after the rejoin, and no range is gained before those lists are done, so no
  key runs on what the member saw before it was fenced.
* **Hand edits.** A member Lease whose holder changed, or whose claims shrank without a
  renewal, or that was deleted (without first saying it left), counts as that member
  leaving; since its latest claims may be lost with the edit, no member gains anything
  until that Lease would have expired. The member itself sees its next write conflict (or
  find no Lease), revokes everything and rejoins under a new Lease.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial

import attrs
import trio

from engine._errors import EngineError, ManagerStateError
from engine._keyspace import KEY_SPACE, KeyRange, KeyRanges
from engine._manager import Manager
from engine._ownership import OwnershipGate
from engine._text import summarize

from .._access._rbac import PolicyRule
from .._client._client import Client
from .._client._errors import AlreadyExistsError, ConflictError, GoneError, KubeError, NotFoundError
from .._client._watch import WatchEvent, WatchEventType
from .._runtime._cluster import Cluster
from .._runtime._shard_filter import add_shard_probe
from ._keeper import FencingKeeper, LeaseClock, check_timings
from ._lease import LEASE_RESOURCE, Lease, create_lease, update_lease

__all__ = ["HashRing", "RingConflictError", "RingStatistics", "ring_ranges", "RING_LABEL"]

logger = logging.getLogger("engine.kube.ring")

RING_LABEL = "ring.engine.dev/name"
"""The label naming the ring a member Lease belongs to."""
HELD_ANNOTATION = "ring.engine.dev/held"
"""The key ranges a member holds, as ``start-end`` hex pairs separated by commas."""
PLUGINS_ANNOTATION = "ring.engine.dev/plugins"
"""The plugins a member runs (sorted, comma-separated); a ring runs one set of plugins."""
LEAVING_ANNOTATION = "ring.engine.dev/leaving"
"""Set to ``"true"`` by a member that leaves gracefully (it holds nothing any more)."""

DEFAULT_POINTS = 512
"""Virtual points per member: enough that shares stay within ±20% of even for 3 to 10 members."""
DEFAULT_HANDOVER_GRACE = 10.0
"""Seconds runs of a released range get to finish before they are cancelled as ``HANDOVER``."""


class RingConflictError(EngineError):
    """A replica would join a ring whose members run other plugins."""


def _point(member: str, i: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{member}/{i}".encode(), digest_size=8).digest(), "big")


def ring_ranges(members: Iterable[str], *, points: int = DEFAULT_POINTS) -> dict[str, KeyRanges]:
    """Divide the key space among ``members`` by consistent hashing.

    Each member gets ``points`` pseudo-random points (BLAKE2b of ``<member>/<i>``); a point
    owns the keys from it up to the next point. Every replica computes the same result from
    the same member names; a join or a leave moves about ``1/N`` of the key space.
    """
    names = sorted(set(members))
    if not names:
        return {}
    if points < 1:
        raise ValueError("points must be >= 1")
    ring = sorted((_point(m, i), m) for m in names for i in range(points))
    pieces: dict[str, list[KeyRange]] = {m: [] for m in names}
    for j, (start, member) in enumerate(ring):
        end = ring[j + 1][0] if j + 1 < len(ring) else KEY_SPACE
        if end > start:
            pieces[member].append(KeyRange(start, end))
    first, last_member = ring[0][0], ring[-1][1]
    if first > 0:
        pieces[last_member].append(KeyRange(0, first))
    return {m: KeyRanges(rs) for m, rs in pieces.items()}


def _encode(ranges: KeyRanges) -> str:
    return ",".join(f"{r.start:x}-{r.end:x}" for r in ranges)


def _decode(text: str) -> KeyRanges:
    if not text:
        return KeyRanges.nothing()
    out = []
    for part in text.split(","):
        start, _, end = part.partition("-")
        out.append(KeyRange(int(start, 16), int(end, 16)))
    return KeyRanges(out)


@attrs.define
class _Record:
    """What this member knows of one member Lease (by uid)."""

    name: str
    holder: str
    held: KeyRanges
    renew_time: dt.datetime | None
    observed_at: float
    duration: float
    plugins: str
    leaving: bool
    resource_version: str | None = None
    valid: bool = True
    present: bool = True
    blocks_all: bool = False
    """Its claims were lost (a hand edit or a deletion): it may hold anything until it expires."""

    def expired(self, now: float) -> bool:
        return now >= self.observed_at + self.duration


@attrs.frozen
class RingStatistics:
    """A snapshot of a :class:`HashRing` member (see :meth:`HashRing.statistics`)."""

    ring: str
    """The ring's name."""
    member: str
    """This member's Lease name (it changes when the member rejoins)."""
    members: tuple[str, ...]
    """The live members, this one included while it is one."""
    owned: KeyRanges
    """The ranges whose keys run here now."""
    assigned: KeyRanges
    """The ranges the ring assigns to this member."""
    releasing: KeyRanges
    """The ranges being handed over now."""
    handovers: int
    """Ranges released to other members (through the gate)."""
    fenced: int
    """Times this member revoked everything because it could not prove its membership."""
    failed_attempts: int
    """Renewals or reads that failed with an API or transport error, or timed out."""


class HashRing:
    """One replica's membership of the scale-out ring ``name``, moving ranges in and out of ``gate``.

    ``client`` reaches the cluster; the member Lease lives in ``namespace``. ``plugins`` (their
    names) are written on the Lease: a replica whose plugins differ from the live members'
    refuses to join (:class:`RingConflictError`). Timings are client-go's leader election
    ones (``lease_duration`` > ``renew_deadline`` > ``retry_period``; 15, 10, 2 s);
    ``handover_grace`` bounds how long runs of a released range may go on.

    Attach it to the manager whose gate it drives with :meth:`attach`: it then runs as a
    service, hands everything over when the manager stops, and deletes its Lease after the
    last run ended.
    """

    def __init__(
        self,
        client: Client,
        gate: OwnershipGate,
        *,
        name: str,
        namespace: str,
        plugins: Sequence[str] = (),
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        handover_grace: float = DEFAULT_HANDOVER_GRACE,
        points: int = DEFAULT_POINTS,
        rng: random.Random | None = None,
    ) -> None:
        if not name:
            raise ValueError("a HashRing needs a name")
        if not namespace:
            raise ValueError("a HashRing needs a namespace")
        check_timings(lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period)
        if handover_grace < 0:
            raise ValueError("handover_grace must be >= 0")
        self._client = client
        self.gate = gate
        self.name = name
        self.namespace = namespace
        self.plugins = ",".join(sorted(plugins))
        self._rng = rng or random.Random()
        self.identity = identity if identity is not None else socket.gethostname()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.handover_grace = handover_grace
        self.points = points
        self._duration_seconds = max(1, math.ceil(lease_duration))
        self._member = self._new_member_name()
        self._lease: Lease | None = None
        self._records: dict[str, _Record] = {}
        self._assigned = KeyRanges.nothing()
        self._releasing = KeyRanges.nothing()
        self._members: tuple[str, ...] = ()
        self._reported: tuple[int, float] | None = None
        self._assignment_cache: tuple[tuple[str, ...], dict[str, KeyRanges]] | None = None
        self._manager: Manager | None = None
        self._leaving = False
        self._contended = False
        self._write_lock = trio.Lock()
        self._abandoned: list[Lease] = []
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._handovers = 0
        self._fenced = 0
        self._started = False
        self._keeper = FencingKeeper(
            renew_deadline=renew_deadline, retry_period=retry_period, rng=self._rng,
            subject=f"the member lease of ring {name}", logger=logger,
        )
        self._clock = LeaseClock()
        self.on_change: list[Callable[[], None]] = []
        """Callbacks called (synchronously) after the owned, assigned or released ranges changed."""
        self.cache_ready: Callable[[], Awaitable[None]] | None = None
        """Awaited after a range was claimed and before its keys run, so that they never run on
        a cache that has not listed them yet (``run_plugins`` waits for the sharded informers,
        which :attr:`on_change` has already widened); if it takes longer than a retry period
        the range stays claimed and is gained on a later renewal."""
        self.cache_refresh: Callable[[], None] | None = None
        """Called (synchronously) when this member rejoins after it was fenced: while it was
        cut off, others ran its ranges and wrote, and its caches may not show it (their
        watches may even be stalled on connections that would deliver old events later), so
        they are to list again; :attr:`cache_ready` then waits for those lists, begun after
        the member could write again, before a range is gained (``run_plugins`` relists every
        informer of the cluster)."""

    def __repr__(self) -> str:
        return f"<HashRing {self.namespace}/{self.name} member={self._member!r} owned={self.gate.owned.share:.3f}>"

    def _new_member_name(self) -> str:
        suffix = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex[:10]
        return f"{self.name}-{suffix}"[-253:].lstrip("-.")

    @property
    def rules(self) -> tuple[PolicyRule, ...]:
        """The RBAC rules a member needs: its Lease and the ring's, in :attr:`namespace`."""
        return (
            PolicyRule(
                "coordination.k8s.io", "leases", ("create", "delete", "get", "list", "update", "watch"),
                namespace=self.namespace,
            ),
        )

    @property
    def member(self) -> str:
        """This member's Lease name."""
        return self._member

    def attach(self, manager: Manager, cluster: Cluster | None = None) -> None:
        """Run as a service of ``manager`` (whose gate must be :attr:`gate`), hand every range
        over when it stops, and delete the member Lease after its last run ended.

        With ``cluster``, the gate places keys with :meth:`Cluster.key_of`, and the cluster's
        sharded informers (``cluster.informer(..., sharded=True)``) follow the ring: they hold
        nothing until the first assignment, then the keys of :attr:`interest` as it changes, and
        a claimed range is gained only once they listed it (:attr:`cache_ready`); after the
        member rejoined from fencing, only once every informer of the cluster listed again
        (:attr:`cache_refresh`). Whether the
        server filters by ``shardSelector`` is asked with a list of the ring's Leases, which a
        member may read (lists of custom resources never show it).
        """
        if manager.ownership is not self.gate:
            raise ManagerStateError("the manager's ownership gate is not this ring's gate")
        self._manager = manager
        manager.add_service(self.run)
        manager.add_shutdown_hook(self.leave)
        if cluster is not None:
            self._follow(cluster)

    def _follow(self, cluster: Cluster) -> None:
        self.gate.key_of = cluster.key_of
        cluster.set_key_ranges(KeyRanges.nothing())
        add_shard_probe(cluster.client, LEASE_RESOURCE, self.namespace)
        self.cache_refresh = cluster.refresh

        async def cache_ready() -> None:
            if cluster.refreshing:
                await cluster.wait_refreshed()
            await cluster.wait_key_ranges_synced()

        self.cache_ready = cache_ready

        def follow() -> None:
            if cluster.key_ranges != self.interest:
                cluster.set_key_ranges(self.interest)

        self.on_change.append(follow)

    @property
    def interest(self) -> KeyRanges:
        """The keys whose objects this member needs cached: those assigned to it (owned, or
        waiting for the previous owner to let go) and those it is still handing over. Informers
        restricted to it (``Cluster.informer(..., sharded=True)``) hold the objects of a range
        before it is gained and until its last run ended. Changes are announced by
        :attr:`on_change`."""
        return self._assigned | self.gate.owned | self._releasing

    def statistics(self) -> RingStatistics:
        """A snapshot of the member's view. Not a checkpoint."""
        return RingStatistics(
            ring=self.name,
            member=self._member,
            members=self._members,
            owned=self.gate.owned,
            assigned=self._assigned,
            releasing=self._releasing,
            handovers=self._handovers,
            fenced=self._fenced,
            failed_attempts=self._keeper.failed,
        )

    # -- running -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join the ring, then renew, read the members and move ranges every ``retry_period``.

        ``task_status.started()`` once the member Lease exists. Raises
        :class:`RingConflictError` (before writing anything) if live members run other
        plugins. API and transport errors are logged and retried, never raised.

        Cancellation: stops at once; ranges still owned stay owned by the gate (the manager
        cancels it last, after every run ended) and the Lease expires on its own.
        """
        if self._started:
            raise ManagerStateError("a HashRing can be run only once")
        self._started = True
        while True:
            started = trio.current_time()
            try:
                with trio.fail_after(self.renew_deadline):
                    await self._join(started)
                break
            except (KubeError, trio.TooSlowError) as exc:
                self._keeper.failed += 1
                logger.warning("joining ring %s failed: %s", self.name, summarize(exc))
                self._member = self._new_member_name()
            await trio.sleep(self.retry_period)
        logger.info("joined ring %s as %s", self.name, self._member)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._watch)
            task_status.started()
            await self._loop()

    async def _join(self, started: float) -> None:
        await self._read(trio.current_time())
        others = {
            r.plugins for r in self._live() if r.name != self._member and r.plugins and r.plugins != self.plugins
        }
        if others:
            raise RingConflictError(
                f"ring {self.name!r} has members running plugins {sorted(others)[0]!r}, not {self.plugins!r}"
            )
        self._lease = await create_lease(self._client, self._lease_body(KeyRanges.nothing()))
        self._keeper.renewed(started)

    async def _loop(self) -> None:
        keeper = self._keeper
        while True:
            started = trio.current_time()
            until = keeper.deadline
            if keeper.expired(started):  # fenced by its own clock: no attempt before the next wake
                self._fence(f"the member lease could not be renewed within {self.renew_deadline:g}s")
                await self.gate.wait_idle()
            self._wake = trio.Event()
            await keeper.attempt(started, partial(self._tick, started), "renewing", until=until)
            wake = keeper.next_wake()
            if self._contended:
                # Members racing for one range all saw each other's claims: wait out the jitter
                # (a watch would wake them all at once again).
                await trio.sleep_until(wake)
            else:
                with trio.move_on_at(wake):
                    await self._wake.wait()
                await trio.sleep_until(min(wake, started + self.retry_period / 4))

    async def _watch(self) -> None:
        """Wake the loop when another member's claims or membership change (the loop still
        decides from its own quorum reads; a renewal alone wakes nobody). Without bookmarks:
        kube-apiserver 1.32 on etcd 3.4 answers a watch that asks for them from no
        ``resourceVersion`` with a 500 ("RequestWatchProgress is disabled")."""
        resource_version: str | None = None
        while True:
            try:
                async with self._client.watch(
                    LEASE_RESOURCE, namespace=self.namespace, label_selector={RING_LABEL: self.name},
                    resource_version=resource_version, timeout_seconds=300, allow_bookmarks=False,
                ) as events:
                    async for event in events:
                        resource_version = event.resource_version or resource_version
                        if event.type is not WatchEventType.BOOKMARK and self._relevant(event):
                            self._wake.set()
            except GoneError:
                resource_version = None
            except KubeError as exc:
                logger.debug("ring %s: watching member leases failed: %s", self.name, summarize(exc))
            await trio.sleep(self.retry_period)

    def _relevant(self, event: WatchEvent) -> bool:
        lease = Lease.from_object(event.object)
        if lease.name == self._member:
            return False
        record = self._records.get(lease.uid or "")
        if record is None or event.type is not WatchEventType.MODIFIED:
            return True
        annotations = lease.annotations
        return (
            lease.holder_identity != record.holder
            or annotations.get(HELD_ANNOTATION, "") != _encode(record.held)
            or (annotations.get(LEAVING_ANNOTATION) == "true") != record.leaving
        )

    async def _tick(self, started: float) -> None:
        self._contended = False
        if self._leaving and self._lease is None:
            return
        for old in list(self._abandoned):
            try:
                await self._client.delete(LEASE_RESOURCE, old.name, namespace=self.namespace, precondition_uid=old.uid)
            except (NotFoundError, ConflictError):
                pass
            self._abandoned.remove(old)
        if self._lease is None:
            self._member = self._new_member_name()
            try:
                self._lease = await create_lease(self._client, self._lease_body(KeyRanges.nothing()))
            except AlreadyExistsError:
                return
            self._keeper.renewed(started)
            logger.info("rejoined ring %s as %s", self.name, self._member)
            if self.cache_refresh is not None:
                self.cache_refresh()
        elif not await self._renew(started, self._held()):
            return
        await self._read(started)
        await self._collect_garbage()
        assigned = KeyRanges.nothing() if self._stopping() else self._assignment().get(self._member, KeyRanges.nothing())
        if assigned != self._assigned:
            self._assigned = assigned
            self._changed()
        lost = self.gate.owned - self._assigned
        if lost:
            self._start_release(lost)
        candidates = self._assigned - self.gate.owned - self._releasing
        if not candidates:
            return
        grant = candidates - self._blocking()
        if not grant:
            return
        claim_started = trio.current_time()
        if not await self._renew(claim_started, self._held() | grant):
            return
        await self._read(trio.current_time())
        granted = grant - self._blocking()
        self._contended = granted != grant
        if granted:
            if self.cache_ready is not None:
                with trio.move_on_after(self.retry_period) as waiting:
                    await self.cache_ready()
                if waiting.cancelled_caught:
                    logger.info("ring %s: the caches do not hold the gained keys yet; running them later", self.name)
                    return
            if self._stopping() or self._lease is None:
                # Leaving began (or the Lease was lost) while claiming: the Lease no longer
                # carries the claim, so others may take the range.
                return
            self.gate.gain(granted)
            self._changed()

    def _stopping(self) -> bool:
        return self._leaving or (self._manager is not None and self._manager.stopping)

    async def _collect_garbage(self) -> None:
        """Delete member Leases expired for a whole lease duration more (crashed members)."""
        now = trio.current_time()
        own = self._lease.uid if self._lease is not None else None
        for key, record in list(self._records.items()):
            if key == own or not record.present or now < record.observed_at + 2 * record.duration:
                continue
            try:
                await self._client.delete(
                    LEASE_RESOURCE, record.name, namespace=self.namespace,
                    precondition_resource_version=record.resource_version,
                )
                logger.info("ring %s: deleted the expired member lease %s", self.name, record.name)
            except (NotFoundError, ConflictError):
                pass

    def _held(self) -> KeyRanges:
        return self.gate.owned | self._releasing

    async def _renew(self, started: float, held: KeyRanges) -> bool:
        """Write the Lease (renewTime and claims); ``False`` if it is no longer ours (fenced)."""
        try:
            async with self._write_lock:
                if self._lease is None:
                    return False
                body = attrs.evolve(
                    self._lease,
                    renew_time=self._clock.now(),
                    lease_duration_seconds=self._duration_seconds,
                    annotations=self._annotations(held),
                )
                self._lease = await update_lease(self._client, body)
        except (ConflictError, NotFoundError) as exc:
            what = "was deleted" if isinstance(exc, NotFoundError) else "was changed by someone else"
            self._fence(f"the member lease {self._member} {what}")
            await self.gate.wait_idle()
            return False
        self._keeper.renewed(started)
        return True

    def _fence(self, reason: str) -> None:
        self._fenced += 1
        if self._lease is not None:
            self._abandoned.append(self._lease)
        self._lease = None
        self._keeper.dropped()
        self._releasing = KeyRanges.nothing()
        self.gate.revoke(reason)
        logger.error("ring %s: %s; every key range revoked", self.name, reason)
        self._changed()

    def _start_release(self, lost: KeyRanges) -> None:
        self._releasing = self._releasing | lost
        if self._nursery is None:
            raise ManagerStateError("a HashRing moves ranges only while it runs")
        self._nursery.start_soon(self._release, lost)

    async def _release(self, lost: KeyRanges) -> None:
        grace = self.handover_grace
        if self._manager is not None and self._manager.stopping:
            # The manager drains its runs for its own grace period and ends them as SHUTDOWN.
            grace = max(grace, self._manager.grace_period + 1)
        await self.gate.release(lost, grace=grace)
        self._handovers += 1
        self._releasing = self._releasing - lost
        self._changed()
        self._wake.set()

    def _changed(self) -> None:
        self._report()
        for callback in list(self.on_change):
            try:
                callback()
            except Exception:
                logger.exception("a ring on_change callback failed")

    # -- the member Leases -----------------------------------------------------------------------

    def _annotations(self, held: KeyRanges, *, leaving: bool = False) -> dict[str, str]:
        out = {HELD_ANNOTATION: _encode(held), PLUGINS_ANNOTATION: self.plugins}
        if leaving:
            out[LEAVING_ANNOTATION] = "true"
        return out

    def _lease_body(self, held: KeyRanges) -> Lease:
        now = self._clock.now()
        return Lease(
            name=self._member,
            namespace=self.namespace,
            holder_identity=self.identity,
            lease_duration_seconds=self._duration_seconds,
            acquire_time=now,
            renew_time=now,
            lease_transitions=0,
            labels={RING_LABEL: self.name},
            annotations=self._annotations(held),
        )

    async def _read(self, now: float) -> None:
        """List the ring's Leases (a quorum read) and update what is known of each member."""
        listed = await self._client.list(LEASE_RESOURCE, namespace=self.namespace, label_selector={RING_LABEL: self.name})
        seen: set[str] = set()
        now = max(now, trio.current_time())
        for obj in listed.items:
            lease = Lease.from_object(obj)
            key = lease.uid or f"{lease.namespace}/{lease.name}"
            seen.add(key)
            self._observe(key, lease, now)
        for key, record in list(self._records.items()):
            if key not in seen:
                if record.present:
                    logger.info("ring %s: member lease %s is gone", self.name, record.name)
                    if not (record.valid and record.leaving and not record.held):
                        record.blocks_all = True
                record.present = False
                if record.expired(now):
                    del self._records[key]
        self._members = tuple(sorted(r.name for r in self._live()))
        self._report()

    def _report(self) -> None:
        """Log this member's share of the keys and the ring's size when either changed, while
        it is a member."""
        if self._lease is None:
            return
        owned = self.gate.owned.share
        shown = (len(self._members), round(owned, 3))
        if shown == self._reported:
            return
        self._reported = shown
        logger.info(
            "ring %s: this replica (%s) owns %.1f%% of the keys; %d member(s)",
            self.name, self._member, 100 * owned, len(self._members),
            extra={"ring": self.name, "member": self._member, "members": len(self._members), "owned": round(owned, 4)},
        )

    def _observe(self, key: str, lease: Lease, now: float) -> None:
        annotations = lease.annotations
        try:
            held: KeyRanges | None = _decode(annotations.get(HELD_ANNOTATION, ""))
        except ValueError:
            held = None
        duration = float(lease.lease_duration_seconds or self._duration_seconds)
        record = self._records.get(key)
        if record is None:
            self._records[key] = _Record(
                name=lease.name,
                holder=lease.holder_identity or "",
                held=held if held is not None else KeyRanges.nothing(),
                renew_time=lease.renew_time,
                observed_at=now,
                duration=duration,
                plugins=annotations.get(PLUGINS_ANNOTATION, ""),
                leaving=annotations.get(LEAVING_ANNOTATION) == "true",
                resource_version=lease.resource_version,
                valid=bool(lease.holder_identity) and held is not None,
            )
            self._records[key].blocks_all = not self._records[key].valid
            return
        record.present = True
        record.resource_version = lease.resource_version
        if not record.valid:
            return
        renewed = lease.renew_time != record.renew_time
        if (
            held is None
            or lease.holder_identity != record.holder
            or not (renewed or not (record.held - held))
        ):
            record.valid = False
            record.blocks_all = True
            logger.warning("ring %s: member lease %s was edited by hand; that member left", self.name, lease.name)
            return
        if renewed or held != record.held or duration != record.duration:
            record.observed_at = now
            record.renew_time = lease.renew_time
            record.held = held
            record.duration = duration
            record.leaving = annotations.get(LEAVING_ANNOTATION) == "true"

    def _live(self) -> list[_Record]:
        now = trio.current_time()
        own = self._lease.uid if self._lease is not None else None
        return [
            r for key, r in self._records.items()
            if r.valid and r.present and not r.leaving and (key == own or not r.expired(now))
        ]

    def _blocking(self) -> KeyRanges:
        """What other members' Leases hold and may still be acting on."""
        now = trio.current_time()
        own = self._lease.uid if self._lease is not None else None
        blocked = KeyRanges.nothing()
        for key, record in self._records.items():
            if key != own and not record.expired(now):
                if record.blocks_all:
                    return KeyRanges.everything()
                blocked = blocked | record.held
        return blocked

    def _assignment(self) -> dict[str, KeyRanges]:
        members = {r.name for r in self._live()}
        if self._lease is not None:
            members.add(self._member)
        names = tuple(sorted(members))
        if self._assignment_cache is None or self._assignment_cache[0] != names:
            self._assignment_cache = (names, ring_ranges(names, points=self.points))
        return self._assignment_cache[1]

    # -- leaving -------------------------------------------------------------------------------

    async def leave(self) -> None:
        """Leave the ring gracefully: hand every range over, then delete the member Lease.

        Runs of owned keys get ``handover_grace`` (the manager has usually drained them
        already: it calls this as a shutdown hook). Errors are logged, not raised; the
        Lease then expires after ``lease_duration``. Bounded by ``handover_grace`` plus
        ``renew_deadline``.

        Cancellation: a checkpoint; if cancelled, the Lease may stay until it expires.
        """
        self._leaving = True
        owned = self.gate.owned
        if owned:
            self._start_release(owned)
        with trio.move_on_after(self.handover_grace + self.renew_deadline):
            while self._releasing:
                await trio.sleep(self.retry_period / 20)
        if self._releasing:
            logger.warning(
                "ring %s: leaving with runs of %.1f%% of the key space still going", self.name,
                100 * self._releasing.share,
            )
            return
        with trio.move_on_after(self.renew_deadline):
            try:
                async with self._write_lock:
                    lease = self._lease
                    if lease is None:
                        return
                    body = attrs.evolve(
                        lease, renew_time=self._clock.now(), annotations=self._annotations(KeyRanges.nothing(), leaving=True)
                    )
                    lease = await update_lease(self._client, body)
                    self._lease = None
                    self._keeper.dropped()
                await trio.sleep(self.retry_period)
                async with self._write_lock:
                    await self._client.delete(
                        LEASE_RESOURCE, lease.name, namespace=self.namespace, precondition_uid=lease.uid
                    )
                logger.info("left ring %s (member lease %s deleted)", self.name, self._member)
            except KubeError as exc:
                logger.warning(
                    "leaving ring %s failed (the member lease expires after %ss): %s",
                    self.name, self._duration_seconds, summarize(exc),
                )
