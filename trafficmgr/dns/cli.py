"""Command line of the GeoDNS server: ``python -m trafficmgr.dns --fleet FILE ...``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from trafficmgr.dns.config import (
    DEFAULT_STATE_FILE,
    MAX_UDP_PAYLOAD,
    ServerConfig,
    parse_listen,
    parse_metrics,
)


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
    parser.add_argument(
        "--rrl-rate", type=float, default=200.0, help="responses/s per client prefix (0: off)"
    )
    parser.add_argument("--rrl-burst", type=float, help="bucket size (default: one second)")
    parser.add_argument(
        "--rrl-slip", type=int, default=2, help="every N-th limited query gets TC=1 (0: drop all)"
    )
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


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Build the server settings from parsed options; raise ValueError when one is bad."""
    host, port = parse_listen(args.listen)
    if args.workers < 1 or args.answers < 1:
        raise ValueError("--workers and --answers must be at least 1")
    if args.rrl_rate < 0 or args.rrl_slip < 0:
        raise ValueError("--rrl-rate and --rrl-slip must not be negative")
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
        rrl_rate=args.rrl_rate,
        rrl_burst=args.rrl_burst,
        rrl_slip=args.rrl_slip,
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
