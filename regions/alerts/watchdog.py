"""The alert path's own heartbeat: a ping to an outside check after each healthy pass.

A dead alert worker tells nobody; an outside check (a Healthchecks ping URL, a cron monitor,
a dead man's switch) that stops hearing the pings does. The worker POSTs a small JSON body
(``status``, ``pending``, ``failed`` in the last hour) to ``alerts_watchdog_url`` at most
every ``alerts_watchdog_every_s``, after a pass that completed, bounded by the delivery
timeout. A ping that fails is logged and tried on the next pass.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from regions import conf
from regions.alerts.transports import post_json
from regions.models import Notification, NotificationStatus
from regions.models.alerts import url_problem

log = logging.getLogger(__name__)

_last_ping: dict[str, float] = {}  # URL → when this process last pinged it (epoch seconds)
_lock = threading.Lock()


def ping_if_due(now: dt.datetime) -> bool:
    """Ping the watchdog URL when one is set and the last ping is old; return whether it was."""
    url = conf.alerts_watchdog_url()
    if not url:
        return False
    problem = url_problem(url)
    if problem:
        log.error("TRAFFICMGR_ALERTS_WATCHDOG_URL: %s", problem)
        return False
    at = now.timestamp()
    with _lock:
        if at - _last_ping.get(url, float("-inf")) < conf.alerts_watchdog_every_s():
            return False
        _last_ping[url] = at
    outcome = post_json(url, health(now), conf.alerts_timeout_s())
    if not outcome.delivered:
        log.warning("alert watchdog ping failed: %s", outcome.error)
        with _lock:
            _last_ping.pop(url, None)
    return outcome.delivered


def health(now: dt.datetime) -> dict[str, object]:
    """Return what the ping says: the worker is alive, with its backlog and recent failures."""
    hour_ago = now - dt.timedelta(hours=1)
    notes = Notification.objects
    return {
        "status": "ok",
        "pending": notes.filter(status=NotificationStatus.PENDING).count(),
        "failed_last_hour": notes.filter(
            status=NotificationStatus.FAILED, created_at__gte=hour_ago
        ).count(),
    }
