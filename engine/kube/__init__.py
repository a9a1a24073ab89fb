"""The Kubernetes adapter: configuration, an httpx client, watchers, informers and their stores.

Nothing in the core engine imports this package. Low-level helpers (raw Lease and Event
functions, resource constants, exec credential plugin support) live in
:mod:`engine.kube.lowlevel`.

Plugin hosting, the webhook server and its review types, the Prometheus collectors, leader
election, Leases, the Kubernetes Event sink, finalizer helpers, permission checks and the
scale-out ring are imported on first use of one of their names (some bring an HTTP server, the
live stream's websocket stack and ``prometheus_client``, which a plain runner does not need).
"""

import typing as _typing


# --- configuration (engine.kube._client._config) ---
from ._client._auth import BearerTokenAuth as BearerTokenAuth
from ._client._auth import TokenFileAuth as TokenFileAuth
from ._client._config import Config as Config
from ._client._errors import ConfigError as ConfigError
from ._client._errors import KubeError as KubeError

# --- client, watch streams, retries, resources and API errors (engine.kube._client._client, _watch, _retry, _errors) ---
from ._client._client import Client as Client
from ._client._client import ClientConfig as ClientConfig
from ._client._client import ObjectList as ObjectList
from ._client._client import join_selectors as join_selectors
from ._client._client import PatchType as PatchType
from ._client._retry import RetryPolicy as RetryPolicy
from ._client._client import Selector as Selector
from ._client._client import ServerVersion as ServerVersion
from ._client._watch import WatchEvent as WatchEvent
from ._client._watch import WatchEventType as WatchEventType
from ._client._watch import WatchStream as WatchStream
from ._client._errors import error_from_status as error_from_status
from ._client._errors import AlreadyExistsError as AlreadyExistsError
from ._client._errors import ApiError as ApiError
from ._client._errors import BadRequestError as BadRequestError
from ._client._errors import ClientStateError as ClientStateError
from ._client._errors import ConflictError as ConflictError
from ._client._errors import ForbiddenError as ForbiddenError
from ._client._errors import GoneError as GoneError
from ._client._errors import InvalidError as InvalidError
from ._client._errors import NotFoundError as NotFoundError
from ._client._errors import ResourceNotFoundError as ResourceNotFoundError
from ._client._errors import ResponseError as ResponseError
from ._client._errors import ServerError as ServerError
from ._client._errors import TLSVerificationError as TLSVerificationError
from ._client._errors import TooManyRequestsError as TooManyRequestsError
from ._client._errors import TransportError as TransportError
from ._client._errors import UnauthorizedError as UnauthorizedError
from ._client._errors import WatchStalledError as WatchStalledError
from ._client._resource import Resource as Resource

# --- watchers, stores, informers and the server's shard filter (engine.kube._runtime._watcher, _store, _informer, _shard_filter) ---
from ._runtime._watcher import Added as Added
from ._runtime._watcher import Bookmark as Bookmark
from ._runtime._watcher import Deleted as Deleted
from ._runtime._watcher import Modified as Modified
from ._runtime._watcher import Restarted as Restarted
from ._runtime._watcher import Watcher as Watcher
from ._runtime._watcher import WatchOptions as WatchOptions
from ._runtime._watcher import WatcherEvent as WatcherEvent
from ._runtime._watcher import WatcherStatistics as WatcherStatistics
from ._runtime._informer import Handler as Handler
from ._runtime._informer import Informer as Informer
from ._runtime._informer import InformerEvent as InformerEvent
from ._runtime._informer import InformerStatistics as InformerStatistics
from ._runtime._informer import Transform as Transform
from ._runtime._informer import strip_managed_fields as strip_managed_fields
from ._runtime._shard_filter import add_shard_probe as add_shard_probe
from ._runtime._shard_filter import filters_shards as filters_shards
from ._runtime._shard_filter import server_filters_shards as server_filters_shards
from ._runtime._watch_list import server_streams_lists as server_streams_lists
from ._runtime._store import NAMESPACE_INDEX as NAMESPACE_INDEX
from ._runtime._store import OWNER_INDEX as OWNER_INDEX
from ._runtime._store import IndexFunc as IndexFunc
from ._runtime._store import ObjectKey as ObjectKey
from ._runtime._store import Store as Store
from ._runtime._store import object_key as object_key

# --- controllers on a cluster: watches, status (engine.kube._runtime._cluster, _status) ---
from ._runtime._cluster import REQUESTED_AT_ANNOTATION as REQUESTED_AT_ANNOTATION
from ._runtime._cluster import SHARD_LABEL as SHARD_LABEL
from ._runtime._cluster import Cluster as Cluster
from ._runtime._cluster import Predicate as Predicate
from ._runtime._cluster import annotation_changed as annotation_changed
from ._runtime._cluster import any_of as any_of
from ._runtime._cluster import generation_changed as generation_changed
from ._runtime._cluster import labels_match as labels_match
from ._runtime._cluster import ref_for as ref_for
from ._runtime._cluster import requested_at_changed as requested_at_changed
from ._client._forbidden import ForbiddenLog as ForbiddenLog
from ._client._forbidden import MissingPermission as MissingPermission

# --- RBAC rules (engine.kube._access._rbac) ---
from ._access._rbac import EVENT_RULES as EVENT_RULES
from ._access._rbac import OPERATION_VERBS as OPERATION_VERBS
from ._access._rbac import Permissions as Permissions
from ._access._rbac import PolicyRule as PolicyRule
from ._access._rbac import crd_rules as crd_rules
from ._access._rbac import leader_election_rules as leader_election_rules
from ._access._rbac import merge_rules as merge_rules
from ._access._rbac import role_objects as role_objects
from ._access._rbac import rules_for as rules_for
from ._runtime._status import READY as READY
from ._runtime._status import RECONCILING as RECONCILING
from ._runtime._status import STALLED as STALLED
from ._runtime._status import get_condition as get_condition
from ._runtime._status import is_ready as is_ready
from ._runtime._status import patch_status as patch_status
from ._runtime._status import set_condition as set_condition

from .._exports import lazy_names as _lazy_names
from .._exports import publish as _publish

# --- imported on first access: plugins, webhooks, Prometheus collectors, leader election,
# Leases, Event sinks, finalizers, permission checks, the ring ---
if _typing.TYPE_CHECKING:
    from ._runtime._event_sink import KubernetesEventSink as KubernetesEventSink
    from ._coordination._lease import Lease as Lease
    from ._coordination._leader import LeaderElector as LeaderElector
    from ._coordination._leader import LeaderElectorStatistics as LeaderElectorStatistics
    from ._coordination._ring import HashRing as HashRing
    from ._coordination._ring import RING_LABEL as RING_LABEL
    from ._coordination._ring import RingConflictError as RingConflictError
    from ._coordination._ring import RingStatistics as RingStatistics
    from ._coordination._ring import ring_ranges as ring_ranges
    from ._runtime._finalizer import hold_finalizer as hold_finalizer
    from ._runtime._finalizer import set_finalizer as set_finalizer
    from ._access._review import MissingPermissionsError as MissingPermissionsError
    from ._access._review import check_permissions as check_permissions
    from ._access._review import whoami as whoami
    from ._hosting._metrics import InformerCollector as InformerCollector
    from ._hosting._metrics import RingCollector as RingCollector
    from ._hosting._plugin import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from ._hosting._plugin import Plugin as Plugin
    from ._hosting._plugin import PluginContext as PluginContext
    from ._hosting._plugin import PluginError as PluginError
    from ._hosting._plugin import PluginHost as PluginHost
    from ._hosting._plugin import WebhookServing as WebhookServing
    from ._hosting._plugin import install_crds as install_crds
    from ._hosting._plugin import load_plugin as load_plugin
    from ._hosting._plugin import check_plugin_config as check_plugin_config
    from ._hosting._plugin import load_plugins as load_plugins
    from ._hosting._plugin import plugin_rules as plugin_rules
    from ._hosting._plugin import run_plugins as run_plugins
    from ._hosting._metrics import ForbiddenCollector as ForbiddenCollector
    from ._webhooks._review import AdmissionDenied as AdmissionDenied
    from ._webhooks._review import AdmissionOperation as AdmissionOperation
    from ._webhooks._review import AdmissionRequest as AdmissionRequest
    from ._webhooks._review import AdmissionResponse as AdmissionResponse
    from ._webhooks._review import AdmissionRule as AdmissionRule
    from ._webhooks._review import AdmissionWebhook as AdmissionWebhook
    from ._webhooks._review import ConversionRequest as ConversionRequest
    from ._webhooks._review import ConversionWebhook as ConversionWebhook
    from ._webhooks._review import MalformedReview as MalformedReview
    from ._webhooks._review import WebhookContext as WebhookContext
    from ._webhooks._review import WebhookDispatcher as WebhookDispatcher
    from ._webhooks._review import WebhookStatistics as WebhookStatistics
    from ._webhooks._review import handler_deadline as handler_deadline
    from ._webhooks._review import json_patch_between as json_patch_between
    from ._webhooks._server import DEFAULT_WEBHOOK_PORT as DEFAULT_WEBHOOK_PORT
    from ._webhooks._server import MAX_REVIEW_BYTES as MAX_REVIEW_BYTES
    from ._webhooks._server import WebhookCertificates as WebhookCertificates
    from ._webhooks._server import WebhookError as WebhookError
    from ._webhooks._server import WebhookServer as WebhookServer
    from ._webhooks._server import WebhookTransport as WebhookTransport
    from ._webhooks._certificates import CertProvisioning as CertProvisioning
    from ._webhooks._certificates import CertRotator as CertRotator
    from ._webhooks._configuration import INJECT_CA_ANNOTATION as INJECT_CA_ANNOTATION
    from ._webhooks._configuration import register_webhooks as register_webhooks
    from ._webhooks._configuration import service_client_config as service_client_config
    from ._webhooks._configuration import url_client_config as url_client_config
    from ._webhooks._configuration import webhook_configurations as webhook_configurations
    from ._webhooks._configuration import with_conversion as with_conversion
    from ._hosting._metrics import WebhookCollector as WebhookCollector

_LAZY = {
    "KubernetesEventSink": "engine.kube._runtime._event_sink",
    "Lease": "engine.kube._coordination._lease",
    "LeaderElector": "engine.kube._coordination._leader",
    "LeaderElectorStatistics": "engine.kube._coordination._leader",
    "HashRing": "engine.kube._coordination._ring",
    "RING_LABEL": "engine.kube._coordination._ring",
    "RingConflictError": "engine.kube._coordination._ring",
    "RingStatistics": "engine.kube._coordination._ring",
    "ring_ranges": "engine.kube._coordination._ring",
    "hold_finalizer": "engine.kube._runtime._finalizer",
    "set_finalizer": "engine.kube._runtime._finalizer",
    "MissingPermissionsError": "engine.kube._access._review",
    "check_permissions": "engine.kube._access._review",
    "whoami": "engine.kube._access._review",
    "InformerCollector": "engine.kube._hosting._metrics",
    "RingCollector": "engine.kube._hosting._metrics",
    "ENTRY_POINT_GROUP": "engine.kube._hosting._plugin",
    "Plugin": "engine.kube._hosting._plugin",
    "PluginContext": "engine.kube._hosting._plugin",
    "PluginError": "engine.kube._hosting._plugin",
    "PluginHost": "engine.kube._hosting._plugin",
    "WebhookServing": "engine.kube._hosting._plugin",
    "CertProvisioning": "engine.kube._webhooks._certificates",
    "CertRotator": "engine.kube._webhooks._certificates",
    "install_crds": "engine.kube._hosting._plugin",
    "load_plugin": "engine.kube._hosting._plugin",
    "check_plugin_config": "engine.kube._hosting._plugin",
    "load_plugins": "engine.kube._hosting._plugin",
    "plugin_rules": "engine.kube._hosting._plugin",
    "run_plugins": "engine.kube._hosting._plugin",
    "ForbiddenCollector": "engine.kube._hosting._metrics",
    "AdmissionDenied": "engine.kube._webhooks._review",
    "AdmissionOperation": "engine.kube._webhooks._review",
    "AdmissionRequest": "engine.kube._webhooks._review",
    "AdmissionResponse": "engine.kube._webhooks._review",
    "AdmissionRule": "engine.kube._webhooks._review",
    "AdmissionWebhook": "engine.kube._webhooks._review",
    "ConversionRequest": "engine.kube._webhooks._review",
    "ConversionWebhook": "engine.kube._webhooks._review",
    "MalformedReview": "engine.kube._webhooks._review",
    "WebhookContext": "engine.kube._webhooks._review",
    "WebhookDispatcher": "engine.kube._webhooks._review",
    "WebhookStatistics": "engine.kube._webhooks._review",
    "handler_deadline": "engine.kube._webhooks._review",
    "json_patch_between": "engine.kube._webhooks._review",
    "DEFAULT_WEBHOOK_PORT": "engine.kube._webhooks._server",
    "MAX_REVIEW_BYTES": "engine.kube._webhooks._server",
    "WebhookCertificates": "engine.kube._webhooks._server",
    "WebhookError": "engine.kube._webhooks._server",
    "WebhookServer": "engine.kube._webhooks._server",
    "WebhookTransport": "engine.kube._webhooks._server",
    "INJECT_CA_ANNOTATION": "engine.kube._webhooks._configuration",
    "register_webhooks": "engine.kube._webhooks._configuration",
    "service_client_config": "engine.kube._webhooks._configuration",
    "url_client_config": "engine.kube._webhooks._configuration",
    "webhook_configurations": "engine.kube._webhooks._configuration",
    "with_conversion": "engine.kube._webhooks._configuration",
    "WebhookCollector": "engine.kube._hosting._metrics",
}
"""Public names imported on first access, and the module that defines each."""

__all__ = [
    "Added",
    "AlreadyExistsError",
    "ApiError",
    "BadRequestError",
    "BearerTokenAuth",
    "Bookmark",
    "Client",
    "ClientConfig",
    "ClientStateError",
    "Cluster",
    "Config",
    "ConfigError",
    "ConflictError",
    "Deleted",
    "ENTRY_POINT_GROUP",
    "EVENT_RULES",
    "ForbiddenError",
    "ForbiddenCollector",
    "MissingPermissionsError",
    "MissingPermission",
    "ForbiddenLog",
    "GoneError",
    "Handler",
    "IndexFunc",
    "Informer",
    "InformerCollector",
    "RingCollector",
    "InformerEvent",
    "InformerStatistics",
    "InvalidError",
    "KubeError",
    "KubernetesEventSink",
    "LeaderElector",
    "LeaderElectorStatistics",
    "HashRing",
    "RING_LABEL",
    "RingConflictError",
    "RingStatistics",
    "ring_ranges",
    "Lease",
    "Modified",
    "NAMESPACE_INDEX",
    "NotFoundError",
    "OPERATION_VERBS",
    "OWNER_INDEX",
    "ObjectKey",
    "ObjectList",
    "PatchType",
    "Permissions",
    "Plugin",
    "PluginContext",
    "PluginError",
    "PluginHost",
    "PolicyRule",
    "Predicate",
    "READY",
    "RECONCILING",
    "REQUESTED_AT_ANNOTATION",
    "Resource",
    "ResourceNotFoundError",
    "ResponseError",
    "Restarted",
    "RetryPolicy",
    "SHARD_LABEL",
    "STALLED",
    "Selector",
    "ServerVersion",
    "ServerError",
    "Store",
    "TokenFileAuth",
    "TooManyRequestsError",
    "TLSVerificationError",
    "Transform",
    "TransportError",
    "UnauthorizedError",
    "WatchEvent",
    "WatchEventType",
    "WatchOptions",
    "WatchStalledError",
    "WatchStream",
    "Watcher",
    "WatcherEvent",
    "WatcherStatistics",
    "annotation_changed",
    "add_shard_probe",
    "any_of",
    "check_permissions",
    "crd_rules",
    "error_from_status",
    "filters_shards",
    "generation_changed",
    "get_condition",
    "hold_finalizer",
    "install_crds",
    "is_ready",
    "join_selectors",
    "labels_match",
    "leader_election_rules",
    "load_plugin",
    "check_plugin_config",
    "load_plugins",
    "merge_rules",
    "object_key",
    "patch_status",
    "plugin_rules",
    "ref_for",
    "role_objects",
    "rules_for",
    "requested_at_changed",
    "run_plugins",
    "set_condition",
    "server_filters_shards",
    "server_streams_lists",
    "set_finalizer",
    "strip_managed_fields",
    "AdmissionDenied",
    "AdmissionOperation",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionRule",
    "AdmissionWebhook",
    "ConversionRequest",
    "ConversionWebhook",
    "MalformedReview",
    "WebhookContext",
    "WebhookDispatcher",
    "WebhookStatistics",
    "handler_deadline",
    "json_patch_between",
    "DEFAULT_WEBHOOK_PORT",
    "MAX_REVIEW_BYTES",
    "WebhookCertificates",
    "WebhookError",
    "WebhookServer",
    "WebhookTransport",
    "CertProvisioning",
    "CertRotator",
    "INJECT_CA_ANNOTATION",
    "register_webhooks",
    "service_client_config",
    "url_client_config",
    "webhook_configurations",
    "with_conversion",
    "WebhookCollector",
    "WebhookServing",
    "whoami",
]

_publish(globals())
__getattr__, __dir__ = _lazy_names(globals(), _LAZY)
