"""The alert rules: which recorded events are alerts, under what name, at what severity.

Each rule reads an ``Event`` as the control plane stores it (kind, severity, region, endpoint
and its ``data``) and says what to tell people, with a ``key`` that names the alert across
repeats (``region_down:eu-west``) for grouping and deduplication. Events no rule names keep
their own kind and severity (``action``, ``config``) when they are warnings or worse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from regions.models import Event, EventKind, Severity

# The event names a channel may subscribe to (``events``), in the order the docs list them
# (``failover`` is both a rule's name and an event kind: once).
EVENT_NAMES = tuple(
    dict.fromkeys(
        (
            "region_down",
            "region_degraded",
            "region_recovered",
            "failover",
            "endpoint_ejected",
            "endpoint_recovered",
            "drill_failed",
            "forced_action",
            "forced_apply",
            "tick_overrun",
            "loop_stalled",
            "test",
            *EventKind.values,
        )
    )
)
_DOWN, _DEGRADED = "down", "degraded"


@dataclass(frozen=True, slots=True)
class Alert:
    """What one event tells people."""

    name: str
    severity: str
    key: str
    region: str
    endpoint: str
    summary: str


def alert_for(event: Event) -> Alert | None:
    """Return the alert ``event`` raises, or None when it is not worth telling anyone."""
    data: Mapping[str, Any] = event.data if isinstance(event.data, dict) else {}
    for rule in _RULES:
        found = rule(event, data)
        if found is not None:
            return found
    if event.severity in (Severity.WARNING, Severity.ERROR, Severity.CRITICAL):
        kind = str(event.kind)
        return _alert(event, kind, event.severity, f"{kind}:{event.region}:{event.endpoint}")
    return None


def _alert(event: Event, name: str, severity: str, key: str) -> Alert:
    return Alert(name, severity, key[:200], event.region, event.endpoint, event.message[:2000])


def _region(event: Event, data: Mapping[str, Any]) -> Alert | None:
    if event.endpoint or event.kind not in (EventKind.FAILOVER, EventKind.HEALTH):
        return None
    new, old = data.get("new"), data.get("old")
    if new == _DOWN:
        return _alert(event, "region_down", Severity.CRITICAL, f"region_down:{event.region}")
    if new == _DEGRADED:
        key = f"region_degraded:{event.region}"
        return _alert(event, "region_degraded", Severity.WARNING, key)
    if old in (_DOWN, _DEGRADED, "recovering") and new == "healthy":
        key = f"region_recovered:{event.region}"
        return _alert(event, "region_recovered", Severity.INFO, key)
    if event.kind == EventKind.FAILOVER and new is not None:
        severity = event.severity if event.severity in Severity.values else Severity.WARNING
        return _alert(event, "failover", severity, f"failover:{event.region}:{new}")
    return None


def _endpoint(event: Event, data: Mapping[str, Any]) -> Alert | None:
    if not event.endpoint or event.kind != EventKind.HEALTH or "healthy" not in data:
        return None
    where = f"{event.region}:{event.endpoint}"
    if data["healthy"]:
        return _alert(event, "endpoint_recovered", Severity.INFO, f"endpoint_recovered:{where}")
    return _alert(event, "endpoint_ejected", Severity.WARNING, f"endpoint_ejected:{where}")


def _drill(event: Event, data: Mapping[str, Any]) -> Alert | None:
    if event.kind != EventKind.DRILL or event.severity == Severity.INFO:
        return None
    return _alert(event, "drill_failed", Severity.WARNING, f"drill_failed:{data.get('drill')}")


def _forced(event: Event, data: Mapping[str, Any]) -> Alert | None:
    if event.severity != Severity.WARNING or event.kind not in (EventKind.ACTION, EventKind.CONFIG):
        return None
    name = "forced_action" if event.kind == EventKind.ACTION else "forced_apply"
    return _alert(event, name, Severity.WARNING, f"{name}:{event.pk}")


_RULES: tuple[Callable[[Event, Mapping[str, Any]], Alert | None], ...] = (
    _region,
    _endpoint,
    _drill,
    _forced,
)
