"""Failover drills against separate processes: the report's numbers, and a runner stopped.

The cluster (``trafficmgr.testing.topology.cluster``) runs every service as its own process. The
first test starts a ``region_outage`` drill with ``manage.py drill --server URL --token T``: the API
stores it, the celery worker runs it (its vantage points ask the real DNS server and the
route API), the command follows it and writes the report. The report must meet the
targets for heartbeats every 1 s and a miss threshold of 3 — detected within 4 s of the
fault, every vantage point's DNS answer moved within 5 s, no residency violation, no wrong
answer, the region recovered over its slow start — and agree with what this test saw by
itself: the published tables and its own ECS queries to the DNS server.

The others run a drill in the ``manage.py drill`` process itself (the local mode) with a
fault far longer than the test, and stop that process once the region is down. SIGTERM: the
runner rolls the fault back itself on its way out and exits 2. SIGKILL: the control plane
must roll it back on its own — the drill row turns ``aborted`` (not left ``running``). Either
way the agents are told to drop the fault and report the truth again, and the region comes
back through its slow start, long before the fault would have ended.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.observe import (
    CLIENTS,
    Api,
    DnsWatch,
    TableFeed,
    region_of_address,
    weights,
)
from trafficmgr.testing.topology.processes import wait_until

pytestmark = pytest.mark.integration

REGION = "eu-west"
MODEL = "llama-3-70b"  # what the drill's vantage points ask: served by every eu-west endpoint
EU = ("GB", "DE")
ALLOWED_EU = {"eu-west", "eu-central"}  # the strict gdpr rule
DURATION_S = 6.0


def parse_time(text: str) -> float:
    from trafficmgr.routing.table_json import parse_iso8601

    return parse_iso8601(text)


def brief(report: dict[str, Any]) -> str:
    keys = (
        "verdict",
        "detected_after_s",
        "table_changed_after_s",
        "dns_changed_after_s",
        "dns_changed_after_s_max",
        "recovered_after_s",
        "wrong_answers",
        "residency_violations",
        "delivery_s",
        "reasons",
    )
    return json.dumps({k: report.get(k) for k in keys}, indent=1)


def test_region_outage_drill_on_separate_processes_meets_the_targets(
    cluster: Cluster, tmp_path: Path
) -> None:
    from regions.drills.report import JITTER_S  # the verdict's timer-scheduling slack

    policy = cluster.fleet["failover"]
    detect_s = int(policy["miss_threshold"]) * float(policy["heartbeat_interval_s"]) + 1.0
    dns_s = detect_s + cluster.tick_s
    slow_start = float(policy["slow_start_s"])
    api = Api(cluster.url, cluster.tokens["admin"])
    cluster.wait_settled()
    feed = TableFeed(cluster.redis_url)
    watch = DnsWatch(
        cluster.dns,
        f"{MODEL}.{cluster.fleet['zone']}",
        dict(CLIENTS),
        region_of_address(cluster.fleet),
    ).start()
    out = tmp_path / "report.json"
    started = time.time()
    try:
        drill = cluster.spawn_manage(
            "drill",
            [
                *("drill", "--kind", "region_outage", "--target", REGION),
                *("--duration", f"{DURATION_S:g}", "--json", str(out)),
                *("--server", cluster.url, "--token", cluster.tokens["admin"]),
            ],
        )
        code = cluster.finish(drill, DURATION_S + 90)
    finally:
        watch.stop()
        feed.close()
    assert out.exists(), f"no report (exit {code}):\n{drill.tail()}"
    report = json.loads(out.read_text())
    context = f"{brief(report)}\n--- manage.py drill\n{drill.tail(4000)}"
    print(f"\n{drill.text()}")

    # The report, against the targets.
    assert code == 0, f"manage.py drill exited {code}\n{context}"
    assert report["verdict"] == "pass", context
    assert report["kind"] == "region_outage" and report["target"] == REGION
    assert report["targets"]["detected_s"] == detect_s, context
    assert report["detected_after_s"] is not None, context
    assert report["detected_after_s"] <= detect_s + JITTER_S, context
    moved = report["dns_changed_after_s"]
    # EU clients are answered eu-west (eu-central is priority 2); US ones only while part of
    # their traffic is still on its way back to us-east after an earlier failover.
    assert set(EU) <= set(moved), context
    assert all(v is not None and v <= dns_s + JITTER_S for v in moved.values()), context
    assert report["dns_changed_after_s_max"] is not None, context
    assert report["dns_changed_after_s_max"] <= dns_s + JITTER_S, context
    assert report["residency_violations"] == 0, context
    assert report["wrong_answers"] == 0, context
    assert report["table_changed_after_s"] is not None, context
    assert report["recovered_after_s"] is not None, context
    assert report["recovered_after_s"] >= slow_start - cluster.tick_s, context
    assert report["answers"]["dns"] > 50 and report["answers"]["route"] > 10, context

    # The same drill, as the API keeps it.
    found = re.search(r"^drill (\d+): region_outage", drill.text(), re.M)
    assert found, drill.text()
    stored = api.drill(int(found.group(1)))
    assert stored["status"] == "finished" and stored["report"] == report, stored

    fault_at = parse_time(report["fault_at"])
    restored = fault_at + report["timeline"]["marks"]["restored"]
    assert started < fault_at < restored

    # What this test saw by itself: the published tables ...
    down = next((t for t in feed.tables if t.state(REGION) == "down"), None)
    assert down is not None, f"no table with {REGION} down was published\n{context}"
    assert down.generated_at - fault_at <= detect_s + JITTER_S, (
        f"first table with {REGION} down {down.generated_at - fault_at:.2f} s after the fault"
    )
    still = {k: w for k, w in weights(down.doc, REGION).items() if w > 0}
    assert not still, f"{REGION} still weighted when down: {still}"
    after = [t for t in feed.tables if t.generated_at > restored]
    ramping = [t for t in after if t.state(REGION) == "recovering"]
    healthy = next((t for t in after if t.state(REGION) == "healthy"), None)
    assert len(ramping) >= 2 and healthy is not None, f"{REGION} never ramped back\n{context}"
    ramps = [t.ramp(REGION) for t in ramping]
    assert ramps == sorted(ramps) and all(0 < r < 1 for r in ramps), ramps
    assert healthy.generated_at - ramping[0].generated_at >= slow_start - cluster.tick_s

    # ... and its own DNS vantage points (ECS over UDP, every 0.2 s).
    for vantage in CLIENTS:
        answers = [a for a in watch.of(vantage) if not a.error]
        assert answers, f"the DNS server never answered {vantage}"
        if vantage in EU:
            wrong = [a for a in answers if not set(a.regions) <= ALLOWED_EU]
            assert not wrong, f"residency broken for {vantage}: {wrong[:5]}"
    gb = [a for a in watch.of("GB") if not a.error]
    before = [a for a in gb if a.at < fault_at]
    assert before and REGION in before[-1].regions, "GB was not answered eu-west before"
    moved_at = next((a.at for a in gb if a.at >= fault_at and REGION not in a.regions), None)
    assert moved_at is not None, "DNS kept answering eu-west to GB"
    assert moved_at - fault_at <= dns_s + JITTER_S + 0.2, (  # + our own query period
        f"GB moved {moved_at - fault_at:.2f} s after the fault (target {dns_s:g} s)"
    )
    print(
        f"drill: detected {report['detected_after_s']} s, DNS moved "
        f"{report['dns_changed_after_s_max']} s ({moved}), recovered "
        f"{report['recovered_after_s']} s; this test saw GB move after "
        f"{moved_at - fault_at:.2f} s, the region down in a table after "
        f"{down.generated_at - fault_at:.2f} s"
    )


FAULT_S = 300.0  # far longer than a test may take: only a rollback ends the fault in time


class Runner:
    """``manage.py drill`` running a drill itself (the local mode), stopped by a signal once
    its fault has taken the region down."""

    def __init__(self, cluster: Cluster, name: str, out: Path) -> None:
        self.cluster = cluster
        self.endpoints = cluster.endpoints_of(REGION)
        self.logged = {e: len(cluster.process(f"agent-{e}").text()) for e in self.endpoints}
        self.proc = cluster.spawn_manage(
            name,
            [
                *("drill", "--kind", "region_outage", "--target", REGION),
                *("--duration", f"{FAULT_S:g}", "--json", str(out)),
                *("--dns", f"127.0.0.1:{cluster.dns_port}", "--http", cluster.url),
            ],
        )
        self.started = time.time()
        self.drill_id = 0

    def _stored(self) -> re.Match[str] | None:
        found = re.search(r"^drill (\d+): region_outage", self.proc.text(), re.M)
        assert found or self.proc.alive(), f"manage.py drill ended:\n{self.proc.tail()}"
        return found

    def _region_down(self) -> bool:
        assert self.proc.alive(), f"manage.py drill ended too soon:\n{self.proc.tail()}"
        table = self.cluster.published_table()
        return table is not None and table["regions"][REGION]["state"] == "down"

    def stop_mid_fault(self, sig: signal.Signals) -> tuple[float, int]:
        """Send ``sig`` once the region is down; return when, and the exit status."""
        try:
            found = wait_until(self._stored, 45, "manage.py drill to store its drill")
            self.drill_id = int(found.group(1))
            wait_until(self._region_down, 20, f"the drill to take {REGION} down")
            at = time.time()
            self.proc.popen.send_signal(sig)
            return at, self.proc.popen.wait(20)
        finally:
            self.cluster.kill(self.proc)

    def assert_agents_back(self, since: float, timeout: float) -> None:
        """The agents were told to drop the fault and report healthy probes again."""

        def truthful() -> bool:
            beats = [self.cluster.heartbeat(e) for e in self.endpoints]
            return all(
                b is not None and b["received_at"] > since and b["probe"][0] is True for b in beats
            )

        wait_until(truthful, timeout, f"{', '.join(self.endpoints)} to report the truth again")
        for name in self.endpoints:
            log = self.cluster.process(f"agent-{name}").text()[self.logged[name] :]
            assert "drill report_unhealthy" in log, f"agent {name} never took the fault:\n{log}"
            assert "cancelled by the control plane" in log, f"agent {name} not told:\n{log}"


def recovery_bound(cluster: Cluster) -> float:
    policy = cluster.fleet["failover"]
    return (
        float(policy["hold_down_s"])
        + 5 * float(policy["heartbeat_interval_s"])
        + float(policy["slow_start_s"])
        + 15
    )


def test_stopping_the_drill_runner_mid_drill_rolls_the_fault_back_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    api = Api(cluster.url, cluster.tokens["admin"])
    cluster.wait_settled()
    out = tmp_path / "stopped.json"
    runner = Runner(cluster, "drill-sigterm", out)
    stopped_at, code = runner.stop_mid_fault(signal.SIGTERM)
    assert code == 2, f"exit {code} (2: aborted, fault rolled back):\n{runner.proc.tail()}"
    assert "fault rolled back" in runner.proc.text(), runner.proc.tail()
    assert not out.exists(), "an interrupted drill wrote a report file"
    ended = api.drill(runner.drill_id)  # the runner ended it on its way out
    assert ended["status"] == "aborted", ended
    assert ended["report"] is not None and ended["report"]["verdict"] == "aborted", ended
    runner.assert_agents_back(stopped_at, 10)
    cluster.wait_settled(recovery_bound(cluster))
    print(
        f"\ndrill {runner.drill_id} stopped with SIGTERM: aborted and rolled back by the "
        f"runner itself; {REGION} healthy again {time.time() - stopped_at:.1f} s later"
    )


def test_killing_the_drill_runner_mid_drill_rolls_the_fault_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    from regions.drills.service import ALIVE_TTL_S
    from regions.drills.tasks import REAP_EVERY_S

    api = Api(cluster.url, cluster.tokens["admin"])
    cluster.wait_settled()
    out = tmp_path / "killed.json"
    runner = Runner(cluster, "drill-sigkill", out)
    killed_at, code = runner.stop_mid_fault(signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not out.exists(), "a report was written by a process killed mid-drill"
    left = api.drill(runner.drill_id)
    assert left["status"] == "running", f"the drill should be running when killed: {left}"

    # The control plane notices the runner is gone and rolls the drill back.
    rolled = wait_until(
        lambda: (d := api.drill(runner.drill_id))["status"] != "running" and d,
        ALIVE_TTL_S + REAP_EVERY_S + 15,
        f"drill {runner.drill_id} to leave 'running' after its runner was killed",
        every=0.5,
    )
    rolled_after = time.time() - killed_at
    assert rolled["status"] == "aborted", rolled
    assert "rolled back" in rolled["reason"], rolled["reason"]
    assert rolled["report"] is not None and rolled["report"]["verdict"] == "aborted", rolled

    # The agents drop the fault, told by the control plane, and the region comes back
    # through its slow start, long before the fault would have ended.
    runner.assert_agents_back(time.time(), 10)
    cluster.wait_settled(recovery_bound(cluster))
    back_after = time.time() - killed_at
    assert time.time() < runner.started + FAULT_S
    print(
        f"\ndrill {runner.drill_id} killed; aborted by the control plane {rolled_after:.1f} s "
        f"later (liveness {ALIVE_TTL_S:g} s, reaper every {REAP_EVERY_S:g} s); {REGION} "
        f"healthy again {back_after:.1f} s after the kill (the fault was to last {FAULT_S:g} s)"
    )
