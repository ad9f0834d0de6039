"""Command line of the GeoDNS server: ``python -m trafficmgr.dns --fleet FILE ...``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from trafficmgr.dns.config import (
    DEFAULT_STATE_FILE,
    MAX_UDP_PAYLOAD,
    ServerConfig,
    parse_listen,
    parse_metrics,
)
from trafficmgr.dns.ratelimit import parse_networks


def add_server_arguments(parser: argparse.ArgumentParser, fleet_required: bool = True) -> None:
    """Add the server's options to a parser (also used by the ``dnsserver`` command)."""
    parser.add_argument("--fleet", required=fleet_required, help="fleet YAML file")
    parser.add_argument("--listen", default="127.0.0.1:5353", help="HOST:PORT (UDP and TCP)")
    parser.add_argument("--table-file", help="routing table JSON file, reloaded when it changes")
    parser.add_argument(
        "--state-file",
        default=DEFAULT_STATE_FILE,
        help="where the last good table is kept across restarts ('' for nowhere)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL") or None,
        help="follow the table in Redis (default: $REDIS_URL)",
    )
    parser.add_argument(
        "--geoip-db",
        default=os.environ.get("TRAFFICMGR_GEOIP_DB") or None,
        help="GeoIP2/GeoLite2 City or Country database (default: maxminddb-geolite2's)",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    parser.add_argument("--answers", type=int, default=1, help="regions per answer")
    _add_rrl_arguments(parser)
    _add_tcp_arguments(parser)
    parser.add_argument("--max-udp-size", type=int, default=MAX_UDP_PAYLOAD)
    parser.add_argument(
        "--ns-address", action="append", default=[], help="address of ns1.<zone> (repeatable)"
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve every worker's counters as Prometheus text on http://HOST:PORT/metrics",
    )
    parser.add_argument(
        "--fleet-poll",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="read the fleet (file or database) again this often, serve changes (0: never)",
    )


def _add_rrl_arguments(parser: argparse.ArgumentParser) -> None:
    """Response-rate limiting (docs/dns.md, "Response-rate limiting")."""
    d = ServerConfig()
    g = parser.add_argument_group("response-rate limiting (UDP; per client prefix and response)")
    g.add_argument(
        "--rrl-rate",
        type=float,
        default=d.rrl_rate,
        help="answers/s per prefix, name and type (0: no rate limiting at all)",
    )
    g.add_argument(
        "--rrl-nxdomain-rate",
        type=float,
        default=d.rrl_nxdomain_rate,
        help="NXDOMAIN/s per prefix (0: unlimited)",
    )
    g.add_argument(
        "--rrl-error-rate",
        type=float,
        default=d.rrl_error_rate,
        help="errors/s (REFUSED, FORMERR, ...) per prefix (0: unlimited)",
    )
    g.add_argument("--rrl-burst", type=float, help="credit in hand (default: one second's worth)")
    g.add_argument(
        "--rrl-window",
        type=float,
        default=d.rrl_window_s,
        metavar="SECONDS",
        help="a key kept over its rate stays limited up to this long",
    )
    g.add_argument(
        "--rrl-slip",
        type=int,
        default=d.rrl_slip,
        help="every N-th limited response goes out with TC=1 (0: drop all)",
    )
    g.add_argument("--rrl-ipv4-prefix", type=int, default=d.rrl_ipv4_prefix, metavar="BITS")
    g.add_argument("--rrl-ipv6-prefix", type=int, default=d.rrl_ipv6_prefix, metavar="BITS")
    g.add_argument(
        "--rrl-exempt",
        action="append",
        default=[],
        metavar="CIDR",
        help="never limit clients in this network (repeatable)",
    )


def _add_tcp_arguments(parser: argparse.ArgumentParser) -> None:
    """DNS over TCP (RFC 7766; docs/dns.md, "DNS over TCP")."""
    d = ServerConfig()
    g = parser.add_argument_group("DNS over TCP (per worker process)")
    g.add_argument("--tcp-max-connections", type=int, default=d.tcp_max_connections)
    g.add_argument(
        "--tcp-max-per-client",
        type=int,
        default=d.tcp_max_per_client,
        help="connections from one IPv4 address or IPv6 /64",
    )
    g.add_argument(
        "--tcp-idle-timeout",
        type=float,
        default=d.tcp_idle_timeout_s,
        metavar="SECONDS",
        help="close a connection without a complete query for this long",
    )
    g.add_argument(
        "--tcp-message-timeout",
        type=float,
        default=d.tcp_message_timeout_s,
        metavar="SECONDS",
        help="close a connection whose message begun is not whole within this",
    )


def _rrl_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The rate-limiting settings; raise ValueError naming the option that is bad."""
    for option in ("rrl_rate", "rrl_nxdomain_rate", "rrl_error_rate", "rrl_window", "rrl_slip"):
        _at_least(args, option, 0)
    if args.rrl_burst is not None:
        _at_least(args, "rrl_burst", 1)
    if not 8 <= args.rrl_ipv4_prefix <= 32:
        raise ValueError(f"--rrl-ipv4-prefix {args.rrl_ipv4_prefix}: give 8 to 32 bits")
    if not 16 <= args.rrl_ipv6_prefix <= 128:
        raise ValueError(f"--rrl-ipv6-prefix {args.rrl_ipv6_prefix}: give 16 to 128 bits")
    return {
        "rrl_rate": args.rrl_rate,
        "rrl_nxdomain_rate": args.rrl_nxdomain_rate,
        "rrl_error_rate": args.rrl_error_rate,
        "rrl_burst": args.rrl_burst,
        "rrl_window_s": args.rrl_window,
        "rrl_slip": args.rrl_slip,
        "rrl_ipv4_prefix": args.rrl_ipv4_prefix,
        "rrl_ipv6_prefix": args.rrl_ipv6_prefix,
        "rrl_exempt": parse_networks(args.rrl_exempt, "--rrl-exempt"),
    }


def _tcp_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The TCP settings; raise ValueError naming the option that is bad."""
    for option in ("tcp_max_connections", "tcp_max_per_client"):
        _at_least(args, option, 1)
    for option in ("tcp_idle_timeout", "tcp_message_timeout"):
        _at_least(args, option, 0.001)
    return {
        "tcp_max_connections": args.tcp_max_connections,
        "tcp_max_per_client": args.tcp_max_per_client,
        "tcp_idle_timeout_s": args.tcp_idle_timeout,
        "tcp_message_timeout_s": args.tcp_message_timeout,
    }


def _at_least(args: argparse.Namespace, option: str, low: float) -> None:
    value = getattr(args, option)
    if not low <= value < float("inf"):
        flag = "--" + option.replace("_", "-")
        raise ValueError(f"{flag} {value}: must be a number, at least {low:g}")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Build the server settings from parsed options; raise ValueError when one is bad."""
    host, port = parse_listen(args.listen)
    if args.workers < 1 or args.answers < 1:
        raise ValueError("--workers and --answers must be at least 1")
    if not 0 <= args.fleet_poll < float("inf"):
        raise ValueError("--fleet-poll must be a number of seconds, 0 or more")
    metrics = parse_metrics(args.metrics) if args.metrics else None
    return ServerConfig(
        host=host,
        port=port,
        table_file=args.table_file,
        state_file=args.state_file or None,
        redis_url=args.redis_url,
        geoip_db=args.geoip_db,
        workers=args.workers,
        answers=args.answers,
        max_udp_payload=max(512, min(65535, args.max_udp_size)),
        **_rrl_settings(args),
        **_tcp_settings(args),
        ns_addresses=tuple(args.ns_address),
        fleet_poll_s=args.fleet_poll,
        metrics=metrics,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve until interrupted."""
    from trafficmgr.dns.fleetwatch import FleetFile
    from trafficmgr.dns.server import DnsServer, serve
    from trafficmgr.fleetfile import FleetError, load_fleet_file

    parser = argparse.ArgumentParser(
        prog="python -m trafficmgr.dns", description="Authoritative GeoDNS server of trafficmgr."
    )
    add_server_arguments(parser)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    log_format = "%(asctime)s %(levelname)s %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=log_format)
    try:
        config = config_from_args(args)
        fleet = load_fleet_file(args.fleet)
    except (ValueError, OSError, FleetError) as exc:
        parser.error(str(exc))

    def ready(server: DnsServer) -> None:
        host, port = server.address
        print(f"GeoDNS for {fleet.zone} on {host}:{port} udp+tcp", flush=True)
        print(f"  try: dig @{host} -p {port} {fleet.models()[0]}.{fleet.zone} A", flush=True)
        if server.metrics_address is not None:
            print(f"  metrics: http://{_url_host(server.metrics_address)}/metrics", flush=True)

    try:
        serve(fleet, config, ready, fleet_source=FleetFile(args.fleet))
    except OSError as exc:
        print(f"cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0


def _url_host(address: tuple[str, int]) -> str:
    """Return ``host:port`` for a URL (``[v6]:port``)."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
