"""Prometheus metrics of a cluster's informers, for the registry of a manager's metrics.

``engine_informer_object_errors_total{resource}`` counts exceptions that user code on the watch
path (index functions, predicates, mappers, handlers) raised for one object and that were
contained to it; ``engine_informer_resets_total{resource}`` counts relists from scratch because
the server's history went backwards; ``engine_informer_restarts_total{resource}`` counts
restarts after unexpected errors, ``engine_informer_skipped_total{resource}`` malformed items.
``engine_forbidden_requests_total{verb,resource}`` counts the 403 answers a client received
(see :class:`ForbiddenLog`). :class:`WebhookCollector` gives controller-runtime's webhook metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ._client import Client
from ._cluster import Cluster
from ._webhook_server import WebhookServer
from ._webhooks import LATENCY_BUCKETS

__all__ = ["ForbiddenCollector", "InformerCollector", "WebhookCollector"]


class ForbiddenCollector(Collector):
    """Collects ``engine_forbidden_requests_total{verb,resource}`` from ``client.forbidden``
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
        }
        totals: dict[str, dict[str, int]] = {name: {} for name in families}
        for informer in self._cluster.informers:
            stats = informer.statistics()
            resource = str(informer.resource)
            for name in families:
                per = totals[name]
                per[resource] = per.get(resource, 0) + int(getattr(stats, name))
        for name, family in families.items():
            for resource, value in sorted(totals[name].items()):
                family.add_metric([resource], value)
            yield family


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
