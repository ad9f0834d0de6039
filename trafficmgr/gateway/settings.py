"""The gateway's own knobs (the routing ones are ``RequestPathConfig``'s), in one value."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trafficmgr.gateway.http import ClientLimits

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_BODY_BYTES = 8 * 1024 * 1024


def networks(specs: Iterable[str]) -> tuple[IpNetwork, ...]:
    """Parse addresses or CIDR networks (``127.0.0.1``, ``10.0.0.0/8``); raise ValueError."""
    return tuple(ipaddress.ip_network(s.strip(), strict=False) for s in specs if s.strip())


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Limits, timeouts and retries of the OpenAI-compatible gateway."""

    max_body_bytes: int = DEFAULT_BODY_BYTES  # a larger request is refused with 413
    trusted_proxies: tuple[IpNetwork, ...] = field(default_factory=tuple)  # may set X-F-F
    connect_timeout_s: float = 2.0
    first_byte_timeout_s: float = 60.0  # a stream's first chunk (retried elsewhere after)
    idle_timeout_s: float = 30.0  # between two chunks of a stream: longer is a stall
    request_timeout_s: float = 600.0  # a whole non-streaming response
    max_attempts: int = 3  # the pick and up to two fallbacks
    retry_budget_ratio: float = 0.2  # retries may add at most this share of requests ...
    retry_budget_per_s: float = 10.0  # ... plus this many per second
    upstream_api_key: str | None = None  # sent to the endpoints (clients' tokens never are)
    max_connections: int = 4096  # pooled keep-alive connections to the endpoints, in all
    # an endpoint past these is broken (its connection aborted, the attempt failed): the
    # status line and headers of a response (1xx interims included), how many headers, and
    # a body read whole (non-streamed answers and passed-back 4xx)
    upstream_max_head_bytes: int = 64 * 1024
    upstream_max_headers: int = 100
    upstream_max_body_bytes: int = 16 * 1024 * 1024  # one response read whole
    upstream_max_buffered_bytes: int = 48 * 1024 * 1024  # all of them at once, per worker
    keepalive_s: float = 60.0
    access_log: bool = False
    shutdown_timeout_s: float = 30.0  # in-flight requests finish (drain) before exit
    # OpenTelemetry spans over OTLP/HTTP; None: the standard OTEL_* variables decide
    tracing: bool | None = None
    otlp_endpoint: str | None = None  # the collector's base URL, else OTEL_EXPORTER_OTLP_*
    # where the workers of one gateway pool their /metrics figures (``serve`` sets one up
    # for --workers above 1); None: this process answers for itself only
    metrics_dir: str | None = None
    # a bearer token /metrics and /healthz's detail require (``TRAFFICMGR_METRICS_TOKEN``,
    # as the control plane's /metrics); None: both open, as inside a private network
    metrics_token: str | None = None
    # what one client may hold of a worker and for how long (its deadlines and caps)
    client_limits: ClientLimits = field(default_factory=ClientLimits)
    # the HTTP server under the routes: "own" (``http``) or "uvicorn" (``asgi``)
    http_server: str = "own"


HTTP_SERVERS = ("own", "uvicorn")


def tracing_wanted(settings: GatewaySettings, environ: Mapping[str, str]) -> bool:
    """Tell whether to trace: the setting when given, else the standard OTEL_* variables.

    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it off; ``otlp`` in
    ``OTEL_TRACES_EXPORTER``, or an OTLP endpoint variable, turn it on; raise ValueError,
    naming the variable, for an exporter or protocol the gateway does not speak."""
    if settings.tracing is not None:
        return settings.tracing
    if settings.otlp_endpoint is not None:
        return True
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    exporters.discard("")
    if exporters:
        if exporters == {"none"}:
            return False
        if exporters != {"otlp"}:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER: the gateway exports over otlp only, got {sorted(exporters)}"
            )
    elif not (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        return False
    if protocol.strip() not in ("", "http/protobuf"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: the gateway exports http/protobuf only, got {protocol!r}"
        )
    return True


# the command-line flags of ``ClientLimits`` (both gateway commands): flag → (field, type, help)
CLIENT_FLAGS: dict[str, tuple[str, type, str]] = {
    "--client-keepalive": ("keepalive_s", float, "seconds an idle client connection stays open"),
    "--head-timeout": ("head_timeout_s", float, "seconds for a request line and headers (408)"),
    "--body-timeout": ("body_timeout_s", float, "seconds' grace before --min-body-rate applies"),
    "--min-body-rate": ("min_body_rate", int, "bytes/s a request body must average (408)"),
    "--client-write-timeout": (
        "write_timeout_s",
        float,
        "seconds a write may wait for a client that does not read (then the connection drops)",
    ),
    "--max-pipelined": ("max_pipelined", int, "requests queued before reading stops"),
    "--max-head-bytes": ("max_head_bytes", int, "bytes of request line and headers (431)"),
    "--max-client-connections": ("max_connections", int, "client connections per worker (503)"),
    "--max-connections-per-client": (
        "max_per_client",
        int,
        "connections per client address, trusted proxies exempt (503)",
    ),
}


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    """Add the ``ClientLimits`` flags, with their defaults, to ``parser``."""
    defaults = ClientLimits()
    for flag, (name, kind, text) in CLIENT_FLAGS.items():
        default = getattr(defaults, name)
        parser.add_argument(flag, type=kind, default=default, help=f"{text}; {default:g}")


def client_limits(options: Mapping[str, object]) -> ClientLimits:
    """Return the ``ClientLimits`` the parsed flags give; raise ValueError naming a flag that
    is not positive."""
    values: dict[str, Any] = {}
    for flag, (name, _, _) in CLIENT_FLAGS.items():
        value = options[flag.removeprefix("--").replace("-", "_")]
        if not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{flag}: must be a positive number, got {value!r}")
        values[name] = value
    return ClientLimits(**values)
