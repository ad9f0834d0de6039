"""Who may do what: API tokens with a role, agent tokens bound to endpoints."""

from __future__ import annotations

from django.db import models

from regions.models.fleet import Endpoint, Region


class Role(models.TextChoices):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"
    CLIENT = "client"  # sends inference requests through the gateway; no API access


ROLE_RANK = {Role.CLIENT: 0, Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


class TokenBase(models.Model):
    """A bearer secret stored as its SHA-256; the secret is shown once, at creation."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="first characters, to recognise it")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class ApiToken(TokenBase):
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    # For client tokens: the tenant its requests count against (empty: none).
    tenant = models.CharField(max_length=63, blank=True, default="")


class AgentToken(TokenBase):
    """May only post heartbeats, and only for its own endpoints."""

    region = models.ForeignKey(
        Region, null=True, blank=True, on_delete=models.CASCADE, related_name="agent_tokens"
    )
    endpoints = models.ManyToManyField(Endpoint, blank=True, related_name="agent_tokens")

    def may_report(self, endpoint: Endpoint) -> bool:
        if self.region_id is not None and endpoint.region_id == self.region_id:
            return True
        return self.endpoints.filter(pk=endpoint.pk).exists()
