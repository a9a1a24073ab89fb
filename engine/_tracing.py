"""Tracing runs with OpenTelemetry: a span per run, its API requests as child spans.

OpenTelemetry is an optional extra (``pip install 'trio-reconciler-engine[otel]'``). This module
imports it only when a :class:`RunTracer` is made, so without it (or without a tracer provider)
the engine pays nothing: :meth:`Manager.run <engine.Manager.run>` adds a :class:`RunTracer` on
its own only when the OpenTelemetry API was imported and a global tracer provider was set, and
the client's requests check one context variable.

A run's span is ``reconcile <controller>``: it starts when the run's trigger entered the queue
and has a ``run started`` event when a worker took the key (the queue wait between them is the
attribute ``engine.queue_wait_s``); it holds the trigger and the run's identity as attributes, a
link to the run it superseded, and ends with the run's outcome (error status for a failure).
While the run's span is current, the engine's API requests (see :func:`request_span`) are
client spans under it and carry its W3C ``traceparent``. A webhook server makes a server span
of each call it answers (see :func:`served_span`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, TypeVar

import trio

from ._controller import Controller, RunObserver
from ._outcome import CancelCause, Outcome
from ._refs import ObjectRef
from ._run import Run

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider

__all__ = ["RunTracer", "global_provider", "request_span", "served_span", "trace_headers"]

_INSTRUMENTATION = "engine"

_T = TypeVar("_T")

_TRACER: ContextVar[Tracer | None] = ContextVar("engine_run_tracer", default=None)
"""The tracer of the traced run the current task works for (its requests are traced)."""

_HEADERS: ContextVar[list[tuple[str, str]] | None] = ContextVar("engine_trace_headers", default=None)
"""The trace context headers of the request being sent in the current task."""


class RunTracer(RunObserver):
    """A run observer that gives every run an OpenTelemetry span (see the module docstring).

    ``tracer_provider`` defaults to OpenTelemetry's global one. :meth:`Manager.run
    <engine.Manager.run>` adds one itself when a global provider is set (see
    :meth:`from_global_provider`); add one with ``manager.add_observer(RunTracer(provider))``
    for a provider of your own. Raises ``ImportError`` when OpenTelemetry is not installed.

    Its hooks run in the run's worker task: the run's span is made current there (and so in
    tasks the reconciler starts) from the run's start to its end.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._context = context
        self.tracer: Tracer = trace.get_tracer(_INSTRUMENTATION, tracer_provider=tracer_provider)
        self._open: dict[Run, tuple[Span, Token[Context], Token[Tracer | None]]] = {}
        self._superseded: dict[tuple[str, ObjectRef], SpanContext] = {}
        self._clock_offset: tuple[float, int] | None = None

    @classmethod
    def from_global_provider(cls) -> RunTracer | None:
        """A tracer for OpenTelemetry's global provider, or ``None`` when none was set (see
        :func:`global_provider`)."""
        provider = global_provider()
        return None if provider is None else cls(provider)

    def _wall_ns(self, at: float) -> int:
        """The wall-clock time (ns, as spans take it) of trio clock time ``at``: one offset
        between the clocks, taken at the first run, so that a virtual clock's times keep their
        order and distances."""
        if self._clock_offset is None:
            self._clock_offset = (trio.current_time(), time.time_ns())
        clock, wall = self._clock_offset
        return wall + int((at - clock) * 1e9)

    def on_run_started(self, controller: Controller, run: Run) -> None:
        trace = self._trace
        trigger = run.trigger
        key = run.key
        wait = max(run.started_at - trigger.observed_at, 0.0)
        started_ns = self._wall_ns(run.started_at)
        queued_ns = started_ns - int(wait * 1e9)
        attributes: dict[str, str | int | float] = {
            "engine.controller": controller.name,
            "engine.run_id": run.id,
            "engine.attempt": run.attempt,
            "engine.object": str(key),
            "engine.trigger.reason": trigger.reason,
            "engine.trigger.sequence": trigger.sequence,
            "engine.queue_wait_s": wait,
        }
        if trigger.revision is not None:
            attributes["engine.trigger.revision"] = trigger.revision
        links = None
        previous = self._superseded.pop((controller.name, key), None)
        if previous is not None:
            links = [trace.Link(previous, {"engine.link": "superseded"})]
        # A root span: the worker's own context (the caller's of Manager.run) is not its parent.
        span = self.tracer.start_span(
            f"reconcile {controller.name}", context=self._context.Context(), kind=trace.SpanKind.CONSUMER,
            attributes=attributes, links=links, start_time=queued_ns,
        )
        span.add_event("run started", timestamp=started_ns)
        run_context = trace.set_span_in_context(span)
        run.trace_id = format(span.get_span_context().trace_id, "032x")
        self._open[run] = (span, self._context.attach(run_context), _TRACER.set(self.tracer))

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        entry = self._open.pop(run, None)
        if entry is None:
            return
        span, token, tracer_token = entry
        _TRACER.reset(tracer_token)
        self._context.detach(token)
        ended: dict[str, str | float] = {"engine.outcome": outcome.kind.value}
        if run.cause is not None:
            ended["engine.cancel_cause"] = run.cause.value
            if run.cause is CancelCause.SUPERSEDED:
                # The key runs next for the trigger that superseded this run: that run links here.
                self._superseded[controller.name, run.key] = span.get_span_context()
        if outcome.reason:
            ended["engine.cancel_reason"] = outcome.reason
        if outcome.requeue_after is not None:
            ended["engine.requeue_after_s"] = outcome.requeue_after
        span.set_attributes(ended)
        if outcome.is_failure:
            error = outcome.error
            if error is not None:
                span.record_exception(error)
            status = self._trace.Status(self._trace.StatusCode.ERROR, str(error) if error else outcome.kind.value)
            span.set_status(status)
        end = run.finished_at
        span.end(end_time=None if end is None else self._wall_ns(end))


def global_provider() -> TracerProvider | None:
    """OpenTelemetry's global tracer provider, or ``None`` when none was set (or the API was
    never imported: then none can have been set). Imports nothing."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider: TracerProvider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


@contextmanager
def served_span(provider: TracerProvider, method: str, path: str, headers: Mapping[str, str]) -> Iterator[Span]:
    """A ``SERVER`` span, current for the block, for one request this process serves (a
    webhook call), under the trace context its ``traceparent`` header names (lower-case
    header names). An exception leaving the block is recorded and propagates."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract(headers)
    tracer = trace.get_tracer(_INSTRUMENTATION, tracer_provider=provider)
    attributes = {"http.request.method": method, "url.path": path}
    with tracer.start_as_current_span(
        f"{method} {path}", context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


class _RequestSpan:
    """The client span of one API request (see :func:`request_span`)."""

    __slots__ = ("_span", "_headers")

    def __init__(self, span: Span, headers: list[tuple[str, str]]) -> None:
        self._span = span
        self._headers = headers

    async def around(self, sending: Awaitable[_T]) -> _T:
        """Await ``sending`` (the request, with its retries) with this span's trace headers
        set for the current task, then end the span with the answer's status code (or the
        error's). Cancellation ends the span as well and propagates."""
        span = self._span
        token = _HEADERS.set(self._headers)
        try:
            response = await sending
        except BaseException as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, int):
                span.set_attribute("http.response.status_code", code)
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        else:
            code = getattr(response, "status_code", None)
            if isinstance(code, int):
                span.set_attribute("http.response.status_code", code)
            return response
        finally:
            _HEADERS.reset(token)
            span.end()


def request_span(method: str, path: str) -> _RequestSpan | None:
    """A client span for one API request, when the current task works for a traced run.

    ``None`` otherwise, after one context variable lookup. Synchronous; the span starts now
    and ends when :meth:`_RequestSpan.around` returns.
    """
    tracer = _TRACER.get()
    if tracer is None:
        return None
    from opentelemetry.trace import SpanKind, get_current_span, set_span_in_context

    if not get_current_span().is_recording():
        return None  # a task a run started that outlived it
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    resource = api_resource(path)
    attributes: dict[str, str] = {"http.request.method": method, "url.path": path, "k8s.resource": resource}
    span = tracer.start_span(f"{method} {resource}", kind=SpanKind.CLIENT, attributes=attributes)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(span))
    return _RequestSpan(span, list(carrier.items()))


def trace_headers() -> list[tuple[str, str]] | None:
    """The ``traceparent`` (and ``tracestate``) headers of the request being sent in the
    current task, or ``None`` when it is not traced. One context variable lookup."""
    return _HEADERS.get()


def api_resource(path: str) -> str:
    """The resource (with its subresource) a Kubernetes API path names: ``configmaps``,
    ``deployments/status``; the path itself for one outside ``/api`` and ``/apis``."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return path
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return path
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"

