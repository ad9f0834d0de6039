"""What the configuration API's tests share: request helpers, bodies, stored state."""

from __future__ import annotations

import json
from typing import Any

API = "/api/v1"
_VOLATILE = {"last_used_at"}  # authenticating touches it; not a change of configuration

NEW_REGION = {
    "name": "eu-central",
    "country": "DE",
    "lat": 50.11,
    "lon": 8.68,
    "addresses": ["192.0.2.20", "2001:db8:20::1"],
    "priority": 2,
}
NEW_ENDPOINT = {
    "name": "euw-3",
    "region": "eu-west",
    "address": "10.1.0.13:8000",
    "gpu": "L4",
    "gpus": 2,
    "models": ["llama-3-8b"],
}


def stored_state() -> dict[str, Any]:
    """Every configuration row, the tokens and the history counts, as comparable values."""
    from regions.models import (
        AgentToken,
        ApiToken,
        AuditLog,
        Endpoint,
        Event,
        FailoverPolicy,
        FleetSettings,
        GpuProfile,
        Region,
        ResidencyRule,
    )

    state: dict[str, Any] = {}
    for model in (
        FleetSettings,
        GpuProfile,
        Region,
        Endpoint,
        ResidencyRule,
        FailoverPolicy,
        ApiToken,
        AgentToken,
    ):
        rows = model.objects.order_by("pk").values()
        state[model.__name__] = [
            {k: v for k, v in row.items() if k not in _VOLATILE} for row in rows
        ]
    state["ResidencyRule.regions"] = sorted(
        ResidencyRule.regions.through.objects.values_list("residencyrule_id", "region_id")
    )
    state["AuditLog"] = AuditLog.objects.count()
    state["Event"] = Event.objects.count()
    return state


def send_raw(
    client: Any, method: str, path: str, body: bytes, content_type: str = "application/json"
) -> Any:
    """Send ``body`` as it is (no JSON encoding by the client)."""
    return client.generic(method, path, body, content_type=content_type)


def send_json(client: Any, method: str, path: str, data: Any) -> Any:
    return send_raw(client, method, path, json.dumps(data).encode())


def assert_error(response: Any, status: int, *fields: str) -> dict[str, Any]:
    """Assert the one error format, the status, and that ``fields`` are named in it.

    A field counts as named when it, or one of its items (``addresses[3]``), is a key.
    """
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) >= {"error", "detail", "fields"}, body
    assert isinstance(body["detail"], str) and body["detail"]
    for field in fields:
        named = [
            k for k in body["fields"] if k == field or k.startswith((f"{field}[", f"{field}."))
        ]
        assert named, (field, body)
    return body
