"""Drills and their reports."""

from __future__ import annotations

from django.db import models


class DrillStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"
    REFUSED = "refused"


# The statuses of a drill that holds the fleet (at most one such drill at a time).
ACTIVE_DRILL_STATUSES = (DrillStatus.PENDING, DrillStatus.RUNNING)


class Drill(models.Model):
    kind = models.CharField(max_length=32)
    target = models.CharField(max_length=63)
    duration_s = models.FloatField()
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=DrillStatus.choices, default=DrillStatus.PENDING
    )
    forced = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} on {self.target} ({self.status})"


class DrillReport(models.Model):
    drill = models.OneToOneField(Drill, on_delete=models.CASCADE, related_name="report")
    report = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
