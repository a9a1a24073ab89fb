"""The runner's OpenTelemetry set-up: a tracer provider when the ``OTEL_*`` variables ask for one.

Traces are exported when ``OTEL_TRACES_EXPORTER`` names exporters (``otlp``, ``console``;
``none`` turns tracing off) or, without it, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (then ``otlp``); ``OTEL_SDK_DISABLED=true`` turns
it off. The OTLP exporter speaks ``http/protobuf`` unless ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``
(or ``OTEL_EXPORTER_OTLP_PROTOCOL``) says ``grpc``; it reads its endpoint, headers and timeout
from the standard variables itself. The resource is OpenTelemetry's own (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``), with the service name ``trio-reconciler-engine`` unless one is
given. Nothing is imported when no variable asks for traces.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["configure_tracing", "SERVICE_NAME"]

logger = logging.getLogger("engine.runner")

SERVICE_NAME = "trio-reconciler-engine"
"""The service name of the runner's traces when ``OTEL_SERVICE_NAME`` names none."""

_EXTRA = "pip install 'trio-reconciler-engine[otel]'"


def _exporters(environ: Mapping[str, str]) -> list[str]:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = environ.get("OTEL_TRACES_EXPORTER")
    if named is not None:
        return [name for name in (part.strip().lower() for part in named.split(",")) if name and name != "none"]
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return ["otlp"]
    return []


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER names {name!r}; the runner exports with 'otlp' or 'console'")
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    wire = "grpc" if protocol == "grpc" else "http"
    # Imported by name: the exporter packages are optional, and not needed to type-check.
    module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{wire}.trace_exporter")
    return module.OTLPSpanExporter()


def configure_tracing(environ: Mapping[str, str]) -> Callable[[], None] | None:
    """Set OpenTelemetry's global tracer provider as ``environ`` asks (see the module
    docstring); returns the function that flushes and shuts it down at exit, or ``None`` when
    no tracing was asked for or it cannot be set up (a warning then says why; the runner runs
    on without traces). Blocking; call it before ``trio.run``."""
    names = _exporters(environ)
    if not names:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exporters = [_exporter(name, environ) for name in names]
    except ImportError as exc:
        missing = exc.name or str(exc)
        hint = "pip install opentelemetry-exporter-otlp-proto-grpc" if "grpc" in missing else _EXTRA
        logger.warning("traces not exported: %s is not installed (%s)", missing, hint)
        return None
    except ValueError as exc:
        logger.warning("traces not exported: %s", exc)
        return None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info("exporting traces", extra={"exporters": ",".join(names)})
    return provider.shutdown
