"""The stored fleet as the DNS servers' fleet source: current on every read, whole or not at all."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FLEET = Path(__file__).resolve().parents[3] / "examples" / "fleet.yaml"

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_read_sees_the_latest_stored_fleet(apply_yaml: Callable[..., Any]) -> None:
    from regions.fleet.dnsfleet import StoredFleet
    from regions.models import Region

    apply_yaml(FLEET.read_bytes())
    source = pickle.loads(pickle.dumps(StoredFleet()))  # as a spawned DNS worker gets it
    first = source()
    assert first is not None and {r.name for r in first.regions} >= {"eu-west", "us-east"}
    assert source() is None  # nothing changed: the cached view, no database read
    region = Region.objects.get(name="eu-west")
    region.addresses = ["192.0.2.99"]
    region.save()  # bumps the configuration version, as every API and admin write does
    again = source()
    assert again is not None and again != first
    eu_west = next(r for r in again.regions if r.name == "eu-west")
    assert eu_west.addresses == ("192.0.2.99",)
