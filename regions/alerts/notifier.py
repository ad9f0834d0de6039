"""Turn new events into notifications: one per matching channel, grouped, inhibited, silenced.

The notifier reads the events stored since its cursor (``AlertCursor``), in id order, and for
each alert (``rules.alert_for``) that no silence mutes and no outage inhibits (an endpoint's
alert while its region is down says nothing the region's page has not said), stores a
pending ``Notification`` per enabled channel whose ``min_severity`` and ``events`` match. A
repeat of one alert's key on one channel within ``alerts_group_s`` bumps ``repeats`` on the
notification already made instead of making another. The cursor moves in the same
transaction with a compare-and-set, so two workers never notify one event twice.

The control loop's own trouble is not an event (a stalled loop records nothing):
``route_loop_alerts`` reads it from the hot state (``watch``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from django.db import transaction
from django.db.models import F, Max

from regions import conf
from regions.alerts import watch
from regions.alerts.rules import Alert, alert_for
from regions.models import (
    SEVERITY_RANK,
    AlertChannel,
    AlertCursor,
    Event,
    EventKind,
    Notification,
    Severity,
    Silence,
)

log = logging.getLogger(__name__)

BATCH = 500


def route_new_events(now: dt.datetime) -> int:
    """Notify the events stored since the last run; return how many notifications were made."""
    cursor = _cursor(now)
    events = list(Event.objects.filter(pk__gt=cursor.last_event_id).order_by("pk")[:BATCH])
    if not events:
        return 0
    made = 0
    with transaction.atomic():
        moved = AlertCursor.objects.filter(pk=1, last_event_id=cursor.last_event_id).update(
            last_event_id=events[-1].pk
        )
        if not moved:  # another worker took this batch
            return 0
        channels = list(AlertChannel.objects.filter(enabled=True))
        for event in events:
            alert = alert_for(event)
            if alert is None or inhibited(alert, event) or silenced(alert, now):
                continue
            made += notify(alert, event, matching(channels, alert), now)
    return made


def route_loop_alerts(now: dt.datetime) -> int:
    """Notify the control loop's own trouble (overrunning ticks, a stalled loop)."""
    figures = watch.loop_figures()
    if figures is None:
        return 0
    overran, last_at = figures
    cursor = _cursor(now)
    alerts = [watch.stall_alert(last_at, now)]
    if overran != cursor.ticks_overran:
        moved = AlertCursor.objects.filter(pk=1, ticks_overran=cursor.ticks_overran).update(
            ticks_overran=overran
        )
        if moved:  # else another worker saw this change
            alerts.append(watch.overrun_alert(overran, cursor.ticks_overran))
    channels = list(AlertChannel.objects.filter(enabled=True))
    made = 0
    for alert in alerts:
        if alert is not None and not silenced(alert, now):
            made += notify(alert, None, matching(channels, alert), now)
    return made


def _cursor(now: dt.datetime) -> AlertCursor:
    """Return the cursor row; the first one starts past the events older than the group
    window: the history before alerts ever ran is not news."""
    cursor = AlertCursor.objects.filter(pk=1).first()
    if cursor is not None:
        return cursor
    old = now - dt.timedelta(seconds=conf.alerts_group_s())
    start = Event.objects.filter(at__lt=old).aggregate(top=Max("pk"))["top"] or 0
    cursor, _ = AlertCursor.objects.get_or_create(pk=1, defaults={"last_event_id": start})
    return cursor


def matching(channels: Iterable[AlertChannel], alert: Alert) -> list[AlertChannel]:
    """Return the channels that take ``alert``: severity high enough, its name subscribed."""
    rank = SEVERITY_RANK[Severity(alert.severity)]
    return [
        c
        for c in channels
        if rank >= SEVERITY_RANK[Severity(c.min_severity)]
        and (c.events is None or alert.name in c.events)
    ]


def inhibited(alert: Alert, event: Event) -> bool:
    """Tell whether ``alert`` is about an endpoint of a region that is down at that event."""
    if not alert.endpoint or not alert.region:
        return False
    last = (
        Event.objects.filter(
            region=alert.region,
            endpoint="",
            kind__in=(EventKind.FAILOVER, EventKind.HEALTH),
            pk__lte=event.pk,
        )
        .order_by("-pk")
        .values_list("data", flat=True)
        .first()
    )
    return isinstance(last, dict) and last.get("new") == "down"


def silenced(alert: Alert, now: dt.datetime) -> bool:
    """Tell whether a silence active at ``now`` matches every field it names in ``alert``."""
    fields = {
        "name": alert.name,
        "region": alert.region,
        "endpoint": alert.endpoint,
        "severity": alert.severity,
    }
    active = Silence.objects.filter(starts_at__lte=now, expires_at__gt=now)
    return any(
        all(fields.get(k) == v for k, v in (s.matchers or {}).items()) for s in active.iterator()
    )


def notify(
    alert: Alert, event: Event | None, channels: Iterable[AlertChannel], now: dt.datetime
) -> int:
    """Store a pending notification of ``alert`` per channel (or count a repeat)."""
    window = now - dt.timedelta(seconds=conf.alerts_group_s())
    made = 0
    for channel in channels:
        grouped = Notification.objects.filter(
            channel=channel, key=alert.key, created_at__gte=window
        ).update(repeats=F("repeats") + 1)
        if grouped:
            continue
        Notification.objects.create(**fields_of(alert, event, channel, now))
        made += 1
    return made


def fields_of(
    alert: Alert, event: Event | None, channel: AlertChannel, now: dt.datetime
) -> dict[str, object]:
    return {
        "event": event,
        "channel": channel,
        "channel_name": channel.name,
        "name": alert.name,
        "key": alert.key,
        "severity": alert.severity,
        "region": alert.region,
        "endpoint": alert.endpoint,
        "summary": alert.summary,
        "at": event.at if event is not None else now,
        "next_attempt_at": now,
        "created_at": now,
    }
