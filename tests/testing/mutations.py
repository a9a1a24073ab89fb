"""The simulator's strength, measured: plant realistic one-line bugs, one at a time, and require
the simulator to catch each within a stated number of seeds.

A :class:`Mutation` names one function of the engine or of a bundled plugin and one line of
it to change. :func:`planted` compiles a copy of that function with the line changed (in its
module's namespace, so it sees the same names) and puts it in place of the original until
the block ends. :func:`hunt` simulates seeds from 0 until one reports a violation.

``python -m tests.testing.mutations [NAME ...] [--seeds N]`` runs every mutation (or those
named) and prints, per mutation, the seed that caught it and the violation; it exits 1 if
one of them was not caught within ``--seeds`` (default 40). It takes minutes; the test suite
(``tests/testing/test_simulate_checks.py``) runs each caught mutation at the one seed that
catches it (:func:`caught_at`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import logging
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence

import attrs

from engine.testing import FaultKind, SimulationResult, simulate, simulation_for

__all__ = ["Mutation", "MUTATIONS", "planted", "hunt", "caught_at", "main"]


@attrs.frozen
class Mutation:
    """One realistic one-line bug."""

    name: str
    bug_class: str
    """Which class of bug the issue lists it under."""
    module: str
    qualname: str
    """``Class.method`` or ``function`` in ``module``."""
    old: str
    """The line's text (stripped) as it is; it must occur exactly once in the function."""
    new: str
    plugin: str = "bundles"
    faults: tuple[FaultKind, ...] | None = None
    """The fault kinds to simulate (``None``: all)."""
    duration: float = 60.0
    scale_out: bool = False
    """Whether to simulate in scale-out mode (ring replicas)."""


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("runs-not-cancelled-on-lease-loss", "fencing", "engine._manager", "Manager._lose_leadership",
             "for controller in self._controllers:", "for controller in []:",
             faults=(FaultKind.LEASE_LOSS, FaultKind.LATENCY)),
    Mutation("relist-drops-vanished-silently", "lost notification", "engine.kube._runtime._store", "Store._replace",
             "changes.append(InformerEvent(WatchEventType.DELETED, old, old))", "pass",
             faults=(FaultKind.HISTORY_REWIND,)),
    Mutation("sink-delivered-inline", "stuck sink", "engine._events", "EventRecorder.run",
             "slot.send.send_nowait(correlated)", "await slot.sink.deliver(correlated)",
             faults=(FaultKind.SINK_OUTAGE, FaultKind.LATENCY)),
    Mutation("shield-does-not-shield", "cut final write", "engine._run", "_Shield.__enter__",
             "scope = self._scope = trio.CancelScope(shield=True, deadline=trio.current_time() + self._seconds)",
             "scope = self._scope = trio.CancelScope(shield=False, deadline=trio.current_time() + self._seconds)"),
    Mutation("dirty-key-not-redelivered", "lost wake-up", "engine._workqueue", "WorkQueue.done",
             "self._enqueue(key)", "pass"),
    Mutation("copy-written-from-the-cache", "plugin invariant", "engine.plugins.mirror._controller",
             "MirrorReconciler.reconcile", "live = await hold_finalizer(self.client, self.configmaps, source, FINALIZER)",
             "live = source", plugin="mirror"),
    Mutation("copy-write-unshielded", "cut final write (plugin)", "engine.plugins.mirror._controller",
             "MirrorReconciler.reconcile", "with ctx.shield(COPY_WRITE_TIMEOUT) as scope:",
             "with __import__('trio').CancelScope() as scope:", plugin="mirror"),
    Mutation("status-write-unshielded", "cut final write (plugin)", "engine.plugins.bundles._controller", "write_status",
             "with ctx.shield(STATUS_WRITE_TIMEOUT) as scope:", "with trio.CancelScope() as scope:"),
    Mutation("gate-release-returns-at-once", "scale-out handover", "engine._ownership", "OwnershipGate.release",
             "self._owned = self._owned - ranges", "self._owned = self._owned - ranges; return 0",
             faults=(FaultKind.SCALE_UP, FaultKind.SCALE_DOWN, FaultKind.LATENCY), scale_out=True),
    Mutation("ring-honours-dead-leases-twice-as-long", "scale-out takeover", "engine.kube._coordination._ring", "_Record.expired",
             "return now >= self.observed_at + self.duration", "return now >= self.observed_at + 2 * self.duration",
             faults=(FaultKind.CRASH,), scale_out=True),
    Mutation("ring-never-takes-over-dead-leases", "scale-out takeover", "engine.kube._coordination._ring", "_Record.expired",
             "return now >= self.observed_at + self.duration", "return False",
             plugin="mirror", faults=(FaultKind.CRASH,), duration=20, scale_out=True),
    Mutation("ring-gains-over-others-claims", "scale-out claims", "engine.kube._coordination._ring", "HashRing._blocking",
             "blocked = blocked | record.held", "pass",
             faults=(FaultKind.SCALE_UP, FaultKind.SCALE_DOWN, FaultKind.LATENCY), scale_out=True),
    # Found by the fault campaign on real kube-apiserver: a member back from a partition ran
    # from caches its hung watches had left behind.
    Mutation("ring-rejoins-on-stale-caches", "scale-out rejoin", "engine.kube._coordination._ring", "HashRing._tick",
             "self.cache_refresh()", "pass", plugin="mirror", faults=(FaultKind.PARTITION,), scale_out=True),
    Mutation("validating-webhooks-skipped-on-update", "admission", "engine.apiserver._admission", "Admission.validate",
             "if request.rt.storage_key in (MUTATING, VALIDATING) or not self.configured(VALIDATING):",
             'if request.rt.storage_key in (MUTATING, VALIDATING) or not self.configured(VALIDATING) '
             'or request.operation == "UPDATE":'),
    # The copy's apply wrapped in a try that swallows any error: the run ends as a success.
    Mutation("copy-write-failure-swallowed", "unrequeued failure (plugin)", "engine.plugins.mirror._controller",
             "MirrorReconciler.reconcile", "await self.client.apply(self.configmaps, copy, field_manager=FIELD_MANAGER, force=True)",
             "try:\n" + 16 * " " + "await self.client.apply(self.configmaps, copy, field_manager=FIELD_MANAGER, force=True)\n"
             + 12 * " " + "except Exception:\n" + 16 * " " + "pass", plugin="mirror"),
    # The Sources' status writes stay shielded (status-write-unshields both).
    Mutation("bundle-status-write-unshielded", "cut final write (plugin)", "engine.plugins.bundles._controller", "write_status",
             "with ctx.shield(STATUS_WRITE_TIMEOUT) as scope:",
             'with ctx.shield(STATUS_WRITE_TIMEOUT) if resource.kind == "Source" else trio.CancelScope() as scope:'),
    # find_cycle as the webhook module imported it: the reconciler's own cycle check stays right.
    Mutation("cycle-check-sees-direct-dependencies-only", "admission (plugin)", "engine.plugins.bundles._webhooks",
             "find_cycle", "frontier = following", "frontier = following if frontier == [start] else []"),
)
"""The bugs :func:`main` plants: one per class of the issue, plus the older classes."""


def _source(function: object) -> str:
    return textwrap.dedent(inspect.getsource(function))  # type: ignore[arg-type]


@contextlib.contextmanager
def planted(mutation: Mutation) -> Iterator[None]:
    """Replace ``mutation.qualname`` by a copy with ``mutation.old`` changed to ``mutation.new``
    until the block ends. Raises ``ValueError`` when the line is not in it exactly once."""
    module = importlib.import_module(mutation.module)
    owner_name, _, attr = mutation.qualname.rpartition(".")
    owner: object = getattr(module, owner_name) if owner_name else module
    original = inspect.getattr_static(owner, attr)
    function = getattr(original, "__wrapped__", original)
    source = _source(function)
    if source.count(mutation.old) != 1:
        raise ValueError(f"{mutation.name}: {mutation.old!r} occurs {source.count(mutation.old)} times in "
                         f"{mutation.module}.{mutation.qualname}")
    namespace = dict(vars(module))
    exec(compile(source.replace(mutation.old, mutation.new), f"<mutant {mutation.name}>", "exec"), namespace)
    setattr(owner, attr, namespace[attr])
    try:
        yield
    finally:
        setattr(owner, attr, original)


def hunt(mutation: Mutation, seeds: int = 40) -> SimulationResult | None:
    """Simulate seeds 0, 1, ... (at most ``seeds``) with ``mutation`` planted; the first
    result with a violation, or ``None``."""
    simulation = simulation_for(mutation.plugin)
    with planted(mutation):
        for seed in range(seeds):
            result = simulate(simulation, seed, faults=mutation.faults, duration=mutation.duration,
                              scale_out=mutation.scale_out)
            if not result.ok:
                return result
    return None


def caught_at(name: str, seed: int) -> SimulationResult:
    """Simulate only ``seed`` with the mutation ``name`` planted (its plugin, faults and
    duration): what a test of a check runs to show the seed that catches its bug."""
    mutation = next(m for m in MUTATIONS if m.name == name)
    with planted(mutation):
        return simulate(simulation_for(mutation.plugin), seed, faults=mutation.faults, duration=mutation.duration,
                        scale_out=mutation.scale_out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testing.mutations", description=__doc__)
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--seeds", type=int, default=40, help="seeds allowed per mutation (default 40)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    logging.disable(logging.CRITICAL)
    missed = 0
    for mutation in chosen:
        started = time.perf_counter()
        result = hunt(mutation, args.seeds)
        took = time.perf_counter() - started
        if result is None:
            missed += 1
            print(f"MISSED  {mutation.name} ({mutation.bug_class}): no violation in {args.seeds} seeds ({took:.0f}s)")
        else:
            print(f"caught  {mutation.name} ({mutation.bug_class}) at seed {result.seed} ({took:.0f}s): {result.violation}")
        sys.stdout.flush()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
