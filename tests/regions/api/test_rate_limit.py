"""Rate limits apply per token: 429 in the error format, with Retry-After."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.api.api_calls import API, assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_per_minute(settings: Any) -> None:
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "3/min"}
    }


def test_over_the_rate_is_429_with_retry_after(three_per_minute: None, viewer_client: Any) -> None:
    for _ in range(3):
        assert viewer_client.get(f"{API}/regions/").status_code == 200
    response = viewer_client.get(f"{API}/regions/")
    body = assert_error(response, 429)
    assert body["error"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 60


def test_limits_are_per_token(three_per_minute: None, make_client: Any) -> None:
    busy, quiet = make_client("viewer", name="busy"), make_client("viewer", name="quiet")
    for _ in range(4):
        busy.get(f"{API}/regions/")
    assert busy.get(f"{API}/regions/").status_code == 429
    assert quiet.get(f"{API}/regions/").status_code == 200


def test_writes_count_too(three_per_minute: None, admin_client: Any) -> None:
    for _ in range(3):
        admin_client.get(f"{API}/gpu-profiles/")
    response = admin_client.post(f"{API}/gpu-profiles/", {}, format="json")
    assert_error(response, 429)


def test_default_rate_does_not_throttle_normal_use(viewer_client: Any) -> None:
    for _ in range(20):
        assert viewer_client.get(f"{API}/regions/").status_code == 200
