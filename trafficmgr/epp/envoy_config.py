"""Generate an Envoy bootstrap that routes a fleet's inference traffic through the EPP.

The shape follows the endpoint picker protocol: the ``ext_proc`` filter asks the EPP for
each request's fallback list, and an endpoints cluster's ``override_host`` load balancing
policy sends the request to the list's first endpoint, each retry to the next. There is
one cluster per region, and the EPP names the one to use (``x-trafficmgr-cluster``): a
fallback (an address the cluster does not hold, which the EPP refuses to send when it reads
this bootstrap) stays inside that region, so it cannot cross a residency zone. Retries
happen only before any byte reached the client (connect failure, refused stream, reset
before the request was sent, 503 from the upstream), and the EPP caps their number at the
list's length (``x-envoy-max-retries``). ``failure_mode_allow`` is off by default: with the
EPP unreachable Envoy answers 500 instead of routing without a pick; it needs ``--region``.

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

    # client certificate, key and CA of an EPP serving mTLS (``--tls-*`` on the EPP)
    epp_tls_cert: str | None = None
    epp_tls_key: str | None = None
    epp_tls_ca: str | None = None

    def __post_init__(self) -> None:
        tls = (self.epp_tls_cert, self.epp_tls_key, self.epp_tls_ca)
        if any(tls) and not all(tls):
            raise ValueError("--epp-tls-cert, --epp-tls-key and --epp-tls-ca go together")
        if self.failure_mode_allow and self.region is None:
            raise ValueError("--failure-mode-allow needs --region (routing without the EPP)")
        if self.body_mode not in BODY_MODES:
            raise ValueError(f"body_mode must be one of {', '.join(BODY_MODES)}")
        if not self.message_timeout_s > 0:
            raise ValueError("message_timeout_s must be positive")

    @property
    def full_duplex(self) -> bool:
        return self.body_mode == "full_duplex"


UNIX_PREFIX = "unix:"


def unix_path(value: str) -> str:
    """``unix:/PATH`` → ``/PATH``; ValueError when the path is not absolute."""
    path = value.removeprefix(UNIX_PREFIX)
    if not path.startswith("/"):
        raise ValueError(f"{value!r}: a Unix socket is unix:/absolute/path")
    return path


def check_listen(value: str) -> None:
    """Check a gRPC listen address: ``HOST:PORT`` or ``unix:/PATH``."""
    if value.startswith(UNIX_PREFIX):
        unix_path(value)
    else:
        split_host_port(value)


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` → (host, port); ValueError when the port is missing."""
    host, port = parse_address(value)
    if port is None:
        raise ValueError(f"{value!r} needs a port")
    return host, port


def _socket(value: str) -> dict[str, Any]:
    if value.startswith(UNIX_PREFIX):
        return {"pipe": {"path": unix_path(value)}}
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


def endpoint_clusters(fleet: Fleet, options: EnvoyOptions) -> list[dict[str, Any]]:
    """One static cluster per region (only ``--region``'s when given), override_host LB."""
    chosen = fleet_endpoints(fleet, options.region)
    regions = [r.name for r in fleet.regions if options.region in (None, r.name)]
    return [
        region_cluster(region, [e for e in chosen if e.region == region], options)
        for region in regions
    ]


def region_cluster(
    region: str, endpoints: Sequence[Endpoint], options: EnvoyOptions
) -> dict[str, Any]:
    """A region's endpoints behind ``override_host``; its fallback never leaves the region."""
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
    name = wire.cluster_name(region)
    hosts = [{"endpoint": {"address": _socket(e.address), "hostname": e.name}} for e in endpoints]
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": _seconds(options.connect_timeout_s),
        "load_balancing_policy": _policy("override_host", None, override),
        "circuit_breakers": {
            "thresholds": [{**limits, "max_requests": 100000, "max_retries": 10000}]
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"locality": {"region": region}, "lb_endpoints": hosts}],
        },
    }


def bootstrap_endpoints(path: str) -> frozenset[tuple[str, str]]:
    """(region, address) of every endpoint in the region clusters of a bootstrap file.

    The EPP reads the file Envoy runs (``--envoy-bootstrap``), so a plan naming an endpoint
    Envoy does not hold is refused rather than sent to the cluster's fallback.
    """
    with open(path, encoding="utf-8") as file:
        doc = yaml.safe_load(file)
    try:
        clusters = doc["static_resources"]["clusters"]
        found = {
            (c["name"].removeprefix(wire.CLUSTER_PREFIX), _address(host["endpoint"]["address"]))
            for c in clusters
            if c["name"].startswith(wire.CLUSTER_PREFIX)
            for locality in c["load_assignment"].get("endpoints", [])
            for host in locality.get("lb_endpoints", [])
        }
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a bootstrap of envoy_config ({exc})") from None
    if not any(c.get("name", "").startswith(wire.CLUSTER_PREFIX) for c in clusters):
        raise ValueError(f"{path}: no {wire.CLUSTER_PREFIX}REGION cluster (regenerate it)")
    return frozenset(found)


def _address(address: dict[str, Any]) -> str:
    """A cluster host's socket address as the fleet spells it: ``IP:PORT``, ``[V6]:PORT``."""
    host, port = address["socket_address"]["address"], address["socket_address"]["port_value"]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _policy(name: str, type_url: str | None, config: dict[str, Any] | None = None) -> Any:
    typed = config if config is not None else {"@type": type_url}
    full = f"envoy.load_balancing_policies.{name}"
    return {"policies": [{"typed_extension_config": {"name": full, "typed_config": typed}}]}


def epp_cluster(options: EnvoyOptions) -> dict[str, Any]:
    """The EPP, over HTTP/2 (gRPC), health-checked on its ``readiness`` service."""
    kind = "STATIC"
    if not options.epp.startswith(UNIX_PREFIX):
        host, _ = split_host_port(options.epp)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            kind = "STRICT_DNS"  # a Service name in Kubernetes
    http2: dict[str, Any] = {"explicit_http_config": {"http2_protocol_options": {}}}
    # one ext_proc stream per HTTP request in flight: Envoy's default cap (1,024) would
    # answer 500 to the next request under load, long streams being the rule here
    limits = {"max_connections": 100000, "max_pending_requests": 100000, "max_requests": 100000}
    cluster = {
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
    if options.epp_tls_cert:
        cluster["transport_socket"] = epp_tls(options)
    return cluster


def epp_tls(options: EnvoyOptions) -> dict[str, Any]:
    """mTLS to the EPP: Envoy's client certificate, the EPP's chain checked against the CA."""
    certificate = {
        "certificate_chain": {"filename": options.epp_tls_cert},
        "private_key": {"filename": options.epp_tls_key},
    }
    common = {
        "tls_certificates": [certificate],
        "validation_context": {"trusted_ca": {"filename": options.epp_tls_ca}},
        "alpn_protocols": ["h2"],  # gRPC
    }
    context: dict[str, Any] = {
        "@type": T + "extensions.transport_sockets.tls.v3.UpstreamTlsContext"
    }
    context["common_tls_context"] = common
    if not options.epp.startswith(UNIX_PREFIX):
        context["sni"] = split_host_port(options.epp)[0]
    return {"name": "envoy.transport_sockets.tls", "typed_config": context}


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


def routes(options: EnvoyOptions) -> list[dict[str, Any]]:
    """To the region cluster the EPP named; retries only before the first byte.

    A request without the EPP's cluster header was never picked (the EPP unreachable with
    ``--failure-mode-allow``): it goes to ``--region``'s cluster then, else gets 503.
    """
    retry = {
        "retry_on": RETRY_ON,
        "retriable_status_codes": [503],
        "num_retries": options.max_fallbacks,
        "retry_back_off": {"base_interval": "0.005s", "max_interval": "0.05s"},
    }
    action = {
        "timeout": _seconds(options.request_timeout_s),
        "idle_timeout": _seconds(options.idle_timeout_s),
        "retry_policy": retry,
    }
    picked = {
        "match": {
            "prefix": "/",
            "headers": [{"name": wire.CLUSTER_HEADER, "present_match": True}],
        },
        "route": {"cluster_header": wire.CLUSTER_HEADER, **action},
        "request_headers_to_remove": [wire.CLUSTER_HEADER],
    }
    unpicked: dict[str, Any]
    if options.failure_mode_allow and options.region is not None:
        unpicked = {"route": {"cluster": wire.cluster_name(options.region), **action}}
    else:
        message = "no endpoint was picked for this request"
        unpicked = {"direct_response": {"status": 503, "body": {"inline_string": message}}}
    return [picked, {"match": {"prefix": "/"}, **unpicked}]


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
            "virtual_hosts": [{"name": "inference", "domains": ["*"], "routes": routes(options)}],
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
            "clusters": [*endpoint_clusters(fleet, options), epp_cluster(options)],
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
    parser.add_argument(
        "--epp", default="127.0.0.1:9002", help="HOST:PORT or unix:/PATH of the EPP (gRPC)"
    )
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
    parser.add_argument("--epp-tls-cert", help="client certificate for an EPP serving mTLS")
    parser.add_argument("--epp-tls-key", help="its private key")
    parser.add_argument("--epp-tls-ca", help="the CA that signed the EPP's certificate")
    parser.add_argument(
        "--message-timeout",
        type=float,
        default=10.0,
        help="seconds Envoy waits for one EPP reply before answering 504",
    )


def options_from_args(args: argparse.Namespace) -> EnvoyOptions:
    for value in (args.listen, args.admin):
        split_host_port(value)
    check_listen(args.epp)
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
        epp_tls_cert=args.epp_tls_cert,
        epp_tls_key=args.epp_tls_key,
        epp_tls_ca=args.epp_tls_ca,
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
