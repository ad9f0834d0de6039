"""What the API and the workers ask of alerts: a run of the worker, test sends, acks.

``run_once(now)`` is one pass of the alert worker: route new events into notifications,
escalate pages nobody acknowledged, deliver what is due, ping the watchdog. It runs apart
from the control loop's tick (a Celery task on beat in the distributed mode, a thread of its
own in the embedded one), so a receiver that hangs costs the worker its timeout, never a
tick.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.utils import timezone

from regions import conf
from regions.alerts import delivery, notifier, watchdog
from regions.alerts.rules import Alert
from regions.models import AlertChannel, Notification, NotificationStatus, Severity

log = logging.getLogger(__name__)


def run_once(now: dt.datetime | None = None) -> dict[str, int]:
    """Make one pass of the alert worker at ``now`` (default: the clock)."""
    at = now or timezone.now()
    made = notifier.route_new_events(at) + notifier.route_loop_alerts(at)
    escalated = escalate_unacknowledged(at)
    attempts = delivery.deliver_due(at)
    pinged = watchdog.ping_if_due(at)
    return {"notified": made, "escalated": escalated, "attempts": attempts, "pinged": int(pinged)}


def test_send(channel: AlertChannel, actor: str) -> Notification:
    """Queue a test notification on ``channel`` (sent by the next worker pass)."""
    alert = Alert(
        name="test",
        severity=Severity.INFO,
        key=f"test:{channel.name}:{timezone.now().timestamp():.6f}",
        region="",
        endpoint="",
        summary=f"test notification for channel {channel.name}, sent by {actor}"[:2000],
    )
    now = timezone.now()
    return Notification.objects.create(**notifier.fields_of(alert, None, channel, now))


def acknowledge(n: Notification, actor: str) -> Notification:
    """Acknowledge ``n`` and every notification of the same alert (its escalations too)."""
    now = timezone.now()
    with transaction.atomic():
        Notification.objects.filter(key=n.key, acknowledged_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=actor[:150]
        )
    n.refresh_from_db()
    return n


def escalate_unacknowledged(now: dt.datetime) -> int:
    """Hand each delivered page unacknowledged for ``alerts_escalate_after_s`` to its
    channel's ``escalate_to``; return how many were escalated."""
    cutoff = now - dt.timedelta(seconds=conf.alerts_escalate_after_s())
    overdue = Notification.objects.filter(
        severity=Severity.CRITICAL,
        status=NotificationStatus.DELIVERED,
        acknowledged_at__isnull=True,
        escalated=False,
        delivered_at__lte=cutoff,
        channel__escalate_to__isnull=False,
    ).select_related("channel__escalate_to")
    count = 0
    for n in overdue[:100]:
        with transaction.atomic():
            if not Notification.objects.filter(pk=n.pk, escalated=False).update(escalated=True):
                continue  # another worker escalated it
            to = n.channel.escalate_to if n.channel is not None else None
            if delivery.hand_on(n, to, now) is not None:
                count += 1
    return count
