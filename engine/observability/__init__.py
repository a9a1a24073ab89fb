"""Observability of a manager: Prometheus metrics, health probes and the live run stream.

:class:`Observability` turns all three on for a :class:`~engine.Manager`; each part is usable
alone (:class:`EngineMetrics`, :class:`Probes`, :class:`LiveStream`).
"""

from .._exports import publish as _publish
from .._http import parse_bind_address as parse_bind_address
from ._live import LiveStatistics as LiveStatistics
from ._live import LiveStream as LiveStream
from ._metrics import EngineMetrics as EngineMetrics
from ._observability import Observability as Observability
from ._probes import CheckFailed as CheckFailed
from ._probes import Probes as Probes

__all__ = [
    "CheckFailed",
    "EngineMetrics",
    "LiveStatistics",
    "LiveStream",
    "Observability",
    "Probes",
    "parse_bind_address",
]

_publish(globals())
