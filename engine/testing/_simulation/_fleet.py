"""The fleet: the replicas' lives, started, stopped gracefully, restarted and scaled, each running the plugin against the embedded server."""

from __future__ import annotations

import itertools
import math
import random

import attrs
import trio

from engine import OwnershipGate
from engine._text import summarize
from engine.kube import Client, HashRing, KubeError, WebhookServer

from .._harness import open_plugin_test
from .._target import KubeTarget
from .._webhook_service import WebhookService
from ._oracle import Oracle
from ._replica import (
    REPLICA,
    RING_HANDOVER_GRACE,
    RING_LEASE_DURATION,
    RING_RENEW_DEADLINE,
    RING_RETRY_PERIOD,
    Replica,
)
from ._spec import Simulation

__all__ = ["Fleet", "TICK"]

TICK = 1.0
"""Seconds of virtual time between the simulation's own looks (the monitor, the settling)."""


@attrs.define(eq=False)
class Fleet:
    """The replica slots: each current life (in the oracle's :class:`Roster`), started as a
    pod would be and stopped gracefully, restarts pending, slots retired by a scale-down."""

    simulation: Simulation
    oracle: Oracle
    leader_election: bool
    """Whether the replicas are leader-election candidates (a lease loss is planned)."""
    rbac: bool = True
    """Whether the replicas run as the plugin's ServiceAccount under its generated Role."""
    scale_out: bool = False
    """Whether the replicas run as members of a scale-out ring instead of with leader election."""
    webhook_service: WebhookService | None = None
    target: KubeTarget | None = None
    nursery: trio.Nursery | None = None
    generations: dict[int, int] = attrs.field(factory=dict)
    restarting: set[int] = attrs.field(factory=set)
    restart_scopes: dict[int, trio.CancelScope] = attrs.field(factory=dict)
    retired: set[int] = attrs.field(factory=set)
    """Scale-out mode: the slots a ``scale-down`` stopped for good."""

    async def start(self, slot: int) -> None:
        """Start a new life of replica ``slot``. A start that fails on an API error (the
        plugin's setup could not discover its types, say) is retried as a crash-looping pod
        would be: after 1, 2, 4, then every 8 seconds."""
        assert self.nursery is not None
        for attempt in itertools.count():
            self.generations[slot] = self.generations.get(slot, 0) + 1
            rep = Replica(slot, f"{REPLICA}{slot + 1}.{self.generations[slot]}")
            self.oracle.roster.replicas.append(rep)
            self.oracle.roster.current[slot] = rep
            try:
                await self.nursery.start(self._replica, rep)
                return
            except KubeError as exc:
                rep.done.set()
                delay = float(min(8, 2**attempt))
                self.oracle.trace.add(rep.identity, "replica", f"start failed ({summarize(exc)}); again in {delay:g}s")
            await trio.sleep(delay)

    async def _replica(self, rep: Replica, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert self.target is not None
        sim = self.simulation
        observer = self.oracle.observer(rep)

        def member(client: Client, gate: OwnershipGate, identity: str) -> HashRing:
            ring = HashRing(
                client, gate, name=f"engine-{sim.plugin.name}", namespace=sim.namespace, plugins=[sim.plugin.name],
                identity=identity, lease_duration=RING_LEASE_DURATION, renew_deadline=RING_RENEW_DEADLINE,
                retry_period=RING_RETRY_PERIOD, handover_grace=RING_HANDOVER_GRACE, rng=random.Random(identity),
            )
            rep.ring = ring
            ring.on_change.append(observer.ring_changed)
            return ring

        async with open_plugin_test(
            sim.plugin, self.target, identity=rep.identity, namespace=sim.namespace, config=sim.config,
            leader_election=self.leader_election, sinks=[self.oracle.roster.notifier], observers=[observer],
            grace_period=self.oracle.checks.grace_period, start_timeout=math.inf, rbac=self.rbac,
            scale_out=member if self.scale_out else None, webhooks=False,
        ) as harness:
            rep.harness = harness
            if self.webhook_service is not None:
                rep.webhook_server = WebhookServer(sim.plugin.webhooks, cluster=harness.cluster,
                                                   client=harness.replica_client)
            rep.started_at = trio.current_time()
            harness.manager.events.add_tap(observer.tap)
            if harness.manager.leader_election is not None:
                harness.manager.leader_election.on_lost(observer.lose)
            mode = " (leader election)" if self.leader_election else f" (ring member {rep.ring.member})" if rep.ring else ""
            self.oracle.trace.add(rep.identity, "replica", "started" + mode)
            task_status.started()
            with rep.wait_scope:
                await harness.wait_stopped()
            if harness.running:
                rep.stop_at = trio.current_time()
                self.oracle.trace.add(rep.identity, "replica", "stopping gracefully")
                report = await harness.stop("simulated restart", timeout=math.inf)
                assert report is not None
                self.oracle.trace.add(rep.identity, "replica", f"stopped: drained for {report.drain_seconds:.3f}s, "
                                      f"{report.cancelled_runs} run(s) cancelled")
            else:
                lost = harness.manager.leadership_lost
                self.oracle.trace.add(rep.identity, "replica", f"stopped by itself: {lost or harness.report}")
        rep.done.set()

    def stop(self, rep: Replica) -> None:
        rep.wait_scope.cancel()

    def schedule_restart(self, rep: Replica, after: float) -> None:
        """Mark ``rep``'s slot as restarting now (so a fault drawn in the same instant sees it) and
        start :meth:`restart_later` for it."""
        assert self.nursery is not None and rep.slot not in self.restarting
        self.restarting.add(rep.slot)
        self.nursery.start_soon(self.restart_later, rep, after)

    async def restart_later(self, rep: Replica, after: float) -> None:
        """Start ``rep``'s slot again ``after`` seconds once it stopped. Cancelled (see
        :meth:`~engine.testing._simulation._faults.FaultDriver.faults_over`) when the faults
        stop while it still runs: a lease loss whose fault the end of the faults cleared before
        the leader lost its lease."""
        scope = self.restart_scopes[rep.slot] = trio.CancelScope()
        try:
            with scope:
                await rep.done.wait()
                await trio.sleep(after)
                if self.oracle.roster.current.get(rep.slot) is rep:
                    await self.start(rep.slot)
        finally:
            self.restart_scopes.pop(rep.slot, None)
            self.restarting.discard(rep.slot)

    async def scale_up(self, slot: int) -> None:
        """Start a new slot that a ``scale-up`` marked as restarting."""
        try:
            await self.start(slot)
        finally:
            self.restarting.discard(slot)

    def webhook_endpoints(self) -> list[tuple[str, WebhookServer]]:
        """The webhook servers of the live replicas that the API server can reach, by slot."""
        return [(rep.identity, rep.webhook_server) for _, rep in sorted(self.oracle.roster.current.items())
                if rep.webhook_server is not None and rep.alive and rep.identity not in self.oracle.roster.cut_off
                and rep.identity not in self.oracle.roster.crashed]
