"""A bounded, deterministic schemathesis run over the whole API: the schema says what it does.

Every operation under ``/api/v1/`` but those that revoke tokens (they would revoke the token the
run uses) is fuzzed with requests valid and invalid by the schema, then the operations are
chained statefully along the links schemathesis infers (create a region, then read, patch
and delete it). Every check but ``positive_data_acceptance`` holds for every response: no
5xx, only documented status codes, content types, headers and bodies, schema-violating input
refused, 405 with ``Allow`` for other methods, 401 without the token, a created object
readable, a deleted one gone. (Schema-valid data may still be refused: the schema's types
are looser than the invariants — an address is "a string".)

Bounded to finish in well under two minutes on two cores (about 25 s of CPU): ten examples
per operation, no coverage phase (minutes of exhaustive cases), twenty stateful scenarios of
up to eight calls. Derandomized, with no example database: every run sends the same requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

schemathesis = pytest.importorskip("schemathesis")
pytestmark = pytest.mark.slow

API_PATHS = r"^/api/v1/"
# Revoking a token (DELETE, or POST .../revoke/) may revoke the one the run uses.
TOKEN_REVOCATIONS = r"^/api/v1/tokens/\{token_id\}/(revoke/)?$"
AGENT_PATHS = "/api/v1/heartbeats/"
FUZZ = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
STATEFUL = settings(
    max_examples=20,
    stateful_step_count=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _load() -> Any:
    spec = json.loads(
        json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str)
    )
    config = schemathesis.config.SchemathesisConfig.from_dict(
        {
            # The exhaustive coverage phase would take minutes on two cores.
            "phases": {"coverage": {"enabled": False}},
            # Every check but this one: schema-valid data may rightly be refused.
            "checks": {"positive_data_acceptance": {"enabled": False}},
        }
    )
    loaded = (
        schemathesis.openapi.from_dict(spec, config=config)
        .include(path_regex=API_PATHS)
        .exclude(path_regex=TOKEN_REVOCATIONS, method=["DELETE", "POST"])
    )
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


@pytest.fixture
def credentials(world: Any, make_client: Any) -> dict[str, str]:
    """Bearer headers: an admin token, and an agent token of eu-west for heartbeats."""
    return {
        "admin": make_client("admin", name="fuzz").token_secret,
        "agent": make_client("agent", region="eu-west", name="fuzz-agent").token_secret,
    }


def headers_for(case: Any, credentials: dict[str, str]) -> dict[str, str]:
    role = "agent" if case.operation.path.startswith(AGENT_PATHS) else "admin"
    return {
        "Authorization": f"Bearer {credentials[role]}",
        "X-Forwarded-Proto": "https",  # behind TLS, as deployed: no redirect to https
    }


def test_the_run_covers_the_api() -> None:
    """The filters leave every operation but the revocations (a regression guard)."""
    labels = {
        result.ok().label for result in schema.get_all_operations() if result.ok() is not None
    }
    assert len(labels) >= 50, sorted(labels)
    assert "DELETE /api/v1/tokens/{token_id}/" not in labels
    assert "POST /api/v1/tokens/{token_id}/revoke/" not in labels
    assert {"POST /api/v1/route", "POST /api/v1/heartbeats/", "GET /api/v1/fleet/export"} <= labels
    schema.as_state_machine()  # infers the links between operations (create → read → delete)
    assert schema.statistic.transitions.total >= 50


@pytest.mark.django_db
@schema.parametrize()
@FUZZ
def test_every_operation_conforms_to_its_schema(case: Any, credentials: dict[str, str]) -> None:
    case.call_and_validate(headers=headers_for(case, credentials))


@pytest.mark.django_db
def test_chained_operations_conform_to_the_schema(credentials: dict[str, str]) -> None:
    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        # Each scenario starts from the same stored state: hypothesis replays a scenario to
        # shrink or check it, and values drawn from responses (a name to delete) must be the
        # same then, or it reports the strategy as flaky.
        def setup(self) -> None:
            self.scenario = transaction.atomic()
            self.scenario.__enter__()

        def teardown(self) -> None:
            transaction.set_rollback(True)
            self.scenario.__exit__(None, None, None)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers_for(case, credentials)}

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            # Say which headers carried the token, so that the auth checks leave them out.
            case.validate_response(
                response,
                additional_checks=additional_checks,
                headers=kwargs.get("headers"),
                transport_kwargs=kwargs,
                recorder=self.recorder,
            )

    run_state_machine_as_test(Workflow, settings=STATEFUL)
