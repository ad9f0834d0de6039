"""Alerts that reach people: channels, the notifications sent through them, silences.

A ``Notification`` carries what it says (event name, severity, region, summary) as well as a
link to its ``Event``: the history purge may delete the event, never what was sent. Its
``key`` groups repeats of one alert (``region_down:eu-west``) for deduplication.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models

from regions.models.events import Event
from regions.models.fleet import validate_name


class Severity(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


# A page is an alert of this rank or above: it escalates when nobody acknowledges it.
SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook"
    SLACK = "slack"
    PAGERDUTY = "pagerduty"
    EMAIL = "email"


class NotificationStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class AlertChannel(models.Model):
    """Where alerts go: a webhook, a Slack-compatible hook, PagerDuty or an email address."""

    name = models.CharField(max_length=63, unique=True, validators=[validate_name])
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    url = models.CharField(max_length=2000, blank=True)
    # email: the recipient; pagerduty: the integration's routing key
    address = models.CharField(max_length=254, blank=True)
    min_severity = models.CharField(
        max_length=8, choices=Severity.choices, default=Severity.WARNING
    )
    # None: every event; else the event names this channel receives (``region_down``, ...)
    events = models.JSONField(null=True, blank=True, default=None)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    fallback = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    escalate_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = target_errors(str(self.kind), self.url, self.address)
        if self.events is not None and not (
            isinstance(self.events, list) and all(isinstance(e, str) for e in self.events)
        ):
            errors["events"] = "null (every event) or a list of event names"
        if self.pk is not None and self.pk in (self.fallback_id, self.escalate_to_id):
            field = "fallback" if self.pk == self.fallback_id else "escalate_to"
            errors[field] = "a channel cannot fall back or escalate to itself"
        if errors:
            raise ValidationError(errors)


def target_errors(kind: str, url: str, address: str) -> dict[str, str]:
    """Return what is wrong with where a channel of ``kind`` sends, by field."""
    errors: dict[str, str] = {}
    if kind == ChannelKind.EMAIL:
        if url:
            errors["url"] = "an email channel sends to its address, not a URL"
        try:
            validate_email(address)
        except ValidationError:
            errors["address"] = "an email channel needs an email address"
        return errors
    if url or kind != ChannelKind.PAGERDUTY:
        problem = url_problem(url)
        if problem:
            errors["url"] = problem
    if kind == ChannelKind.PAGERDUTY and not (address and address.isalnum()):
        errors["address"] = "a pagerduty channel needs its integration's routing key"
    elif kind != ChannelKind.PAGERDUTY and address:
        errors["address"] = f"a {kind} channel sends to its URL, not an address"
    return errors


def url_problem(url: str) -> str:
    """Return why ``url`` cannot receive alerts, or an empty string."""
    if not url:
        return "required: the receiver's http(s) URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return f"only http and https URLs receive alerts, not {parts.scheme or 'no scheme'}"
    if not parts.hostname:
        return "the URL names no host"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "the URL holds spaces or control characters"
    return ""


class Notification(models.Model):
    """One alert sent (or being sent) to one channel, with its delivery status."""

    event = models.ForeignKey(Event, null=True, blank=True, on_delete=models.SET_NULL)
    channel = models.ForeignKey(
        AlertChannel, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    channel_name = models.CharField(max_length=63)
    name = models.CharField(max_length=32)  # the event's name: region_down, test, ...
    key = models.CharField(max_length=200, db_index=True)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    region = models.CharField(max_length=63, blank=True)
    endpoint = models.CharField(max_length=63, blank=True)
    summary = models.CharField(max_length=2000)
    at = models.DateTimeField()  # when the event happened
    repeats = models.PositiveIntegerField(default=0)  # same key within the group window
    status = models.CharField(
        max_length=16, choices=NotificationStatus.choices, default=NotificationStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=150, blank=True)
    escalated = models.BooleanField(default=False)
    # the notification this one falls back from or escalates
    origin = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} → {self.channel_name}: {self.status}"


SILENCE_MATCHERS = ("name", "region", "endpoint", "severity")


class Silence(models.Model):
    """Mute the alerts that match every matcher (``name``, ``region``, ``endpoint``,
    ``severity``) until ``expires_at``."""

    matchers = models.JSONField(default=dict)
    comment = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    starts_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"silence {self.matchers} until {self.expires_at:%Y-%m-%d %H:%M}"

    def clean(self) -> None:
        matchers = self.matchers
        if not isinstance(matchers, dict) or not matchers:
            raise ValidationError({"matchers": "an object of name, region, endpoint, severity"})
        unknown = sorted(set(matchers) - set(SILENCE_MATCHERS))
        if unknown:
            raise ValidationError({"matchers": f"unknown matcher {', '.join(unknown)}"})
        if not all(isinstance(v, str) and v for v in matchers.values()):
            raise ValidationError({"matchers": "each matcher is a non-empty string"})
        if self.starts_at and self.expires_at and self.expires_at <= self.starts_at:
            raise ValidationError({"expires_at": "must be after starts_at"})


class AlertCursor(models.Model):
    """How far the notifier has read (one row): the newest event it turned into
    notifications, and the control loop's overrun count at its last look."""

    last_event_id = models.BigIntegerField(default=0)
    ticks_overran = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"alerts read up to event {self.last_event_id}"
