"""Issuing tokens: API tokens with a role, agent tokens bound to a region's endpoints."""

from __future__ import annotations

from django.db import transaction

from regions.access.tokens import hash_secret, new_secret
from regions.errors import DomainError
from regions.models import AgentToken, ApiToken, Region, Role

TOKEN_ROLES = ("viewer", "operator", "admin", "agent", "client")


class TokenError(DomainError):
    """A token request that cannot be honoured (bad role, unknown region)."""

    status_code = 400
    code = "invalid_token_request"


def create_token(
    name: str,
    role: str,
    region: str | Region | None = None,
    created_by: str = "",
    tenant: str = "",
) -> tuple[ApiToken | AgentToken, str]:
    """Create an API token (viewer/operator/admin), a client token (inference requests through
    the gateway, optionally of a tenant) or an agent token bound to a region.

    Returns the stored token and its secret; only the secret's hash is kept.
    """
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise TokenError(
            "a token needs a name of 1 to 100 characters", fields={"name": ["1 to 100 characters"]}
        )
    if role not in TOKEN_ROLES:
        raise TokenError(
            f"role {role!r} is not one of {', '.join(TOKEN_ROLES)}",
            fields={"role": [f"one of {', '.join(TOKEN_ROLES)}"]},
        )
    if tenant and role != "client":
        raise TokenError(
            "only client tokens belong to a tenant", fields={"tenant": ["only for role client"]}
        )
    if len(tenant) > 63:
        raise TokenError("tenant: at most 63 characters", fields={"tenant": ["at most 63"]})
    if role != "agent" and region is not None:
        raise TokenError(
            "only agent tokens are bound to a region", fields={"region": ["only for role agent"]}
        )
    if role == "agent":
        return _create_agent_token(name, region, created_by)
    secret = new_secret(agent=False)
    token = ApiToken.objects.create(
        name=name,
        role=Role(role),
        prefix=secret[:12],
        key_hash=hash_secret(secret),
        created_by=created_by[:150],
        tenant=tenant,
    )
    return token, secret


def _create_agent_token(
    name: str, region: str | Region | None, created_by: str
) -> tuple[AgentToken, str]:
    if region is None:
        raise TokenError(
            "an agent token must be bound to a region",
            fields={"region": ["required for role agent"]},
        )
    if not isinstance(region, Region):
        found = Region.objects.filter(name=region).first()
        if found is None:
            raise TokenError(f"unknown region {region!r}", fields={"region": ["unknown region"]})
        region = found
    secret = new_secret(agent=True)
    with transaction.atomic():
        token = AgentToken.objects.create(
            name=name,
            region=region,
            prefix=secret[:12],
            key_hash=hash_secret(secret),
            created_by=created_by[:150],
        )
        token.endpoints.set(region.endpoints.all())
    return token, secret
