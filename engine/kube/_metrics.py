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
``engine_forbidden_requests_total{verb,resource}`` counts the 403 answers a client received
(see :class:`ForbiddenLog`).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._client import Client
from ._cluster import Cluster

__all__ = ["ForbiddenCollector", "InformerCollector"]


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
        filtering: dict[str, bool] = {}
        totals: dict[str, dict[str, int]] = {name: {} for name in families}
        for informer in self._cluster.informers:
            stats = informer.statistics()
            resource = str(informer.resource)
            for name in families:
                per = totals[name]
                per[resource] = per.get(resource, 0) + int(getattr(stats, name))
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
