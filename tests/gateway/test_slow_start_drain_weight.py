"""Through the gateway: weight 0 takes nothing, a drained endpoint takes nothing new, an
endpoint coming back ramps up (slow start)."""

from __future__ import annotations

import time
from dataclasses import replace

import httpx2 as httpx

from tests.gateway.world import TOKEN, US_IP, GatewayThread, make_core
from trafficmgr.routing.types import Fleet

HEADERS = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": US_IP}
BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def served(gw: GatewayThread, n: int, strategy: str = "round_robin") -> dict[str, int]:
    counts: dict[str, int] = {}
    with httpx.Client(timeout=20) as http:
        for _ in range(n):
            r = http.post(
                gw.base_url + "/chat/completions",
                json=BODY,
                headers={**HEADERS, "x-trafficmgr-strategy": strategy},
            )
            assert r.status_code == 200, r.text
            name = r.headers["x-trafficmgr-endpoint"]
            counts[name] = counts.get(name, 0) + 1
    return counts


def test_weight_zero_endpoint_gets_no_request(fleet: Fleet) -> None:
    regions = tuple(
        replace(
            r,
            endpoints=tuple(
                replace(e, weight=0.0) if e.name == "use-1" else e for e in r.endpoints
            ),
        )
        for r in fleet.regions
    )
    core, _ = make_core(replace(fleet, regions=regions), region="us-east")
    with GatewayThread(core) as gw:
        assert served(gw, 12) == {"use-2": 12}
        assert served(gw, 6, "ai_aware") == {"use-2": 6}


def test_drain_then_return_with_slow_start(fleet: Fleet) -> None:
    core, _ = make_core(fleet, region="us-east", slow_start_s=1.0, slow_start_floor=0.05)
    with GatewayThread(core) as gw:
        core.drain("use-1")
        assert served(gw, 10) == {"use-2": 10}
        core.undrain("use-1")
        early = served(gw, 20).get("use-1", 0)
        time.sleep(1.1)
        late = served(gw, 20).get("use-1", 0)
        assert early < 8 and late == 10
