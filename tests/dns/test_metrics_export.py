"""The GeoDNS server's counters reach Prometheus: ``--metrics HOST:PORT`` serves every worker's.

The process tests send real queries over UDP and TCP on loopback, then scrape the HTTP endpoint
and parse it with prometheus_client's own parser.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.dns.test_cli import running_server
from tests.dns.test_truncation import fleet_with_many_addresses
from tests.dns.world import CITY_DB, FLEET_FILE, GB, NAME, ROOT, ask, query, quiet_config
from trafficmgr.dns.config import parse_metrics
from trafficmgr.dns.exporter import render, snapshot, table_state
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import TCP_AND_UDP, free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Parse Prometheus text into {(name, sorted labels): value}."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(found: Samples, name: str, **labels: str) -> float:
    """Sum a metric over every sample whose labels include ``labels`` (e.g. all workers)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= set(ls))


def test_render_counts_what_the_server_answered(
    make_server: Callable[..., DnsServer], fleet: Fleet
) -> None:
    server = make_server(
        quiet_config(rrl_rate=1, rrl_burst=1, rrl_slip=1),
        fleet_=fleet_with_many_addresses(fleet, 30),
    )
    for rdtype, source in (("A", "10.9.0.1"), ("A", "10.9.4.1"), ("TXT", "10.9.5.1")):
        ask(server, query(NAME, rdtype, ecs=(GB, 32)), source=source)
    ask(server, query("example.org.", "A"), source="10.9.1.1")  # not our zone: refused
    big = ask(server, query(NAME, "AAAA"), source="10.9.2.1")  # 30 addresses: over 512 octets
    assert big.flags & dns.flags.TC
    ask(server, query(NAME, "A"), source="10.9.0.1")  # over the rate limit: slipped (no type)
    ask(server, query(NAME, "A"), source=GB, tcp=True)  # TCP is not rate-limited
    server.counters.observe(0.0003)
    found = samples(render([("0", snapshot(server))], now=server.store.snapshot.loaded_at + 7))
    assert total(found, "trafficmgr_dns_queries_total", transport="udp") == 6
    assert total(found, "trafficmgr_dns_queries_total", transport="tcp") == 1
    assert total(found, "trafficmgr_dns_answers_by_qtype_total", qtype="A") == 4  # with refused
    assert total(found, "trafficmgr_dns_answers_by_qtype_total", qtype="TXT") == 1
    assert total(found, "trafficmgr_dns_answers_by_qtype_total", qtype="AAAA") == 1
    assert total(found, "trafficmgr_dns_answers_by_rcode_total", rcode="REFUSED") == 1
    assert total(found, "trafficmgr_dns_refused_total") == 1
    assert total(found, "trafficmgr_dns_truncated_total") == 1
    assert total(found, "trafficmgr_dns_rate_limited_total", action="slipped") == 1
    assert total(found, "trafficmgr_dns_events_total", event="answered") == 7
    assert total(found, "trafficmgr_dns_answer_duration_seconds_count") == 1
    assert total(found, "trafficmgr_dns_answer_duration_seconds_bucket", le="0.0005") == 1
    assert total(found, "trafficmgr_dns_answer_duration_seconds_bucket", le="0.0001") == 0
    assert total(found, "trafficmgr_dns_table_source", source="static") == 1
    assert total(found, "trafficmgr_dns_table_source", source="published") == 0
    age = total(found, "trafficmgr_dns_table_age_seconds")
    assert age == pytest.approx(7, abs=1)
    assert total(found, "trafficmgr_dns_worker_up", worker="0") == 1


def test_each_family_is_declared_once_with_its_type(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server()
    ask(server, query(NAME, "A", ecs=(GB, 32)))
    text = render([("0", snapshot(server)), ("1", snapshot(server))])
    types = [line.split()[2:] for line in text.splitlines() if line.startswith("# TYPE")]
    names = [name for name, _ in types]
    assert len(names) == len(set(names))  # one block per family, both workers inside it
    families = {f.name: f for f in text_string_to_metric_families(text)}
    kinds = {name: f.type for name, f in families.items()}
    assert kinds["trafficmgr_dns_answer_duration_seconds"] == "histogram"
    in_it = {s.name for s in families["trafficmgr_dns_answer_duration_seconds"].samples}
    assert {
        f"trafficmgr_dns_answer_duration_seconds_{x}" for x in ("bucket", "sum", "count")
    } == in_it
    assert kinds["trafficmgr_dns_queries"] == "counter"  # the parser drops "_total"
    assert kinds["trafficmgr_dns_table_age_seconds"] == "gauge"


def test_a_worker_that_does_not_answer_is_down_not_zero() -> None:
    found = samples(render([("0", None), ("1", None)]))
    assert total(found, "trafficmgr_dns_worker_up") == 0
    assert not [k for k in found if k[0] == "trafficmgr_dns_queries_total"]


@pytest.mark.parametrize(
    ("source", "redis_connected", "state"),
    [
        ("static", None, "static"),
        ("state-file", None, "last-good"),
        ("redis", True, "published"),
        ("redis", False, "last-good"),  # kept while Redis is unreachable: fail static
        ("setter", None, "published"),
        ("table-file", None, "published"),
    ],
)
def test_table_state_names_where_the_table_comes_from(
    source: str, redis_connected: bool | None, state: str
) -> None:
    assert table_state(source, redis_connected) == state


def test_the_metrics_address_needs_a_port() -> None:
    assert parse_metrics("127.0.0.1:9153") == ("127.0.0.1", 9153)
    assert parse_metrics("[::1]:9153") == ("::1", 9153)
    with pytest.raises(ValueError, match="the port is missing"):
        parse_metrics("127.0.0.1")


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(response.read().decode())


def send_queries(port: int, count: int) -> None:
    """Send ``count`` UDP queries from fresh source ports (spread over workers) and one TCP."""
    for _ in range(count):
        reply = dns.query.udp(query(NAME, "A", ecs=(GB, 32)), "127.0.0.1", port=port, timeout=3)
        assert reply.answer
    dns.query.tcp(query(NAME, "TXT", ecs=(GB, 32)), "127.0.0.1", port=port, timeout=3)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_server_process_serves_every_worker_s_counters(tmp_path: Path, workers: str) -> None:
    metrics_port = free_port(TCP_AND_UDP)
    extra = ("--workers", workers, "--metrics", f"127.0.0.1:{metrics_port}")
    with running_server(tmp_path, *extra) as (port, _):
        before = samples(scrape(metrics_port))
        sent = total(before, "trafficmgr_dns_queries_total")  # the readiness probes so far
        send_queries(port, 40)
        found = samples(scrape(metrics_port))
        with pytest.raises(urllib.error.HTTPError, match="404"):
            scrape(metrics_port, "/other")
    names = [str(i) for i in range(int(workers))]
    assert [total(found, "trafficmgr_dns_worker_up", worker=n) for n in names] == [1] * len(names)
    assert total(found, "trafficmgr_dns_queries_total") == sent + 41
    assert total(found, "trafficmgr_dns_queries_total", transport="tcp") == 1
    assert total(found, "trafficmgr_dns_answers_by_qtype_total", qtype="A") >= 40
    assert total(found, "trafficmgr_dns_answer_duration_seconds_count") >= 41
    for n in names:  # 40 source ports: the kernel gave each worker some (2 x 2^-40 it did not)
        assert total(found, "trafficmgr_dns_queries_total", worker=n) > 0
        # each worker serves the static table (no control plane here)
        assert total(found, "trafficmgr_dns_table_source", worker=n, source="static") == 1


@pytest.mark.slow
def test_manage_py_dnsserver_takes_the_metrics_option(tmp_path: Path) -> None:
    port, metrics_port = free_port(TCP_AND_UDP), free_port(TCP_AND_UDP)
    env = {**os.environ, "SECRET_KEY": "test", "TRAFFICMGR_VAR_DIR": str(tmp_path)}
    args = [sys.executable, "manage.py", "dnsserver", "--fleet", str(FLEET_FILE)]
    args += ["--listen", f"127.0.0.1:{port}", "--geoip-db", str(CITY_DB), "--rrl-rate", "0"]
    args += ["--metrics", f"127.0.0.1:{metrics_port}", "--state-file", ""]
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline(), process.stdout.readline()]
        assert f"metrics on http://127.0.0.1:{metrics_port}/metrics" in lines[1], lines
        send_queries(port, 3)
        deadline = time.monotonic() + 10
        while total(samples(scrape(metrics_port)), "trafficmgr_dns_queries_total") < 4:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        process.terminate()
        process.communicate(timeout=20)


@pytest.mark.slow
def test_a_taken_metrics_port_stops_the_server_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        args = [sys.executable, "-m", "trafficmgr.dns", "--fleet", str(FLEET_FILE)]
        args += ["--listen", f"127.0.0.1:{free_port(TCP_AND_UDP)}", "--state-file", ""]
        args += ["--metrics", f"127.0.0.1:{busy}"]
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot serve" in done.stderr


def test_every_dns_series_the_shipped_dashboard_plots_is_exported(server: DnsServer) -> None:
    """deploy/grafana-dashboard.json plots only DNS series a server's scrape carries."""
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"trafficmgr_dns_[a-z0-9_]+", target["expr"])
    }
    ask(server, query(NAME, "A"), source="10.9.0.1")  # families by qtype/rcode need one answer
    exported = set(samples(render([("0", snapshot(server))], now=time.time())).keys())
    names = {name for name, _ in exported}
    assert wanted, "the dashboard plots no DNS series"
    assert not wanted - names, f"plotted but not exported: {sorted(wanted - names)}"
