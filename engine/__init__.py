"""A trio-native reconciler engine for Kubernetes-style controllers.

Start with :class:`Manager` and :class:`Controller`: a controller runs a reconciler for keys
(:class:`ObjectRef`) taken from its :class:`WorkQueue`; triggers come from sources; every run
has its own cancel scope and a typed :class:`CancelCause` when the engine cancels it; events
go through a non-blocking :class:`EventRecorder` to sinks.

Metrics, health probes and the live stream live in :mod:`engine.observability`. The
Kubernetes adapter lives in :mod:`engine.kube`, the embedded API server in
:mod:`engine.apiserver`, test helpers in :mod:`engine.testing`, the ``python -m engine``
commands in :mod:`engine.cli`; none of the modules above imports them.
"""

from ._controller import Controller as Controller
from ._controller import Reconciler as Reconciler
from ._controller import RunObserver as RunObserver
from ._controller import SupersedePolicy as SupersedePolicy
from ._deps import DependencyIndex as DependencyIndex
from ._errors import EngineError as EngineError
from ._errors import LifecycleError as LifecycleError
from ._errors import ManagerStateError as ManagerStateError
from ._errors import QueueShutDown as QueueShutDown
from ._events import Event as Event
from ._events import EventCorrelator as EventCorrelator
from ._events import EventRecorder as EventRecorder
from ._events import EventRecorderStatistics as EventRecorderStatistics
from ._events import EventSink as EventSink
from ._events import EventSinkStatistics as EventSinkStatistics
from ._events import EventType as EventType
from ._events import ObjectEvents as ObjectEvents
from ._exports import publish as _publish
from ._keyspace import KeyRange as KeyRange
from ._keyspace import KeyRanges as KeyRanges
from ._keyspace import fnv1a64 as fnv1a64
from ._logging import JSONFormatter as JSONFormatter
from ._logging import TextFormatter as TextFormatter
from ._logging import configure_logging as configure_logging
from ._manager import LeaderElection as LeaderElection
from ._manager import Manager as Manager
from ._manager import ShutdownReport as ShutdownReport
from ._observer import RunLog as RunLog
from ._observer import RunRecord as RunRecord
from ._outcome import CancelCause as CancelCause
from ._outcome import DependencyNotReady as DependencyNotReady
from ._outcome import Outcome as Outcome
from ._outcome import OutcomeKind as OutcomeKind
from ._outcome import Result as Result
from ._outcome import TerminalError as TerminalError
from ._ownership import OwnershipGate as OwnershipGate
from ._ownership import OwnershipStatistics as OwnershipStatistics
from ._ratelimit import ExponentialBackoffLimiter as ExponentialBackoffLimiter
from ._ratelimit import MaxOfLimiter as MaxOfLimiter
from ._ratelimit import RateLimiter as RateLimiter
from ._ratelimit import TokenBucketLimiter as TokenBucketLimiter
from ._ratelimit import default_rate_limiter as default_rate_limiter
from ._refs import ObjectRef as ObjectRef
from ._refs import Priority as Priority
from ._refs import Trigger as Trigger
from ._refs import Triggerable as Triggerable
from ._run import Run as Run
from ._run import RunContext as RunContext
from ._sinks import LogSink as LogSink
from ._sinks import MemorySink as MemorySink
from ._sinks import WebhookDeliveryError as WebhookDeliveryError
from ._sinks import WebhookSink as WebhookSink
from ._sources import Change as Change
from ._sources import ChannelSource as ChannelSource
from ._sources import MappedSource as MappedSource
from ._sources import Source as Source
from ._sources import TimerSource as TimerSource
from ._sources import WarmSource as WarmSource
from ._tracing import RunTracer as RunTracer
from ._workqueue import QueueObserver as QueueObserver
from ._workqueue import WorkQueue as WorkQueue
from ._workqueue import WorkQueueStatistics as WorkQueueStatistics
from ._writes import ECHO_HORIZON as ECHO_HORIZON
from ._writes import ECHO_WAIT as ECHO_WAIT

__version__ = "0.1.0.dev0"

__all__ = [
    "ECHO_HORIZON",
    "ECHO_WAIT",
    "CancelCause",
    "Change",
    "ChannelSource",
    "Controller",
    "DependencyIndex",
    "DependencyNotReady",
    "EngineError",
    "Event",
    "EventCorrelator",
    "EventRecorder",
    "EventRecorderStatistics",
    "EventSink",
    "EventSinkStatistics",
    "EventType",
    "LifecycleError",
    "ExponentialBackoffLimiter",
    "JSONFormatter",
    "KeyRange",
    "KeyRanges",
    "LeaderElection",
    "LogSink",
    "Manager",
    "ManagerStateError",
    "MappedSource",
    "MaxOfLimiter",
    "MemorySink",
    "ObjectEvents",
    "ObjectRef",
    "Outcome",
    "OutcomeKind",
    "OwnershipGate",
    "OwnershipStatistics",
    "Priority",
    "QueueObserver",
    "QueueShutDown",
    "RateLimiter",
    "Reconciler",
    "Result",
    "Run",
    "RunContext",
    "RunLog",
    "RunObserver",
    "RunRecord",
    "RunTracer",
    "ShutdownReport",
    "Source",
    "SupersedePolicy",
    "TerminalError",
    "TextFormatter",
    "TimerSource",
    "TokenBucketLimiter",
    "Trigger",
    "Triggerable",
    "WarmSource",
    "WebhookDeliveryError",
    "WebhookSink",
    "WorkQueue",
    "WorkQueueStatistics",
    "configure_logging",
    "default_rate_limiter",
    "fnv1a64",
]

_publish(globals())
