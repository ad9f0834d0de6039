"""The named worlds and the fleet builder: every text is a fleet file the product reads."""

from __future__ import annotations

import pytest
import yaml

from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.testing import worlds
from trafficmgr.testing.fleets import (
    SITES,
    WIDTH,
    clients,
    endpoint,
    gpu_profiles,
    header,
    region,
    regions,
)

# the worlds are the texts that open with a zone (the module also holds their pieces)
TEXTS = sorted(
    name
    for name, value in vars(worlds).items()
    if name.isupper() and isinstance(value, str) and value.startswith("zone:")
)


@pytest.mark.parametrize("name", TEXTS)
def test_every_world_is_a_fleet_file_the_product_reads(name: str) -> None:
    fleet = load_fleet_text(getattr(worlds, name))
    assert fleet.regions


def test_the_worlds_differ() -> None:
    assert len(TEXTS) >= 12
    texts = [getattr(worlds, name) for name in TEXTS]
    assert len(set(texts)) == len(texts)


def test_a_built_fleet_reads_as_written() -> None:
    text = (
        header(ttl=7)
        + gpu_profiles("H100")
        + regions(
            region(
                "eu-central",
                endpoint("euc-1", "10.2.0.11:8000", "H100", 2, ["a-model-with-a-long-name"] * 3),
                priority=2,
            )
        )
        + clients(("DE", 1))
    )
    assert all(len(line) <= WIDTH for line in text.splitlines())
    raw = yaml.safe_load(text)
    (place,) = raw["regions"]
    assert place["country"] == SITES["eu-central"].country and place["priority"] == 2
    assert place["endpoints"][0]["gpus"] == 2 and len(place["endpoints"][0]["models"]) == 3
    fleet = load_fleet_text(text)
    assert [r.name for r in fleet.regions] == ["eu-central"]
