"""Run one drill: baseline, inject, watch, restore, wait for recovery, report.

``run_drill(id)`` claims a pending drill (compare-and-set, so two workers never run one
drill), keeps a liveness key fresh while it runs (``rollback_dangling_drills`` leaves live
drills alone), and whatever happens — the end of the fault, an abort, a guardrail tripping
during the fault, an error — cancels the instructions before it returns. The probes of
``drill_measure`` run beside it (where they ask: ``drill_measure.configure``); route probes
use a viewer token the runner issues for the drill and revokes afterwards. The readings it
takes between phases (agents, tables, detection, recovery) are ``watching``'s; the figures
come from ``drill_report``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from regions import hotstate
from regions.conf import tick_seconds
from regions.drills import guardrails as drill_guardrails
from regions.drills import progress as drill_progress
from regions.drills import report as drill_report
from regions.drills import service
from regions.drills.measure import (
    MeasureSetup,
    Probes,
    build_vantages,
    default_setup,
    model_for,
    open_locator,
)
from regions.drills.report import Observations
from regions.drills.watching import POLL_S, DrillWatch
from regions.fleet import snapshot
from regions.models import ApiToken, Drill, DrillReport, DrillStatus

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
CHECK_EVERY_S = 0.5
GUARD_EVERY_S = 1.0


def run_drill(
    drill_id: int, setup: MeasureSetup | None = None, progress: Progress | None = None
) -> dict[str, Any] | None:
    """Run a pending drill to its end; return its report (None when it was not pending)."""
    service.mark_alive(drill_id)
    claimed = Drill.objects.filter(pk=drill_id, status=DrillStatus.PENDING).update(
        status=DrillStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        service.mark_gone(drill_id)
        return None
    drill = Drill.objects.get(pk=drill_id)
    try:
        run = DrillRun(drill, setup or default_setup(), progress)
    except Exception as exc:  # e.g. the target left the fleet since the drill was stored
        log.exception("drill %s could not start", drill_id)
        abandon(drill, f"could not start: {getattr(exc, 'detail', exc)}")
        service.mark_gone(drill_id)
        return None
    try:
        return run.execute()
    except Exception as exc:
        log.exception("drill %s failed", drill_id)
        run.restore()
        return run.finish(f"error while running the drill: {type(exc).__name__}: {exc}")
    except BaseException as exc:  # Ctrl-C, a worker shutting down: restore, then go
        run.restore()
        run.finish(f"interrupted ({type(exc).__name__}); the fault was rolled back")
        raise
    finally:
        run.close()
        service.mark_gone(drill_id)


def abandon(drill: Drill, reason: str) -> None:
    """End a drill that never injected anything: aborted, with a report saying why."""
    Drill.objects.filter(pk=drill.pk, status=DrillStatus.RUNNING).update(
        status=DrillStatus.ABORTED, finished_at=timezone.now(), reason=reason[:4000]
    )
    DrillReport.objects.update_or_create(
        drill=drill, defaults={"report": service.aborted_report(drill, reason)}
    )
    service.record_event(drill, f"aborted: {reason}", "warning")


class DrillRun(DrillWatch):
    """The state of one drill while it runs."""

    def __init__(self, drill: Drill, setup: MeasureSetup, progress: Progress | None) -> None:
        self.drill = drill
        self.setup = setup
        self.say = progress or (lambda line: log.info("drill %s: %s", drill.pk, line))
        self.view = snapshot.current()
        self.fleet = self.view.fleet
        self.store = hotstate.get()
        given = {
            k: v for k, v in (drill.params or {}).items() if k not in ("resolved", "guardrails")
        }
        self.spec = service.resolve(self.fleet, drill.kind, drill.target, drill.duration_s, given)
        policy = self.fleet.failover
        self.obs = Observations(
            kind=drill.kind,
            target=drill.target,
            region=self.spec.region,
            endpoints=self.spec.endpoints,
            region_out=self.spec.region_out,
            expect_detection=drill.kind != "latency",
            injected_at=time.time(),
            interval_s=policy.heartbeat_interval_s,
            miss_threshold=policy.miss_threshold,
            tick_s=tick_seconds(),
            ttl_s=float(self.fleet.ttl),
            guardrails=dict((drill.params or {}).get("guardrails") or {}),
            injected=False,
        )
        self.obs.recovery_wait_s = float(
            given.get("recovery_wait_s")
            or min(
                service.MAX_RECOVERY_WAIT_S,
                policy.hold_down_s
                + (policy.up_threshold + policy.miss_threshold + 2) * policy.heartbeat_interval_s
                + policy.slow_start_s
                + 10.0,
            )
        )
        self.delivery_s = 2 * policy.heartbeat_interval_s + 1.0
        self.probes: Probes | None = None
        self.issued_token: ApiToken | None = None
        self.restored = False
        self.injected = False
        self.before_state = ""
        self._last_version: str | None = None
        self._alive_at = 0.0

    # --- the phases -----------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        if not self.drill.forced:
            check = drill_guardrails.preflight(self.spec, self.view, exclude=self.drill.pk)
            if check.refusals:
                why = "; ".join(r.reason for r in check.refusals)
                return self.finish(f"refused at start by the guardrails: {why}")
            self.obs.guardrails = check.figures
        service.record_event(self.drill, f"started for {self.spec.duration_s:g} s")
        self.start_probes()
        self.publish()
        self.watch_for(self.setup.baseline_s)
        table = self.store.table()
        status = table.regions.get(self.spec.region) if table is not None else None
        self.before_state = status.state.value if status is not None else ""
        aborted = self.fault()
        self.restore()
        if aborted is None:
            self.await_recovery()
        return self.finish(aborted)

    def start_probes(self) -> None:
        locator = open_locator()
        model = model_for(self.fleet, self.spec.endpoints)
        vantages, notes = build_vantages(self.fleet, model, locator, self.setup.per_country)
        self.obs.vantages, self.obs.dns_configured = vantages, self.setup.dns is not None
        self.obs.notes.extend(notes)
        token = self.setup.route_token
        if self.setup.route_url and token is None:
            from regions.access.issue import create_token

            self.issued_token, token = create_token(  # type: ignore[assignment]
                service.probe_token_name(self.drill.pk), "viewer", created_by="drill"
            )
        self.probes = Probes(
            self.fleet,
            vantages,
            dns_server=self.setup.dns,
            route_url=self.setup.route_url,
            route_token=token,
            dns_every_s=self.setup.dns_every_s,
            route_every_s=self.setup.route_every_s,
        ).start()
        where = f"DNS {self.setup.dns[0]}:{self.setup.dns[1]}" if self.setup.dns else "no DNS"
        self.say(
            f"{len(vantages)} vantage points ({', '.join(v.name for v in vantages)}) asking "
            f"{model}.{self.fleet.zone} via {where}"
            + (f" and {self.setup.route_url}/api/v1/route" if self.setup.route_url else "")
        )

    def fault(self) -> str | None:
        """Inject, hold the fault for its duration; return why it ended early, if it did."""
        spec, obs = self.spec, self.obs
        extra = 0.0 if spec.instruction == "silence" else self.delivery_s
        obs.injected_at = time.time()
        self.injected = obs.injected = True
        service.inject(spec, self.drill.pk, spec.endpoints, spec.duration_s + extra)
        self.say(f"injected {spec.instruction} on {', '.join(spec.endpoints)}")
        queued_at = obs.injected_at
        next_check = next_guard = 0.0
        while True:
            now = time.time()
            self.watch_agents()
            self.watch_table()
            start = max(obs.taken_at.values()) if self.all_taken() else obs.injected_at
            if now >= start + spec.duration_s:
                return None
            if not self.all_taken() and now - queued_at >= self.delivery_s:
                queued_at = now
                waiting = [e for e in spec.endpoints if e not in obs.taken_at]
                service.inject(spec, self.drill.pk, waiting, start + spec.duration_s + extra - now)
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                stop = self.check()
                if stop:
                    return stop
            if now >= next_guard and not self.drill.forced:
                next_guard = now + GUARD_EVERY_S
                tripped = drill_guardrails.during(spec, obs.guardrails, now)
                if tripped:
                    return f"aborted by the guardrails during the fault: {'; '.join(tripped)}"
            time.sleep(POLL_S)

    def restore(self) -> None:
        """Cancel the instructions (a silenced agent takes it at its next drill poll)."""
        if self.restored:
            return
        self.restored = True
        service.cancel(self.drill.pk, self.spec.endpoints, self.spec.duration_s + 60.0)
        self.obs.restore_at = time.time()
        self.say("restored: drill instructions cancelled")
        self.publish()

    def await_recovery(self) -> None:
        deadline = time.time() + self.obs.recovery_wait_s
        next_check = 0.0
        while time.time() < deadline:
            self.watch_table()
            if self.recovered():
                return
            now = time.time()
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                if self.check():
                    return
            time.sleep(POLL_S * 2)
        self.say(f"not recovered within {self.obs.recovery_wait_s:g} s")

    def finish(self, aborted: str | None) -> dict[str, Any]:
        """Stop the probes, build and store the report, set the final status, tell the log."""
        if self.probes is not None:
            self.probes.stop()
            self.obs.dns_answers = list(self.probes.dns_answers)
            self.obs.route_answers = list(self.probes.route_answers)
        self.detect()
        self.obs.end_at = time.time()
        status = Drill.objects.filter(pk=self.drill.pk).values_list("status", "reason").first()
        if status is not None and status[0] == DrillStatus.ABORTED:
            aborted = status[1] or "aborted"
        self.obs.aborted = aborted
        report = drill_report.build(self.obs)
        final = DrillStatus.ABORTED if aborted else DrillStatus.FINISHED
        Drill.objects.filter(pk=self.drill.pk, status=DrillStatus.RUNNING).update(
            status=final, finished_at=timezone.now(), reason=(aborted or "")[:4000]
        )
        DrillReport.objects.update_or_create(drill=self.drill, defaults={"report": report})
        severity = "info" if report["verdict"] == "pass" else "warning"
        service.record_event(
            self.drill, f"{final}: verdict {report['verdict']}", severity, report=_brief(report)
        )
        self.say(f"{final}: verdict {report['verdict']}: {'; '.join(report['reasons'][:4])}")
        return report

    def close(self) -> None:
        if self.probes is not None:
            self.probes.stop()
        if self.issued_token is not None:
            self.issued_token.revoked_at = timezone.now()
            self.issued_token.save(update_fields=["revoked_at"])
            self.issued_token = None

    def check(self) -> str | None:
        """Refresh liveness, look for detection; return the abort reason if one was asked."""
        now = time.time()
        if now - self._alive_at >= service.ALIVE_EVERY_S:
            self._alive_at = now
            service.mark_alive(self.drill.pk)
        close_old_connections()
        if self.detect():
            after = (self.obs.detected_at or 0.0) - self.obs.injected_at
            self.say(f"+{after:.1f}s detected: {self.obs.detected_by}")
        self.publish()
        row = Drill.objects.filter(pk=self.drill.pk).values_list("status", "reason").first()
        if row is not None and row[0] == DrillStatus.ABORTED:
            return row[1] or "aborted"
        return None

    def publish(self) -> None:
        """Tell the dashboards how far the drill got (``drill_progress``); never fails it."""
        answers = list(self.probes.dns_answers) if self.probes is not None else []
        try:
            drill_progress.publish(
                drill_progress.document(self.drill.pk, self.obs, answers, time.time())
            )
        except Exception:  # the cache away: the drill goes on, the page waits for the report
            log.exception("drill %s: could not publish its progress", self.drill.pk)


def _brief(report: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "fault_at",
        "detected_after_s",
        "table_changed_after_s",
        "dns_changed_after_s_max",
        "recovered_after_s",
        "wrong_answers",
        "residency_violations",
        "verdict",
    )
    return {k: report.get(k) for k in keys}
