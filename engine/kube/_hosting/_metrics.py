"""Prometheus metrics of a cluster's informers, for the registry of a manager's metrics.

``engine_informer_object_errors_total{resource}`` counts exceptions that user code on the watch
path (index functions, predicates, mappers, handlers) raised for one object and that were
contained to it; ``engine_informer_resets_total{resource}`` counts relists from scratch because
the server's history went backwards; ``engine_informer_restarts_total{resource}`` counts
restarts after unexpected errors, ``engine_informer_skipped_total{resource}`` malformed items.
``engine_informer_out_of_range_total{resource}`` counts the listed objects and watch events an
informer restricted to key ranges dropped on its side, and
``engine_informer_server_shard_filter{resource}`` (1 or 0, for such informers once they asked)
says whether the API server filters them by ``shardSelector`` (KEP-5866) or the informer alone
does (the server then sends every object, and the replica's memory and CPU do not shrink).
``engine_informer_cached_objects{resource}`` is how many objects the informers hold.
``engine_forbidden_requests_total{verb,resource}`` counts the 403 answers a client received
(see :class:`ForbiddenLog`). The ``engine_ring_*`` series of a scale-out member are
:class:`RingCollector`'s; :class:`WebhookCollector` gives controller-runtime's webhook metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..._keyspace import fnv1a64
from .._client._client import Client
from .._coordination._ring import HashRing
from .._runtime._cluster import Cluster
from .._webhooks._review import LATENCY_BUCKETS
from .._webhooks._server import WebhookServer

__all__ = ["ForbiddenCollector", "InformerCollector", "RingCollector", "WebhookCollector"]


class ForbiddenCollector(Collector):
    """Collects ``engine_informer_cached_objects{resource}`` is how many objects the informers hold.
``engine_forbidden_requests_total{verb,resource}`` from ``client.forbidden``
    at scrape time (``resource`` as ``plural.group``, ``plural.group/subresource``).
    Register it once; cheap and never blocks."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "engine_forbidden_requests", "Requests the API server refused with 403 Forbidden",
            labels=["verb", "resource"],
        )
        for (verb, resource), count in sorted(self._client.forbidden.counts().items()):
            family.add_metric([verb, resource], count)
        yield family


class InformerCollector(Collector):
    """Collects the statistics of every informer of ``cluster`` at scrape time.

    Register it once: ``registry.register(InformerCollector(cluster))``; informers created
    later are included. Collecting is cheap and never blocks.
    """

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def collect(self) -> Iterator[Metric]:
        families = {
            "object_errors": CounterMetricFamily(
                "engine_informer_object_errors", "Exceptions raised by user code for one object, contained to it",
                labels=["resource"],
            ),
            "resets": CounterMetricFamily(
                "engine_informer_resets", "Relists from scratch because the server's history went backwards",
                labels=["resource"],
            ),
            "restarts": CounterMetricFamily(
                "engine_informer_restarts", "Informer restarts after unexpected errors", labels=["resource"],
            ),
            "skipped": CounterMetricFamily(
                "engine_informer_skipped", "Malformed list items and watch lines skipped", labels=["resource"],
            ),
            "out_of_range": CounterMetricFamily(
                "engine_informer_out_of_range",
                "Listed objects and watch events outside the informer's key ranges, dropped on the client",
                labels=["resource"],
            ),
        }
        server_filter = GaugeMetricFamily(
            "engine_informer_server_shard_filter",
            "1 if the API server filters the informer's key ranges by shardSelector, 0 if only the client does",
            labels=["resource"],
        )
        cached_objects = GaugeMetricFamily(
            "engine_informer_cached_objects", "Objects held in the informers' caches", labels=["resource"],
        )
        cached: dict[str, int] = {}
        filtering: dict[str, bool] = {}
        totals: dict[str, dict[str, int]] = {name: {} for name in families}
        for informer in self._cluster.informers:
            stats = informer.statistics()
            resource = str(informer.resource)
            for name in families:
                per = totals[name]
                per[resource] = per.get(resource, 0) + int(getattr(stats, name))
            cached[resource] = cached.get(resource, 0) + len(informer.store)
            server = informer.server_filters_shards
            if informer.key_ranges is not None and server is not None:
                filtering[resource] = filtering.get(resource, True) and server
        for name, family in families.items():
            for resource, value in sorted(totals[name].items()):
                family.add_metric([resource], value)
            yield family
        for resource, server in sorted(filtering.items()):
            server_filter.add_metric([resource], 1 if server else 0)
        yield server_filter
        for resource, count in sorted(cached.items()):
            cached_objects.add_metric([resource], count)
        yield cached_objects


_HANDOVER_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)


class RingCollector(Collector):
    """Collects a scale-out member's view of its ring at scrape time.

    ``engine_ring_members{ring}`` (live members), ``engine_ring_owned_share{ring}`` (the
    fraction of the key space owned), ``engine_ring_owned_ranges{ring}``,
    ``engine_ring_owned_keys{ring}`` (cached objects of ``cluster`` in the owned ranges),
    ``engine_ring_handovers_total{ring}`` (ranges handed to other members),
    ``engine_ring_fenced_total{ring}`` (times every range was revoked because membership
    could not be proven) and the histogram ``engine_ring_handover_duration_seconds{ring}``
    (from giving a range up to its last run ending). Register it once, before the ring
    runs; cheap (the key count walks the cached objects) and never blocks.
    """

    def __init__(self, ring: HashRing, cluster: Cluster | None = None) -> None:
        self._ring = ring
        self._cluster = cluster
        self._counts = [0] * (len(_HANDOVER_BUCKETS) + 1)
        self._sum = 0.0
        ring.gate.on_handover.append(self._observe)

    def _observe(self, seconds: float) -> None:
        self._sum += seconds
        for i, bound in enumerate(_HANDOVER_BUCKETS):
            if seconds <= bound:
                self._counts[i] += 1
                return
        self._counts[-1] += 1

    def _owned_keys(self) -> int:
        if self._cluster is None:
            return 0
        owned = self._ring.gate.owned
        seen = 0
        for informer in self._cluster.informers:
            for obj in informer.store:
                uid = obj.get("metadata", {}).get("uid")
                if uid and fnv1a64(uid) in owned:
                    seen += 1
        return seen

    def collect(self) -> Iterator[Metric]:
        stats = self._ring.statistics()
        labels = [stats.ring]
        gauges = (
            ("engine_ring_members", "Live members of the scale-out ring", len(stats.members)),
            ("engine_ring_owned_share", "Fraction of the key space this member owns", stats.owned.share),
            ("engine_ring_owned_ranges", "Key ranges this member owns", len(stats.owned.ranges)),
            ("engine_ring_owned_keys", "Cached objects in the key ranges this member owns", self._owned_keys()),
        )
        for name, doc, value in gauges:
            gauge = GaugeMetricFamily(name, doc, labels=["ring"])
            gauge.add_metric(labels, value)
            yield gauge
        for name, doc, count in (
            ("engine_ring_handovers", "Key ranges handed over to other members", stats.handovers),
            ("engine_ring_fenced", "Times every key range was revoked because membership could not be proven",
             stats.fenced),
        ):
            counter = CounterMetricFamily(name, doc, labels=["ring"])
            counter.add_metric(labels, count)
            yield counter
        histogram = HistogramMetricFamily(
            "engine_ring_handover_duration_seconds", "Seconds from giving a key range up to its last run ending",
            labels=["ring"],
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*_HANDOVER_BUCKETS, math.inf), self._counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if math.isinf(bound) else repr(bound), cumulative))
        histogram.add_metric(labels, buckets, self._sum)
        yield histogram


class WebhookCollector(Collector):
    """Collects controller-runtime's webhook metrics from ``server`` at scrape time:
    ``controller_runtime_webhook_requests_total{code,webhook}`` (``code`` the HTTP status,
    ``webhook`` the path), ``controller_runtime_webhook_latency_seconds{webhook}`` (histogram)
    and ``controller_runtime_webhook_requests_in_flight{webhook}``. Register it once; cheap
    and never blocks."""

    def __init__(self, server: WebhookServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily(
            "controller_runtime_webhook_requests", "Total number of admission requests by HTTP status code.",
            labels=["code", "webhook"],
        )
        latency = HistogramMetricFamily(
            "controller_runtime_webhook_latency_seconds", "Histogram of the latency of processing admission requests",
            labels=["webhook"],
        )
        in_flight = GaugeMetricFamily(
            "controller_runtime_webhook_requests_in_flight", "Current number of admission requests being served.",
            labels=["webhook"],
        )
        for path, stats in self._server.dispatcher.items():
            for code, count in sorted(stats.requests.items()):
                total.add_metric([str(code), path], count)
            buckets = [(f"{bound:g}", count) for bound, count in zip(LATENCY_BUCKETS, stats.buckets, strict=True)]
            latency.add_metric([path], [*buckets, ("+Inf", stats.latency_count)], stats.latency_sum)
            in_flight.add_metric([path], stats.in_flight)
        yield total
        yield latency
        yield in_flight
