"""Celery side of the drills: run one, reap dangling ones, scheduled practice runs.

``dispatch(id)`` starts a stored drill once the transaction that stored it commits: in the
embedded mode (eager Celery) on a thread of this process, so the request that created it
returns at once; in the distributed mode as the ``regions.drills.run`` task, which holds one
worker slot for the drill's duration plus its recovery wait (run workers with concurrency
of at least 2 so ticks go on meanwhile).

Scheduled practice runs are opt-in: ``TRAFFICMGR_DRILL_SCHEDULE`` (or
``TRAFFICMGR["DRILL_SCHEDULE"]``) holds comma-separated ``target:kind:duration_s:every_s``
entries, e.g. ``eu-west:region_outage:30:86400``. Beat starts each every ``every_s``; the
drill passes the same guardrails (a refused one is kept as history too). Beat also reaps
dangling drills every ``REAP_EVERY_S``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import current_app, shared_task
from django.db import close_old_connections, connection, transaction

from regions import conf
from regions.audit.trail import acting_as
from regions.drills import service
from regions.errors import DomainError

log = logging.getLogger(__name__)

REAP_EVERY_S = 10.0
TASK_LIMIT_S = service.MAX_DURATION_S + service.MAX_RECOVERY_WAIT_S + 120.0


@dataclass(frozen=True, slots=True)
class ScheduledDrill:
    target: str
    kind: str
    duration_s: float
    every_s: float

    @property
    def key(self) -> str:
        return f"trafficmgr-drill-{self.target}-{self.kind}"


def parse_schedule(text: str) -> list[ScheduledDrill]:
    """Read ``target:kind:duration_s:every_s[,...]``; raise ValueError naming a bad entry."""
    out = []
    for raw in (part.strip() for part in (text or "").split(",")):
        if not raw:
            continue
        pieces = raw.split(":")
        if len(pieces) != 4:
            raise ValueError(f"drill schedule entry {raw!r}: expected target:kind:duration:every")
        target, kind, duration, every = pieces
        if kind not in service.KINDS:
            raise ValueError(f"drill schedule entry {raw!r}: unknown kind {kind!r}")
        try:
            seconds, period = float(duration), float(every)
        except ValueError:
            raise ValueError(f"drill schedule entry {raw!r}: durations are seconds") from None
        if not service.MIN_DURATION_S <= seconds <= service.MAX_DURATION_S:
            raise ValueError(f"drill schedule entry {raw!r}: duration outside 1..600 s")
        if period < 3600:
            raise ValueError(f"drill schedule entry {raw!r}: at most one drill an hour")
        out.append(ScheduledDrill(target, kind, seconds, period))
    return out


def configured_schedule() -> list[ScheduledDrill]:
    text = conf.drill_schedule()
    try:
        return parse_schedule(text)
    except ValueError:
        log.exception("TRAFFICMGR_DRILL_SCHEDULE ignored")
        return []


def beat_schedule() -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {
        "trafficmgr-drill-reaper": {
            "task": "regions.drills.reap",
            "schedule": REAP_EVERY_S,
            "options": {"expires": REAP_EVERY_S},
        }
    }
    for item in configured_schedule():
        entries[item.key] = {
            "task": "regions.drills.scheduled",
            "schedule": item.every_s,
            "args": (item.target, item.kind, item.duration_s),
            "options": {"expires": item.every_s / 2},
        }
    return entries


@shared_task(name="regions.drills.run", ignore_result=True, soft_time_limit=TASK_LIMIT_S)
def run(drill_id: int) -> None:
    """Run a stored drill (a worker slot stays busy until it ends)."""
    from regions.drills.runner import run_drill

    run_drill(drill_id)


@shared_task(name="regions.drills.reap", ignore_result=True)
def reap() -> list[int]:
    """Abort drills whose runner is gone (see ``service.rollback_dangling_drills``)."""
    return service.rollback_dangling_drills()


@shared_task(name="regions.drills.scheduled", ignore_result=True, soft_time_limit=TASK_LIMIT_S)
def scheduled(target: str, kind: str, duration_s: float) -> int | None:
    """Start one scheduled practice run here; return its id (None when refused)."""
    from regions.drills.runner import run_drill

    with acting_as("schedule", "system"):
        try:
            drill = service.create_drill(kind, target, duration_s)
        except service.DrillRefused as exc:
            log.warning("scheduled drill %s on %s refused: %s", kind, target, exc.detail)
            return None
        except DomainError as exc:
            log.error("scheduled drill %s on %s is invalid: %s", kind, target, exc.detail)
            return None
    run_drill(drill.pk)
    return int(drill.pk)


def _run_in_thread(drill_id: int) -> None:
    from regions.drills.runner import run_drill

    close_old_connections()
    try:
        run_drill(drill_id)
    except Exception:
        log.exception("drill %s failed", drill_id)
    finally:
        connection.close()


def eager() -> bool:
    """Tell whether Celery runs tasks in-process (the embedded mode)."""
    return bool(current_app.conf.task_always_eager)


def dispatch(drill_id: int) -> None:
    """Start a stored drill once its row is committed (see the module docstring)."""

    def start() -> None:
        if eager():
            thread = threading.Thread(
                target=_run_in_thread, args=(drill_id,), name=f"drill-{drill_id}", daemon=True
            )
            thread.start()
        else:
            run.apply_async((drill_id,), expires=service.PENDING_GRACE_S)

    transaction.on_commit(start)


def parse_drill_flag(text: str) -> tuple[str, str, float]:
    """Read the demo's ``--drill KIND:TARGET:DURATION_S``; raise ValueError when malformed."""
    kind, target, duration = [*text.split(":"), "", "", ""][:3]
    if kind not in service.KINDS or not target:
        raise ValueError(
            f"--drill {text!r}: expected KIND:TARGET:SECONDS, "
            f"KIND one of {', '.join(service.KINDS)}"
        )
    try:
        return kind, target, float(duration or 30)
    except ValueError:
        raise ValueError(f"--drill {text!r}: the duration is seconds") from None


def start_when_ready(
    kind: str,
    target: str,
    duration_s: float,
    *,
    say: Callable[[str], None],
    out_dir: Path | None = None,
    wait_s: float = 60.0,
) -> threading.Thread:
    """Run a drill from the embedded demo once the target region serves; keep its report.

    The report goes to ``out_dir/drill-<id>.json`` with its timeline ``drill-<id>.png``.
    """

    def ready() -> bool:
        from regions import hotstate
        from regions.fleet import snapshot

        table = hotstate.get().table()
        fleet = snapshot.current().fleet
        owner = {e.name: r.name for r in fleet.regions for e in r.endpoints}
        status = table.regions.get(owner.get(target, target)) if table is not None else None
        return status is not None and status.state.value in ("healthy", "degraded")

    def run_it() -> None:
        from regions.drills.plot import plot_report
        from regions.drills.runner import run_drill

        close_old_connections()
        try:
            deadline = time.monotonic() + wait_s
            while not ready() and time.monotonic() < deadline:
                time.sleep(0.5)
            with acting_as("demo", "cli", "cli"):
                drill = service.create_drill(kind, target, duration_s)
            say(f"drill {drill.pk}: {kind} on {target} for {duration_s:g} s")
            report = run_drill(drill.pk, progress=lambda line: say(f"drill {drill.pk}: {line}"))
            if report is not None:
                say(f"drill {drill.pk} report:\n{json.dumps(report, indent=2)}")
            if report is not None and out_dir is not None:
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / f"drill-{drill.pk}.json").write_text(json.dumps(report, indent=2))
                plot_report(report, out_dir / f"drill-{drill.pk}.png")
                say(f"drill {drill.pk}: report in {out_dir}/drill-{drill.pk}.json and .png")
        except DomainError as exc:
            say(f"drill {kind} on {target} not started: {exc.detail}")
        except Exception:
            log.exception("the demo's drill failed")
        finally:
            connection.close()

    thread = threading.Thread(target=run_it, name="demo-drill", daemon=True)
    thread.start()
    return thread
