"""What a drill does, checked against the fleet: kinds, params, targets, instructions.

Kinds and the instruction each sends to the agents (``params`` in brackets):

- ``region_outage``: ``report_unhealthy`` on every active endpoint of a region;
- ``agent_silence``: ``silence`` on a region's endpoints or on one endpoint;
- ``endpoint_failure``: ``report_unhealthy`` on one endpoint (the target, or [endpoint], or
  the region's first active endpoint);
- ``latency``: ``latency`` [added_ms, default 500] on a region's endpoints or one endpoint;
- ``gpu_degraded``: ``degrade_gpu`` [gpus: "all" | index | list, throttle_reasons, xid,
  lost]; thermal throttling on every GPU by default, an ``xid`` or ``lost`` fails them;
- ``capacity_loss``: ``report_unhealthy`` on N of a region's M endpoints, the largest first
  [fraction, default 0.5, or count].

Every kind also takes [recovery_wait_s]: how long to wait for recovery after the restore.
Bad input (unknown kind or target, a duration outside 1..``MAX_DURATION_S``, unknown or
out-of-range params) raises a 400 ``DomainError`` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from regions.errors import DomainError
from trafficmgr.routing.health import THROTTLE_PENALTY, nominal_capacity
from trafficmgr.routing.types import AdminState, Endpoint, Fleet, Region

KINDS = (
    "region_outage",
    "agent_silence",
    "endpoint_failure",
    "latency",
    "gpu_degraded",
    "capacity_loss",
)
INSTRUCTION_OF = {
    "region_outage": "report_unhealthy",
    "agent_silence": "silence",
    "endpoint_failure": "report_unhealthy",
    "latency": "latency",
    "gpu_degraded": "degrade_gpu",
    "capacity_loss": "report_unhealthy",
}
REGION_ONLY = frozenset({"region_outage", "capacity_loss"})
PARAMS_OF: dict[str, frozenset[str]] = {
    "region_outage": frozenset(),
    "agent_silence": frozenset(),
    "endpoint_failure": frozenset({"endpoint"}),
    "latency": frozenset({"added_ms"}),
    "gpu_degraded": frozenset({"gpus", "throttle_reasons", "xid", "lost"}),
    "capacity_loss": frozenset({"fraction", "count"}),
}
COMMON_PARAMS = frozenset({"recovery_wait_s"})
MIN_DURATION_S = 1.0
MAX_DURATION_S = 600.0
MAX_RECOVERY_WAIT_S = 900.0
DEFAULT_ADDED_MS = 500.0


def invalid(field_name: str, message: str) -> DomainError:
    return DomainError(
        f"{field_name}: {message}",
        fields={field_name: [message]},
        code="invalid",
        status_code=400,
    )


@dataclass(frozen=True, slots=True)
class DrillSpec:
    """A drill resolved against the fleet: whom it touches and what it tells their agents."""

    kind: str
    target: str
    duration_s: float
    region: str
    endpoints: tuple[str, ...]  # the endpoints whose agents get the instruction
    instruction: str
    agent_params: Mapping[str, Any] = field(default_factory=dict)
    capacity_kept: float = 0.0  # share of the touched endpoints' capacity left during the fault
    whole_region: bool = False  # every active endpoint of the region is touched
    params: Mapping[str, Any] = field(default_factory=dict)  # as given

    @property
    def region_out(self) -> bool:
        """Tell whether the fault leaves the region with no serving endpoint."""
        return self.capacity_kept == 0.0 and self.whole_region

    def resolved(self) -> dict[str, Any]:
        return {"region": self.region, "endpoints": list(self.endpoints)}


def _number(params: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(f"params.{key}", f"expected a number, got {value!r}")
    if not lo <= value <= hi:
        raise invalid(f"params.{key}", f"{value!r} is outside {lo:g}..{hi:g}")
    return float(value)


def check_params(kind: str, params: Any) -> dict[str, Any]:
    """Refuse params a kind does not know, and values out of range."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise invalid("params", "expected an object")
    allowed = PARAMS_OF[kind] | COMMON_PARAMS
    for key in params:
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise invalid(f"params.{str(key)[:64]}", f"unknown for {kind} (known: {known})")
    _number(params, "recovery_wait_s", 0, MAX_RECOVERY_WAIT_S)
    _number(params, "added_ms", 1, 60_000)
    _number(params, "fraction", 0.01, 1)
    _number(params, "count", 1, 10_000)
    _number(params, "xid", 0, 1_000_000)
    if "endpoint" in params and not isinstance(params["endpoint"], str):
        raise invalid("params.endpoint", "expected an endpoint name")
    if "lost" in params and not isinstance(params["lost"], bool):
        raise invalid("params.lost", "expected true or false")
    gpus = params.get("gpus")
    if gpus is not None and not (
        gpus == "all"
        or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0)
        or (isinstance(gpus, list) and all(isinstance(g, int) and g >= 0 for g in gpus))
    ):
        raise invalid("params.gpus", 'expected "all", a GPU index or a list of indexes')
    reasons = params.get("throttle_reasons")
    if reasons is not None and not (
        isinstance(reasons, list) and all(isinstance(r, str) and len(r) < 64 for r in reasons)
    ):
        raise invalid("params.throttle_reasons", "expected a list of reason names")
    return dict(params)


def check_duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("duration_s", f"expected a number of seconds, got {value!r}")
    if not MIN_DURATION_S <= value <= MAX_DURATION_S:
        raise invalid(
            "duration_s",
            f"{value:g} s is outside {MIN_DURATION_S:g}..{MAX_DURATION_S:g} s "
            "(a drill must last long enough to measure and end on its own soon)",
        )
    return float(value)


def resolve(fleet: Fleet, kind: Any, target: Any, duration_s: Any, params: Any) -> DrillSpec:
    """Check a drill request against the fleet; raise DomainError (400) naming the field."""
    if kind not in KINDS:
        raise invalid("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    duration = check_duration(duration_s)
    given = check_params(kind, params)
    if not isinstance(target, str) or not target:
        raise invalid("target", "expected a region or endpoint name")
    regions = {r.name: r for r in fleet.regions}
    owner = {e.name: r for r in fleet.regions for e in r.endpoints}
    if target in regions:
        region, endpoint = regions[target], None
    elif target in owner:
        if kind in REGION_ONLY:
            raise invalid("target", f"{kind} targets a region; {target!r} is an endpoint")
        region, endpoint = owner[target], target
    else:
        raise invalid("target", f"no region or endpoint is named {target!r}")
    touched, kept = _touched(fleet, kind, region, endpoint, given)
    active = [e.name for e in region.endpoints if e.admin_state is AdminState.ACTIVE]
    whole = bool(active) and set(active) <= set(touched)
    agent = _agent_params(kind, given)
    return DrillSpec(
        kind,
        target,
        duration,
        region.name,
        tuple(touched),
        INSTRUCTION_OF[kind],
        agent,
        kept,
        whole,
        given,
    )


def _touched(
    fleet: Fleet, kind: str, region: Region, endpoint: str | None, params: Mapping[str, Any]
) -> tuple[list[str], float]:
    """Return the endpoints a drill instructs and the share of their capacity it keeps."""
    active = [e for e in region.endpoints if e.admin_state is AdminState.ACTIVE]
    if endpoint is not None:
        names = [endpoint]
    elif kind == "endpoint_failure":
        wanted = params.get("endpoint")
        if wanted is not None and wanted not in {e.name for e in region.endpoints}:
            raise invalid("params.endpoint", f"{wanted!r} is not an endpoint of {region.name}")
        names = [wanted] if wanted else [e.name for e in active[:1]]
    elif kind == "capacity_loss":
        names = [e.name for e in _largest_first(fleet, active)]
        if params.get("count") is not None:
            count = int(params["count"])
            if count > len(names):
                raise invalid(
                    "params.count", f"{region.name} has only {len(names)} active endpoints"
                )
        else:
            count = max(1, math.ceil(float(params.get("fraction") or 0.5) * len(names)))
        names = names[:count]
    else:
        names = [e.name for e in active]
    if kind == "latency":
        return names, 1.0
    if kind == "gpu_degraded" and params.get("xid") is None and not params.get("lost"):
        return names, 1.0 - THROTTLE_PENALTY
    return names, 0.0


def _largest_first(fleet: Fleet, endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    return sorted(
        endpoints, key=lambda e: (-nominal_capacity(e, fleet.gpu_profiles.get(e.gpu)), e.name)
    )


def _agent_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a drill's params into what the agent's instruction reads."""
    if kind == "latency":
        return {"add_ms": float(params.get("added_ms") or DEFAULT_ADDED_MS)}
    if kind == "gpu_degraded":
        out: dict[str, Any] = {"gpus": params.get("gpus", "all")}
        for key in ("throttle_reasons", "xid", "lost"):
            if params.get(key) is not None:
                out[key] = params[key]
        return out
    return {}
