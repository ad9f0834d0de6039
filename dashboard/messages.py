"""Messages the dashboard's WebSocket sends, built with the REST API's serializers and JSON.

Browser-bound message types (``type`` key):

- ``snapshot``: everything the page shows, sent once on connect (see ``snapshot``);
- ``table.update``: forwarded as the control loop sends it to the ``dashboard`` group
  (``regions.loop.history.notify_dashboard``: table, diff, transitions);
- ``live.update``: per tick, the endpoints' and regions' live state (``live_doc``);
- ``events.new``: Event rows written since the last message, oldest first;
- ``config.update``: regions, endpoints, residency rules, ... after a configuration write;
- ``drills.update``: drills under way with their live progress, and the last ones
  (``dashboard.drillfeed``; the snapshot carries the same as ``drills``);
- ``pong`` and ``error``: answers to what the page sends (``dashboard.inbound``).

The ``live``, ``events``, ``config`` and ``drills`` updates come from ``dashboard.livefeed``,
which reads the hot state once per tick per process, never per browser, and relays every
message to the process's pages as JSON text encoded once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dashboard.drillfeed import drills_doc
from regions import conf, hotstate
from regions.access.permissions import has_role, role_of
from regions.api.loop.views import TableVersionSerializer
from regions.api.serializers import (
    EndpointSerializer,
    EventSerializer,
    GpuProfileSerializer,
    RegionSerializer,
    ResidencyRuleSerializer,
)
from regions.decisions import route
from regions.fleet import snapshot
from regions.models import (
    Endpoint,
    Event,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyRule,
    Role,
    RoutingTableVersion,
)
from trafficmgr.routing.countrysets import covered_countries
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.table import DEFAULT_ZONE, table_to_json, zone_keys, zone_location
from trafficmgr.routing.types import Heartbeat

SNAPSHOT_EVENTS = 100
SNAPSHOT_HISTORY = 20
EVENTS_PER_MESSAGE = 200
# What the page gets of the loop's evaluation of an endpoint.
ENDPOINT_KEYS = (
    "region",
    "healthy",
    "score",
    "load",
    "capacity",
    "strain",
    "state",
    "state_since",
    "reason",
    "evidence",
)


def tick_seconds() -> float:
    return conf.tick_seconds()


def user_doc(user: Any) -> dict[str, Any]:
    """Who is looking, and what the page may offer them."""
    return {
        "username": user.get_username(),
        "role": role_of(user),
        "can_act": has_role(user, Role.OPERATOR),
        "can_configure": has_role(user, Role.ADMIN),
    }


def table_doc() -> dict[str, Any]:
    """The routing table exactly as ``GET /api/v1/routing/table`` returns it."""
    table, source = route.current_table(snapshot.current(), time.time())
    return {**table_to_json(table), "source": source}


def zone_points(zones: Any) -> dict[str, list[float]]:
    """Where each client zone's clients are (centroids), for the map's flows."""
    out: dict[str, list[float]] = {}
    for zone in zones:
        if zone == DEFAULT_ZONE:
            continue
        point = zone_location(zone).point
        if point is not None:
            out[zone] = [round(point.lat, 3), round(point.lon, 3)]
    return out


def residency_docs() -> list[dict[str, Any]]:
    """Residency rules as the API lists them, plus every client country they cover (their
    countries, their named sets' and their continents': what the map shades)."""
    rules = ResidencyRule.objects.prefetch_related("regions")
    docs = []
    for doc in ResidencyRuleSerializer(rules, many=True).data:
        covered = covered_countries(doc["countries"], doc["continents"], doc.get("sets") or ())
        docs.append({**doc, "covered_countries": sorted(covered)})
    return docs


def config_doc() -> dict[str, Any]:
    """The fleet's configuration as the REST API returns it (regions, endpoints, ...)."""
    fleet_settings = FleetSettings.current()
    return {
        "regions": RegionSerializer(Region.objects.all(), many=True).data,
        "endpoints": EndpointSerializer(
            Endpoint.objects.select_related("region", "gpu"), many=True
        ).data,
        "gpu_profiles": GpuProfileSerializer(GpuProfile.objects.all(), many=True).data,
        "residency": residency_docs(),
        "clients": [
            {**c, "zones": list(zone_keys(country_location(str(c["country"]))))}
            for c in fleet_settings.clients or []
        ],
        "zone": fleet_settings.zone,
    }


def config_message() -> dict[str, Any]:
    return {"type": "config.update", **config_doc(), "zones": zone_points(table_doc()["zones"])}


def heartbeat_figures(hb: Heartbeat) -> dict[str, Any]:
    """Summarise one heartbeat: GPU means and sums, the server's queue and latency."""
    gpus = hb.gpus
    doc: dict[str, Any] = {
        "gpus": len(gpus),
        "gpu_util_pct": round(sum(g.util_pct for g in gpus) / len(gpus), 1) if gpus else None,
        "mem_used_mb": round(sum(g.mem_used_mb for g in gpus)) if gpus else None,
        "mem_total_mb": round(sum(g.mem_total_mb for g in gpus)) if gpus else None,
        "temp_c_max": max((g.temp_c for g in gpus), default=None),
        "power_w": round(sum(g.power_w for g in gpus)) if gpus else None,
        "throttled_gpus": sum(1 for g in gpus if g.throttle_reasons),
        "xid_errors": sum(g.xid_errors for g in gpus),
        "sent_at": hb.sent_at,
        "received_at": hb.received_at,
    }
    if hb.server is not None:
        s = hb.server
        doc.update(
            {
                "server": s.kind,
                "running": s.requests_running,
                "waiting": s.requests_waiting,
                "kv_cache_usage": round(s.kv_cache_usage, 4),
                "tokens_per_s": round(s.tokens_per_s),
                "ttft_p50_ms": round(s.ttft_p50_ms, 1),
                "ttft_p99_ms": round(s.ttft_p99_ms, 1),
                "models_loaded": list(s.models_loaded),
            }
        )
    if hb.probe is not None:
        doc.update({"probe_ok": hb.probe.ok, "probe_ms": round(hb.probe.latency_ms, 1)})
    return doc


def live_doc(evaluation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The last tick's view of every endpoint and region, from the hot state.

    ``at`` is the tick's time (None before the first tick); endpoints carry the control
    loop's health verdict (healthy, score, load, capacity, strain, reason), the state they are
    shown in (``state``: healthy, degraded, down or unknown, held by the band and hold-down
    regions have; ``state_since``) and their heartbeat's figures; regions their failover
    machine (state, since, paused).
    """
    store = hotstate.get()
    ev = store.evaluation() if evaluation is None else evaluation
    beats = store.heartbeats()
    endpoints: dict[str, dict[str, Any]] = {}
    for name, health in ev.get("endpoints", {}).items():
        endpoints[name] = {key: health.get(key) for key in ENDPOINT_KEYS}
    for name, hb in beats.items():
        endpoints.setdefault(name, {}).update(heartbeat_figures(hb))
    return {
        "at": ev.get("at"),
        "server_time": time.time(),
        "tick_s": tick_seconds(),
        "regions": ev.get("regions", {}),
        "endpoints": endpoints,
    }


def live_message(evaluation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "live.update", **live_doc(evaluation)}


def last_event_id() -> int:
    return Event.objects.order_by("-id").values_list("id", flat=True).first() or 0


def events_after(last_id: int) -> list[dict[str, Any]]:
    """Events written after ``last_id``, oldest first, as ``GET /api/v1/events/`` lists them."""
    rows = Event.objects.filter(id__gt=last_id).order_by("id")[:EVENTS_PER_MESSAGE]
    return list(EventSerializer(rows, many=True).data)


def snapshot_message(user: Any) -> dict[str, Any]:
    """Everything the page shows, for a browser that just connected."""
    table = table_doc()
    events = Event.objects.order_by("-at", "-id")[:SNAPSHOT_EVENTS]
    history = RoutingTableVersion.objects.defer("table").order_by("-generated_at", "-id")
    return {
        "type": "snapshot",
        "user": user_doc(user),
        "table": table,
        "zones": zone_points(table["zones"]),
        **config_doc(),
        "live": live_doc(),
        "events": EventSerializer(events, many=True).data,
        "history": TableVersionSerializer(history[:SNAPSHOT_HISTORY], many=True).data,
        "drills": drills_doc(),
    }
