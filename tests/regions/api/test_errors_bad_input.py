"""Bad input is refused with a 4xx in the one error format, naming the problem, and
leaves stored state exactly as it was.

(Role and token refusals — a viewer writing, no token, a revoked token, an operator
doing an admin-only action — are in test_auth_roles.py; they assert unchanged state too.)
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from rest_framework.validators import UniqueValidator

from regions.api.serializers import StrictModelSerializer
from regions.middleware import BodySizeLimitMiddleware
from tests.regions.api.api_calls import (
    API,
    NEW_ENDPOINT,
    NEW_REGION,
    assert_error,
    send_json,
    send_raw,
)

pytestmark = pytest.mark.django_db

RULE = {"name": "gdpr", "continents": ["EU"], "regions": ["eu-west"]}
PROFILE = {
    "name": "B200",
    "prefill_tokens_per_s": 30000,
    "decode_tokens_per_s": 6000,
    "max_concurrency": 128,
}

# (method, path, body, field the error must name)
BAD_BODIES = {
    # wrong JSON types
    "name is a number": ("POST", "regions/", NEW_REGION | {"name": 123}, "name"),
    "lat is a string": ("POST", "regions/", NEW_REGION | {"lat": "50.1"}, "lat"),
    "priority is a string": ("POST", "regions/", NEW_REGION | {"priority": "2"}, "priority"),
    "priority is a fraction": ("POST", "regions/", NEW_REGION | {"priority": 1.5}, "priority"),
    "priority is a boolean": ("POST", "regions/", NEW_REGION | {"priority": True}, "priority"),
    "flag is a string": (
        "PATCH",
        "regions/eu-west/",
        {"failover_paused": "yes"},
        "failover_paused",
    ),
    "addresses is a string": (
        "POST",
        "regions/",
        NEW_REGION | {"addresses": "192.0.2.1"},
        "addresses",
    ),
    "address item is a number": (
        "POST",
        "regions/",
        NEW_REGION | {"addresses": [3232235777]},
        "addresses",
    ),
    "gpus is a string": ("POST", "endpoints/", NEW_ENDPOINT | {"gpus": "8"}, "gpus"),
    "models is a string": ("POST", "endpoints/", NEW_ENDPOINT | {"models": "llama-3-8b"}, "models"),
    "region is an object": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"region": {"name": "eu-west"}},
        "region",
    ),
    "weight is null": ("PATCH", "endpoints/euw-1/", {"weight": None}, "weight"),
    "regions is a string": ("POST", "residency-rules/", RULE | {"regions": "eu-west"}, "regions"),
    "threshold is a string": (
        "PATCH",
        "failover-policies/default/",
        {"miss_threshold": "3"},
        "miss_threshold",
    ),
    "admin_state is a number": ("PATCH", "endpoints/euw-1/", {"admin_state": 1}, "admin_state"),
    "body is a list": ("POST", "regions/", [NEW_REGION], "non_field_errors"),
    # unknown fields
    "unknown field on create": ("POST", "regions/", NEW_REGION | {"nmae": "x"}, "nmae"),
    "unknown field on patch": ("PATCH", "endpoints/euw-1/", {"model_names": ["x"]}, "model_names"),
    "unknown field on a rule": ("POST", "residency-rules/", RULE | {"clients": {}}, "clients"),
    # missing required fields
    "region without country": (
        "POST",
        "regions/",
        {k: v for k, v in NEW_REGION.items() if k != "country"},
        "country",
    ),
    "region without addresses": (
        "POST",
        "regions/",
        {k: v for k, v in NEW_REGION.items() if k != "addresses"},
        "addresses",
    ),
    "endpoint without gpu": (
        "POST",
        "endpoints/",
        {k: v for k, v in NEW_ENDPOINT.items() if k != "gpu"},
        "gpu",
    ),
    "rule without regions": (
        "POST",
        "residency-rules/",
        {"name": "r", "countries": ["DE"]},
        "regions",
    ),
    "empty body": ("POST", "gpu-profiles/", {}, "name"),
    # negative or zero GPU counts, capacities
    "zero gpus": ("POST", "endpoints/", NEW_ENDPOINT | {"gpus": 0}, "gpus"),
    "negative gpus": ("PATCH", "endpoints/euw-1/", {"gpus": -8}, "gpus"),
    "zero concurrency": (
        "POST",
        "gpu-profiles/",
        PROFILE | {"max_concurrency": 0},
        "max_concurrency",
    ),
    "negative decode rate": (
        "POST",
        "gpu-profiles/",
        PROFILE | {"decode_tokens_per_s": -1},
        "decode_tokens_per_s",
    ),
    "huge integer": ("PATCH", "regions/eu-west/", {"priority": 10**30}, "priority"),
    # unknown GPU profile
    "unknown gpu": ("POST", "endpoints/", NEW_ENDPOINT | {"gpu": "Z900"}, "gpu"),
    # duplicate names
    "duplicate region": ("POST", "regions/", NEW_REGION | {"name": "eu-west"}, "name"),
    "duplicate endpoint": ("POST", "endpoints/", NEW_ENDPOINT | {"name": "euw-1"}, "name"),
    "duplicate profile": ("POST", "gpu-profiles/", PROFILE | {"name": "H100"}, "name"),
    "duplicate rule": ("POST", "residency-rules/", RULE | {"name": "india-local"}, "name"),
    "rename onto another": ("PATCH", "regions/us-east/", {"name": "eu-west"}, "name"),
    # invalid IPv4 / IPv6 / host:port
    "bad ipv4": ("POST", "regions/", NEW_REGION | {"addresses": ["300.1.2.3"]}, "addresses"),
    "bad ipv6": ("POST", "regions/", NEW_REGION | {"addresses": ["2001:db8::zz"]}, "addresses"),
    "hostname as ingress": (
        "POST",
        "regions/",
        NEW_REGION | {"addresses": ["lb.example"]},
        "addresses",
    ),
    "empty addresses": ("POST", "regions/", NEW_REGION | {"addresses": []}, "addresses"),
    "port out of range": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"address": "10.0.0.1:99999"},
        "address",
    ),
    "port missing": ("POST", "endpoints/", NEW_ENDPOINT | {"address": "10.0.0.1:"}, "address"),
    "bad v6 port": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"address": "[2001:db8::1]:http"},
        "address",
    ),
    "bad v6 host": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"address": "[2001:db8::zz]:80"},
        "address",
    ),
    "space in host": ("POST", "endpoints/", NEW_ENDPOINT | {"address": "gpu 1:8000"}, "address"),
    "port zero": ("POST", "endpoints/", NEW_ENDPOINT | {"address": "10.0.0.1:0"}, "address"),
    "bad host label": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"address": "-gpu-.example:80"},
        "address",
    ),
    # lat/lon out of range
    "lat above 90": ("POST", "regions/", NEW_REGION | {"lat": 90.5}, "lat"),
    "lat below -90": ("PATCH", "regions/eu-west/", {"lat": -91}, "lat"),
    "lon above 180": ("POST", "regions/", NEW_REGION | {"lon": 181}, "lon"),
    "lon below -180": ("PATCH", "regions/eu-west/", {"lon": -180.01}, "lon"),
    "bad country": ("POST", "regions/", NEW_REGION | {"country": "XX"}, "country"),
    # residency rules naming unknown regions, or empty client sets
    "rule names unknown region": (
        "POST",
        "residency-rules/",
        RULE | {"regions": ["nowhere"]},
        "regions",
    ),
    "rule without clients": (
        "POST",
        "residency-rules/",
        {"name": "r", "regions": ["eu-west"]},
        "countries",
    ),
    "rule with empty clients": (
        "POST",
        "residency-rules/",
        RULE | {"continents": [], "countries": []},
        "countries",
    ),
    # names are constrained: SQL- or HTML-looking names are refused cleanly
    "sql-looking region name": (
        "POST",
        "regions/",
        NEW_REGION | {"name": "'; DROP TABLE regions; --"},
        "name",
    ),
    "html-looking endpoint name": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"name": "<script>alert(1)</script>"},
        "name",
    ),
    "html-looking model name": (
        "POST",
        "endpoints/",
        NEW_ENDPOINT | {"models": ["<img src=x onerror=alert(1)>"]},
        "models",
    ),
    "sql-looking address": (
        "POST",
        "regions/",
        NEW_REGION | {"addresses": ["1.2.3.4' OR '1'='1"]},
        "addresses",
    ),
    "lone surrogate": ("POST", "regions/", NEW_REGION | {"name": "eu\ud800"}, "name"),
    "nul character": ("POST", "tokens/", {"name": "a\u0000b", "role": "viewer"}, "name"),
    "too long a name": ("POST", "regions/", NEW_REGION | {"name": "r" * 64}, "name"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_body_is_400_naming_the_field(
    world: Any, admin_client: Any, unchanged: Any, case: str
) -> None:
    method, path, body, field = BAD_BODIES[case]
    with unchanged():
        response = send_raw(
            admin_client, method, f"{API}/{path}", json.dumps(body).encode("utf-8", "surrogatepass")
        )
        assert_error(response, 400, field)


TEN_THOUSAND = [f"item-{i}" for i in range(10_000)]
HUGE_LISTS = {
    "addresses": ("POST", "regions/", NEW_REGION | {"addresses": ["192.0.2.1"] * 10_000}),
    "models": ("POST", "endpoints/", NEW_ENDPOINT | {"models": TEN_THOUSAND}),
    "countries": ("POST", "residency-rules/", RULE | {"countries": ["DE"] * 10_000}),
    "regions": ("POST", "residency-rules/", RULE | {"regions": TEN_THOUSAND}),
}


@pytest.mark.parametrize("field", list(HUGE_LISTS))
def test_ten_thousand_item_list_is_refused_cheaply(
    world: Any, admin_client: Any, unchanged: Any, django_assert_max_num_queries: Any, field: str
) -> None:
    method, path, body = HUGE_LISTS[field]
    with unchanged(), django_assert_max_num_queries(10):
        body = assert_error(send_json(admin_client, method, f"{API}/{path}", body), 400, field)
    assert "10000" in json.dumps(body["fields"])


def test_body_over_one_megabyte_is_413(world: Any, admin_client: Any, unchanged: Any) -> None:
    padding = "x" * (1_048_576 + 1)
    with unchanged():
        response = send_json(
            admin_client, "POST", f"{API}/regions/", NEW_REGION | {"name": padding}
        )
        body = assert_error(response, 413)
    assert body["error"] == "too_large"


def test_413_applies_before_authentication(world: Any, anon_client: Any) -> None:
    response = send_raw(anon_client, "POST", f"{API}/tokens/", b"[" + b"0," * 600_000 + b"0]")
    assert_error(response, 413)


def test_body_without_content_length_is_measured_as_read() -> None:
    """A chunked upload (no Content-Length, as ASGI servers pass it) is measured, too."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/regions/",
        "headers": [],
        "query_string": b"",
    }
    request = ASGIRequest(scope, io.BytesIO(b"x" * (1_048_576 + 10)))
    response = BodySizeLimitMiddleware(lambda r: HttpResponse("reached the view"))(request)
    assert response.status_code == 413
    assert json.loads(response.content)["error"] == "too_large"


def test_body_just_under_the_limit_is_parsed(world: Any, admin_client: Any) -> None:
    body = json.dumps(NEW_REGION).encode()
    body = body[:-1] + b" " * (1_048_576 - len(body)) + b"}"
    assert send_raw(admin_client, "POST", f"{API}/regions/", body).status_code == 201


def test_unreadable_content_length_is_400(world: Any, admin_client: Any) -> None:
    response = admin_client.generic(
        "POST", f"{API}/regions/", b"{}", content_type="application/json", CONTENT_LENGTH="lots"
    )
    assert_error(response, 400)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"name": "eu-\xff\xfe", "country": "DE"}', "utf-8"),
        (b'{"name": "eu-north", ', "JSON parse error"),
        (b"{'name': 'single-quoted'}", "JSON parse error"),
        (b'{"lat": NaN}', "NaN"),
        (b'{"lat": Infinity}', "Infinity"),
        (b'{"lon": -Infinity}', "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"name": "eu-north", "name": "eu-south"}', "duplicate key 'name'"),
        (b'{"name": "\xe9t\xe9"}', "not utf-8"),
    ],
)
def test_undecodable_body_is_400_naming_the_problem(
    world: Any, admin_client: Any, unchanged: Any, raw: bytes, words: str
) -> None:
    with unchanged():
        body = assert_error(send_raw(admin_client, "POST", f"{API}/regions/", raw), 400)
    assert body["error"] == "parse_error"
    assert words.lower() in body["detail"].lower()


def test_empty_body_names_the_required_fields(
    world: Any, admin_client: Any, unchanged: Any
) -> None:
    with unchanged():
        assert_error(
            send_raw(admin_client, "POST", f"{API}/regions/", b""),
            400,
            "name",
            "country",
            "lat",
            "lon",
            "addresses",
        )


def test_overflowing_number_is_not_infinity(world: Any, admin_client: Any, unchanged: Any) -> None:
    raw = json.dumps(NEW_REGION).replace('"lat": 50.11', '"lat": 1e999').encode()
    with unchanged():
        assert_error(send_raw(admin_client, "POST", f"{API}/regions/", raw), 400, "lat")


def test_body_that_is_not_json_is_415(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        response = send_raw(
            admin_client,
            "POST",
            f"{API}/regions/",
            b"name=eu-north",
            content_type="application/x-www-form-urlencoded",
        )
        assert_error(response, 415)


BAD_QUERIES = {
    "too many search terms": ("endpoints/?search=" + "+".join(["gpu"] * 50), "search"),
    "nul in search": ("endpoints/?search=a%00b", "search"),
    "nul in a filter": ("endpoints/?region=eu%00west", "region"),
    "offset past any database": ("endpoints/?offset=" + "9" * 40, "offset"),
    "too many ordering terms": ("endpoints/?ordering=" + ",".join(["name"] * 3000), "ordering"),
    "ordering by a secret": ("tokens/?ordering=key_hash", "ordering"),
    "too many filter values": ("endpoints/?" + "&".join(["region=r"] * 101), "region"),
    "unknown token filter": ("tokens/?secret=x", "secret"),
    "bad token filter value": ("tokens/?active=maybe", "active"),
}


@pytest.mark.parametrize("case", list(BAD_QUERIES))
def test_bad_query_string_is_400_naming_the_parameter(
    world: Any, admin_client: Any, case: str
) -> None:
    path, param = BAD_QUERIES[case]
    assert_error(admin_client.get(f"{API}/{path}"), 400, param)


@pytest.mark.parametrize(
    "path",
    [
        "regions/bad name/",
        "regions/<script>/",
        "tokens/xyz/",
        "tokens/api-99999999999999999999999/",
        "events/abc/",
    ],
)
def test_malformed_ids_are_404_in_the_error_format(
    world: Any, admin_client: Any, path: str
) -> None:
    body = assert_error(admin_client.get(f"{API}/{path}"), 404)
    assert body["error"] == "not_found"


def test_duplicate_that_slips_past_validation_is_409(
    world: Any, admin_client: Any, unchanged: Any, monkeypatch: Any
) -> None:
    """Two writers racing for one name: the database's unique index answers, as a 409."""
    monkeypatch.setattr(UniqueValidator, "__call__", lambda self, value, field: None)
    monkeypatch.setattr(StrictModelSerializer, "_full_clean", lambda self, attrs: None)
    with unchanged():
        body = assert_error(
            send_json(admin_client, "POST", f"{API}/regions/", NEW_REGION | {"name": "eu-west"}),
            409,
        )
    assert body["error"] == "conflict"
