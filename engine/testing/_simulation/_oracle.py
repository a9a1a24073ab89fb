"""The oracle: what the simulation checks, wired to the embedded server it watches and to the replicas it hears from."""

from __future__ import annotations

import attrs

from ...apiserver import RequestLog
from .._target import KubeTarget
from .._trace import Trace
from ._audit import RequestAudit
from ._checks import Checks
from ._notifications import Notifications
from ._observer import ReplicaObserver
from ._replica import Replica, Roster
from ._spec import ClusterState, Simulation
from ._verdict import Verdict

__all__ = ["Oracle"]


@attrs.define(eq=False)
class Oracle:
    """The verdict, the checks, the watched changes owed and the request audit of one seed,
    over one :class:`Roster` of replicas. It drives nothing: the fleet, the fault driver and
    the runner tell it what they do, and it fails the run at the first broken guarantee."""

    simulation: Simulation
    verdict: Verdict = attrs.field(factory=Verdict)
    roster: Roster = attrs.field(factory=Roster)
    notifications: Notifications = attrs.field(init=False)
    checks: Checks = attrs.field(init=False)
    audit: RequestAudit = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.notifications = Notifications(self.verdict, self.roster)
        self.checks = Checks(self.simulation, self.verdict, self.roster, self.notifications)
        self.audit = RequestAudit(self.simulation, self.verdict, self.roster, self.checks, self.notifications)

    @property
    def trace(self) -> Trace:
        return self.verdict.trace

    def attach(self, target: KubeTarget) -> None:
        """Watch ``target``'s embedded server: its request log, its answered requests and its
        storage's change feed."""
        assert target.api is not None
        self.checks.target = self.audit.target = target
        log = self.notifications.log = RequestLog(target.api.store)
        target.api.add_request_observer(log)
        target.api.add_request_observer(self.audit.on_request)
        target.api.store.add_listener(self.notifications.on_change)
        self.checks.state = ClusterState(target.api.store, self.simulation.namespace, requests=log)

    def observer(self, rep: Replica) -> ReplicaObserver:
        """The observer of the replica life ``rep``, to hand to its engine."""
        return ReplicaObserver(rep, self.checks, self.notifications)
