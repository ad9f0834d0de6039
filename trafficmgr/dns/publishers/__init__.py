"""Publish the routing table into external authoritative DNS servers.

For operators who keep their own DNS: RFC 2136 dynamic updates with TSIG (BIND 9, Knot;
one target per BIND view for geo answers) and the PowerDNS Authoritative HTTP API (plain
records or LUA records). Each target plans (desired records vs what the server holds),
checks the plan against a safety valve and sends only the difference.

The control loop calls ``publish(table, targets)`` when it publishes a new table version;
``load_targets`` builds the targets from a YAML/JSON file, ``metrics()`` returns the
counters. ``python -m trafficmgr.dns.publishers --help`` does the same from a shell.

Imports: the engine (``trafficmgr.routing``, ``trafficmgr.fleetfile``) only; it runs beside
the DNS server or alone, without Django.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trafficmgr.dns.publishers.config import load_targets, targets_from_dict
from trafficmgr.dns.publishers.errors import (
    AuthError,
    ConfigError,
    PublishError,
    RefusedError,
    ServerError,
    TableError,
    TsigError,
    UnknownRegionError,
    UnknownZoneKeyError,
    UnreachableError,
    UnsafePlanError,
)
from trafficmgr.dns.publishers.plan import Plan
from trafficmgr.dns.publishers.powerdns import PowerDnsTarget
from trafficmgr.dns.publishers.records import DnsZone, desired_records, lua_records
from trafficmgr.dns.publishers.results import PublishReport, PublishResult, metrics
from trafficmgr.dns.publishers.retry import RetryPolicy
from trafficmgr.dns.publishers.rfc2136 import Rfc2136Target, view_targets
from trafficmgr.dns.publishers.target import Target
from trafficmgr.dns.publishers.tsig import TsigKey, ViewSpec
from trafficmgr.routing.types import RoutingTable

__all__ = [
    "AuthError",
    "ConfigError",
    "DnsZone",
    "Plan",
    "PowerDnsTarget",
    "PublishError",
    "PublishReport",
    "PublishResult",
    "RefusedError",
    "RetryPolicy",
    "Rfc2136Target",
    "ServerError",
    "TableError",
    "Target",
    "TsigError",
    "TsigKey",
    "UnknownRegionError",
    "UnknownZoneKeyError",
    "UnreachableError",
    "UnsafePlanError",
    "ViewSpec",
    "desired_records",
    "load_targets",
    "lua_records",
    "metrics",
    "publish",
    "targets_from_dict",
    "view_targets",
]


def publish(
    table: RoutingTable,
    targets: Sequence[Target],
    *,
    force: bool = False,
    dry_run: bool = False,
    on_plan: Callable[[Plan], None] | None = None,
) -> PublishReport:
    """Publish ``table`` to every target; a failing target does not stop the others.

    Never raises a ``PublishError``: failures are in the report (``report.ok``,
    ``report.errors``, ``report.raise_for_errors()``) and counted in ``metrics()``.
    Blocking network I/O, bounded by each target's timeout x retry attempts: call it from
    a worker, not from the tick that compiles the table.
    """
    results = []
    errors = []
    for target in targets:
        try:
            results.append(target.publish(table, force=force, dry_run=dry_run, on_plan=on_plan))
        except PublishError as exc:
            errors.append(exc)
    return PublishReport(table.version, tuple(results), tuple(errors), metrics())
