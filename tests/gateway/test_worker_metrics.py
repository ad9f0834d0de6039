"""/metrics with several workers: any worker's scrape answers for all of them."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from trafficmgr.fleetfile import dump_fleet
from trafficmgr.gateway.metrics import SHARE_S, WorkerShare, pooled
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def _counter(name: str, value: float, created: float, **labels: str) -> Metric:
    m = Metric(name, "help", "counter")
    m.add_sample(name + "_total", labels, value)
    m.add_sample(name + "_created", labels, created)
    return m


def _gauge(name: str, values: dict[str, float]) -> Metric:
    m = Metric(name, "help", "gauge")
    for endpoint, v in values.items():
        m.add_sample(name, {"endpoint": endpoint}, v)
    return m


def _histogram(counts: list[float], total: float) -> Metric:
    m = Metric("trafficmgr_gateway_routing_seconds", "help", "histogram")
    for le, c in zip(["0.001", "+Inf"], counts, strict=True):
        m.add_sample("trafficmgr_gateway_routing_seconds_bucket", {"le": le}, c)
    m.add_sample("trafficmgr_gateway_routing_seconds_count", {}, counts[-1])
    m.add_sample("trafficmgr_gateway_routing_seconds_sum", {}, total)
    return m


def _written(families: list[Metric], tmp: Path, pid: int) -> list[list[object]]:
    WorkerShare(tmp, pid).publish(families)
    doc = json.loads((tmp / f"{pid}.json").read_text())
    families_doc: list[list[object]] = doc["families"]
    return families_doc


def _values(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_counters_and_histograms_add_up_gauges_of_stopped_workers_do_not(tmp_path: Path) -> None:
    own = [
        _counter("trafficmgr_gateway_retries", 2, 200.0, reason="timeout"),
        _gauge("trafficmgr_gateway_in_flight", {"a": 3}),
        _gauge("trafficmgr_gateway_ejected", {"a": 1}),
        _histogram([4, 5], 0.002),
    ]
    other = _written(
        [
            _counter("trafficmgr_gateway_retries", 5, 100.0, reason="timeout"),
            _counter("trafficmgr_gateway_retries", 1, 150.0, reason="server_error"),
            _gauge("trafficmgr_gateway_in_flight", {"a": 4, "b": 1}),
            _gauge("trafficmgr_gateway_ejected", {"a": 1, "b": 1}),
            _histogram([1, 2], 0.001),
        ],
        tmp_path,
        11,
    )
    gone = _written(
        [
            _counter("trafficmgr_gateway_retries", 7, 50.0, reason="timeout"),
            _gauge("trafficmgr_gateway_in_flight", {"a": 9}),
        ],
        tmp_path,
        12,
    )
    v = _values(pooled(own, [other], [gone]))
    assert v[("trafficmgr_gateway_workers", ())] == 2  # this one and the running one
    assert v[("trafficmgr_gateway_retries_total", (("reason", "timeout"),))] == 14
    assert v[("trafficmgr_gateway_retries_created", (("reason", "timeout"),))] == 50.0
    assert v[("trafficmgr_gateway_retries_total", (("reason", "server_error"),))] == 1
    # gauges: a stopped worker's 9 in flight are not there any more
    assert v[("trafficmgr_gateway_in_flight", (("endpoint", "a"),))] == 7
    assert v[("trafficmgr_gateway_in_flight", (("endpoint", "b"),))] == 1
    assert v[("trafficmgr_gateway_ejected", (("endpoint", "a"),))] == 1  # either, not 2
    assert v[("trafficmgr_gateway_routing_seconds_bucket", (("le", "+Inf"),))] == 7
    assert v[("trafficmgr_gateway_routing_seconds_count", ())] == 7
    assert abs(v[("trafficmgr_gateway_routing_seconds_sum", ())] - 0.003) < 1e-12


def test_a_worker_reads_the_others_and_skips_itself_and_unreadable_files(
    tmp_path: Path,
) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(done.stdout)  # a process that has exited
    WorkerShare(tmp_path, dead).publish([_counter("x", 1, 1.0)])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        WorkerShare(tmp_path, running.pid).publish([_counter("x", 2, 1.0)])
        me = WorkerShare(tmp_path, 4242424)
        me.publish([_counter("x", 100, 1.0)])
        (tmp_path / "77.json").write_text('{"pid": 77, "fam')  # cut short: skipped
        alive, stopped = me.peers()
    finally:
        running.kill()
        running.wait()
    assert [f[0][3] for f in alive] == [[["x_total", {}, 2.0], ["x_created", {}, 1.0]]]
    assert [f[0][3] for f in stopped] == [[["x_total", {}, 1.0], ["x_created", {}, 1.0]]]


def _scrape(port: int) -> dict[str, float]:
    """Return requests answered (all labels summed) and workers, from one new connection."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"requests": 0.0, "workers": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "trafficmgr_gateway_requests_total":
                out["requests"] += s.value
            elif s.name == "trafficmgr_gateway_workers":
                out["workers"] = s.value
    return out


def test_every_scrape_of_two_workers_counts_every_request(fleet: Fleet, tmp_path: Path) -> None:
    port = free_port()
    before = set(Path(tempfile.gettempdir()).glob("trafficmgr-gateway-metrics-*"))
    (tmp_path / "fleet.yaml").write_text(dump_fleet(fleet))
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(tmp_path / "fleet.yaml"),
            "--listen", f"127.0.0.1:{port}", "--token", "cli-secret", "--workers", "2",
        ],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _scrape(port)["workers"] == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "two workers did not start"
            time.sleep(0.2)
        body = json.dumps({"model": "m1", "prompt": "a b", "max_tokens": 2}).encode()
        sent = 24
        for _ in range(sent):  # one connection each: the kernel spreads them over both
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions",
                data=body,
                headers={"Authorization": "Bearer cli-secret", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        time.sleep(SHARE_S * 2.5)  # both have written their figures since
        seen = [_scrape(port) for _ in range(12)]
        assert all(s == {"requests": sent, "workers": 2} for s in seen), seen
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert re.search(rb"^trafficmgr_gateway_request_seconds_count\{.*\} ", text, re.M)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    after = set(Path(tempfile.gettempdir()).glob("trafficmgr-gateway-metrics-*"))
    assert after <= before, "the shared metrics directory was left behind"
