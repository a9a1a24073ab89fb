"""What users write tests of their reconcilers with.

To test a plugin, :func:`open_plugin_test` runs it against a :class:`KubeTarget` and hands back
a :class:`PluginHarness` (apply manifests, wait for conditions, read runs and events). The
target is the embedded API server (:class:`engine.apiserver.ApiServer`) under virtual time by
default, or a real control plane: :class:`EnvTest` starts a real etcd and kube-apiserver the
way controller-runtime's envtest does. The pytest plugin (``engine.testing._pytest_plugin``,
entry point ``engine``) provides the fixtures ``kube_target``, ``kube_api``, ``kube_client``
and ``kube_cluster``.

:func:`simulate` runs a plugin through a seeded workload and fault schedule with trio's
scheduling fixed by the seed, checks the engine's guarantees at every step, and replays a
seed exactly (``python -m engine simulate``); a :class:`Simulation` says what the workload is
and what converged means for a plugin; :func:`find_simulation` finds a plugin's as
``python -m engine simulate`` does, and :func:`load_simulation` loads one by ``module:attr``.

The embedded API server itself lives in :mod:`engine.apiserver`.
"""

from .._exports import publish as _publish
from ._envtest import EnvTest as EnvTest
from ._errors import EnvTestError as EnvTestError
from ._errors import HarnessError as HarnessError
from ._errors import WaitTimeout as WaitTimeout
from ._harness import PluginHarness as PluginHarness
from ._harness import open_plugin_test as open_plugin_test
from ._schedule import FaultKind as FaultKind
from ._schedule import parse_fault_kinds as parse_fault_kinds
from ._simulation._finder import find_simulation as find_simulation
from ._simulation._finder import load_simulation as load_simulation
from ._simulation._finder import simulation_for as simulation_for
from ._simulation._result import DEFAULT_BOUND as DEFAULT_BOUND
from ._simulation._result import DEFAULT_DURATION as DEFAULT_DURATION
from ._simulation._result import DEFAULT_SEED_TIMEOUT as DEFAULT_SEED_TIMEOUT
from ._simulation._result import SimulationResult as SimulationResult
from ._simulation._seed import simulate as simulate
from ._simulation._spec import AdmissionOracle as AdmissionOracle
from ._simulation._spec import ClusterState as ClusterState
from ._simulation._spec import Inadmissible as Inadmissible
from ._simulation._spec import Simulation as Simulation
from ._simulation._spec import Step as Step
from ._simulation._sweep import simulate_seeds as simulate_seeds
from ._target import KubeTarget as KubeTarget
from ._target import open_embedded_target as open_embedded_target
from ._trace import TraceEntry as TraceEntry

__all__ = [
    "DEFAULT_BOUND",
    "DEFAULT_DURATION",
    "DEFAULT_SEED_TIMEOUT",
    "AdmissionOracle",
    "ClusterState",
    "EnvTest",
    "EnvTestError",
    "FaultKind",
    "HarnessError",
    "Inadmissible",
    "KubeTarget",
    "PluginHarness",
    "Simulation",
    "SimulationResult",
    "Step",
    "TraceEntry",
    "WaitTimeout",
    "find_simulation",
    "load_simulation",
    "open_embedded_target",
    "open_plugin_test",
    "parse_fault_kinds",
    "simulate",
    "simulate_seeds",
    "simulation_for",
]

_publish(globals())
