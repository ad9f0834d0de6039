"""Drill instructions reach the agents in heartbeat replies, in a form the agent obeys."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agents.drill import DrillState
from agents.heartbeat import Heartbeat, ProbeReading
from regions import hotstate
from regions.drills import service
from regions.drills.spec import KINDS
from regions.loop import ingest
from regions.models import Drill, DrillStatus
from tests.regions.drills.conftest import REGION_OF
from tests.regions.loop.conftest import hb_doc


def beat(agent_tokens: dict[str, Any], name: str) -> dict[str, Any]:
    at = time.time()
    body = json.dumps(hb_doc(name, int(at * 1000), at)).encode()
    return ingest.ingest(agent_tokens[REGION_OF[name]], body, at).body


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_delivered_and_obeyed(
    world: Any, agent_tokens: dict[str, Any], kind: str
) -> None:
    spec = service.resolve(world, kind, "eu-west", 20, None)
    service.inject(spec, 7, spec.endpoints, 20)
    name = spec.endpoints[0]
    reply = beat(agent_tokens, name)
    instruction = reply["drill"]
    assert instruction["kind"] == spec.instruction and instruction["id"] == "drill-7"
    assert "drill" not in beat(agent_tokens, name)  # handed over once

    agent = DrillState()
    assert agent.instruct(instruction, time.time()) is not None
    active = agent.active()
    assert active is not None and active.kind == spec.instruction
    truth = Heartbeat(name, 1, time.time(), 1.0, probe=ProbeReading(ok=True))
    shown = agent.apply(truth)
    assert shown.drill is not None and shown.drill["id"] == "drill-7"
    if spec.instruction == "report_unhealthy":
        assert shown.probe is not None and not shown.probe.ok
    assert agent.instruct({"kind": "none", "id": "drill-7-end"}, time.time()) is not None
    assert agent.active() is None


@pytest.fixture
def redis_store(redis_url: str) -> Iterator[Any]:
    from regions.hotstate.redis_store import RedisHotState

    store = RedisHotState(redis_url, prefix=f"trafficmgr-test-drills-{uuid.uuid4().hex[:10]}")
    hotstate.use(store)
    yield store
    store.reset()
    hotstate.use(None)


@pytest.mark.integration
@pytest.mark.django_db
def test_rollback_reaches_agents_through_redis(
    world: Any, agent_tokens: dict[str, Any], redis_store: Any
) -> None:
    spec = service.resolve(world, "region_outage", "eu-west", 30, None)
    drill = Drill.objects.create(
        kind="region_outage",
        target="eu-west",
        duration_s=30,
        status=DrillStatus.RUNNING,
        params={"resolved": spec.resolved()},
    )
    service.inject(spec, drill.pk, spec.endpoints, 30)
    assert beat(agent_tokens, "euw-1")["drill"]["kind"] == "report_unhealthy"

    assert service.rollback_dangling_drills() == [drill.pk]
    # euw-1 took the fault and now hears the end of it; euw-2's fault, never taken, is
    # replaced by the cancel.
    for name in ("euw-1", "euw-2"):
        assert beat(agent_tokens, name)["drill"] == {"kind": "none", "id": f"drill-{drill.pk}-end"}
