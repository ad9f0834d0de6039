"""Every path of the API takes a trailing slash: ``POST /api/v1/route/`` answered a 404 where
``/api/v1/route`` answered, while the actions and the configuration took both forms."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

DECISION = {
    "model": "llama-3-8b",
    "client_country": "IE",
    "input_tokens": 100,
    "max_output_tokens": 50,
}


@pytest.mark.parametrize("path", ["/api/v1/route", "/api/v1/route/"])
def test_a_decision_is_answered_with_or_without_the_slash(
    world: Any, viewer_client: Any, path: str
) -> None:
    response = viewer_client.post(path, data=json.dumps(DECISION), content_type="application/json")
    assert response.status_code in (200, 503), response.content
    doc = response.json()
    assert ("region" in doc) if response.status_code == 200 else ("error" in doc)


@pytest.mark.parametrize(
    "path",
    ["/api/v1/routing/table/", "/api/v1/routing/history/", "/api/v1/route/completions/"],
)
def test_the_other_loop_paths_take_the_slash_too(world: Any, viewer_client: Any, path: str) -> None:
    if path.endswith("completions/"):
        response = viewer_client.post(path, data="{}", content_type="application/json")
    else:
        response = viewer_client.get(path)
    assert response.status_code != 404, response.content


def test_reverse_and_the_schema_keep_the_form_the_fast_front_answers(admin_client: Any) -> None:
    assert reverse("route") == "/api/v1/route"
    assert reverse("route-completions") == "/api/v1/route/completions"
    paths = admin_client.get("/api/schema/?format=json").json()["paths"]
    assert "/api/v1/route" in paths and "/api/v1/route/" not in paths
