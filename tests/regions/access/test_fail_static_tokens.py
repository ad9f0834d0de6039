"""A PostgreSQL outage does not log agents out: known tokens work from the cache meanwhile.

Before: once a principal's 5 s cache entry expired, every heartbeat needed the database, so
an outage refused them all and the loop took every region down.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from regions import hotstate
from regions.access import auth
from regions.models import ApiToken


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(auth.cache, "clock", fake)
    auth.cache.clear()
    auth.database.succeeded()
    yield fake
    auth.cache.clear()
    auth.database.succeeded()


@pytest.fixture
def database_away(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every token lookup fails as with PostgreSQL stopped; the list counts the attempts."""
    asked: list[str] = []

    def refuse(secret: str, key_hash: str) -> Any:
        asked.append(secret)
        raise OperationalError("connection refused")

    original = auth._from_database
    monkeypatch.setattr(auth, "_from_database", refuse)
    yield asked
    monkeypatch.setattr(auth, "_from_database", original)
    auth.database.succeeded()


def test_a_known_token_keeps_working_while_the_database_is_away(
    world: Any, make_client: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = make_client("viewer", name="steady").token_secret
    assert auth.resolve_token(secret) is not None
    clock.now += auth.TOKEN_TTL_S + 30  # long expired
    asked: list[str] = []

    def refuse(secret: str, key_hash: str) -> Any:
        asked.append(secret)
        raise OperationalError("connection refused")

    monkeypatch.setattr(auth, "_from_database", refuse)
    user = auth.resolve_token(secret)
    assert user is not None and user.name == "steady"
    assert auth.resolve_token(secret) is not None
    assert len(asked) == 1, "asked the unreachable database again at once"
    assert hotstate.get().counters().get("fail_static|what=token") == 2


def test_an_unknown_agent_token_is_refused_and_counted_as_the_control_planes_impairment(
    world: Any, clock: Clock, database_away: list[str]
) -> None:
    with pytest.raises(OperationalError):
        auth.resolve_token("tmk_" + "x" * 43)  # an API token: no heartbeat goes missing
    assert not hotstate.get().impairments()
    auth.database.succeeded()
    with pytest.raises(OperationalError):
        auth.resolve_token("tma_" + "x" * 43)
    assert hotstate.get().impairments(), "the refusal was not recorded as an impairment"


def test_a_revocation_wins_once_the_database_is_back(
    world: Any, make_client: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = make_client("viewer", name="going").token_secret
    assert auth.resolve_token(secret) is not None
    # Revoked behind the signals' back (no token version bump): only the database knows.
    ApiToken.objects.filter(name="going").update(revoked_at=timezone.now())
    clock.now += auth.TOKEN_TTL_S
    assert auth.resolve_token(secret) is None


def test_a_revocation_through_the_orm_drops_the_fail_static_copy(
    world: Any, make_client: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = make_client("viewer", name="revoked").token_secret
    assert auth.resolve_token(secret) is not None
    token = ApiToken.objects.get(name="revoked")
    token.revoked_at = timezone.now()
    token.save()  # bumps the token version: every cached principal is dropped

    def refuse(secret: str, key_hash: str) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(auth, "_from_database", refuse)
    with pytest.raises(OperationalError):
        auth.resolve_token(secret)
