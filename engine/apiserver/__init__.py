"""The embedded Kubernetes API server: a kube-apiserver 1.36 look-alike in one trio process.

Start with :class:`ApiServer`::

    async with ApiServer() as api:
        async with httpx.AsyncClient(base_url=api.url) as client:
            ...

It serves the core, ``apps``, ``coordination.k8s.io``, ``events.k8s.io`` and
``apiextensions.k8s.io`` groups and every CRD created on it, with the real server's request
path: discovery, validation (OpenAPI schemas and CEL rules of CRDs), server-side apply and
managed fields, finalizers and deletion propagation, admission and conversion webhooks, Tables
for kubectl, watches with bookmarks, paging, and the real server's ``Status`` answers. It is the default world of
``python -m engine run --embedded`` and a command of its own (``python -m engine apiserver``).

``ApiServer(listen=False)`` with :meth:`ApiServer.memory_transport` runs without sockets, so a
whole system can run inside one trio run under ``MockClock`` (:meth:`ApiServer.direct_transport`
does the same without HTTP encoding, for speed). ``api.faults`` injects failures;
``api.store`` is the server's :class:`ObjectStorage`, for seeding and inspecting state;
``api.snapshot()`` and ``api.restore(snapshot)`` take it back in time, as an etcd restore does;
a :class:`RequestLog` added with ``api.add_request_observer(log)`` records who wrote what, when,
and under which Lease.
Beside the API, the server runs what a cluster's controller manager would (garbage collection,
namespace clean-up), after the requests, as a cluster does: ``await api.settle()`` waits for
it, and ``ApiServer(controllers=False)`` answers as an API server alone.

This package imports the core only; the test tools in :mod:`engine.testing` use it, never the
other way round. :class:`Change` (one stored change) and :class:`RequestInfo` (what a fault's
predicate sees) are the types storage observers and faults receive; the selector parsers and
:func:`check_feature_gates` read what the real server reads, as it reads it.
"""

from .._exports import publish as _publish
from ._api import ServedRequest as ServedRequest
from ._errors import ApiServerError as ApiServerError
from ._errors import RequestRejected as RequestRejected
from ._faults import Fault as Fault
from ._faults import Faults as Faults
from ._faults import FaultScope as FaultScope
from ._faults import RequestInfo as RequestInfo
from ._memory import DirectTransport as DirectTransport
from ._memory import MemoryTransport as MemoryTransport
from ._requestlog import LeaseHolding as LeaseHolding
from ._requestlog import RequestLog as RequestLog
from ._requestlog import RequestRecord as RequestRecord
from ._resources import ResourceType as ResourceType
from ._selectors import parse_field_selector as parse_field_selector
from ._selectors import parse_label_selector as parse_label_selector
from ._server import ApiServer as ApiServer
from ._shards import check_feature_gates as check_feature_gates
from ._storage import Change as Change
from ._storage import ObjectStorage as ObjectStorage
from ._storage import StorageSnapshot as StorageSnapshot

__all__ = [
    "ApiServer",
    "ApiServerError",
    "Change",
    "DirectTransport",
    "Fault",
    "FaultScope",
    "Faults",
    "LeaseHolding",
    "MemoryTransport",
    "ObjectStorage",
    "RequestLog",
    "RequestRecord",
    "RequestInfo",
    "RequestRejected",
    "ResourceType",
    "ServedRequest",
    "StorageSnapshot",
    "check_feature_gates",
    "parse_field_selector",
    "parse_label_selector",
]

_publish(globals())
