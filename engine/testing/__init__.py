"""What users need to test their reconcilers: an embedded Kubernetes-compatible API server.

Start with :class:`ApiServer`::

    async with ApiServer() as api:
        async with httpx.AsyncClient(base_url=api.url) as client:
            ...

``ApiServer(listen=False)`` with :meth:`ApiServer.memory_transport` runs without sockets, so a
whole system can run inside one trio run under ``MockClock``. ``api.faults`` injects failures;
``api.store`` is the server's :class:`ObjectStorage`, for seeding and inspecting state;
``api.snapshot()`` and ``api.restore(snapshot)`` take it back in time, as an etcd restore does.
Beside the API, the server runs what a cluster's controller manager would (garbage collection,
namespace clean-up), after the requests, as a cluster does: ``await api.settle()`` waits for
it, and ``ApiServer(controllers=False)`` answers as an API server alone.

To test a plugin, :func:`open_plugin_test` runs it against a :class:`KubeTarget` and hands back
a :class:`PluginHarness` (apply manifests, wait for conditions, read runs and events). The
pytest plugin (``engine.testing._pytest_plugin``, entry point ``engine``) provides the
fixtures ``kube_target``, ``kube_api``, ``kube_client`` and ``kube_cluster``, under virtual
time on the embedded server; :class:`EnvTest` starts a real etcd and kube-apiserver the way
controller-runtime's envtest does.

:func:`simulate` runs a plugin through a seeded workload and fault schedule with trio's
scheduling fixed by the seed, checks the engine's guarantees at every step, and replays a
seed exactly (``python -m engine simulate``); a :class:`Simulation` says what the workload is
and what converged means for a plugin.
"""

from .._exports import moved_names as _moved_names
from .._exports import publish as _publish
from ._envtest import EnvTest as EnvTest
from ._errors import ApiServerError as ApiServerError
from ._errors import EnvTestError as EnvTestError
from ._errors import HarnessError as HarnessError
from ._errors import RequestRejected as RequestRejected
from ._errors import WaitTimeout as WaitTimeout
from ._faults import Fault as Fault
from ._faults import Faults as Faults
from ._faults import FaultScope as FaultScope
from ._harness import PluginHarness as PluginHarness
from ._harness import open_plugin_test as open_plugin_test
from ._memory import MemoryTransport as MemoryTransport
from ._resources import ResourceType as ResourceType
from ._schedule import FaultKind as FaultKind
from ._server import ApiServer as ApiServer
from ._simulate import SimulationResult as SimulationResult
from ._simulate import simulate as simulate
from ._simulate import simulate_seeds as simulate_seeds
from ._simulation import ClusterState as ClusterState
from ._simulation import Simulation as Simulation
from ._simulation import Step as Step
from ._simulation import simulation_for as simulation_for
from ._storage import ObjectStorage as ObjectStorage
from ._storage import StorageSnapshot as StorageSnapshot
from ._target import KubeTarget as KubeTarget
from ._target import open_embedded_target as open_embedded_target
from ._trace import TraceEntry as TraceEntry

__all__ = [
    "ApiServer",
    "ApiServerError",
    "ClusterState",
    "EnvTest",
    "EnvTestError",
    "Fault",
    "FaultKind",
    "FaultScope",
    "Faults",
    "HarnessError",
    "KubeTarget",
    "MemoryTransport",
    "ObjectStorage",
    "PluginHarness",
    "RequestRejected",
    "ResourceType",
    "Simulation",
    "SimulationResult",
    "Step",
    "StorageSnapshot",
    "TraceEntry",
    "WaitTimeout",
    "open_embedded_target",
    "open_plugin_test",
    "simulate",
    "simulate_seeds",
    "simulation_for",
]

_publish(globals())
__getattr__ = _moved_names(__name__, {"Store": "engine.testing:ObjectStorage"})
