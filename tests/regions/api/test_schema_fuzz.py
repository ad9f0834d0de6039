"""A small, bounded schemathesis run over the configuration API (skipped without it).

Generated requests, valid and invalid by the schema, must never cause a 5xx, and every
response must match what the schema says about its status, headers and body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.specs.openapi import checks  # noqa: E402

# This module's routes only: collections, their items, and revoking a token.
CONFIG_API = (
    r"^/api/v1/(regions|endpoints|gpu-profiles|residency-rules|failover-policies|tokens|events"
    r"|audit)/(\{[a-z_]+\}/)?$|^/api/v1/tokens/\{token_id\}/revoke/$"
)


def _load() -> Any:
    spec = json.loads(
        json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str)
    )
    # Fuzzing only: the exhaustive coverage phase would take minutes on two cores.
    config = schemathesis.config.SchemathesisConfig.from_dict(
        {"phases": {"coverage": {"enabled": False}}}
    )
    loaded = schemathesis.openapi.from_dict(spec, config=config).include(path_regex=CONFIG_API)
    loaded.app = get_wsgi_application()
    return loaded


schema = _load()


@pytest.fixture(autouse=True)
def _keep_test_connection() -> Iterator[None]:
    """Keep the test's transaction open across requests, as Django's test client does.

    The WSGI app closes old database connections at each request's start and end; with
    PostgreSQL (persistent connections) that would close the test's own connection.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_config_api_conforms_to_its_schema(case: Any, world: Any, make_client: Any) -> None:
    client = make_client("admin", name="fuzz")
    headers = {
        "Authorization": f"Bearer {client.token_secret}",
        "X-Forwarded-Proto": "https",  # behind TLS, as deployed: no redirect to https
    }
    case.call_and_validate(
        headers=headers,
        # The schema's types are looser than the invariants (an address is "a string"),
        # so schema-valid data may rightly be refused with a 400.
        excluded_checks=[checks.positive_data_acceptance],
    )
