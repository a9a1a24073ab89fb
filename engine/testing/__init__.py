"""What users need to test their reconcilers: an embedded Kubernetes-compatible API server.

Start with :class:`ApiServer`::

    async with ApiServer() as api:
        async with httpx.AsyncClient(base_url=api.url) as client:
            ...

``ApiServer(listen=False)`` with :meth:`ApiServer.memory_transport` runs without sockets, so a
whole system can run inside one trio run under ``MockClock``. ``api.faults`` injects failures;
``api.store`` is the server's :class:`ObjectStorage`, for seeding and inspecting state.
"""

from .._exports import moved_names as _moved_names
from .._exports import publish as _publish
from ._errors import ApiServerError as ApiServerError
from ._errors import RequestRejected as RequestRejected
from ._faults import Fault as Fault
from ._faults import Faults as Faults
from ._faults import FaultScope as FaultScope
from ._memory import MemoryTransport as MemoryTransport
from ._resources import ResourceType as ResourceType
from ._server import ApiServer as ApiServer
from ._storage import ObjectStorage as ObjectStorage

__all__ = [
    "ApiServer",
    "ApiServerError",
    "Fault",
    "FaultScope",
    "Faults",
    "MemoryTransport",
    "ObjectStorage",
    "RequestRejected",
    "ResourceType",
]

_publish(globals())
__getattr__ = _moved_names(__name__, {"Store": "engine.testing:ObjectStorage"})
