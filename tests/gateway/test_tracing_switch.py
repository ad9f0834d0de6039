"""When the gateway traces: its setting, else the standard OTEL_* variables; an exporter or
protocol it does not speak is an error naming the variable."""

from __future__ import annotations

import pytest

from trafficmgr.gateway.settings import GatewaySettings, tracing_wanted

OFF = GatewaySettings()


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "gw"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": " OTLP "}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True),
    ],
)
def test_the_environment_decides_by_default(environ: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(OFF, environ) is wanted


def test_the_setting_wins_over_the_environment() -> None:
    env = {"OTEL_TRACES_EXPORTER": "otlp"}
    assert tracing_wanted(GatewaySettings(tracing=False), env) is False
    assert tracing_wanted(GatewaySettings(tracing=True), {}) is True
    assert tracing_wanted(GatewaySettings(otlp_endpoint="http://127.0.0.1:4318"), {}) is True


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
    ],
)
def test_what_it_cannot_export_is_named(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ValueError, match=variable):
        tracing_wanted(OFF, environ)
