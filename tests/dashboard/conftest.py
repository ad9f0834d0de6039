"""Fixtures of the dashboard's tests: users of each role, sessions, a WebSocket to the app.

The fleet is the small named ``world`` of tests/conftest.py. The channel layer and the hot
state are in-process, whatever REDIS_URL says: these tests are about the dashboard, not
about Redis (tests/regions/loop and tests/integration cover that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

ORIGIN = b"http://testserver"
Headers = list[tuple[bytes, bytes]]


@pytest.fixture(autouse=True)
def _in_process(settings: Any) -> Iterator[Any]:
    """Plain HTTP for the test client, the in-memory channel layer, a fresh hot state."""
    from regions import hotstate
    from regions.caches import reset_process_state

    settings.SECURE_SSL_REDIRECT = False
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    store = hotstate.MemoryHotState()
    reset_process_state(store)
    yield store
    reset_process_state(None)


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    """Create a Django user with a role: ``make_user("operator")``; None: no role at all."""
    from django.contrib.auth.models import Group, User

    def make(role: str | None, username: str | None = None) -> Any:
        name = username or f"{role or 'nobody'}-user"
        user = User.objects.create_user(name, password="a-long-test-password")
        if role is not None:
            group, _ = Group.objects.get_or_create(name=role)
            user.groups.add(group)
        return user

    return make


@pytest.fixture
def session_cookie() -> Callable[[Any], bytes]:
    """Return the Cookie header of a signed-in session of ``user``."""
    from django.test import Client

    def cookie(user: Any) -> bytes:
        client = Client()
        client.force_login(user)
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    return cookie


@pytest.fixture
def ws_headers(session_cookie: Callable[[Any], bytes]) -> Callable[[Any], Headers]:
    """Headers of a browser's WebSocket handshake: same origin, and the session if any."""

    def headers(user: Any | None) -> Headers:
        out = [(b"origin", ORIGIN), (b"host", b"testserver")]
        if user is not None:
            out.append((b"cookie", session_cookie(user)))
        return out

    return headers
