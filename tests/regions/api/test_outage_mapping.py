"""Which errors mean "a store cannot be reached", and how each layer answers them.

In process, with the errors raised where they come from: a DRF view (the exception handler),
another Django view (``ErrorFormatMiddleware.process_exception``) and another middleware
(Django turns that into a 500 at its layer; the outermost middleware restyles it). The same
from outside, with real stores stopped, is in test_outage_errors.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError
from django.test import Client
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from regions.api.errors import exception_handler
from tests.regions.api.api_calls import API

pytestmark = pytest.mark.django_db

OUTAGES = [
    RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    RedisTimeoutError("Timeout reading from socket"),
    BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    OperationalError("connection to server at 127.0.0.1, port 5432 failed"),
    InterfaceError("connection already closed"),
    DatabaseError("the database failed moments ago; not asked again yet"),
]


def assert_outage(response: Any) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert int(response["Retry-After"]) >= 1
    doc = response.json()
    assert set(doc) == {"error", "detail", "fields"} and doc["error"] == "unavailable"


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: type(e).__name__)
def test_the_exception_handler_answers_503_with_retry_after(exc: Exception) -> None:
    response = exception_handler(exc, {})
    assert response is not None and response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.data["error"] == "unavailable"
    store = "Redis" if "connecting" in str(exc) or "socket" in str(exc) else "the database"
    assert response.data["detail"].startswith(store)


def test_a_conflict_is_still_a_conflict() -> None:
    response = exception_handler(IntegrityError("duplicate key"), {})
    assert response is not None and response.status_code == 409


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: type(e).__name__)
def test_a_drf_view_answers_an_outage_in_the_error_format(
    world: Any, viewer_client: Any, monkeypatch: pytest.MonkeyPatch, exc: Exception
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr("regions.api.config.views.RegionViewSet.list", fail)
    assert_outage(viewer_client.get(f"{API}/regions/"))


def test_a_plain_django_view_answers_an_outage_in_the_error_format(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Connection refused.")

    monkeypatch.setattr("regions.metrics.generate_latest", fail)
    assert_outage(Client().get("/metrics"))


def test_an_outage_inside_another_middleware_is_restyled(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(SessionMiddleware, "process_request", fail)
    client = Client(raise_request_exception=False)
    response = client.get(f"{API}/regions/")
    assert_outage(response)
    assert response["X-Content-Type-Options"] == "nosniff"  # outer layers' headers are kept


def test_an_unexpected_error_inside_another_middleware_is_a_json_500(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(SessionMiddleware, "process_request", fail)
    response = Client(raise_request_exception=False).get(f"{API}/regions/")
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert response.json()["error"] == "server_error"


def test_a_browser_gets_a_page_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.DEBUG = True  # even then: no traceback page for an outage

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr("django.contrib.auth.views.LoginView.post", fail)
    client = Client(raise_request_exception=False)
    response = client.post("/login/", {"username": "ops", "password": "x"}, HTTP_ACCEPT="text/html")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert int(response["Retry-After"]) >= 1
    assert b"Traceback" not in response.content and b"the database" in response.content
