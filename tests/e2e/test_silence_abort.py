"""Aborting an ``agent_silence`` drill ends the silence at once, not when it expires.

``manage.py drill --kind agent_silence`` silences eu-central's agents for two minutes. Once
the control plane has stopped hearing them, an operator aborts the drill through the REST
API: the agents, which send no heartbeats while silenced but poll for their instruction
every 2 s, must take the cancel and report again within a few seconds.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.observe import Api
from trafficmgr.testing.topology.processes import wait_until

pytestmark = pytest.mark.integration

REGION = "eu-central"  # priority 2: silencing it moves little traffic
SILENCE_S = 120.0
BACK_WITHIN_S = 8.0  # a 2 s poll, a 1 s heartbeat interval, and room for a loaded machine


def test_an_aborted_silence_ends_within_seconds(cluster: Cluster, tmp_path: Path) -> None:
    api = Api(cluster.url, cluster.tokens["admin"])
    cluster.wait_settled()
    endpoints = cluster.endpoints_of(REGION)
    logged = {e: len(cluster.process(f"agent-{e}").text()) for e in endpoints}
    runner = cluster.spawn_manage(
        "drill-silence",
        [
            *("drill", "--kind", "agent_silence", "--target", REGION),
            *("--duration", f"{SILENCE_S:g}", "--json", str(tmp_path / "silence.json")),
            *("--dns", f"127.0.0.1:{cluster.dns_port}", "--http", cluster.url),
        ],
    )
    try:
        found = wait_until(
            lambda: (
                re.search(r"^drill (\d+): agent_silence", runner.text(), re.M)
                or (None if runner.alive() else runner.tail())
            ),
            45,
            "manage.py drill to store its drill",
        )
        assert isinstance(found, re.Match), f"manage.py drill ended:\n{found}"
        drill_id = int(found.group(1))

        def silent() -> bool:
            beats = [cluster.heartbeat(e) for e in endpoints]
            return all(b is not None and time.time() - b["received_at"] > 2.0 for b in beats)

        wait_until(silent, 20, f"{REGION}'s agents to go silent")
        aborted_at = time.time()
        api.call("POST", f"drills/{drill_id}/abort", {"reason": "e2e: abort a silence"})

        def reporting() -> bool:
            beats = [cluster.heartbeat(e) for e in endpoints]
            return all(b is not None and b["received_at"] > aborted_at for b in beats)

        wait_until(reporting, BACK_WITHIN_S, f"{REGION}'s agents to report again after abort")
        back_s = time.time() - aborted_at
        for name in endpoints:
            log = cluster.process(f"agent-{name}").text()[logged[name] :]
            assert "cancelled by the control plane" in log, f"agent {name} not told:\n{log}"
        assert api.drill(drill_id)["status"] == "aborted"
        print(f"\n{REGION}: agents reporting again {back_s:.2f} s after the abort")
    finally:
        cluster.finish(runner, 30)
    cluster.wait_settled(120)
