"""The declarative fleet file: read, validated into an engine ``Fleet``, and written back.

Owns: ``safeyaml`` (YAML parsed with bounds, no aliases, the line of every path),
``read`` (the document validated into a ``Fleet``, every problem named by its path),
``write`` (a ``Fleet`` as a document again, for ``export_fleet``).
Imports: the engine (``trafficmgr.routing``) and PyYAML only; no Django, so the DNS server,
the gateway, the endpoint picker and the simulator read the same file the control plane does.
"""

from __future__ import annotations

from trafficmgr.fleetfile.read import (
    fleet_from_dict,
    load_fleet_file,
    load_fleet_text,
    parse_address,
)
from trafficmgr.fleetfile.safeyaml import MAX_BYTES, MAX_ITEMS, FleetError, FleetIssue, parse_yaml
from trafficmgr.fleetfile.write import dump_fleet, failover_to_dict, fleet_to_dict

__all__ = [
    "MAX_BYTES",
    "MAX_ITEMS",
    "FleetError",
    "FleetIssue",
    "dump_fleet",
    "failover_to_dict",
    "fleet_from_dict",
    "fleet_to_dict",
    "load_fleet_file",
    "load_fleet_text",
    "parse_address",
    "parse_yaml",
]
