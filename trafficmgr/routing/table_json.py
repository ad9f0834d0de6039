"""The routing table as JSON (the GET /api/v1/routing/table shape) and its content version."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from trafficmgr.routing.types import RegionState, RegionStatus, RoutingTable, WeightedRegion

VERSION_CHARS = 12


def content_version(
    regions: Mapping[str, RegionStatus],
    zones: Mapping[str, Mapping[str, tuple[WeightedRegion, ...]]],
) -> str:
    """Return a short stable hash of the region states and the weighted lists."""
    digest = hashlib.sha256()
    for name in sorted(regions):
        digest.update(f"{name}={regions[name].state.value};".encode())
    for zone in sorted(zones):
        lists = zones[zone]
        parts = [zone]
        for model in sorted(lists):
            parts.append(model)
            parts.extend(f"{w.region}:{w.weight!r}:{w.reason}" for w in lists[model])
        digest.update("\x1f".join(parts).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()[:VERSION_CHARS]


def iso8601(ts: float) -> str:
    """Format seconds since the epoch as ISO 8601 UTC."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def parse_iso8601(text: Any) -> float:
    """Parse ISO 8601 (or a number of seconds) into seconds since the epoch."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO 8601 time, got {text!r}")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def table_to_json(table: RoutingTable) -> dict[str, Any]:
    """Return the table as the GET /api/v1/routing/table document (docs/architecture.md §4)."""
    doc: dict[str, Any] = {
        "version": table.version,
        "generated_at": iso8601(table.generated_at),
        "regions": {name: _status_doc(s) for name, s in table.regions.items()},
        "zones": {
            zone: {
                model: [{"region": w.region, "weight": w.weight, "reason": w.reason} for w in ws]
                for model, ws in lists.items()
            }
            for zone, lists in table.zones.items()
        },
    }
    if table.notes:
        doc["notes"] = {zone: dict(models) for zone, models in table.notes.items()}
    return doc


def _status_doc(status: RegionStatus) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "state": status.state.value,
        "headroom": status.headroom,
        "capacity": status.capacity,
        "reason": status.reason,
        "since": iso8601(status.since),
        "ramp": status.ramp,
        "models": dict(status.models),
    }
    if status.demand is not None:
        doc["demand"] = status.demand
    return doc


def table_from_json(doc: Any) -> RoutingTable:
    """Build a table from its JSON document; raise ValueError when it is malformed."""
    try:
        regions = {str(n): _status_from(s) for n, s in _mapping(doc["regions"]).items()}
        zones = {
            str(zone): {str(model): _entries(ws) for model, ws in _mapping(lists).items()}
            for zone, lists in _mapping(doc["zones"]).items()
        }
        notes = {
            str(zone): {str(m): str(text) for m, text in _mapping(models).items()}
            for zone, models in _mapping(doc.get("notes", {})).items()
        }
        return RoutingTable(
            version=str(doc["version"]),
            generated_at=parse_iso8601(doc["generated_at"]),
            regions=regions,
            zones=zones,
            notes=notes,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a routing table document: {exc!r}") from exc


def _mapping(value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _status_from(doc: Any) -> RegionStatus:
    d = _mapping(doc)
    return RegionStatus(
        state=RegionState(d["state"]),
        headroom=_number(d["headroom"]),
        capacity=_number(d.get("capacity", 0.0)),
        reason=str(d.get("reason", "")),
        since=parse_iso8601(d.get("since", 0.0)),
        ramp=_number(d.get("ramp", 1.0)),
        models={str(m): _number(c) for m, c in _mapping(d.get("models", {})).items()},
        demand=None if d.get("demand") is None else _number(d["demand"]),
    )


def _entries(items: Any) -> tuple[WeightedRegion, ...]:
    if not isinstance(items, list):
        raise TypeError(f"expected a list of weighted regions, got {type(items).__name__}")
    return tuple(
        WeightedRegion(str(_mapping(i)["region"]), _number(i["weight"]), str(i.get("reason", "")))
        for i in items
    )


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def dumps(table: RoutingTable) -> str:
    """Serialise a table to compact JSON text."""
    return json.dumps(table_to_json(table), separators=(",", ":"), sort_keys=True)
