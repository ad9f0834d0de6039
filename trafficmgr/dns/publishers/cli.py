"""``python -m trafficmgr.dns.publishers``: publish a routing table file to external DNS.

Examples:

    python -m trafficmgr.dns.publishers --table table.json --fleet examples/fleet.yaml \\
        --target rfc2136 --server 127.0.0.1:53 --key-file /etc/trafficmgr/tm.key --dry-run
    python -m trafficmgr.dns.publishers --table table.json --fleet examples/fleet.yaml \\
        --target rfc2136 --server 127.0.0.1 --view eu=EU:eu.key --view default=default:df.key
    python -m trafficmgr.dns.publishers --table table.json --fleet examples/fleet.yaml \\
        --target powerdns --api-url http://127.0.0.1:8081 --api-key-env PDNS_API_KEY --lua geo
    python -m trafficmgr.dns.publishers --table table.json --fleet fleet.yaml --targets t.yaml

Exit status: 0 published (or nothing to do), 1 a target failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from trafficmgr.dns.publishers import publish
from trafficmgr.dns.publishers.config import load_targets
from trafficmgr.dns.publishers.errors import ConfigError, PublishError
from trafficmgr.dns.publishers.plan import Plan
from trafficmgr.dns.publishers.powerdns import LUA_MODES, PowerDnsTarget
from trafficmgr.dns.publishers.records import DnsZone, check_regions
from trafficmgr.dns.publishers.retry import RetryPolicy
from trafficmgr.dns.publishers.rfc2136 import DIFF_SOURCES, Rfc2136Target, view_targets
from trafficmgr.dns.publishers.target import Target
from trafficmgr.dns.publishers.tsig import TsigKey, ViewSpec
from trafficmgr.fleetfile import FleetError, load_fleet_file
from trafficmgr.routing.table import table_from_json
from trafficmgr.routing.types import RoutingTable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trafficmgr.dns.publishers",
        description="Publish a routing table to BIND/Knot (RFC 2136 + TSIG) or PowerDNS (API).",
    )
    p.add_argument("--table", required=True, help="routing table JSON (GET /api/v1/routing/table)")
    p.add_argument("--fleet", help="fleet file: zone, TTL, region addresses, models")
    p.add_argument("--zone", help="zone name (without --fleet)")
    p.add_argument("--ttl", type=int, help="TTL of published records (default: fleet's, or 10)")
    p.add_argument(
        "--region",
        action="append",
        default=[],
        metavar="NAME=ADDR[,ADDR]",
        help="a region's ingress addresses (without --fleet; repeat)",
    )
    p.add_argument("--target", choices=("rfc2136", "powerdns"), help="one target from flags")
    p.add_argument("--targets", help="targets file (YAML/JSON), instead of --target")
    g = p.add_argument_group("rfc2136 (BIND, Knot)")
    g.add_argument("--server", help="HOST[:PORT] of the primary (default port 53)")
    g.add_argument("--key-file", help="TSIG key in BIND syntax (tsig-keygen output)")
    g.add_argument(
        "--key", help="TSIG key as [ALGORITHM:]NAME:SECRET (visible in ps; prefer a file)"
    )
    g.add_argument("--client-zone", default="default", help="client zone key: DE, EU, default, ...")
    g.add_argument(
        "--view",
        action="append",
        default=[],
        metavar="VIEW=ZONEKEY:KEYFILE",
        help="publish ZONEKEY's answer into a BIND view with that key (repeat)",
    )
    g.add_argument("--diff", choices=DIFF_SOURCES, default="axfr", help="what to diff against")
    g.add_argument("--state-file", help="last published state ({view} for each view)")
    g = p.add_argument_group("powerdns")
    g.add_argument("--api-url", help="e.g. http://127.0.0.1:8081")
    g.add_argument("--api-key-env", help="environment variable holding the API key")
    g.add_argument("--api-key-file", help="file holding the API key")
    g.add_argument("--lua", choices=LUA_MODES, default="off", help="LUA records (default: off)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds per request")
    p.add_argument("--attempts", type=int, default=4, help="tries per request (backoff between)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--force", action="store_true", help="apply a plan the safety valve refuses")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    try:
        table = read_table(args.table)
        zone = read_zone(args)
        check_regions(table, zone)
        targets = build_targets(args, zone)
    except (PublishError, FleetError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def show(plan: Plan) -> None:
        if not args.json:
            print(plan.summary())

    report = publish(table, targets, force=args.force, dry_run=args.dry_run, on_plan=show)
    if args.json:
        doc = {
            "version": report.version,
            "ok": report.ok,
            "results": [dataclasses.asdict(r) for r in report.results],
            "errors": [
                {"target": e.target, "type": type(e).__name__, "error": e.message}
                for e in report.errors
            ],
            "counters": report.counters,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def read_table(path: str) -> RoutingTable:
    with open(path) as fh:
        try:
            return table_from_json(json.load(fh))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: not a routing table: {exc!r}") from exc


def read_zone(args: argparse.Namespace) -> DnsZone:
    if args.fleet:
        zone = DnsZone.from_fleet(load_fleet_file(args.fleet))
        return dataclasses.replace(zone, ttl=args.ttl) if args.ttl is not None else zone
    if not args.zone or not args.region:
        raise ConfigError("give --fleet, or --zone and at least one --region NAME=ADDR")
    addresses: dict[str, list[str]] = {}
    for item in args.region:
        name, _, addrs = item.partition("=")
        addresses[name.strip()] = [a.strip() for a in addrs.split(",") if a.strip()]
    return DnsZone.make(args.zone, 10 if args.ttl is None else args.ttl, addresses)


def build_targets(args: argparse.Namespace, zone: DnsZone) -> list[Target]:
    if args.targets:
        return load_targets(args.targets, zone)
    retry = RetryPolicy(attempts=max(1, args.attempts))
    if args.target == "powerdns":
        api_key = _api_key(args)
        if not args.api_url:
            raise ConfigError("--api-url is required for --target powerdns")
        return [
            PowerDnsTarget(
                zone, args.api_url, api_key, lua=args.lua, timeout_s=args.timeout, retry=retry
            )
        ]
    if args.target != "rfc2136":
        raise ConfigError("give --target rfc2136|powerdns or --targets FILE")
    if not args.server:
        raise ConfigError("--server is required for --target rfc2136")
    host, port = host_port(args.server)
    options: dict[str, Any] = {
        "diff": args.diff,
        "state_file": args.state_file,
        "timeout_s": args.timeout,
        "retry": retry,
    }
    if args.view:
        views: dict[str, ViewSpec] = {}
        for item in args.view:
            view, _, rest = item.partition("=")
            client_zone, _, key_file = rest.partition(":")
            if not (view and client_zone and key_file):
                raise ConfigError(f"--view {item!r}: expected VIEW=ZONEKEY:KEYFILE")
            views[view] = ViewSpec(client_zone, host, TsigKey.from_file(key_file), port)
        return list(view_targets(zone, views, **options))
    if args.key_file:
        key = TsigKey.from_file(args.key_file)
    elif args.key:
        key = TsigKey.parse(args.key)
    else:
        raise ConfigError("--key-file or --key is required for --target rfc2136")
    return [Rfc2136Target(zone, host, key, port=port, client_zone=args.client_zone, **options)]


def host_port(text: str, default: int = 53) -> tuple[str, int]:
    """Split ``HOST[:PORT]`` (``[v6]:PORT`` for IPv6 with a port)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, int(port)
    return text, default


def _api_key(args: argparse.Namespace) -> str:
    if args.api_key_file:
        with open(args.api_key_file) as fh:
            return fh.read().strip()
    if args.api_key_env and os.environ.get(args.api_key_env):
        return os.environ[args.api_key_env]
    raise ConfigError("--api-key-file or --api-key-env (set and non-empty) is required")
