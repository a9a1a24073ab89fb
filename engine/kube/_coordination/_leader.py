"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

A :class:`LeaderElector` is the :class:`engine.LeaderElection` of a :class:`engine.Manager`
running in several replicas: one replica leads (its controllers run), the others stand by.

* **Acquire.** Every ``retry_period`` (jittered to ``[0.5, 1]`` of it, so never later) a
  replica reads the Lease and takes it when it does not exist (create), names this replica,
  has no holder (it was released), or has not changed for ``leaseDurationSeconds`` *as
  observed by this replica's own clock*: like client-go, a replica remembers the trio time at
  which it last saw the record change and never compares remote timestamps, so clock skew
  between replicas does not matter. A fresh replica therefore waits a whole lease duration
  before it takes over an abandoned Lease.
* **Watching while standing by.** A replica that does not lead also watches its one Lease
  (``fieldSelector=metadata.name=<name>``) and observes every event as it would a read, so it
  sees a renewal within the event's delivery time rather than up to ``retry_period`` late.
  It tries again at the earlier of its next retry and the expiry it observed (its own
  ``observed_at + leaseDurationSeconds``), and at once when the watch shows the Lease
  released or deleted. An observation only ever moves ``observed_at`` later, so the watch can
  only delay a takeover, never hasten one past the rule above: a late, lost or broken watch
  leaves the polling reads, which decide alone as before. When the watch cannot be had
  (forbidden, errors, 410) the replica says so once and polls, retrying the watch with
  backoff. The leader stops the watch. A late event older than the record already observed
  (by integer ``resourceVersion``, as the API server's are) is ignored rather than taken for a
  change.
* **Renew.** The leader writes ``renewTime`` every ``retry_period``. A renewal counts from the
  moment its attempt *started* (before the request could reach the server), so the leader's
  view is never later than any standby's observation of the same write.
* **Fencing.** If no renewal succeeded within ``renew_deadline`` of the last successful one
  (errors, conflicts, or a request that hangs: attempts are cut off at the deadline), or a read
  shows another holder, the ``on_lost`` callbacks are called synchronously and the elector stops
  leading. Because ``renew_deadline < lease_duration``, they run strictly before a standby can
  take over. One case no Lease-based election fences (client-go's neither): a restore of the
  API server's storage (an etcd backup) that brings back an older Lease record, released or
  held by an earlier leader. A standby may then take the Lease while the current leader still
  leads, until that leader's renewals fail for ``renew_deadline``.
* **Optimistic concurrency.** Every write carries the ``resourceVersion`` it was based on; a
  ``ConflictError`` means someone else wrote first, and the Lease is read again.
* **Release.** :meth:`LeaderElector.release` (called by the manager after a graceful drain)
  writes ``holderIdentity: ""`` and ``leaseDurationSeconds: 1``, as client-go's
  ``ReleaseOnCancel`` does, so a standby takes over at its next retry.

``leaseTransitions`` is incremented whenever the holder changes; ``acquireTime`` and
``renewTime`` are MicroTime. All timing is trio's clock (the wall-clock timestamps written are
derived from it), so elections run in virtual time under ``trio.testing.MockClock``. API and
transport errors are logged (error type and server message only, never request headers) and
retried; they never escape :meth:`LeaderElector.run`.
"""

from __future__ import annotations

import enum
import logging
import math
import random
import socket
import uuid
from collections.abc import Callable

import attrs
import trio

from engine._errors import ManagerStateError
from engine._text import summarize

from ..._backoff import jittered_backoff
from .._access._rbac import PolicyRule, leader_election_rules
from .._client._client import Client
from .._client._errors import AlreadyExistsError, ConflictError, GoneError, KubeError, NotFoundError
from .._client._retry import RetryPolicy
from .._client._watch import WatchEvent, WatchEventType
from ._keeper import FencingKeeper, LeaseClock, check_timings
from ._lease import LEASE_RESOURCE, Lease, create_lease, get_lease, update_lease

__all__ = ["LeaderElector", "LeaderElectorStatistics"]

logger = logging.getLogger("engine.kube.leader")

_RELEASE_ATTEMPTS = 3
_WATCH_TIMEOUT_SECONDS = 300
_WATCH_BACKOFF_CAP = 60.0
_ANY_VERSION = "0"


class _State(enum.Enum):
    UNSTARTED = "unstarted"
    RUNNING = "running"
    RELEASED = "released"
    LOST = "lost"
    STOPPED = "stopped"


@attrs.frozen
class LeaderElectorStatistics:
    """A snapshot of a :class:`LeaderElector` (see :meth:`LeaderElector.statistics`), for
    readiness probes and metrics."""

    identity: str
    """This replica's ``holderIdentity``."""
    state: str
    """``unstarted``, ``running``, ``released``, ``lost`` or ``stopped``."""
    is_leader: bool
    """Whether this replica leads now."""
    state_known: bool
    """Whether the Lease was read or written at least once (else ``holder`` means nothing)."""
    holder: str | None
    """The holder last observed (``None``: none, or not known yet)."""
    transitions: int | None
    """``leaseTransitions`` last observed."""
    observed_at: float | None
    """trio time at which the Lease record was last seen to change."""
    leading_since: float | None
    """trio time at which this replica last acquired the Lease."""
    last_renewal: float | None
    """trio time at which the last successful acquisition or renewal attempt started."""
    acquisitions: int
    """Times this replica acquired the Lease."""
    failed_attempts: int
    """Acquire or renew attempts that failed with an API or transport error, or timed out."""
    lost_reason: str | None
    """Why leadership was lost, if it was."""


def _spec(lease: Lease) -> tuple[object, ...]:
    return (
        lease.holder_identity,
        lease.lease_duration_seconds,
        lease.acquire_time,
        lease.renew_time,
        lease.lease_transitions,
    )


def _older(lease: Lease, than: Lease | None) -> bool:
    """Whether ``lease`` is a record older than ``than`` (a late watch event): only when both
    resourceVersions are integers, as the API server's are; otherwise it is observed, which can
    only move ``observed_at`` later."""
    if than is None or lease.uid != than.uid:
        return False
    try:
        return int(lease.resource_version or "") < int(than.resource_version or "")
    except ValueError:
        return False


def _default_identity(rng: random.Random | None) -> str:
    suffix = uuid.UUID(int=rng.getrandbits(128), version=4) if rng is not None else uuid.uuid4()
    return f"{socket.gethostname()}_{suffix}"


class LeaderElector:
    """Leader election on the Lease ``namespace/name`` through ``client``.

    Implements :class:`engine.LeaderElection`: pass it as ``Manager(leader_election=...)``.
    ``identity`` defaults to ``<hostname>_<random uuid>`` (controller-runtime's choice);
    ``lease_duration`` (whole seconds, written as ``leaseDurationSeconds``) must exceed
    ``renew_deadline``, which must exceed ``retry_period`` (client-go's defaults: 15, 10, 2).
    ``rng`` drives the retry jitter and the default identity.

    The elector runs once: :meth:`run` returns after :meth:`release` or after leadership was
    lost, and a new replica life needs a new elector.
    """

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        namespace: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        if not name:
            raise ValueError("a LeaderElector needs a lease name")
        if not namespace:
            raise ValueError("a LeaderElector needs a lease namespace")
        if identity is not None and not identity:
            raise ValueError("identity must not be empty")
        check_timings(lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period)
        self._client = client
        self.name = name
        self.namespace = namespace
        self._rng = rng or random.Random()
        self.identity = identity if identity is not None else _default_identity(rng)
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._duration_seconds = max(1, math.ceil(lease_duration))
        self._state = _State.UNSTARTED
        self._acquired = trio.Event()
        self._callbacks: list[Callable[[str], None]] = []
        self._observed: Lease | None = None
        self._observed_spec: tuple[object, ...] | None = None
        self._observed_at: float | None = None
        self._leading_since: float | None = None
        self._acquisitions = 0
        self._lost_reason: str | None = None
        self._run_scope: trio.CancelScope | None = None
        self._run_done = trio.Event()
        self._keeper = FencingKeeper(
            renew_deadline=renew_deadline, retry_period=retry_period, rng=self._rng,
            subject=f"lease {namespace}/{name}", logger=logger,
        )
        self._clock = LeaseClock()
        self._wake = trio.Event()
        self._seen = trio.Event()
        self._watch_scope: trio.CancelScope | None = None
        self._watch_said = False
        self._failed_seen = 0
        self.cache_refresh: list[Callable[[], None]] = []
        """Called, synchronously, when this replica becomes leader after an attempt to reach
        the server failed since it started: its warm caches may hold what stalled watches
        left behind (a standby cut off from the server). :class:`Cluster` adds its
        :meth:`~Cluster.refresh` for a manager with this elector, and starts no controller
        before those lists are done."""

    def __repr__(self) -> str:
        return (
            f"<LeaderElector {self.namespace}/{self.name} identity={self.identity!r} "
            f"{self._state.value}{' leading' if self._leading else ''}>"
        )

    # -- what the manager asks -----------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds leadership now. Not a checkpoint."""
        return self._leading

    @property
    def holder(self) -> str | None:
        """The holder this replica last observed, ``None`` if none or not yet known."""
        return self._observed.holder_identity if self._observed is not None else None

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` synchronously when leadership is lost: the renewal did not
        succeed within ``renew_deadline``, or another holder was seen. It runs in the elector's
        task, before any standby can acquire the Lease; an exception it raises is logged."""
        self._callbacks.append(callback)

    async def wait_leading(self) -> None:
        """Return once this replica leads (at once if it does).

        Cancellation: a checkpoint; nothing changes.
        """
        if self._leading:
            await trio.lowlevel.checkpoint()
            return
        while not self._leading:
            await self._acquired.wait()

    @property
    def rules(self) -> tuple[PolicyRule, ...]:
        """The RBAC rules this elector needs: :func:`leader_election_rules` in its namespace."""
        return leader_election_rules(self.namespace)

    def statistics(self) -> LeaderElectorStatistics:
        """A snapshot of the elector's state and counters. Not a checkpoint."""
        lease = self._observed
        return LeaderElectorStatistics(
            identity=self.identity,
            state=self._state.value,
            is_leader=self._leading,
            state_known=lease is not None,
            holder=lease.holder_identity if lease is not None else None,
            transitions=lease.lease_transitions if lease is not None else None,
            observed_at=self._observed_at,
            leading_since=self._leading_since,
            last_renewal=self._keeper.renewed_at,
            acquisitions=self._acquisitions,
            failed_attempts=self._keeper.failed,
            lost_reason=self._lost_reason,
        )

    # -- running ---------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Try to acquire the Lease every ``retry_period``, then renew it while leading.

        Calls ``task_status.started()`` at once. Returns after :meth:`release`, or after
        leadership was lost (the ``on_lost`` callbacks have then run). API and transport errors
        are logged and retried, never raised. Raises :class:`engine.ManagerStateError` if run a
        second time.

        Cancellation: stops at once. If it was leading, it stops leading without releasing the
        Lease (``is_leader`` becomes false, no ``on_lost`` callback): standbys take over after
        ``lease_duration``, as after a crash.
        """
        if self._state is _State.RELEASED:
            task_status.started()
            return
        if self._state is not _State.UNSTARTED:
            raise ManagerStateError("a LeaderElector can be run only once")
        self._state = _State.RUNNING
        self._run_scope = trio.CancelScope()
        task_status.started()
        logger.info(
            "leader election started for lease %s/%s as %s", self.namespace, self.name, self.identity
        )
        try:
            with self._run_scope:
                await self._loop()
        finally:
            if self._leading:
                self._keeper.dropped()
                logger.warning(
                    "stopped leading lease %s/%s without releasing it; it expires after %ss",
                    self.namespace, self.name, self._duration_seconds,
                )
            if self._state is _State.RUNNING:
                self._state = _State.STOPPED
            self._run_done.set()

    async def _loop(self) -> None:
        keeper = self._keeper
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    started = trio.current_time()
                    self._wake = trio.Event()
                    if keeper.expired(started):
                        self._lose(f"the lease could not be renewed within renew_deadline ({self.renew_deadline:g}s)")
                        return
                    leading = self._leading
                    if await keeper.attempt(
                        started, self._try_acquire_or_renew, "renewing" if leading else "acquiring"
                    ):
                        keeper.renewed(started)
                        if not leading:
                            self._become_leader(started)
                    elif leading:
                        holder = self.holder
                        if holder is not None and holder != self.identity:
                            self._lose(f"the lease is now held by {holder!r}")
                            return
                    if self._leading:
                        self._stop_watch()
                        await trio.sleep_until(keeper.next_wake())
                    else:
                        self._start_watch(nursery)
                        await self._stand_by(started, keeper.next_wake())
            finally:
                self._stop_watch()
                nursery.cancel_scope.cancel()

    async def _stand_by(self, started: float, tick: float) -> None:
        """Sleep until ``tick``, or the expiry observed (if it is still ahead of the attempt
        that ``started``), or a watch event that shows the Lease released or deleted; an
        observed renewal moves the expiry later."""
        while not self._wake.is_set():
            self._seen = trio.Event()
            expiry = self._expiry()
            until = tick if expiry is None or expiry <= started else min(tick, expiry)
            if trio.current_time() >= until:
                break
            with trio.move_on_at(until):
                await self._seen.wait()
        await trio.lowlevel.checkpoint()

    def _expiry(self) -> float | None:
        lease = self._observed
        if lease is None or self._observed_at is None or lease.holder_identity in (None, self.identity):
            return None
        return self._observed_at + (lease.lease_duration_seconds or self._duration_seconds)

    # -- the watch while standing by -------------------------------------------------------------

    def _start_watch(self, nursery: trio.Nursery) -> None:
        if self._watch_scope is None:
            self._watch_scope = trio.CancelScope()
            nursery.start_soon(self._watch, self._watch_scope)

    def _stop_watch(self) -> None:
        if self._watch_scope is not None:
            self._watch_scope.cancel(reason="leading: the lease is renewed, not watched")
            self._watch_scope = None

    async def _watch(self, scope: trio.CancelScope) -> None:
        """Observe every event of the Lease until ``scope`` is cancelled; failures fall back to
        polling and are retried with backoff. A watch starts at ``resourceVersion=0`` (whatever
        state the server has at hand: an older record can only delay a takeover, and one older
        than what was observed is ignored), which servers without consistent watch reads from
        the cache (1.32 on etcd 3.4) also serve; without bookmarks, which such a server cannot
        give a watch of one name ("RequestWatchProgress is disabled")."""
        resource_version = _ANY_VERSION
        failures = 0
        with scope:
            while True:
                received = False
                try:
                    async with self._client.watch(
                        LEASE_RESOURCE, namespace=self.namespace, field_selector={"metadata.name": self.name},
                        resource_version=resource_version, timeout_seconds=_WATCH_TIMEOUT_SECONDS,
                        allow_bookmarks=False, retry=RetryPolicy(max_attempts=1),
                    ) as events:
                        async for event in events:
                            received = True
                            resource_version = event.resource_version or resource_version
                            self._on_event(event)
                except GoneError as exc:
                    if resource_version == _ANY_VERSION:
                        self._say_watch_failed(exc)
                    resource_version = _ANY_VERSION
                except KubeError as exc:
                    self._say_watch_failed(exc)
                failures = 0 if received else failures + 1
                if failures:
                    await trio.sleep(
                        jittered_backoff(failures - 1, base=self.retry_period, cap=_WATCH_BACKOFF_CAP, rng=self._rng)
                    )

    def _say_watch_failed(self, exc: KubeError) -> None:
        level = logging.DEBUG if self._watch_said else logging.INFO
        self._watch_said = True
        logger.log(
            level, "watching lease %s/%s failed, polling it every %gs instead: %s",
            self.namespace, self.name, self.retry_period, summarize(exc),
        )

    def _on_event(self, event: WatchEvent) -> None:
        if self._leading or event.type is WatchEventType.BOOKMARK:
            return
        if event.object.get("metadata", {}).get("name") != self.name:
            return
        if event.type is WatchEventType.DELETED:
            self._wake.set()
        else:
            lease = Lease.from_object(event.object)
            if not _older(lease, self._observed):
                self._observe(lease)
                if lease.holder_identity is None:
                    self._wake.set()
        self._seen.set()

    @property
    def _leading(self) -> bool:
        return self._keeper.holding

    def _become_leader(self, now: float) -> None:
        self._leading_since = now
        self._acquisitions += 1
        logger.info(
            "acquired lease %s/%s as %s (transitions %s)",
            self.namespace, self.name, self.identity, self.statistics().transitions,
        )
        failed, self._failed_seen = self._keeper.failed - self._failed_seen, self._keeper.failed
        if failed and self.cache_refresh:
            logger.info(
                "listing every cache again before leading: %d attempt(s) to reach the server failed meanwhile", failed
            )
            for refresh in self.cache_refresh:
                refresh()
        self._acquired.set()

    def _lose(self, reason: str) -> None:
        self._keeper.dropped()
        self._acquired = trio.Event()
        self._state = _State.LOST
        self._lost_reason = reason
        logger.error("lost leadership of lease %s/%s: %s", self.namespace, self.name, reason)
        for callback in list(self._callbacks):
            try:
                callback(reason)
            except Exception:
                logger.exception("an on_lost callback of lease %s/%s failed", self.namespace, self.name)

    # -- the lease -------------------------------------------------------------------------------

    def _observe(self, lease: Lease) -> None:
        spec = _spec(lease)
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = trio.current_time()
        self._observed = lease

    def _valid_for_others(self, lease: Lease) -> bool:
        assert self._observed_at is not None
        duration = lease.lease_duration_seconds or self._duration_seconds
        return self._observed_at + duration > trio.current_time()

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's ``tryAcquireOrRenew``); ``True`` if we hold the Lease now."""
        if self._leading and self._observed is not None:
            try:
                self._observe(await update_lease(self._client, self._renewal(self._observed)))
                return True
            except ConflictError:
                logger.info("renewing lease %s/%s conflicted; reading it again", self.namespace, self.name)
        try:
            current = await get_lease(self._client, self.name, namespace=self.namespace)
        except NotFoundError:
            now = self._clock.now()
            fresh = Lease(
                name=self.name,
                namespace=self.namespace,
                holder_identity=self.identity,
                lease_duration_seconds=self._duration_seconds,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            )
            try:
                self._observe(await create_lease(self._client, fresh))
            except AlreadyExistsError:
                return False
            return True
        self._observe(current)
        holder = current.holder_identity
        if holder is not None and holder != self.identity and self._valid_for_others(current):
            return False
        try:
            self._observe(await update_lease(self._client, self._renewal(current)))
        except ConflictError:
            return False
        return True

    def _renewal(self, current: Lease) -> Lease:
        now = self._clock.now()
        ours = current.holder_identity == self.identity
        transitions = current.lease_transitions or 0
        return attrs.evolve(
            current,
            holder_identity=self.identity,
            lease_duration_seconds=self._duration_seconds,
            acquire_time=current.acquire_time if ours and current.acquire_time else now,
            renew_time=now,
            lease_transitions=transitions if ours else transitions + 1,
        )

    # -- releasing -------------------------------------------------------------------------------

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at its next retry (graceful shutdown).

        Stops acquiring and renewing at once (``is_leader`` is false before the first
        checkpoint); then, if this replica was leading, writes ``holderIdentity: ""`` and
        ``leaseDurationSeconds: 1`` keeping ``leaseTransitions``. A conflict is read again and
        retried while the Lease still names this replica. Bounded by ``renew_deadline``; API and
        transport errors are logged, not raised (the Lease then expires after
        ``lease_duration``). Idempotent.

        Cancellation: a checkpoint; if cancelled after the write was sent, the release may or
        may not have been applied.
        """
        was_leading = self._leading
        self._keeper.dropped()
        if self._state in (_State.UNSTARTED, _State.RUNNING):
            self._state = _State.RELEASED
        running = self._run_scope is not None
        if self._run_scope is not None:
            self._run_scope.cancel(reason="leader election released")
        if not was_leading or self._observed is None:
            await trio.lowlevel.checkpoint()
            return
        with trio.move_on_after(self.renew_deadline) as bound:
            if running:
                await self._run_done.wait()
            try:
                await self._write_release(self._observed)
            except KubeError as exc:
                logger.warning(
                    "releasing lease %s/%s failed (it expires after %ss): %s",
                    self.namespace, self.name, self._duration_seconds, summarize(exc),
                )
        if bound.cancelled_caught:
            logger.warning(
                "releasing lease %s/%s did not finish within %gs; it expires after %ss",
                self.namespace, self.name, self.renew_deadline, self._duration_seconds,
            )

    async def _write_release(self, lease: Lease) -> None:
        for _ in range(_RELEASE_ATTEMPTS):
            if lease.holder_identity != self.identity:
                logger.info(
                    "lease %s/%s is no longer held by %s; nothing to release",
                    self.namespace, self.name, self.identity,
                )
                return
            now = self._clock.now()
            released = attrs.evolve(
                lease,
                holder_identity="",
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
            )
            try:
                self._observe(await update_lease(self._client, released))
            except ConflictError:
                lease = await get_lease(self._client, self.name, namespace=self.namespace)
                self._observe(lease)
                continue
            logger.info("released lease %s/%s", self.namespace, self.name)
            return
        logger.warning(
            "releasing lease %s/%s conflicted %d times; it expires after %ss",
            self.namespace, self.name, _RELEASE_ATTEMPTS, self._duration_seconds,
        )
