"""A running drill's progress, for the dashboard to follow it live.

What a drill has measured so far — the agents that took the fault, its detection, each
vantage point's DNS answer, the target region's state, ramp and share of the traffic —
lives in its runner (a Celery worker, or a thread of the demo), while dashboards are served
by web processes. The runner publishes a small document through Django's cache, the store
its liveness key already uses (Redis in the distributed mode, the process itself in the
embedded one), every ``PUBLISH_EVERY_S``; the dashboards' live feed reads it. It expires
``TTL_S`` after the last publish: the final figures are the report's.

Phases: ``baseline`` (probing before the fault), ``fault`` (injected, until the restore),
``recovering`` (restored, waiting for the region to come back), ``recovered``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.cache import cache

from regions.drills.measure import Answer
from regions.drills.report import Observations, fault_time
from trafficmgr.contracts import drill_progress_key

PUBLISH_EVERY_S = 0.5
TTL_S = 30.0


def phase_of(obs: Observations) -> str:
    if not obs.injected:
        return "baseline"
    if obs.restore_at is None:
        return "fault"
    return "recovering" if obs.recovered_at is None else "recovered"


def _after(at: float | None, origin: float | None) -> float | None:
    return None if at is None or origin is None else round(max(0.0, at - origin), 3)


def vantage_docs(obs: Observations, answers: Sequence[Answer], fault_at: float | None) -> list:
    """Per vantage point: what DNS answered before the fault, now, and when it moved away from
    the target region (one pass over the answers)."""
    before: dict[str, tuple[str, ...]] = {}
    latest: dict[str, Answer] = {}
    moved: dict[str, float] = {}
    end = obs.restore_at if obs.restore_at is not None else float("inf")
    for a in answers:
        if a.error:
            continue
        latest[a.vantage] = a
        if not obs.injected or a.at < obs.injected_at:
            before[a.vantage] = a.regions
        elif a.at <= end and a.vantage not in moved and obs.region not in a.regions:
            moved[a.vantage] = a.at
    out = []
    for v in obs.vantages:
        served = obs.region in before.get(v.name, ())
        now = latest.get(v.name)
        out.append(
            {
                "name": v.name,
                "country": v.country,
                "before": list(before.get(v.name, ())),
                "now": list(now.regions) if now is not None else [],
                "served_by_target": served,
                "moved_after_s": _after(moved.get(v.name), fault_at) if served else None,
            }
        )
    return out


def document(
    drill_id: int, obs: Observations, answers: Sequence[Answer], now: float
) -> dict[str, Any]:
    """The progress of one drill, as the dashboard shows it."""
    fault_at, _ = fault_time(obs) if obs.injected else (None, [])
    taken = [e for e in obs.endpoints if e in obs.taken_at]
    full = fault_at if obs.injected and len(taken) == len(obs.endpoints) else None
    before = [t for t in obs.tables if t.at < obs.injected_at] if obs.injected else obs.tables
    last = obs.tables[-1] if obs.tables else None
    return {
        "id": drill_id,
        "phase": phase_of(obs),
        "at": now,
        "injected_at": obs.injected_at if obs.injected else None,
        "fault_at": full,
        "taken": len(taken),
        "endpoints": list(obs.endpoints),
        "detected_after_s": _after(obs.detected_at, full or obs.injected_at)
        if obs.injected
        else None,
        "detected_by": obs.detected_by,
        "restored_at": obs.restore_at,
        "recovered_after_s": _after(obs.recovered_at, obs.restore_at),
        "recovery_wait_s": obs.recovery_wait_s,
        "region": {
            "name": obs.region,
            "state": last.state if last is not None else "",
            "ramp": last.ramp if last is not None else None,
            "share": round(last.share, 4) if last is not None else None,
            "share_before": round(before[-1].share, 4) if before else None,
        },
        "dns_measured": obs.dns_configured,
        "vantages": vantage_docs(obs, answers, full or (obs.injected_at if obs.injected else None)),
    }


def publish(doc: dict[str, Any]) -> None:
    cache.set(drill_progress_key(int(doc["id"])), doc, TTL_S)


def read(drill_id: int) -> dict[str, Any] | None:
    found = cache.get(drill_progress_key(drill_id))
    return found if isinstance(found, dict) else None


def read_many(drill_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The progress of several drills in one cache round trip."""
    if not drill_ids:
        return {}
    keys = {i: drill_progress_key(i) for i in drill_ids}
    found = cache.get_many(list(keys.values()))
    return {i: found[k] for i, k in keys.items() if isinstance(found.get(k), dict)}
