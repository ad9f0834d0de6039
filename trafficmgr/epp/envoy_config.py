"""Generate an Envoy bootstrap that routes a fleet's inference traffic through the EPP.

The shape follows the endpoint picker protocol: the ``ext_proc`` filter asks the EPP for
each request's fallback list, and the endpoints cluster's ``override_host`` load
balancing policy sends the request to the list's first endpoint, each retry to the next.
Retries happen only before any byte reached the client (connect failure, refused stream,
reset before the request was sent, 503 from the upstream), and the EPP caps their number
at the list's length (``x-envoy-max-retries``), so the cluster's fallback round robin,
which knows nothing of residency, never picks a host. ``failure_mode_allow`` is off by
default for the same reason: with the EPP unreachable Envoy answers 500 instead of
spreading requests over every endpoint of the cluster, residency or not.

``python -m trafficmgr.epp.envoy_config --fleet FILE --listen HOST:PORT --epp HOST:PORT``
prints the YAML.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from trafficmgr.epp import wire
from trafficmgr.fleetfile import load_fleet_file, parse_address
from trafficmgr.routing.types import AdminState, Endpoint, Fleet

T = "type.googleapis.com/envoy."
CEL_FILTER = T + "extensions.access_loggers.filters.cel.v3.ExpressionFilter"
RETRY_ON = "connect-failure,refused-stream,reset-before-request,retriable-status-codes"
# --body-mode → the ext_proc request body mode (docs/epp.md compares them)
BODY_MODES = {"buffered": "BUFFERED", "streamed": "STREAMED", "full_duplex": "FULL_DUPLEX_STREAMED"}


@dataclass(frozen=True, slots=True)
class EnvoyOptions:
    listen: str = "0.0.0.0:8080"
    epp: str = "127.0.0.1:9002"
    admin: str = "127.0.0.1:9901"
    region: str | None = None
    body_mode: str = "buffered"  # a key of BODY_MODES
    failure_mode_allow: bool = False
    max_body_bytes: int = 4 << 20
    max_fallbacks: int = 4  # retries down the list, at most; the EPP lowers it per request
    request_timeout_s: float = 600.0
    idle_timeout_s: float = 120.0
    connect_timeout_s: float = 1.0
    # one ext_proc reply, at most: past it a request gets 504 (a hung EPP costs this long);
    # above the core's longest admission wait (interactive_wait_s, 5 s)
    message_timeout_s: float = 10.0
    # read the subset hint from the x-gateway-destination-endpoint-subset request header;
    # only behind a hop that sets it (a client could otherwise narrow its own candidates)
    subset_header: bool = False

    def __post_init__(self) -> None:
        if self.body_mode not in BODY_MODES:
            raise ValueError(f"body_mode must be one of {', '.join(BODY_MODES)}")
        if not self.message_timeout_s > 0:
            raise ValueError("message_timeout_s must be positive")

    @property
    def full_duplex(self) -> bool:
        return self.body_mode == "full_duplex"


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` → (host, port); ValueError when the port is missing."""
    host, port = parse_address(value)
    if port is None:
        raise ValueError(f"{value!r} needs a port")
    return host, port


def _socket(value: str) -> dict[str, Any]:
    host, port = split_host_port(value)
    return {"socket_address": {"address": host, "port_value": port}}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def fleet_endpoints(fleet: Fleet, region: str | None) -> list[Endpoint]:
    """The endpoints Envoy may send to: active ones, of ``region`` when one is named."""
    if region is not None:
        fleet.region(region)  # KeyError names an unknown region
    chosen = [
        e
        for r in fleet.regions
        if region is None or r.name == region
        for e in r.endpoints
        if e.admin_state != AdminState.DISABLED
    ]
    for endpoint in chosen:
        host, port = parse_address(endpoint.address)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(
                f"endpoint {endpoint.name}: {endpoint.address!r} is not IP:PORT "
                "(override_host matches the addresses Envoy connects to)"
            ) from None
        if port is None:
            raise ValueError(f"endpoint {endpoint.name}: {endpoint.address!r} has no port")
    return chosen


def endpoints_cluster(fleet: Fleet, options: EnvoyOptions) -> dict[str, Any]:
    """A static cluster of the fleet's endpoints, one locality per region, override_host LB."""
    localities: dict[str, list[dict[str, Any]]] = {}
    for endpoint in fleet_endpoints(fleet, options.region):
        entry = {"endpoint": {"address": _socket(endpoint.address), "hostname": endpoint.name}}
        localities.setdefault(endpoint.region, []).append(entry)
    lb_key = {"key": wire.DESTINATION_NAMESPACE}
    override = {
        "@type": T + "extensions.load_balancing_policies.override_host.v3.OverrideHost",
        "override_host_sources": [
            {"metadata": {**lb_key, "path": [{"key": wire.DESTINATION_KEY}]}}
        ],
        "selected_host_key": {**lb_key, "path": [{"key": wire.SERVED_KEY}]},
        "fallback_policy": _policy(
            "round_robin", T + "extensions.load_balancing_policies.round_robin.v3.RoundRobin"
        ),
    }
    limits = {"max_connections": 100000, "max_pending_requests": 100000}
    return {
        "name": "endpoints",
        "type": "STATIC",
        "connect_timeout": _seconds(options.connect_timeout_s),
        "load_balancing_policy": _policy("override_host", None, override),
        "circuit_breakers": {
            "thresholds": [{**limits, "max_requests": 100000, "max_retries": 10000}]
        },
        "load_assignment": {
            "cluster_name": "endpoints",
            "endpoints": [
                {"locality": {"region": region}, "lb_endpoints": entries}
                for region, entries in localities.items()
            ],
        },
    }


def _policy(name: str, type_url: str | None, config: dict[str, Any] | None = None) -> Any:
    typed = config if config is not None else {"@type": type_url}
    full = f"envoy.load_balancing_policies.{name}"
    return {"policies": [{"typed_extension_config": {"name": full, "typed_config": typed}}]}


def epp_cluster(options: EnvoyOptions) -> dict[str, Any]:
    """The EPP, over HTTP/2 (gRPC), health-checked on its ``readiness`` service."""
    host, _ = split_host_port(options.epp)
    try:
        ipaddress.ip_address(host)
        kind = "STATIC"
    except ValueError:
        kind = "STRICT_DNS"  # a Service name in Kubernetes
    http2: dict[str, Any] = {"explicit_http_config": {"http2_protocol_options": {}}}
    # one ext_proc stream per HTTP request in flight: Envoy's default cap (1,024) would
    # answer 500 to the next request under load, long streams being the rule here
    limits = {"max_connections": 100000, "max_pending_requests": 100000, "max_requests": 100000}
    return {
        "name": "epp",
        "type": kind,
        "connect_timeout": _seconds(options.connect_timeout_s),
        "circuit_breakers": {"thresholds": [limits]},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": T + "extensions.upstreams.http.v3.HttpProtocolOptions",
                **http2,
            }
        },
        "health_checks": [
            {
                "timeout": "1s",
                "interval": "2s",
                "unhealthy_threshold": 2,
                "healthy_threshold": 1,
                "grpc_health_check": {"service_name": "readiness"},
            }
        ],
        "load_assignment": {
            "cluster_name": "epp",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(options.epp)}}]}],
        },
    }


def ext_proc_filter(options: EnvoyOptions) -> dict[str, Any]:
    """The ext_proc filter: what it sends the EPP and which metadata flows each way."""
    duplex = options.full_duplex
    mode = {
        "request_header_mode": "SEND",
        "response_header_mode": "SEND",
        "request_body_mode": BODY_MODES[options.body_mode],
        # usage is read as the response streams; STREAMED lets each chunk on at once
        "response_body_mode": "FULL_DUPLEX_STREAMED" if duplex else "STREAMED",
        # full-duplex requires trailers to be sent: they end a body that has them
        "request_trailer_mode": "SEND" if duplex else "SKIP",
        "response_trailer_mode": "SEND" if duplex else "SKIP",
    }
    namespaces = [wire.DESTINATION_NAMESPACE, wire.SUBSET_NAMESPACE]
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}},
            # off: an unreachable EPP gives 500, never a pick that ignored residency
            "failure_mode_allow": options.failure_mode_allow,
            "message_timeout": _seconds(options.message_timeout_s),
            "processing_mode": mode,
            # STREAMED parts go with their headers, not a round trip later: the EPP answers
            # response headers at once, so the first body chunk is already there to answer
            **({} if duplex else {"send_body_without_waiting_for_header_response": True}),
            # x-envoy-max-retries is set by the EPP to cap retries at the list's length
            "mutation_rules": {"allow_envoy": True},
            "metadata_options": {
                "forwarding_namespaces": {"untyped": namespaces},
                "receiving_namespaces": {"untyped": [wire.DESTINATION_NAMESPACE]},
            },
        },
    }


def subset_filter() -> dict[str, Any]:
    """Copy the subset header into ``envoy.lb.subset_hint`` metadata, for the EPP."""
    target = {"metadata_namespace": wire.SUBSET_NAMESPACE, "key": wire.SUBSET_KEY}
    rule = {"header": wire.SUBSET_KEY, "on_header_present": target, "remove": True}
    return {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": T + "extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [rule],
        },
    }


def route(options: EnvoyOptions) -> dict[str, Any]:
    """Every path to the endpoints cluster; retries only before the first byte."""
    retry = {
        "retry_on": RETRY_ON,
        "retriable_status_codes": [503],
        "num_retries": options.max_fallbacks,
        "retry_back_off": {"base_interval": "0.005s", "max_interval": "0.05s"},
    }
    return {
        "match": {"prefix": "/"},
        "route": {
            "cluster": "endpoints",
            "timeout": _seconds(options.request_timeout_s),
            "idle_timeout": _seconds(options.idle_timeout_s),
            "retry_policy": retry,
        },
    }


def local_replies() -> dict[str, Any]:
    """Envoy's own error replies (413, 503 after the list ran out, 500 without the EPP) in
    OpenAI's error shape; the EPP's immediate responses already are, and are left alone."""
    mappers = []
    for low, high, kind in ((400, 500, "invalid_request_error"), (500, 600, "server_error")):
        expression = (
            f"response.code >= {low} && response.code < {high} && "
            "!response.code_details.startsWith('trafficmgr_epp')"
        )
        error = {"message": "%LOCAL_REPLY_BODY%", "type": kind, "code": "%RESPONSE_CODE_DETAILS%"}
        mappers.append(
            {
                "filter": {
                    "extension_filter": {
                        "name": "envoy.access_loggers.extension_filters.cel",
                        "typed_config": {
                            "@type": CEL_FILTER,
                            "expression": expression,
                        },
                    }
                },
                "body_format_override": {
                    "json_format": {"error": error},
                    "content_type": "application/json",
                },
            }
        )
    return {"mappers": mappers}


def listener(options: EnvoyOptions) -> dict[str, Any]:
    hcm = {
        "@type": T + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "inference",
        "use_remote_address": True,  # appends the peer to x-forwarded-for for the EPP
        "stream_idle_timeout": _seconds(options.idle_timeout_s),
        "local_reply_config": local_replies(),
        "route_config": {
            "name": "inference",
            "virtual_hosts": [{"name": "inference", "domains": ["*"], "routes": [route(options)]}],
        },
        "http_filters": [
            *([subset_filter()] if options.subset_header else []),
            ext_proc_filter(options),
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": T + "extensions.filters.http.router.v3.Router"},
            },
        ],
    }
    return {
        "name": "inference",
        "address": _socket(options.listen),
        # BUFFERED bodies are held whole; bigger ones get 413 from Envoy itself
        "per_connection_buffer_limit_bytes": options.max_body_bytes,
        "filter_chains": [
            {
                "filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                ]
            }
        ],
    }


def bootstrap(fleet: Fleet, options: EnvoyOptions) -> dict[str, Any]:
    """The whole bootstrap as a dict (admin on loopback unless told otherwise)."""
    return {
        "node": {"id": "trafficmgr-envoy", "cluster": "trafficmgr"},
        "admin": {"address": _socket(options.admin)},
        "static_resources": {
            "listeners": [listener(options)],
            "clusters": [endpoints_cluster(fleet, options), epp_cluster(options)],
        },
    }


def render(fleet: Fleet, options: EnvoyOptions) -> str:
    """The bootstrap as YAML, with a header saying how it was made."""
    region = f" --region {options.region}" if options.region else ""
    header = (
        "# Envoy bootstrap generated by trafficmgr (python -m trafficmgr.epp.envoy_config"
        f" --listen {options.listen} --epp {options.epp}{region}).\n"
        "# Endpoint picker protocol: ext_proc asks the EPP; override_host follows its list.\n"
    )
    return header + yaml.safe_dump(bootstrap(fleet, options), sort_keys=False, width=100)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with the ``envoy_config`` management command."""
    parser.add_argument("--listen", default="0.0.0.0:8080", help="HOST:PORT Envoy serves on")
    parser.add_argument("--epp", default="127.0.0.1:9002", help="HOST:PORT of the EPP (gRPC)")
    parser.add_argument("--admin", default="127.0.0.1:9901", help="HOST:PORT of Envoy's admin")
    parser.add_argument("--region", help="only this region's endpoints")
    parser.add_argument(
        "--body-mode",
        choices=sorted(BODY_MODES),
        default="buffered",
        help="how request bodies go to the EPP (docs/epp.md)",
    )
    parser.add_argument(
        "--full-duplex", action="store_true", help="the same as --body-mode full_duplex"
    )
    parser.add_argument(
        "--failure-mode-allow",
        action="store_true",
        help="route without the EPP when it fails (ignores residency: see docs/epp.md)",
    )
    parser.add_argument(
        "--subset-header",
        action="store_true",
        help="take the subset hint from the x-gateway-destination-endpoint-subset header",
    )
    parser.add_argument("--max-body-bytes", type=int, default=4 << 20)
    parser.add_argument("--max-fallbacks", type=int, default=4)
    parser.add_argument(
        "--message-timeout",
        type=float,
        default=10.0,
        help="seconds Envoy waits for one EPP reply before answering 504",
    )


def options_from_args(args: argparse.Namespace) -> EnvoyOptions:
    for value in (args.listen, args.epp, args.admin):
        split_host_port(value)
    if not args.message_timeout > 0:
        raise ValueError("--message-timeout must be positive")
    body_mode = "full_duplex" if args.full_duplex else args.body_mode
    return EnvoyOptions(
        listen=args.listen,
        epp=args.epp,
        admin=args.admin,
        region=args.region,
        body_mode=body_mode,
        failure_mode_allow=args.failure_mode_allow,
        max_body_bytes=args.max_body_bytes,
        max_fallbacks=args.max_fallbacks,
        subset_header=args.subset_header,
        message_timeout_s=args.message_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trafficmgr.epp.envoy_config")
    parser.add_argument("--fleet", required=True, help="fleet YAML file")
    parser.add_argument("--output", "-o", help="write here instead of standard output")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        text = render(load_fleet_file(args.fleet), options_from_args(args))
    except (ValueError, KeyError) as exc:
        parser.error(str(exc))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
