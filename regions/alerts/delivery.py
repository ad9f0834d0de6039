"""Deliver pending notifications: bounded attempts with backoff, auto-disable, fallback.

A worker claims a due notification with an UPDATE whose row count is a compare-and-set (it
moves ``next_attempt_at`` past the attempt's timeout), so two workers never send it at once
and one that died mid-attempt leaves it to be retried. An attempt that fails for a reason
worth retrying is tried again after ``alerts_retry_base_s`` × 2^(attempts-1) (at most
``MAX_BACKOFF_S``), up to ``alerts_max_attempts``; then it is ``failed``. A permanent error
(4xx other than 429) fails it at once and disables the channel, with the reason, until an
admin changes it or a test send gets through. A failed notification goes on to the
channel's ``fallback`` when it has one: nothing is dropped without a trace.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from django.db import transaction

from regions import conf
from regions.alerts.transports import Outcome, send
from regions.models import AlertChannel, Notification, NotificationStatus

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0
BATCH = 50


def backoff_s(attempts: int) -> float:
    """Return the wait before the attempt after ``attempts`` failed ones."""
    return min(MAX_BACKOFF_S, conf.alerts_retry_base_s() * 2 ** max(0, attempts - 1))


def deliver_due(now: dt.datetime, deadline_s: float = 30.0) -> int:
    """Attempt the notifications due at ``now``; return how many attempts were made.

    Stops claiming new ones once ``deadline_s`` of wall time has passed, so one run of the
    worker is bounded however many receivers hang.
    """
    started = time.monotonic()
    due = Notification.objects.filter(
        status=NotificationStatus.PENDING, next_attempt_at__lte=now
    ).order_by("next_attempt_at", "pk")
    done = 0
    for pk in list(due.values_list("pk", flat=True)[:BATCH]):
        if time.monotonic() - started > deadline_s:
            break
        if attempt(pk, now):
            done += 1
    return done


def attempt(pk: int, now: dt.datetime) -> bool:
    """Claim notification ``pk`` and make one delivery attempt; False: someone else has it."""
    timeout = conf.alerts_timeout_s()
    lease = now + dt.timedelta(seconds=timeout + 30)
    claimed = Notification.objects.filter(
        pk=pk, status=NotificationStatus.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=lease)
    if not claimed:
        return False
    n = Notification.objects.select_related("channel").get(pk=pk)
    channel = n.channel
    if channel is None:
        record(n, Outcome(False, True, "the channel was deleted"), now)
    elif not channel.enabled and n.name != "test":
        record(n, Outcome(False, True, f"channel disabled: {channel.disabled_reason}"), now)
    else:
        record(n, send(n, channel.kind, channel.url, channel.address, timeout), now)
    return True


def record(n: Notification, outcome: Outcome, now: dt.datetime) -> None:
    """Store what one attempt did, and what follows from it."""
    n.attempts += 1
    n.last_error = outcome.error[:500]
    if outcome.delivered:
        n.status = NotificationStatus.DELIVERED
        n.delivered_at = now
    elif outcome.permanent or n.attempts >= conf.alerts_max_attempts():
        n.status = NotificationStatus.FAILED
    else:
        n.next_attempt_at = now + dt.timedelta(seconds=backoff_s(n.attempts))
    with transaction.atomic():
        n.save()
        channel = n.channel
        if channel is not None and outcome.delivered and n.name == "test" and not channel.enabled:
            _set_enabled(channel, True, "")
        if channel is not None and outcome.permanent and channel.enabled:
            _set_enabled(channel, False, f"{outcome.error} (at {now:%Y-%m-%d %H:%M:%S}Z)")
        if n.status == NotificationStatus.FAILED:
            log.warning("notification %s to %s failed: %s", n.pk, n.channel_name, n.last_error)
            hand_on(n, channel.fallback if channel is not None else None, now)


def _set_enabled(channel: AlertChannel, enabled: bool, reason: str) -> None:
    channel.enabled = enabled
    channel.disabled_reason = reason[:500]
    channel.save(update_fields=["enabled", "disabled_reason"])


def hand_on(n: Notification, to: AlertChannel | None, now: dt.datetime) -> Notification | None:
    """Queue a copy of ``n`` on channel ``to`` (a fallback or an escalation), once per chain."""
    if to is None or not to.enabled or _in_chain(n, to):
        return None
    return Notification.objects.create(
        event=n.event,
        channel=to,
        channel_name=to.name,
        name=n.name,
        key=n.key,
        severity=n.severity,
        region=n.region,
        endpoint=n.endpoint,
        summary=n.summary,
        at=n.at,
        next_attempt_at=now,
        created_at=now,
        origin=n,
    )


def _in_chain(n: Notification, to: AlertChannel) -> bool:
    """Tell whether ``to`` already had this alert along the chain (fallback loops end)."""
    seen: Notification | None = n
    for _ in range(20):
        if seen is None:
            return False
        if seen.channel_id == to.pk:
            return True
        seen = seen.origin
    return True
