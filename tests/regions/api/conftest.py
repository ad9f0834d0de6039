"""Fixtures of the configuration API's tests.

The clients (``viewer_client``, ``admin_client``, ...) and the named ``world`` come from
tests/conftest.py; here: ``unchanged``, to prove a refused input changed nothing, plain
HTTP for the test client, and a clean throttle cache per test. Shared request helpers and
bodies are in api_calls.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from tests.regions.api.api_calls import stored_state


@pytest.fixture
def unchanged() -> Callable[[], AbstractContextManager[None]]:
    """``with unchanged(): <refused request>`` asserts stored state is exactly as before."""

    @contextmanager
    def check() -> Iterator[None]:
        before = stored_state()
        yield
        assert stored_state() == before

    return check


@pytest.fixture(autouse=True)
def _plain_http(settings: Any) -> None:
    """The test client speaks plain HTTP; without TLS settings it would get 301 to https."""
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture(autouse=True)
def _fresh_throttle_cache() -> Iterator[None]:
    """Rate-limit counters live in the cache; keep them from leaking between tests."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()
