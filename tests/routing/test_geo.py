"""Client location from GeoIP databases, country centroids, distance and RTT estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from trafficmgr.geoip import Locator
from trafficmgr.routing.countries import CENTROID_OF, CONTINENT_OF
from trafficmgr.routing.geo import (
    BASE_RTT_MS,
    continent_location,
    country_location,
    distance_km,
    rtt_ms,
)
from trafficmgr.routing.types import ClientLocation, GeoPoint

GEOIP = Path(__file__).resolve().parents[1] / "data" / "geoip"
CITY_DB = GEOIP / "GeoIP2-City-Test.mmdb"
COUNTRY_DB = GEOIP / "GeoLite2-Country-Test.mmdb"
LONDON = GeoPoint(51.51, -0.13)
NEW_YORK = GeoPoint(40.71, -74.01)

pytestmark = pytest.mark.skipif(not CITY_DB.exists(), reason="MaxMind test databases missing")


@pytest.fixture
def city() -> Locator:
    return Locator(str(CITY_DB))


@pytest.mark.parametrize(
    ("ip", "country", "continent"),
    [
        ("81.2.69.142", "GB", "EU"),
        ("89.160.20.128", "SE", "EU"),
        ("216.160.83.56", "US", "NA"),
        ("175.16.199.1", "CN", "AS"),
        ("2001:218::1", "JP", "AS"),
    ],
)
def test_city_database_gives_country_continent_and_point(
    city: Locator, ip: str, country: str, continent: str
) -> None:
    where = city.locate(ip)
    assert (where.country, where.continent) == (country, continent)
    assert where.point is not None


def test_country_database_is_detected_and_uses_the_centroid() -> None:
    locator = Locator(str(COUNTRY_DB))
    assert "Country" in locator.database_type
    where = locator.locate("81.2.69.142")
    assert where == ClientLocation("GB", "EU", GeoPoint(*CENTROID_OF["GB"]))


@pytest.mark.parametrize(
    "bad", ["", "not-an-ip", "999.1.1.1", "10.0.0.1", "1.2.3.4", "::", None, 42, "81.2.69.142/24"]
)
def test_bad_or_unknown_addresses_give_the_default_location(city: Locator, bad: object) -> None:
    assert city.locate(bad) == ClientLocation()  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix_len", [-1, True, "24"])
def test_bad_prefix_lengths_give_the_default_location(city: Locator, prefix_len: object) -> None:
    assert city.locate("81.2.69.142", prefix_len) == ClientLocation()  # type: ignore[arg-type]


def test_ecs_subnet_is_located_by_its_masked_prefix(city: Locator) -> None:
    assert city.locate("81.2.69.143", 31).country == "GB"  # masked to 81.2.69.142/31
    assert city.locate("81.2.69.142", 32).country == "GB"  # longer than the cache prefix
    with Locator() as real:
        assert real.locate("8.8.8.0", 24).country == "US"


def test_scope_never_exceeds_the_cache_prefix(city: Locator) -> None:
    _, scope = city.locate_with_scope("81.2.69.142", 32)
    assert 0 < scope <= 24
    _, scope6 = city.locate_with_scope("2001:218::1", 128)
    assert 0 < scope6 <= 56


def test_answers_are_cached_per_v4_slash_24_and_v6_slash_56(city: Locator) -> None:
    city.locate("81.2.69.142")
    city.locate("81.2.69.143")
    city.locate("2001:218::1")
    city.locate("2001:218:0:ff::2")
    assert (city.hits, city.misses) == (2, 2)


def test_cache_is_bounded() -> None:
    locator = Locator(str(CITY_DB), cache_size=2)
    for ip in ("81.2.69.142", "89.160.20.128", "216.160.83.56", "175.16.199.1"):
        locator.locate(ip)
    assert locator.cached == 2
    locator.locate("81.2.69.142")
    assert locator.misses == 5  # evicted, so looked up again


def test_ipv4_mapped_ipv6_is_located_as_ipv4(city: Locator) -> None:
    assert city.locate("::ffff:81.2.69.142").country == "GB"


def test_default_database_comes_from_maxminddb_geolite2() -> None:
    with Locator() as locator:
        assert "City" in locator.database_type
        assert locator.locate("8.8.8.8").country == "US"


def test_country_location_uses_the_centroid_table() -> None:
    where = country_location("de")
    assert (where.country, where.continent) == ("DE", "EU")
    assert where.point == GeoPoint(*CENTROID_OF["DE"])
    assert country_location("XX") == ClientLocation()
    assert country_location("") == ClientLocation()


def test_continent_location() -> None:
    assert continent_location("eu").continent == "EU"
    assert continent_location("EU").point is not None
    assert continent_location("ZZ") == ClientLocation()


def test_every_country_has_a_centroid_in_range() -> None:
    assert set(CENTROID_OF) == set(CONTINENT_OF)
    assert len(CENTROID_OF) >= 249
    for lat, lon in CENTROID_OF.values():
        assert -90 <= lat <= 90 and -180 <= lon <= 180


def test_distance_is_haversine() -> None:
    assert distance_km(LONDON, NEW_YORK) == pytest.approx(5570, abs=30)
    assert distance_km(LONDON, NEW_YORK) == pytest.approx(distance_km(NEW_YORK, LONDON))
    assert distance_km(LONDON, LONDON) == 0
    assert distance_km(GeoPoint(0, 0), GeoPoint(0, 180)) == pytest.approx(20_015, abs=5)


def test_rtt_estimate_is_plausible_and_grows_with_distance() -> None:
    assert rtt_ms(LONDON, LONDON) == BASE_RTT_MS
    assert 70 <= rtt_ms(LONDON, NEW_YORK) <= 100
    paris = GeoPoint(48.86, 2.35)
    assert rtt_ms(LONDON, paris) < rtt_ms(LONDON, NEW_YORK)
