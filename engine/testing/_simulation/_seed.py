"""Running one seed: the oracle, the fleet and the fault driver wired to one embedded server under virtual time, with trio's scheduling fixed by the seed."""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Iterable

import attrs
import httpx
import trio
import trio.testing

from engine._text import summarize
from engine.kube import AdmissionWebhook, Client, install_crds

from .._admission_check import AdmissionCheck
from .._determinism import deterministic_scheduling
from .._harness import DRIVER_USER_AGENT, register_in_process, webhook_configuration_name
from .._schedule import RING_FAULTS, FaultKind, plan_faults
from .._target import open_embedded_target
from .._webhook_service import WebhookService
from ._attempts import RunWrites
from ._faults import FaultDriver
from ._fleet import TICK, Fleet
from ._oracle import Oracle
from ._replica import REPLICA, RING_REPLICAS
from ._result import DEFAULT_BOUND, DEFAULT_DURATION, DEFAULT_SEED_TIMEOUT, SimulationResult, replay_command
from ._settling import Settler
from ._spec import Simulation

__all__ = ["simulate", "EPOCH", "DIRECT_TRANSPORT"]

EPOCH = 1_700_000_000.0
"""The wall clock (seconds since the Unix epoch) at the start of virtual time."""
DIRECT_TRANSPORT = True
"""Whether the replicas and the driver reach the embedded server through its direct transport
(requests handed to its handler, no HTTP encoding: most of a seed's cost otherwise) rather
than HTTP/1.1 over memory streams. Replays are exact either way, but a seed's run differs
between the two."""


@attrs.define(eq=False)
class _Simulator:
    """One seed's run: draws the workload and the fault plan from the seed, builds the oracle,
    the fleet, the fault driver and the settler, and wires them to one embedded server."""

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
    oracle: Oracle = attrs.field(init=False)
    fleet: Fleet = attrs.field(init=False)
    faults: FaultDriver = attrs.field(init=False)
    settler: Settler = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        master = random.Random(self.seed)
        workload_rng = random.Random(master.getrandbits(64))
        fault_rng = random.Random(master.getrandbits(64))
        steps = self.simulation.steps(workload_rng, self.duration)
        kinds = self.kinds - {FaultKind.LEASE_LOSS} if self.scale_out else self.kinds - RING_FAULTS
        plan = plan_faults(fault_rng, kinds, self.duration)
        self.oracle = Oracle(self.simulation)
        leader_election = not self.scale_out and any(f.kind is FaultKind.LEASE_LOSS for f in plan)
        self.fleet = Fleet(self.simulation, self.oracle, leader_election, self.rbac, self.scale_out)
        self.faults = FaultDriver(self.simulation, self.oracle, self.fleet, steps, plan, self.duration)
        self.settler = Settler(self.simulation, self.oracle, self.fleet, self.bound)

    async def main(self) -> None:
        self.oracle.trace.origin = trio.current_time()
        with self.oracle.verdict.scope:
            try:
                await self._run()
            except BaseException as raised:
                group = _errors_of(raised)
                escaped = self._sink_failure(group)
                if escaped is not None:
                    self.oracle.verdict.fail(escaped)
                    return
                exc: BaseException = group
                while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                    exc = exc.exceptions[0]
                detail = "".join(traceback.format_exception_only(exc)).strip()
                where = traceback.extract_tb(exc.__traceback__)[-1:]
                at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
                self.oracle.verdict.fail(f"the simulation crashed: {detail}{at}")

    def _sink_failure(self, error: BaseException) -> str | None:
        """What to report when ``error`` (the simulation's crash) is an event sink's failure
        that escaped from a delivery made outside the sink's own worker (where the recorder
        would have counted it): the dispatcher, and every sink with it, stopped."""
        if isinstance(error, BaseExceptionGroup):
            return next((m for e in error.exceptions if (m := self._sink_failure(e)) is not None), None)
        sinks = {id(sink): (rep, sink) for rep in self.oracle.roster.replicas if rep.harness is not None
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
            target.wrap_transport = self._wrap_transport
            self.oracle.attach(target)
            self.fleet.target = self.faults.target = target
            async with target.client(user_agent=DRIVER_USER_AGENT) as driver:
                self.faults.driver = driver
                await install_crds(driver, sim.plugin.crds)
                if self.webhooks and sim.plugin.webhooks:
                    await self._register_webhooks(driver)
                async with trio.open_nursery() as nursery:
                    self.fleet.nursery = self.faults.nursery = nursery
                    for f in self.faults.plan:
                        self.oracle.trace.add("sim", "plan", f"at {f.at:.3f}s: {f.describe()}")
                    for slot in range(RING_REPLICAS if self.scale_out else 2 if self.fleet.leader_election else 1):
                        await self.fleet.start(slot)
                    nursery.start_soon(self._monitor)
                    await self.faults.drive()
                    await self.faults.faults_over()
                    await self.settler.settle()
                    await self.settler.finish()
                    nursery.cancel_scope.cancel(reason="simulation finished")

    def _wrap_transport(self, transport: httpx.AsyncBaseTransport, user_agent: str) -> httpx.AsyncBaseTransport:
        """A replica's client sends through :class:`RunWrites` (which run made each write, and
        which failed); the driver's as it is."""
        identity = user_agent.split("/", 1)[0]
        return RunWrites(transport, identity, self.oracle.roster) if identity.startswith(REPLICA) else transport

    async def _register_webhooks(self, driver: Client) -> None:
        """Register the plugin's webhooks once, served by the live replicas through a
        :class:`~engine.testing._webhook_service.WebhookService`, and, when the simulation
        has oracles for them, start the admission check."""
        assert self.fleet.target is not None and self.fleet.target.api is not None
        api, plugin = self.fleet.target.api, self.simulation.plugin
        service = WebhookService(webhook_configuration_name(plugin), self.fleet.webhook_endpoints)
        if not await register_in_process(driver, api, plugin, service):
            return
        self.fleet.webhook_service = service
        audit = self.oracle.audit
        service.observers.append(audit.webhook_called)
        self.oracle.trace.add("sim", "webhooks", f"{len(plugin.webhooks)} registered, served by the live replicas")
        policies = {w.path: w.failure_policy for w in plugin.webhooks
                    if isinstance(w, AdmissionWebhook) and not w.mutating}
        if not self.simulation.admission or not policies:
            return
        check = audit.admission = AdmissionCheck(api.store, self.simulation.admission, policies,
                                                 origin=self.oracle.trace.origin)
        service.observers.append(check.asked)
        api.add_request_observer(check.served)
        api.add_watch_observer(check.delivered)
        api.store.add_listener(audit.admitted)

    async def _monitor(self) -> None:
        while True:
            await trio.sleep(TICK)
            await trio.testing.wait_all_tasks_blocked()
            self.oracle.checks.check_quiescent()
            self.oracle.checks.check()

    def result(self, replay: str, wall: float, virtual: float) -> SimulationResult:
        verdict, faults = self.oracle.verdict, self.faults
        return SimulationResult(
            seed=self.seed, violation=verdict.violation, replay=replay, trace=tuple(verdict.trace.entries),
            digest=verdict.trace.digest(), faults=tuple(f"{f.describe()} at {f.at:.1f}s" for f in faults.plan),
            steps=faults.applied, runs=sum(len(r.harness.runs) for r in self.oracle.roster.replicas if r.harness is not None),
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
        oracle = self._runner.oracle
        oracle.verdict.fail(
            f"the seed hung: it did not end within {self._seconds:g}s of wall time (virtual time stuck at "
            f"{trio.current_time() - oracle.trace.origin:.3f}s: something keeps the engine busy at one "
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
    short timings: :data:`~engine.testing._simulation._replica.RING_LEASE_DURATION`) instead
    of leader-election candidates, two at first, and the fault kinds ``scale-up``,
    ``scale-down``, ``crash`` and ``partition`` act on them (``lease-loss`` is not drawn);
    every write of a key's object must come while its replica owned the key's range, and every
    range a crashed or cut-off replica owned must be owned again within
    :data:`~engine.testing._simulation._checks.OWNED_AGAIN_BOUND`. With ``webhooks`` (the
    default) the plugin's webhooks are registered, served by the live replicas, and the
    simulation's admission oracles are checked. A seed still running after ``seed_timeout``
    seconds of wall time (``None``: no limit) ends as a violation that says it hung, with its
    replay command. Runs its own ``trio.run`` under ``MockClock``: call it from synchronous
    code, not from inside trio. The same arguments give the same trace, entry for entry (up to
    a seed that hung, which ends where the wall clock stopped it).
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
    replay = replay_command(named, simulation_ref, seed, kinds, duration, bound, rbac, scale_out, webhooks)
    return runner.result(replay, time.perf_counter() - wall, clock.current_time())
