"""A running drill publishes its progress for the dashboard: phase, agents that took the fault,
detection, each vantage point's DNS answer, the region's state and share; it ends with the
report."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from regions.drills import progress
from regions.drills.measure import Answer, MeasureSetup, Vantage
from regions.drills.report import Observations, TableSample
from regions.drills.runner import run_drill
from tests.regions.drills.conftest import RecordingHotState, api_drill
from tests.regions.loop.conftest import wait_for

T0 = 1_800_000_000.0


def vantage(name: str) -> Vantage:
    return Vantage(name, name, ipaddress.IPv4Network("192.0.2.0/24"), "192.0.2.1", "m", None)


def observations() -> Observations:
    obs = Observations(
        kind="region_outage",
        target="eu-west",
        region="eu-west",
        endpoints=("euw-1", "euw-2"),
        region_out=True,
        expect_detection=True,
        injected_at=T0,
        interval_s=1.0,
        miss_threshold=3,
        tick_s=1.0,
        ttl_s=10.0,
        vantages=[vantage("IE"), vantage("US")],
        dns_configured=True,
    )
    obs.taken_at = {"euw-1": T0 + 0.4, "euw-2": T0 + 0.9}
    obs.detected_at, obs.detected_by = T0 + 3.0, "region eu-west: healthy → down: ..."
    obs.tables = [
        TableSample(T0 - 1, "v1", 0.4, "healthy", 1.0),
        TableSample(T0 + 3.2, "v2", 0.0, "down", 0.0),
    ]
    return obs


def test_the_document_follows_the_fault_vantage_by_vantage() -> None:
    obs = observations()
    answers = [
        Answer(T0 - 0.5, "IE", ("eu-west",)),
        Answer(T0 - 0.5, "US", ("us-east",)),
        Answer(T0 + 2.0, "IE", ("eu-west",)),
        Answer(T0 + 3.0, "IE", (), error="timeout"),  # errors move nothing
        Answer(T0 + 3.4, "IE", ("eu-central",)),
        Answer(T0 + 3.6, "US", ("us-east",)),
    ]
    doc = progress.document(7, obs, answers, T0 + 4)
    assert doc["phase"] == "fault" and doc["taken"] == 2
    assert doc["fault_at"] == T0 + 0.9  # the last agent took it
    assert doc["detected_after_s"] == pytest.approx(2.1)
    assert doc["region"] == {
        "name": "eu-west",
        "state": "down",
        "ramp": 0.0,
        "share": 0.0,
        "share_before": 0.4,
    }
    ie, us = doc["vantages"]
    assert ie["before"] == ["eu-west"] and ie["now"] == ["eu-central"]
    assert ie["served_by_target"] and ie["moved_after_s"] == pytest.approx(2.5)
    assert not us["served_by_target"] and us["moved_after_s"] is None

    obs.restore_at = T0 + 10
    assert progress.document(7, obs, answers, T0 + 11)["phase"] == "recovering"
    obs.recovered_at = T0 + 40
    done = progress.document(7, obs, answers, T0 + 41)
    assert done["phase"] == "recovered" and done["recovered_after_s"] == 30.0


def test_before_the_fault_nothing_is_measured_yet() -> None:
    obs = observations()
    obs.injected, obs.taken_at, obs.detected_at = False, {}, None
    doc = progress.document(7, obs, [Answer(T0 - 0.5, "IE", ("eu-west",))], T0 - 0.4)
    assert doc["phase"] == "baseline" and doc["injected_at"] is None
    assert doc["detected_after_s"] is None and doc["fault_at"] is None
    assert doc["vantages"][0]["now"] == ["eu-west"]


@pytest.mark.django_db(transaction=True)
def test_a_runner_publishes_its_progress_while_it_runs(
    world: Any,
    healthy: Callable[..., float],
    feeder: Callable[[tuple[str, ...]], None],
    operator_client: Any,
    store: RecordingHotState,
) -> None:
    healthy()
    created = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=30)
    drill_id = created.json()["id"]

    def run() -> None:
        try:
            run_drill(drill_id, MeasureSetup(dns=None, route_url=None, baseline_s=0.1))
        finally:
            connection.close()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    feeder(("euw-1", "euw-2", "aps-1"))  # heartbeats after the injection: the agents took it
    wait_for(lambda: (progress.read(drill_id) or {}).get("taken") == 2, timeout=15, step=0.1)
    doc = progress.read(drill_id)
    assert doc is not None
    assert doc["id"] == drill_id and doc["phase"] == "fault"
    assert doc["endpoints"] == ["euw-1", "euw-2"] and doc["fault_at"] is not None
    assert doc["region"]["name"] == "eu-west" and doc["dns_measured"] is False

    assert operator_client.post(f"/api/v1/drills/{drill_id}/abort").status_code == 200
    runner.join(15)
    assert not runner.is_alive()
    assert (progress.read(drill_id) or {}).get("restored_at") is not None
