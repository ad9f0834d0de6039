"""What happened: events, the append-only audit log, published table versions."""

from __future__ import annotations

from typing import Any

from django.db import models


class EventKind(models.TextChoices):
    HEALTH = "health"
    FAILOVER = "failover"
    DRILL = "drill"
    ACTION = "action"
    CONFIG = "config"
    TABLE = "table"


class Event(models.Model):
    """Something that happened to the fleet: health transitions, failovers, drills, actions."""

    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    severity = models.CharField(max_length=8, default="info")
    region = models.CharField(max_length=63, blank=True, db_index=True)
    endpoint = models.CharField(max_length=63, blank=True)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    # Set by the control loop: an event written late (from the Redis outbox, after a database
    # outage) or twice (a retry) is stored once.
    uid = models.CharField(max_length=32, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind}: {self.message}"


class LoopState(models.Model):
    """The control loop's durable state: one row, written with each tick's events.

    Redis holds the working copy; this row is what a Redis that lost its data is restored
    from (the region machines, the counters behind /metrics), and its ``fence`` is the
    newest tick that wrote it (a compare-and-set: an older tick's write changes nothing).
    """

    fence = models.BigIntegerField(default=0)
    at = models.FloatField(default=0.0, help_text="the tick's time, seconds since the epoch")
    machines = models.JSONField(default=dict, blank=True)
    counters = models.JSONField(default=dict, blank=True)
    counters_at = models.FloatField(default=0.0)
    table_version = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"loop state at {self.at:.3f} (fence {self.fence})"


class AppendOnlyQuerySet(models.QuerySet["AuditLog"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("the audit log is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("the audit log is append-only")


class AuditLog(models.Model):
    """Who changed what, when and from where; rows are never updated or deleted."""

    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150)
    actor_type = models.CharField(max_length=16)  # user | token | cli | system
    source = models.CharField(max_length=100, blank=True)  # client address or "cli"
    action = models.CharField(max_length=32)  # create | update | delete | drain | apply ...
    object_type = models.CharField(max_length=63)
    object_id = models.CharField(max_length=63, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("the audit log is append-only")


class DocumentField(models.JSONField):
    """JSON kept as written: PostgreSQL's ``json`` type instead of ``jsonb``.

    For large documents that are stored and read back whole, never searched inside: a tick's
    routing table (~600 KB for 50 regions x 250 zones x 4 models) and its diff. ``jsonb``
    parses a document into its binary form on every insert, most of a history write's cost;
    ``json`` only validates it (measured on PostgreSQL 15 with lz4 column compression:
    a 600 KB table and 230 KB diff inserted in ~4 ms against ~19 ms as ``jsonb``, ~36 ms as
    ``jsonb`` with the default pglz). Key lookups still work; ``?``-style containment does
    not, and nothing here uses it. Other databases store JSON as text either way.
    """

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is not None and not isinstance(value, str | bytes):
            return value  # the driver parsed ``json`` already
        return super().from_db_value(value, expression, connection)  # type: ignore[arg-type]


class RoutingTableVersion(models.Model):
    version = models.CharField(max_length=64, unique=True)
    generated_at = models.DateTimeField(db_index=True)
    table = DocumentField()
    diff = DocumentField(default=dict, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-generated_at", "-id"]

    def __str__(self) -> str:
        return self.version
