"""Tests of engine._tracing: a span per run, its API requests as child spans with ``traceparent``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from engine import (
    Controller,
    Manager,
    ObjectRef,
    OutcomeKind,
    Result,
    RunContext,
    RunLog,
    RunTracer,
    SupersedePolicy,
)
from engine._tracing import api_resource, request_span

from ._support import running

pytest.importorskip("opentelemetry.sdk.trace", reason="the OpenTelemetry SDK (the 'test' extra) is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

A = ObjectRef("Bundle", "a", "ns")


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


def traced(exporter: InMemorySpanExporter, reconcile, **kwargs) -> tuple[Manager, Controller, RunLog]:  # type: ignore[no-untyped-def]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    manager = Manager(handle_signals=False, grace_period=5)
    log = RunLog()
    manager.add_observer(log)
    manager.add_observer(RunTracer(provider))
    controller = manager.add_controller(Controller("test", reconcile, **kwargs))
    return manager, controller, log


def runs(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "reconcile test"]


async def test_a_run_span_has_its_trigger_queue_wait_and_outcome(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter
) -> None:
    release = trio.Event()

    async def reconcile(ctx: RunContext) -> Result | None:
        if ctx.ref == A:
            await release.wait()
            return None
        return Result(requeue_after=60)

    b = ObjectRef("Bundle", "b", "ns")
    manager, controller, log = traced(exporter, reconcile)
    async with running(manager):
        controller.trigger(A, reason="Bundle modified", revision="7")
        await trio.sleep(1)
        controller.trigger(b, reason="resync")
        await trio.sleep(2.5)
        release.set()
        await trio.sleep(1)
    spans = {s.attributes["engine.object"]: s for s in runs(exporter)}  # type: ignore[index]
    span_a, span_b = spans[str(A)], spans[str(b)]
    assert span_a.kind is SpanKind.CONSUMER
    assert dict(span_a.attributes or {}) == {
        "engine.controller": "test",
        "engine.run_id": log.records[0].run_id,
        "engine.attempt": 1,
        "engine.object": str(A),
        "engine.trigger.reason": "Bundle modified",
        "engine.trigger.sequence": 1,
        "engine.trigger.revision": "7",
        "engine.queue_wait_s": 0.0,
        "engine.outcome": "success",
    }
    assert span_b.attributes is not None
    assert span_b.attributes["engine.queue_wait_s"] == pytest.approx(2.5)
    assert span_b.attributes["engine.outcome"] == "requeue_after"
    assert span_b.attributes["engine.requeue_after_s"] == 60
    (started,) = span_b.events
    assert started.name == "run started"
    assert span_b.start_time is not None
    assert (started.timestamp - span_b.start_time) / 1e9 == pytest.approx(2.5)
    assert span_a.status.status_code is StatusCode.UNSET


async def test_a_failed_run_has_error_status_and_the_exception(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        raise RuntimeError("boom")

    manager, controller, _ = traced(exporter, reconcile)
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(0.5)
    span = runs(exporter)[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "boom"
    assert span.attributes is not None and span.attributes["engine.outcome"] == "error"
    assert [e.name for e in span.events] == ["run started", "exception"]


@pytest.mark.parametrize("policy", [SupersedePolicy.CANCEL_RUN, SupersedePolicy.INTERRUPTIBLE])
async def test_a_superseded_run_is_linked_from_its_successor(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter, policy: SupersedePolicy
) -> None:
    """Under ``INTERRUPTIBLE`` the run is cancelled after the trigger, when it enters its section."""

    async def reconcile(ctx: RunContext) -> None:
        if ctx.trigger.revision == "1":
            await trio.sleep(1.5)
            with ctx.interruptible():
                await trio.sleep(100)

    manager, controller, log = traced(exporter, reconcile, supersede=policy)
    async with running(manager):
        controller.trigger(A, revision="1")
        await trio.sleep(1)
        controller.trigger(A, revision="2")
        await trio.sleep(1)
    assert log.kinds() == [OutcomeKind.SUPERSEDED, OutcomeKind.SUCCEEDED]
    first, second = sorted(runs(exporter), key=lambda s: s.start_time or 0)
    assert first.attributes is not None
    assert first.attributes["engine.outcome"] == "superseded"
    assert first.attributes["engine.cancel_cause"] == "superseded"
    assert first.attributes["engine.cancel_reason"] == "superseded by trigger #2"
    assert first.status.status_code is StatusCode.UNSET
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert not first.links
    assert first.parent is None and second.parent is None
    assert first.context.trace_id != second.context.trace_id, "each run is a trace of its own"


async def test_the_live_stream_shows_the_trace_id_of_a_run_in_progress_and_ended(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter
) -> None:
    from engine.observability import LiveStream

    release = trio.Event()

    async def reconcile(ctx: RunContext) -> None:
        await release.wait()

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    manager = Manager(handle_signals=False, grace_period=5)
    live = LiveStream(manager)
    manager.add_observer(RunTracer(provider))  # after the stream: the manager runs tracers first
    controller = manager.add_controller(Controller("test", reconcile))
    async with running(manager):
        controller.trigger(A)
        await trio.sleep(0.5)
        (running_now,) = (o["running"] for o in live.state.objects() if o["object"] == str(A))
        release.set()
        await trio.sleep(0.5)
        (last,) = (o["last"] for o in live.state.objects() if o["object"] == str(A))
    trace_id = format(runs(exporter)[0].context.trace_id, "032x")
    assert running_now["trace_id"] == trace_id
    assert last["trace_id"] == trace_id


async def test_a_runs_api_requests_are_child_spans_and_carry_its_traceparent(exporter: InMemorySpanExporter) -> None:
    from engine.apiserver import ApiServer
    from engine.apiserver._api import ServedRequest
    from engine.kube import Client, Config, NotFoundError, Resource

    configmaps = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)
    served: list[ServedRequest] = []
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        api.add_request_observer(served.append)

        async def reconcile(ctx: RunContext) -> None:
            await client.create(configmaps, {"metadata": {"name": "a", "namespace": "default"}, "data": {}})
            with pytest.raises(NotFoundError):
                await client.get(configmaps, "missing", namespace="default")
            with pytest.raises(NotFoundError):  # a path the client sends through httpx, not its direct path
                await client.get(configmaps, "not:plain", namespace="default")

        await client.create(configmaps, {"metadata": {"name": "outside", "namespace": "default"}, "data": {}})
        manager, controller, _ = traced(exporter, reconcile)
        async with running(manager):
            controller.trigger(A)
            with trio.fail_after(10):
                while not runs(exporter):
                    await trio.sleep(0.01)
    run = runs(exporter)[0]
    children = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert [(s.name, dict(s.attributes or {})) for s in children] == [
        ("POST configmaps", {
            "http.request.method": "POST", "url.path": "/api/v1/namespaces/default/configmaps",
            "k8s.resource": "configmaps", "http.response.status_code": 201,
        }),
        ("GET configmaps", {
            "http.request.method": "GET", "url.path": "/api/v1/namespaces/default/configmaps/missing",
            "k8s.resource": "configmaps", "http.response.status_code": 404,
        }),
        ("GET configmaps", {
            "http.request.method": "GET", "url.path": "/api/v1/namespaces/default/configmaps/not%3Aplain",
            "k8s.resource": "configmaps", "http.response.status_code": 404,
        }),
    ]
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in children)
    assert children[1].status.status_code is StatusCode.ERROR
    trace_id = format(run.context.trace_id, "032x")
    assert [(r.verb, r.traceparent and r.traceparent.split("-")[:3]) for r in served] == [
        ("create", None),
        ("create", ["00", trace_id, format(children[0].context.span_id, "016x")]),
        ("get", ["00", trace_id, format(children[1].context.span_id, "016x")]),
        ("get", ["00", trace_id, format(children[2].context.span_id, "016x")]),
    ]


async def test_a_global_provider_is_traced_without_being_asked(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)

    async def reconcile(ctx: RunContext) -> None:
        pass

    manager = Manager(handle_signals=False, grace_period=5)
    controller = manager.add_controller(Controller("test", reconcile))
    with provider.get_tracer("test").start_as_current_span("around the manager") as around:
        async with running(manager):
            controller.trigger(A)
            await trio.sleep(0.5)
    (run,) = runs(exporter)
    assert run.parent is None and run.context.trace_id != around.get_span_context().trace_id


async def test_without_a_provider_or_the_api_nothing_is_traced_and_nothing_fails(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids: list[str | None] = []

    class Ids(RunLog):
        def on_run_started(self, controller: Controller, run) -> None:  # type: ignore[no-untyped-def]
            ids.append(run.trace_id)

    async def reconcile(ctx: RunContext) -> None:
        assert request_span("GET", "/api/v1/namespaces/ns/configmaps/a") is None

    for installed in (True, False):
        if not installed:
            for module in ("opentelemetry", "opentelemetry.trace", "opentelemetry.context"):
                monkeypatch.setitem(sys.modules, module, None)
            with pytest.raises(ImportError):
                RunTracer()
        assert RunTracer.from_global_provider() is None
        manager = Manager(handle_signals=False, grace_period=5)
        manager.add_observer(Ids())
        controller = manager.add_controller(Controller("test", reconcile))
        async with running(manager):
            controller.trigger(A)
            await trio.sleep(0.5)
        assert controller.outcomes[OutcomeKind.SUCCEEDED] == 1
    assert ids == [None, None]


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/ns/configmaps/a", "configmaps"),
        ("/api/v1/namespaces/ns/configmaps", "configmaps"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/api/v1/namespaces", "namespaces"),
        ("/apis/apps/v1/namespaces/ns/deployments/d/status", "deployments/status"),
        ("/apis/example.com/v1/bundles", "bundles"),
        ("/apis/apps/v1", "/apis/apps/v1"),
        ("/version", "/version"),
    ],
)
def test_api_resource_names_the_resource_of_a_path(path: str, resource: str) -> None:
    assert api_resource(path) == resource


async def test_a_webhook_call_is_a_server_span_under_the_callers_traceparent(
    autojump_clock: trio.testing.MockClock, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx
    from opentelemetry import trace

    from engine.kube import (
        AdmissionRequest,
        AdmissionResponse,
        AdmissionRule,
        AdmissionWebhook,
        WebhookContext,
        WebhookServer,
    )

    async def allow(request: AdmissionRequest, ctx: WebhookContext) -> AdmissionResponse | None:
        return None

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    rules = [AdmissionRule("widgets.test.dev/v1", "widgets", ("CREATE",))]
    server = WebhookServer([AdmissionWebhook("allow.widgets.test.dev", allow, rules)])
    widget = {"apiVersion": "widgets.test.dev/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "widgets.test.dev", "version": "v1", "kind": "Widget"},
        "resource": {"group": "widgets.test.dev", "version": "v1", "resource": "widgets"},
        "name": "w", "namespace": "ns", "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": widget, "oldObject": None, "dryRun": False}}
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with httpx.AsyncClient(transport=server.transport()) as client:
        answer = await client.post(
            "https://webhooks.invalid/validate/allow.widgets.test.dev", json=review, headers={"traceparent": parent}
        )
    assert answer.status_code == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "POST /validate/allow.widgets.test.dev"
    assert span.kind is SpanKind.SERVER
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert span.parent is not None and format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    assert dict(span.attributes or {}) == {
        "http.request.method": "POST", "url.path": "/validate/allow.widgets.test.dev", "http.response.status_code": 200,
    }
