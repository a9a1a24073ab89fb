"""Low-level Kubernetes helpers that a plugin or controller author rarely needs.

The higher-level pieces in :mod:`engine.kube` are built on these: :class:`~engine.kube.LeaderElector`
on the Lease functions, :class:`~engine.kube.KubernetesEventSink` on the Event functions, and
:class:`~engine.kube.Config` on the exec credential plugin support. Use them directly only to do
something those pieces do not.

* Leases (``coordination.k8s.io/v1``): :func:`get_lease`, :func:`create_lease`,
  :func:`update_lease` (optimistic: :class:`~engine.kube.ConflictError` on a stale
  ``resourceVersion``), and :data:`LEASE_RESOURCE`.
* Events: :func:`build_event`, :func:`create_event`, :func:`patch_event_series`, and the
  resources :data:`EVENTS_RESOURCE` (``events.k8s.io/v1``) and :data:`CORE_EVENTS_RESOURCE`
  (``v1``).
* Exec credential plugins: :class:`ExecConfig` (a kubeconfig ``user.exec`` stanza),
  :class:`ExecCredential` (what a plugin returned) and :class:`ExecAuth` (the httpx auth that
  runs the plugin and caches its credential).
* resourceVersions: :func:`resource_version_of` (an object's) and :func:`resource_version_number`
  (the revision one holds, for telling which of two is newer where that is all one needs).
"""

from .._exports import publish as _publish
from ._client._auth import ExecAuth as ExecAuth
from ._client._auth import ExecConfig as ExecConfig
from ._client._auth import ExecCredential as ExecCredential
from ._client._wire import resource_version_number as resource_version_number
from ._client._wire import resource_version_of as resource_version_of
from ._coordination._lease import LEASE_RESOURCE as LEASE_RESOURCE
from ._coordination._lease import create_lease as create_lease
from ._coordination._lease import get_lease as get_lease
from ._coordination._lease import update_lease as update_lease
from ._runtime._events import CORE_EVENTS_RESOURCE as CORE_EVENTS_RESOURCE
from ._runtime._events import EVENTS_RESOURCE as EVENTS_RESOURCE
from ._runtime._events import build_event as build_event
from ._runtime._events import create_event as create_event
from ._runtime._events import patch_event_series as patch_event_series

__all__ = [
    "CORE_EVENTS_RESOURCE",
    "EVENTS_RESOURCE",
    "LEASE_RESOURCE",
    "ExecAuth",
    "ExecConfig",
    "ExecCredential",
    "build_event",
    "create_event",
    "create_lease",
    "get_lease",
    "patch_event_series",
    "update_lease",
    "resource_version_number",
    "resource_version_of",
]

_publish(globals())
