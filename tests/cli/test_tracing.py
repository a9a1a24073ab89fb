"""Tests of engine.cli._tracing: the runner sets up a tracer provider only when OTEL_* variables ask."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest

from engine.cli._tracing import SERVICE_NAME, configure_tracing

pytest.importorskip("opentelemetry.sdk.trace", reason="the OpenTelemetry SDK (the 'test' extra) is not installed")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The providers the runner set, instead of OpenTelemetry's global one (set once per process)."""
    set_: list[Any] = []
    monkeypatch.setattr(trace, "set_tracer_provider", set_.append)
    return set_


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_SERVICE_NAME": "mine"},
    ],
)
def test_nothing_is_set_up_unless_the_variables_ask(environ: dict[str, str], providers: list[Any]) -> None:
    assert configure_tracing(environ) is None
    assert providers == []


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_TRACES_EXPORTER": "console"},
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "mine"},
    ],
)
def test_the_exporters_named_are_set_up_with_the_service_name(
    environ: dict[str, str], providers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    end = configure_tracing(environ)
    assert end is not None
    (provider,) = providers
    assert isinstance(provider, TracerProvider)
    assert provider.resource.attributes["service.name"] == environ.get("OTEL_SERVICE_NAME", SERVICE_NAME)
    end()


def test_an_otlp_endpoint_alone_asks_for_otlp(providers: list[Any]) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the OTLP/HTTP exporter is not installed")
    end = configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert end is not None and len(providers) == 1
    end()


@pytest.mark.parametrize(
    ("environ", "warning"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "traces not exported: OTEL_TRACES_EXPORTER names 'zipkin'; the runner exports with 'otlp' or 'console'",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "traces not exported: opentelemetry.exporter.otlp.proto.grpc.trace_exporter is not installed "
            "(pip install opentelemetry-exporter-otlp-proto-grpc)",
        ),
    ],
)
def test_what_cannot_be_set_up_is_one_warning_and_no_traces(
    environ: dict[str, str], warning: str, providers: list[Any], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    with caplog.at_level(logging.WARNING, logger="engine.runner"):
        assert configure_tracing(environ) is None
    assert [r.getMessage() for r in caplog.records] == [warning]
    assert providers == []


def test_without_the_sdk_the_runner_says_which_extra_to_install(
    providers: list[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)
    with caplog.at_level(logging.WARNING, logger="engine.runner"):
        assert configure_tracing({"OTEL_TRACES_EXPORTER": "otlp"}) is None
    assert [r.getMessage() for r in caplog.records] == [
        "traces not exported: opentelemetry.sdk.resources is not installed "
        "(pip install 'trio-reconciler-engine[otel]')"
    ]
