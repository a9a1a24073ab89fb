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


# --- configuration (engine.kube._config) ---
from ._auth import BearerTokenAuth as BearerTokenAuth
from ._auth import TokenFileAuth as TokenFileAuth
from ._config import Config as Config
from ._errors import ConfigError as ConfigError
from ._errors import KubeError as KubeError

# --- client, watch streams, retries, resources and API errors (engine.kube._client, _watch, _retry, _errors) ---
from ._client import Client as Client
from ._client import ClientConfig as ClientConfig
from ._client import ObjectList as ObjectList
from ._client import join_selectors as join_selectors
from ._client import PatchType as PatchType
from ._retry import RetryPolicy as RetryPolicy
from ._client import Selector as Selector
from ._client import ServerVersion as ServerVersion
from ._watch import WatchEvent as WatchEvent
from ._watch import WatchEventType as WatchEventType
from ._watch import WatchStream as WatchStream
from ._errors import error_from_status as error_from_status
from ._errors import AlreadyExistsError as AlreadyExistsError
from ._errors import ApiError as ApiError
from ._errors import BadRequestError as BadRequestError
from ._errors import ClientStateError as ClientStateError
from ._errors import ConflictError as ConflictError
from ._errors import ForbiddenError as ForbiddenError
from ._errors import GoneError as GoneError
from ._errors import InvalidError as InvalidError
from ._errors import NotFoundError as NotFoundError
from ._errors import ResourceNotFoundError as ResourceNotFoundError
from ._errors import ResponseError as ResponseError
from ._errors import ServerError as ServerError
from ._errors import TLSVerificationError as TLSVerificationError
from ._errors import TooManyRequestsError as TooManyRequestsError
from ._errors import TransportError as TransportError
from ._errors import UnauthorizedError as UnauthorizedError
from ._errors import WatchStalledError as WatchStalledError
from ._resource import Resource as Resource

# --- watchers, stores and informers (engine.kube._watcher, _store, _informer) ---
from ._watcher import Added as Added
from ._watcher import Bookmark as Bookmark
from ._watcher import Deleted as Deleted
from ._watcher import Modified as Modified
from ._watcher import Restarted as Restarted
from ._watcher import Watcher as Watcher
from ._watcher import WatcherEvent as WatcherEvent
from ._watcher import WatcherStatistics as WatcherStatistics
from ._informer import Handler as Handler
from ._informer import Informer as Informer
from ._informer import InformerEvent as InformerEvent
from ._informer import InformerStatistics as InformerStatistics
from ._informer import Transform as Transform
from ._informer import strip_managed_fields as strip_managed_fields
from ._store import NAMESPACE_INDEX as NAMESPACE_INDEX
from ._store import OWNER_INDEX as OWNER_INDEX
from ._store import IndexFunc as IndexFunc
from ._store import ObjectKey as ObjectKey
from ._store import Store as Store
from ._store import object_key as object_key

# --- controllers on a cluster: watches, status (engine.kube._cluster, _status) ---
from ._cluster import REQUESTED_AT_ANNOTATION as REQUESTED_AT_ANNOTATION
from ._cluster import SHARD_LABEL as SHARD_LABEL
from ._cluster import Cluster as Cluster
from ._cluster import Predicate as Predicate
from ._cluster import annotation_changed as annotation_changed
from ._cluster import any_of as any_of
from ._cluster import generation_changed as generation_changed
from ._cluster import labels_match as labels_match
from ._cluster import ref_for as ref_for
from ._cluster import requested_at_changed as requested_at_changed
from ._forbidden import ForbiddenLog as ForbiddenLog
from ._forbidden import MissingPermission as MissingPermission

# --- RBAC rules (engine.kube._rbac) ---
from ._rbac import EVENT_RULES as EVENT_RULES
from ._rbac import OPERATION_VERBS as OPERATION_VERBS
from ._rbac import Permissions as Permissions
from ._rbac import PolicyRule as PolicyRule
from ._rbac import crd_rules as crd_rules
from ._rbac import leader_election_rules as leader_election_rules
from ._rbac import merge_rules as merge_rules
from ._rbac import role_objects as role_objects
from ._rbac import rules_for as rules_for
from ._status import READY as READY
from ._status import RECONCILING as RECONCILING
from ._status import STALLED as STALLED
from ._status import get_condition as get_condition
from ._status import is_ready as is_ready
from ._status import patch_status as patch_status
from ._status import set_condition as set_condition

from .._exports import lazy_names as _lazy_names
from .._exports import moved_names as _moved_names
from .._exports import publish as _publish

# --- imported on first access: plugins, webhooks, Prometheus collectors, leader election,
# Leases, Event sinks, finalizers, permission checks, the ring ---
if _typing.TYPE_CHECKING:
    from ._event_sink import KubernetesEventSink as KubernetesEventSink
    from ._lease import Lease as Lease
    from ._leader import LeaderElector as LeaderElector
    from ._leader import LeaderElectorStatistics as LeaderElectorStatistics
    from ._ring import HashRing as HashRing
    from ._ring import RING_LABEL as RING_LABEL
    from ._ring import RingConflictError as RingConflictError
    from ._ring import RingStatistics as RingStatistics
    from ._ring import ring_ranges as ring_ranges
    from ._finalizer import hold_finalizer as hold_finalizer
    from ._finalizer import set_finalizer as set_finalizer
    from ._access import MissingPermissionsError as MissingPermissionsError
    from ._access import check_permissions as check_permissions
    from ._access import whoami as whoami
    from ._metrics import InformerCollector as InformerCollector
    from ._metrics import RingCollector as RingCollector
    from ._plugin import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from ._plugin import Plugin as Plugin
    from ._plugin import PluginContext as PluginContext
    from ._plugin import PluginError as PluginError
    from ._plugin import PluginHost as PluginHost
    from ._plugin import WebhookServing as WebhookServing
    from ._plugin import install_crds as install_crds
    from ._plugin import load_plugin as load_plugin
    from ._plugin import load_plugins as load_plugins
    from ._plugin import plugin_rules as plugin_rules
    from ._plugin import run_plugins as run_plugins
    from ._metrics import ForbiddenCollector as ForbiddenCollector
    from ._webhooks import AdmissionDenied as AdmissionDenied
    from ._webhooks import AdmissionOperation as AdmissionOperation
    from ._webhooks import AdmissionRequest as AdmissionRequest
    from ._webhooks import AdmissionResponse as AdmissionResponse
    from ._webhooks import AdmissionRule as AdmissionRule
    from ._webhooks import AdmissionWebhook as AdmissionWebhook
    from ._webhooks import ConversionRequest as ConversionRequest
    from ._webhooks import ConversionWebhook as ConversionWebhook
    from ._webhooks import MalformedReview as MalformedReview
    from ._webhooks import WebhookContext as WebhookContext
    from ._webhooks import WebhookDispatcher as WebhookDispatcher
    from ._webhooks import WebhookStatistics as WebhookStatistics
    from ._webhooks import handler_deadline as handler_deadline
    from ._webhooks import json_patch as json_patch
    from ._webhook_server import DEFAULT_WEBHOOK_PORT as DEFAULT_WEBHOOK_PORT
    from ._webhook_server import MAX_REVIEW_BYTES as MAX_REVIEW_BYTES
    from ._webhook_server import WebhookCertificates as WebhookCertificates
    from ._webhook_server import WebhookError as WebhookError
    from ._webhook_server import WebhookServer as WebhookServer
    from ._webhook_server import WebhookTransport as WebhookTransport
    from ._webhook_certs import CertProvisioning as CertProvisioning
    from ._webhook_certs import CertRotator as CertRotator
    from ._webhook_config import INJECT_CA_ANNOTATION as INJECT_CA_ANNOTATION
    from ._webhook_config import register_webhooks as register_webhooks
    from ._webhook_config import service_client_config as service_client_config
    from ._webhook_config import url_client_config as url_client_config
    from ._webhook_config import webhook_configurations as webhook_configurations
    from ._webhook_config import with_conversion as with_conversion
    from ._metrics import WebhookCollector as WebhookCollector

_LAZY = {
    "KubernetesEventSink": "engine.kube._event_sink",
    "Lease": "engine.kube._lease",
    "LeaderElector": "engine.kube._leader",
    "LeaderElectorStatistics": "engine.kube._leader",
    "HashRing": "engine.kube._ring",
    "RING_LABEL": "engine.kube._ring",
    "RingConflictError": "engine.kube._ring",
    "RingStatistics": "engine.kube._ring",
    "ring_ranges": "engine.kube._ring",
    "hold_finalizer": "engine.kube._finalizer",
    "set_finalizer": "engine.kube._finalizer",
    "MissingPermissionsError": "engine.kube._access",
    "check_permissions": "engine.kube._access",
    "whoami": "engine.kube._access",
    "InformerCollector": "engine.kube._metrics",
    "RingCollector": "engine.kube._metrics",
    "ENTRY_POINT_GROUP": "engine.kube._plugin",
    "Plugin": "engine.kube._plugin",
    "PluginContext": "engine.kube._plugin",
    "PluginError": "engine.kube._plugin",
    "PluginHost": "engine.kube._plugin",
    "WebhookServing": "engine.kube._plugin",
    "CertProvisioning": "engine.kube._webhook_certs",
    "CertRotator": "engine.kube._webhook_certs",
    "install_crds": "engine.kube._plugin",
    "load_plugin": "engine.kube._plugin",
    "load_plugins": "engine.kube._plugin",
    "plugin_rules": "engine.kube._plugin",
    "run_plugins": "engine.kube._plugin",
    "ForbiddenCollector": "engine.kube._metrics",
    "AdmissionDenied": "engine.kube._webhooks",
    "AdmissionOperation": "engine.kube._webhooks",
    "AdmissionRequest": "engine.kube._webhooks",
    "AdmissionResponse": "engine.kube._webhooks",
    "AdmissionRule": "engine.kube._webhooks",
    "AdmissionWebhook": "engine.kube._webhooks",
    "ConversionRequest": "engine.kube._webhooks",
    "ConversionWebhook": "engine.kube._webhooks",
    "MalformedReview": "engine.kube._webhooks",
    "WebhookContext": "engine.kube._webhooks",
    "WebhookDispatcher": "engine.kube._webhooks",
    "WebhookStatistics": "engine.kube._webhooks",
    "handler_deadline": "engine.kube._webhooks",
    "json_patch": "engine.kube._webhooks",
    "DEFAULT_WEBHOOK_PORT": "engine.kube._webhook_server",
    "MAX_REVIEW_BYTES": "engine.kube._webhook_server",
    "WebhookCertificates": "engine.kube._webhook_server",
    "WebhookError": "engine.kube._webhook_server",
    "WebhookServer": "engine.kube._webhook_server",
    "WebhookTransport": "engine.kube._webhook_server",
    "INJECT_CA_ANNOTATION": "engine.kube._webhook_config",
    "register_webhooks": "engine.kube._webhook_config",
    "service_client_config": "engine.kube._webhook_config",
    "url_client_config": "engine.kube._webhook_config",
    "webhook_configurations": "engine.kube._webhook_config",
    "with_conversion": "engine.kube._webhook_config",
    "WebhookCollector": "engine.kube._metrics",
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
    "WatchStalledError",
    "WatchStream",
    "Watcher",
    "WatcherEvent",
    "WatcherStatistics",
    "annotation_changed",
    "any_of",
    "check_permissions",
    "crd_rules",
    "error_from_status",
    "generation_changed",
    "get_condition",
    "hold_finalizer",
    "install_crds",
    "is_ready",
    "join_selectors",
    "labels_match",
    "leader_election_rules",
    "load_plugin",
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
    "json_patch",
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
__getattr__, __dir__ = _lazy_names(globals(), _LAZY, _moved_names(__name__, dict.fromkeys(
    ["CORE_EVENTS_RESOURCE", "EVENTS_RESOURCE", "LEASE_RESOURCE", "ExecAuth", "ExecConfig", "ExecCredential", "build_event", "create_event", "create_lease", "get_lease", "patch_event_series", "update_lease"],
    "engine.kube.lowlevel",
)))
