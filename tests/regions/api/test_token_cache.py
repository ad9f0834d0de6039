"""Resolved tokens are cached briefly: no query per request, and a revoke still bites.

Revokes, role changes and deletions through the ORM take effect at once (signals bump the
token version); a write that bypasses them is seen within ``TOKEN_TTL_S`` at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from regions.access import auth
from regions.models import AgentToken, ApiToken
from tests.regions.api.api_calls import API, assert_error

pytestmark = pytest.mark.django_db


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    """The token cache's clock, moved by hand; the cache starts empty."""
    fake = FakeClock()
    monkeypatch.setattr(auth.cache, "clock", fake)
    auth.cache.clear()
    yield fake
    auth.cache.clear()


def test_a_cached_token_costs_no_query(world: Any, make_client: Any, clock: FakeClock) -> None:
    client = make_client("viewer", name="reader")
    secret = client.token_secret
    assert auth.resolve_token(secret) is not None
    with CaptureQueriesContext(connection) as queries:
        user = auth.resolve_token(secret)
    assert user is not None and user.role == "viewer"
    assert len(queries) == 0
    assert auth.cached_token(secret) == user


def test_an_entry_lives_at_most_the_ttl(world: Any, make_client: Any, clock: FakeClock) -> None:
    secret = make_client("viewer", name="reader").token_secret
    auth.resolve_token(secret)
    clock.now += auth.TOKEN_TTL_S - 0.01
    assert auth.cached_token(secret) is not None
    clock.now += 0.02
    assert auth.cached_token(secret) is None


def test_revoking_through_the_api_refuses_the_next_request(
    world: Any, make_client: Any, admin_client: Any, clock: FakeClock
) -> None:
    gone = make_client("operator", name="gone")
    assert gone.get(f"{API}/regions/").status_code == 200  # now cached
    token = ApiToken.objects.get(name="gone")
    assert admin_client.post(f"{API}/tokens/api-{token.pk}/revoke/").status_code == 200
    assert_error(gone.get(f"{API}/regions/"), 401)


def test_a_role_change_applies_to_the_next_request(
    world: Any, make_client: Any, clock: FakeClock
) -> None:
    client = make_client("admin", name="demoted")
    assert client.get(f"{API}/tokens/").status_code == 200
    token = ApiToken.objects.get(name="demoted")
    token.role = "viewer"
    token.save(update_fields=["role"])
    assert_error(client.get(f"{API}/tokens/"), 403)


def test_deleting_an_agent_token_refuses_it(
    world: Any, agent_client: Any, clock: FakeClock
) -> None:
    secret = agent_client.token_secret
    assert auth.resolve_token(secret) is not None
    AgentToken.objects.filter(name="test-agent").get().delete()
    assert auth.resolve_token(secret) is None


def test_a_revoke_behind_the_signals_bites_within_the_ttl(
    world: Any, make_client: Any, clock: FakeClock
) -> None:
    client = make_client("viewer", name="sneaky")
    assert client.get(f"{API}/regions/").status_code == 200
    ApiToken.objects.filter(name="sneaky").update(revoked_at=timezone.now())  # no signal
    assert client.get(f"{API}/regions/").status_code == 200  # cached: the bounded staleness
    clock.now += auth.TOKEN_TTL_S
    assert_error(client.get(f"{API}/regions/"), 401)


def test_another_process_revoking_drops_this_cache(
    world: Any, make_client: Any, clock: FakeClock
) -> None:
    from regions import hotstate

    secret = make_client("viewer", name="elsewhere").token_secret
    assert auth.resolve_token(secret) is not None
    ApiToken.objects.filter(name="elsewhere").update(revoked_at=timezone.now())
    hotstate.get().bump_token_version()  # what the revoking process's signal does, shared
    assert auth.resolve_token(secret) is None


def test_unknown_and_revoked_secrets_are_not_cached_as_principals(
    world: Any, make_client: Any, clock: FakeClock
) -> None:
    assert auth.resolve_token("tmk_no-such-token") is None
    assert auth.cached_token("tmk_no-such-token") is None
    secret = make_client("viewer", name="late").token_secret
    ApiToken.objects.filter(name="late").update(revoked_at=timezone.now())
    assert auth.resolve_token(secret) is None
    assert auth.cached_token(secret) is None
    ApiToken.objects.filter(name="late").update(revoked_at=None)  # bypasses the signals
    clock.now += auth.TOKEN_TTL_S  # known unknown for at most the TTL
    assert auth.resolve_token(secret) is not None


def test_the_cache_stays_bounded(world: Any, make_client: Any, clock: FakeClock) -> None:
    small = auth.TokenCache(auth.TOKEN_TTL_S, 3, clock)
    user = auth.resolve_token(make_client("viewer").token_secret)
    assert user is not None
    version = small.version()
    for i in range(10):
        small.put(f"hash-{i}", user, version)
        assert len(small._entries) <= 3
    assert small.get("hash-9") == user


def test_a_principal_read_before_a_revoke_is_not_kept(
    world: Any, make_client: Any, clock: FakeClock
) -> None:
    secret = make_client("viewer", name="racing").token_secret
    stale = auth.resolve_token(secret)
    auth.cache.clear()
    version = auth.cache.version()
    token = ApiToken.objects.get(name="racing")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])  # the version moves on
    assert stale is not None
    auth.cache.put("racing", stale, version)  # a reader that started before the revoke
    assert auth.cache.get("racing") is None


def test_last_used_is_still_stamped(world: Any, make_client: Any, clock: FakeClock) -> None:
    client = make_client("viewer", name="stamped")
    assert client.get(f"{API}/regions/").status_code == 200
    assert ApiToken.objects.get(name="stamped").last_used_at is not None
