"""Write an engine Fleet back as a fleet-file document (``export_fleet``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml

from trafficmgr.routing.types import (
    AdminState,
    FailoverPolicy,
    Fleet,
    ServiceObjective,
    UnlocatedClients,
)


def fleet_to_dict(fleet: Fleet) -> dict[str, Any]:
    """The fleet as a fleet-file document; ``fleet_from_dict`` of it gives the same Fleet."""
    doc: dict[str, Any] = {
        "zone": fleet.zone,
        "ttl": fleet.ttl,
        "gpu_profiles": {
            p.name: {
                "prefill_tokens_per_s": p.prefill_tokens_per_s,
                "decode_tokens_per_s": p.decode_tokens_per_s,
                "max_concurrency": p.max_concurrency,
            }
            for p in sorted(fleet.gpu_profiles.values(), key=lambda p: p.name)
        },
    }
    doc["regions"] = []
    for reg in fleet.regions:
        rd: dict[str, Any] = {
            "name": reg.name,
            "country": reg.country,
            "location": {"lat": reg.location.lat, "lon": reg.location.lon},
            "addresses": list(reg.addresses),
            "priority": reg.priority,
        }
        if reg.weight != 1.0:
            rd["weight"] = reg.weight
        if reg.admin_state is not AdminState.ACTIVE:
            rd["state"] = reg.admin_state.value
        rd["endpoints"] = []
        for e in reg.endpoints:
            ed: dict[str, Any] = {
                "name": e.name,
                "address": e.address,
                "gpu": e.gpu,
                "gpus": e.gpus,
                "models": list(e.models),
            }
            if e.weight != 1.0:
                ed["weight"] = e.weight
            if e.admin_state is not AdminState.ACTIVE:
                ed["state"] = e.admin_state.value
            rd["endpoints"].append(ed)
        doc["regions"].append(rd)
    doc["residency"] = [
        {
            "name": rule.name,
            "clients": {
                k: v
                for k, v in (
                    ("sets", sorted(rule.sets)),
                    ("countries", sorted(rule.listed_countries())),
                    ("continents", sorted(rule.continents)),
                )
                if v
            },
            "regions": list(rule.regions),
            "mode": rule.mode.value,
        }
        for rule in fleet.residency
    ]
    if fleet.unlocated != UnlocatedClients():
        doc["unlocated_clients"] = str(fleet.unlocated)
    doc["failover"] = failover_to_dict(fleet.failover)
    if fleet.clients:
        doc["clients"] = [{"country": c.country, "share": c.share} for c in fleet.clients]
    served = set(fleet.models())  # an objective of a model no endpoint serves any more: left out
    slo = replace(fleet.slo, models={m: v for m, v in fleet.slo.models.items() if m in served})
    if slo != ServiceObjective():
        doc["slo"] = slo_doc(slo)
    return doc


def slo_doc(slo: ServiceObjective) -> dict[str, Any]:
    """The objective as stored: ``slo_to_dict``, or {} for the default."""
    return {} if slo == ServiceObjective() else slo_to_dict(slo)


def slo_to_dict(slo: ServiceObjective) -> dict[str, Any]:
    """The service objective as the fleet file writes it."""
    doc: dict[str, Any] = {"ttft_p99_ms": slo.ttft_p99_ms}
    if slo.models:
        doc["models"] = {m: {"ttft_p99_ms": ms} for m, ms in sorted(slo.models.items())}
    return doc


def failover_to_dict(f: FailoverPolicy) -> dict[str, Any]:
    """The failover policy as the fleet file writes it."""
    return {
        "heartbeat_interval_s": f.heartbeat_interval_s,
        "miss_threshold": f.miss_threshold,
        "up_threshold": f.up_threshold,
        "down_threshold": f.down_threshold,
        "hold_down_s": f.hold_down_s,
        "slow_start_s": f.slow_start_s,
        "spillover_headroom": f.spillover_headroom,
        "all_down": f.all_down.value,
        "max_shift_per_tick": f.max_shift_per_tick,
    }


def dump_fleet(fleet: Fleet) -> str:
    return yaml.safe_dump(fleet_to_dict(fleet), sort_keys=False, default_flow_style=None, width=100)
