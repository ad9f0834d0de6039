"""Failover drills: store or refuse, inject through the agents, abort, roll back.

A drill injects its fault through the agents' drill instructions (``hotstate.set_drill``,
handed to an endpoint's agent in the reply to its next heartbeat), so it exercises the
true detection path: heartbeats → endpoint health → region machine → table → DNS. Agents
obey without touching the real GPU and return to the truth by themselves when the
instruction's ``duration_s`` runs out, so a drill whose runner dies still ends. What each
kind tells the agents is in ``drill_spec``; the guardrails are in ``drill_guardrails``;
running one is ``drill_runner``.

Bad input is a 400 and stores nothing. A drill the guardrails refuse is stored with status
``refused`` and its reasons, and answered 409; an admin may force past the forceable ones.
``rollback_dangling_drills`` aborts drills whose runner is gone and cancels their faults.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from regions import hotstate
from regions.audit import trail
from regions.drills.spec import (
    KINDS,
    MAX_DURATION_S,
    MAX_RECOVERY_WAIT_S,
    MIN_DURATION_S,
    DrillSpec,
    invalid,
    resolve,
)
from regions.errors import DomainError, UnsafePlan
from regions.fleet import snapshot
from regions.fleet.actionplan import check_may_force
from regions.models import ACTIVE_DRILL_STATUSES, Drill, DrillReport, DrillStatus, Event, EventKind
from regions.models import Region as RegionRow
from trafficmgr.contracts import drill_alive_key

__all__ = [
    "KINDS",
    "MAX_DURATION_S",
    "MAX_RECOVERY_WAIT_S",
    "MIN_DURATION_S",
    "DomainError",
    "DrillRefused",
    "DrillSpec",
    "abort_drill",
    "cancel",
    "create_drill",
    "inject",
    "invalid",
    "resolve",
    "rollback_dangling_drills",
]

ACTIVE = ACTIVE_DRILL_STATUSES
ALIVE_TTL_S = 15.0  # a runner refreshes its liveness key every ALIVE_EVERY_S
ALIVE_EVERY_S = 2.0
PENDING_GRACE_S = 30.0  # a queued drill may wait this long for a worker before it dangles


# --- instructions -----------------------------------------------------------------------


def instruction_id(drill_id: int) -> str:
    return f"drill-{drill_id}"


def inject(spec: DrillSpec, drill_id: int, endpoints: Iterable[str], seconds: float) -> None:
    """Queue the fault for these endpoints' agents, lasting ``seconds`` from when they take it.

    The queued instruction expires unclaimed after a few heartbeats; the runner queues it
    again (with the time left) for agents that have not taken it yet.
    """
    store = hotstate.get()
    interval = snapshot.current().fleet.failover.heartbeat_interval_s
    doc = {
        "kind": spec.instruction,
        "duration_s": round(max(0.0, seconds), 3),
        "params": dict(spec.agent_params),
        "id": instruction_id(drill_id),
    }
    for name in endpoints:
        store.set_drill(name, doc, min(max(seconds, 0.1), 2 * interval + 1.0))


def cancel(drill_id: int, endpoints: Iterable[str], ttl_s: float = MAX_DURATION_S) -> None:
    """Tell these endpoints' agents to drop the drill (replacing an instruction not yet taken).

    A silenced agent sends no heartbeats, but it asks for pending instructions every few
    seconds (``GET heartbeats/<endpoint>/drill``) and takes the cancel there; an agent that
    does not poll hears it once its silence runs out (``ttl_s``), when it is harmless.
    """
    store = hotstate.get()
    doc = {"kind": "none", "id": f"{instruction_id(drill_id)}-end"}
    for name in endpoints:
        store.set_drill(name, doc, ttl_s)


# --- liveness of a drill's runner ---------------------------------------------------------


def mark_alive(drill_id: int) -> None:
    cache.set(drill_alive_key(drill_id), 1, ALIVE_TTL_S)


def mark_gone(drill_id: int) -> None:
    cache.delete(drill_alive_key(drill_id))


def is_alive(drill_id: int) -> bool:
    return cache.get(drill_alive_key(drill_id)) is not None


# --- records ------------------------------------------------------------------------------


def record_event(drill: Drill, message: str, severity: str = "info", **data: Any) -> None:
    resolved = (drill.params or {}).get("resolved", {})
    Event.objects.create(
        at=timezone.now(),
        kind=EventKind.DRILL,
        severity=severity,
        region=str(resolved.get("region", ""))[:63],
        endpoint=drill.target if drill.target != resolved.get("region") else "",
        message=f"drill {drill.pk} ({drill.kind} on {drill.target}): {message}"[:2000],
        data={"drill": drill.pk, "kind": drill.kind, "target": drill.target, **data},
    )


def aborted_report(drill: Drill, reason: str) -> dict[str, Any]:
    """The report of a drill that ended without a measurement (rolled back, aborted early)."""
    return {
        "kind": drill.kind,
        "target": drill.target,
        "fault_at": None,
        "detected_after_s": None,
        "table_changed_after_s": None,
        "dns_changed_after_s": {},
        "dns_changed_after_s_max": None,
        "traffic_shifted_after_s": None,
        "recovered_after_s": None,
        "wrong_answers": 0,
        "residency_violations": 0,
        "verdict": "aborted",
        "reasons": [reason],
    }


class DrillRefused(UnsafePlan):
    """The guardrails refused a drill; it is stored with status ``refused``."""

    code = "drill_refused"
    refusal = "drill refused: {reasons}"


def create_drill(
    kind: Any,
    target: Any,
    duration_s: Any,
    params: Any = None,
    *,
    force: bool = False,
    may_force: bool = False,
) -> Drill:
    """Validate, check the guardrails and store a drill (pending); raise when refused."""
    from regions.drills import guardrails as drill_guardrails

    view = snapshot.load()
    spec = resolve(view.fleet, kind, target, duration_s, params)
    check_may_force(force, may_force, "a drill")
    actor = trail.current_actor()
    with transaction.atomic():
        # One drill at a time per region: creators of drills on a region take turns here.
        RegionRow.objects.select_for_update().filter(name=spec.region).first()
        check = drill_guardrails.preflight(spec, view)
        blocking = [r.reason for r in check.plan.blocking(force)]
        forced = check.plan.forced(force)
        drill = Drill.objects.create(
            kind=spec.kind,
            target=spec.target,
            duration_s=spec.duration_s,
            params={
                **spec.params,
                "resolved": spec.resolved(),
                "guardrails": check.figures,
            },
            status=DrillStatus.REFUSED if blocking else DrillStatus.PENDING,
            forced=forced,
            reason="; ".join(blocking)[:4000],
            created_by=actor.name[:150],
            finished_at=timezone.now() if blocking else None,
        )
        trail.record(
            "drill",
            "Drill",
            str(drill.pk),
            str(drill),
            None,
            {
                "kind": drill.kind,
                "target": drill.target,
                "duration_s": drill.duration_s,
                "status": drill.status,
                "forced": forced,
            },
        )
        if blocking:
            record_event(drill, f"refused: {drill.reason}", "warning", refusals=blocking)
    check.plan.raise_if_unsafe(
        force,
        error=DrillRefused,
        extra={"id": drill.pk, "status": drill.status, "reason": drill.reason},
    )
    return drill


def abort_drill(drill_id: int, reason: str = "") -> Drill:
    """Abort a pending or running drill: cancel its instructions now, whoever runs it."""
    actor = trail.current_actor()
    with transaction.atomic():
        drill = Drill.objects.select_for_update().filter(pk=drill_id).first()
        if drill is None:
            raise DomainError(f"no drill {drill_id}", code="not_found", status_code=404)
        if drill.status not in ACTIVE:
            raise DomainError(f"drill {drill_id} is already {drill.status}", code="conflict")
        why = reason or f"aborted by {actor.name}"
        drill.status = DrillStatus.ABORTED
        drill.reason = why[:4000]
        drill.finished_at = timezone.now()
        drill.save(update_fields=["status", "reason", "finished_at"])
        trail.record("abort", "Drill", str(drill.pk), str(drill), None, {"reason": why})
        alive = is_alive(drill.pk)
        if not alive:  # nobody will write the report: write it here
            DrillReport.objects.get_or_create(
                drill=drill, defaults={"report": aborted_report(drill, why)}
            )
            record_event(drill, f"aborted: {why}", "warning")
    cancel(drill.pk, (drill.params or {}).get("resolved", {}).get("endpoints", []))
    return drill


def probe_token_name(drill_id: int) -> str:
    """The name of the viewer token a drill's route probes ask with (revoked when it ends)."""
    return f"drill {drill_id} route probes"


def revoke_probe_tokens(drill_id: int) -> None:
    """Revoke the probe tokens a drill's runner issued and could not revoke itself."""
    from regions.models import ApiToken

    now = timezone.now()
    for token in ApiToken.objects.filter(
        name=probe_token_name(drill_id), created_by="drill", revoked_at__isnull=True
    ):
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])


def rollback_dangling_drills(pending_grace_s: float = PENDING_GRACE_S) -> list[int]:
    """Abort drills left pending or running by a process that is gone; cancel their faults.

    Called on the control plane's start (the demo and the control loop's first tick) and
    periodically by the worker. A running drill's runner keeps a liveness key fresh; one
    without it is dangling. A pending drill is given ``pending_grace_s`` to be picked up.
    """
    cutoff = timezone.now() - dt.timedelta(seconds=pending_grace_s)
    rolled: list[int] = []
    for drill in Drill.objects.filter(status__in=ACTIVE).order_by("pk"):
        if is_alive(drill.pk):
            continue
        if drill.status == DrillStatus.PENDING and drill.created_at > cutoff:
            continue
        why = (
            f"rolled back: its runner stopped while the drill was {drill.status} "
            "(control plane restarted or the process died); instructions cancelled"
        )
        # One transaction: a reader never sees the drill aborted without its report.
        with transaction.atomic():
            updated = Drill.objects.filter(pk=drill.pk, status=drill.status).update(
                status=DrillStatus.ABORTED, reason=why, finished_at=timezone.now()
            )
            if not updated:
                continue
            drill.status = DrillStatus.ABORTED
            DrillReport.objects.get_or_create(
                drill=drill, defaults={"report": aborted_report(drill, why)}
            )
            record_event(drill, why, "warning")
        cancel(drill.pk, (drill.params or {}).get("resolved", {}).get("endpoints", []))
        revoke_probe_tokens(drill.pk)
        rolled.append(drill.pk)
    return rolled
