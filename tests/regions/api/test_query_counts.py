"""List endpoints run a bounded number of queries, however many rows they return."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from regions.models import AuditLog, Endpoint, Event, GpuProfile, Region, ResidencyRule
from tests.regions.api.api_calls import API

pytestmark = pytest.mark.django_db

# Token lookup, its last-used stamp, the count, the page, one prefetch: a fixed cost.
MAX_QUERIES = 6


def _thousand_endpoints() -> None:
    regions = Region.objects.bulk_create(
        Region(name=f"r-{i:02d}", country="DE", lat=50.0, lon=8.0, addresses=["192.0.2.1"])
        for i in range(20)
    )
    gpus = list(GpuProfile.objects.all())
    Endpoint.objects.bulk_create(
        Endpoint(
            region=regions[i % len(regions)],
            name=f"ep-{i:04d}",
            address=f"10.9.{i // 250}.{i % 250 + 1}:8000",
            gpu=gpus[i % len(gpus)],
            gpus=8,
            model_names=["llama-3-8b"],
        )
        for i in range(1000)
    )
    rules = ResidencyRule.objects.bulk_create(
        ResidencyRule(name=f"rule-{i:03d}", countries=["DE"]) for i in range(100)
    )
    through = ResidencyRule.regions.through
    through.objects.bulk_create(
        through(residencyrule_id=rule.pk, region_id=region.pk)
        for rule in rules
        for region in regions[:3]
    )
    now = timezone.now()
    Event.objects.bulk_create(
        Event(at=now, kind="health", region="r-01", message=f"e{i}") for i in range(500)
    )
    AuditLog.objects.bulk_create(
        AuditLog(at=now, actor="cli:test", actor_type="cli", action="create", object_type="Region")
        for _ in range(500)
    )


@pytest.mark.parametrize(
    "path",
    [
        "endpoints",
        "regions",
        "residency-rules",
        "gpu-profiles",
        "failover-policies",
        "events",
        "audit",
        "tokens",
    ],
)
def test_list_queries_do_not_grow_with_rows(
    world: Any, admin_client: Any, django_assert_max_num_queries: Any, path: str
) -> None:
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(f"{API}/{path}/?limit=1000").status_code == 200
    _thousand_endpoints()
    with django_assert_max_num_queries(max(MAX_QUERIES, len(few))):
        response = admin_client.get(f"{API}/{path}/?limit=1000")
    assert response.status_code == 200


def test_thousand_endpoints_in_one_page(
    world: Any, viewer_client: Any, django_assert_max_num_queries: Any
) -> None:
    _thousand_endpoints()
    with django_assert_max_num_queries(MAX_QUERIES):
        body = viewer_client.get(f"{API}/endpoints/?limit=1000&offset=5").json()
    assert body["count"] == 1005
    assert len(body["results"]) == 1000
    assert {"region", "gpu", "models"} <= set(body["results"][0])


def test_residency_rules_with_their_regions(
    world: Any, viewer_client: Any, django_assert_max_num_queries: Any
) -> None:
    _thousand_endpoints()
    with django_assert_max_num_queries(MAX_QUERIES):
        body = viewer_client.get(f"{API}/residency-rules/?limit=1000&region=r-00").json()
    assert body["count"] == 100
    assert body["results"][0]["regions"] == ["r-00", "r-01", "r-02"]
