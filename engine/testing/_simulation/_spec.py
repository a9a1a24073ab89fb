"""What a plugin author gives the simulator: the workload, what "converged" means, invariants.

A :class:`Simulation` names a plugin and, optionally, a workload generator (a function of a
seeded ``random.Random`` returning timed :class:`Step` objects), a convergence check and
invariants, all of them functions of a :class:`ClusterState` (a synchronous view of the
embedded server's objects). Without a workload the plugin's example manifests are applied
and then mutated; without a convergence check every object of the plugin's own types must
report its current generation as observed.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from engine.kube import Plugin, get_condition

from ...apiserver import ObjectStorage, RequestLog, parse_field_selector, parse_label_selector

__all__ = [
    "AdmissionOracle",
    "ClusterState",
    "Inadmissible",
    "Simulation",
    "Step",
    "Invariant",
    "example_workload",
    "generation_converged",
    "failed_ready_condition",
]

Obj = dict[str, Any]

Invariant = Callable[["ClusterState"], "str | None"]
"""A property of the cluster that must hold at every step: ``None`` when it holds, else a
message saying what is wrong."""


@attrs.frozen
class Step:
    """One workload step: at ``at`` seconds of virtual time, apply or delete ``manifest``.

    ``apply`` is a server-side apply by the test's own client (never faulted); namespaced
    objects without a namespace go to the simulation's namespace. ``delete`` of an object
    that does not exist is not an error.
    """

    at: float
    action: Literal["apply", "delete"]
    manifest: Mapping[str, Any]
    note: str = ""
    """Why, for the trace (``"revision r3"``)."""

    @classmethod
    def apply(cls, at: float, manifest: Mapping[str, Any], note: str = "") -> Step:
        return cls(at, "apply", manifest, note)

    @classmethod
    def delete(cls, at: float, manifest: Mapping[str, Any], note: str = "") -> Step:
        return cls(at, "delete", manifest, note)

    def describe(self) -> str:
        meta = self.manifest.get("metadata") or {}
        where = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
        return f"{self.action} {self.manifest.get('kind')} {where}" + (f" ({self.note})" if self.note else "")


@attrs.define(eq=False)
class ClusterState:
    """The embedded server's objects, read synchronously (no request, no checkpoint), and,
    in a simulation, its request log (:attr:`requests`).

    Objects are the stored ones: read them, do not modify them.
    """

    _storage: ObjectStorage
    namespace: str
    """The simulation's namespace."""
    requests: RequestLog | None = None
    """The server's request log (who wrote what, when, under which Lease), in a simulation."""

    def objects(self, kind: str, *, namespace: str | None = None, group: str | None = None) -> list[Obj]:
        """Every stored object of ``kind`` (optionally of ``group``), in ``namespace`` or all."""
        out: list[Obj] = []
        everything, no_fields = parse_label_selector(None), parse_field_selector(None)
        for rt in self._storage.types():
            if rt.kind != kind or (group is not None and rt.group != group):
                continue
            items, _, _, _ = self._storage.list_objects(rt, namespace if rt.namespaced else None, everything, no_fields)
            out.extend(items)
        return out

    def get(self, kind: str, name: str, namespace: str | None = None, *, group: str | None = None) -> Obj | None:
        """One stored object, or ``None``."""
        for rt in self._storage.types():
            if rt.kind == kind and (group is None or rt.group == group):
                found = self._storage.lookup(rt, namespace if rt.namespaced else None, name)
                if found is not None:
                    return found
        return None


@attrs.frozen
class Inadmissible:
    """Why a validating webhook must refuse an object: what an :class:`AdmissionOracle` found."""

    reason: str
    """What is wrong, in a few words (``dependency cycle: b0 -> b1 -> b0``)."""
    through: tuple[str, ...] = ()
    """The names of the other objects (of its kind, in its namespace) the verdict rests on; empty
    when the object alone is enough to refuse it."""


@attrs.frozen
class AdmissionOracle:
    """What the plugin's validating webhooks must refuse, for one kind, evaluated by the
    simulation on its own (not by calling the plugin's handler).

    ``judge(obj, old, peers)`` takes the object about to be stored, the stored one it replaces
    (``None`` on a create) and the other stored objects of its kind in its namespace, by name;
    it returns ``None`` when the write need not be refused, else :class:`Inadmissible`. It
    must be pure and cheap: the simulator calls it at every write of the kind.
    """

    kind: str
    group: str
    judge: Callable[[Mapping[str, Any], Mapping[str, Any] | None, Mapping[str, Mapping[str, Any]]],
                    Inadmissible | None] = attrs.field(eq=False)


def failed_ready_condition(status: Mapping[str, Any]) -> bool:
    """The default failure-status test: a ``Ready`` condition ``False`` whose reason says it
    failed (contains ``Fail`` or ``Error``)."""
    condition = get_condition({"status": status}, "Ready")
    if condition is None or condition.get("status") != "False":
        return False
    reason = str(condition.get("reason", ""))
    return "Fail" in reason or "Error" in reason


def generation_converged(plugin: Plugin) -> Callable[[ClusterState], list[str]]:
    """The default convergence check: every object of the plugin's own types (its CRDs) is
    not being deleted and reports its current generation as observed (``status.observedGeneration``
    or the ``Ready`` condition's). Types none of whose objects has a status are left out
    (the plugin reads them and writes no status to them)."""
    kinds = [((crd.get("spec") or {}).get("group"), ((crd.get("spec") or {}).get("names") or {}).get("kind"))
             for crd in plugin.crds]

    def check(state: ClusterState) -> list[str]:
        problems = []
        for group, kind in kinds:
            objects = state.objects(str(kind), group=str(group))
            if not any(obj.get("status") for obj in objects):
                continue
            for obj in objects:
                meta = obj["metadata"]
                name = f"{kind} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")
                if meta.get("deletionTimestamp"):
                    problems.append(f"{name} is still being deleted (finalizers {meta.get('finalizers')})")
                    continue
                status = obj.get("status") or {}
                ready = get_condition(obj, "Ready") or {}
                observed = status.get("observedGeneration", ready.get("observedGeneration"))
                if observed != meta.get("generation"):
                    problems.append(f"{name}: generation {meta.get('generation')}, observed {observed}")
        return problems

    return check


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, Mapping):
        return [leaf for key in sorted(node) for leaf in _leaves(node[key], (*path, key))]
    if isinstance(node, list):
        return [leaf for i, item in enumerate(node) for leaf in _leaves(item, (*path, i))]
    return [(path, node)]


def _mutated(manifest: Mapping[str, Any], rng: random.Random, serial: int) -> Obj | None:
    obj = copy.deepcopy(dict(manifest))
    field = "spec" if isinstance(obj.get("spec"), Mapping) else "data" if isinstance(obj.get("data"), Mapping) else None
    if field is None:
        return None
    leaves = [(p, v) for p, v in _leaves(obj[field]) if isinstance(v, (str, int, bool))]
    if not leaves:
        return None
    path, value = rng.choice(leaves)
    parent = obj[field]
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(value, bool):
        parent[path[-1]] = not value
    elif isinstance(value, int):
        parent[path[-1]] = value + 1
    else:
        parent[path[-1]] = f"{value.split('~')[0]}~{serial}"
    return obj


def example_workload(examples: Sequence[Mapping[str, Any]]) -> Callable[[random.Random, float], list[Step]]:
    """The default workload: apply the plugin's example manifests at time 0, then, until
    ``duration``, mutate them: one random leaf of a ``spec`` (or ``data``) changes (strings
    get a suffix, numbers grow, booleans flip), sometimes several times in quick succession,
    and sometimes an object is deleted and applied again later."""

    def workload(rng: random.Random, duration: float) -> list[Step]:
        steps = [Step.apply(0.0, m, "example") for m in examples]
        current = {i: dict(m) for i, m in enumerate(examples) if m.get("kind") != "Namespace"}
        if not current:
            return steps
        t, serial = 0.0, 0
        while True:
            t += rng.uniform(0.5, 6.0)
            if t >= duration:
                return steps
            index = rng.choice(sorted(current))
            roll = rng.random()
            if roll < 0.1:
                steps.append(Step.delete(t, current[index], "delete"))
                steps.append(Step.apply(t + rng.uniform(1.0, 10.0), current[index], "recreate"))
                continue
            for burst in range(rng.choice((1, 1, 1, 2, 4)) if roll < 0.9 else 1):
                serial += 1
                mutated = _mutated(current[index], rng, serial)
                if mutated is None:
                    break
                current[index] = mutated
                steps.append(Step.apply(t + burst * rng.uniform(0.01, 0.3), mutated, f"mutation {serial}"))

    return workload


def _no_invariants() -> tuple[Invariant, ...]:
    return ()


def _invariants(items: Iterable[Invariant]) -> tuple[Invariant, ...]:
    return tuple(items)


def _oracles(items: Iterable[AdmissionOracle]) -> tuple[AdmissionOracle, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class Simulation:
    """How to simulate one plugin: its workload, its convergence check, its invariants.

    ``workload(rng, duration)`` returns the steps (times in seconds of virtual time, from 0 to
    ``duration``) from the seeded ``rng`` alone; ``converged(state)`` returns what is not yet
    converged (an empty list when everything is); each invariant returns ``None`` or what is
    wrong, and is checked at every step. ``failure_status(status)`` says whether a status
    written by a run is a failure status (one that a superseded or shutdown run must never
    write). ``config`` updates the plugin's configuration; ``prompt`` is how long a dependent
    may wait for its run once its dependency is Ready. ``admission`` says, per kind, what the
    plugin's validating webhooks must refuse: while they are registered, no object they must
    refuse may be stored (see :func:`~engine.testing.simulate`).
    """

    plugin: Plugin
    workload: Callable[[random.Random, float], Iterable[Step]] | None = None
    converged: Callable[[ClusterState], Sequence[str]] | None = None
    invariants: Sequence[Invariant] = attrs.field(factory=_no_invariants, converter=_invariants)
    admission: Sequence[AdmissionOracle] = attrs.field(factory=tuple, converter=_oracles)
    failure_status: Callable[[Mapping[str, Any]], bool] = failed_ready_condition
    config: Mapping[str, Any] = attrs.field(factory=dict)
    namespace: str = "sim"
    """Where namespaced objects without a namespace go."""
    prompt: float = 10.0
    """Seconds of virtual time within which a dependent must start a run after its dependency
    became Ready."""

    def steps(self, rng: random.Random, duration: float) -> list[Step]:
        """The workload for one seed, sorted by time (stable)."""
        workload = self.workload if self.workload is not None else example_workload(self.plugin.examples)
        return sorted(workload(rng, duration), key=lambda s: s.at)

    def convergence(self, state: ClusterState) -> list[str]:
        """What is not converged yet."""
        check = self.converged if self.converged is not None else generation_converged(self.plugin)
        return list(check(state))
