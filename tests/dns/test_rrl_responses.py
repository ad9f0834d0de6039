"""The responder under a flood: limited by response, counted, slipped, TCP untouched.

Before, a flood of one name from a prefix exhausted that prefix's single bucket and the
server went silent for every other name that prefix asked; now only the flooded response is
limited. Limited responses are counted by class and exported per worker.
"""

from __future__ import annotations

from collections.abc import Callable

import dns.flags
import dns.message
import dns.rcode
import pytest

from tests.dns.world import NAME, ZONE, ask, query, quiet_config
from trafficmgr.dns.exporter import render, snapshot
from trafficmgr.dns.ratelimit import RateLimiter
from trafficmgr.dns.server import DnsServer

Make = Callable[..., DnsServer]
FLOODED = "203.0.113.66"


def still_time(server: DnsServer) -> None:
    """Give the server its limiter with a clock that stands still (no credit comes back)."""
    c = server.config
    server.responder.limiter = RateLimiter(
        c.rrl_rate,
        c.rrl_burst,
        c.rrl_slip,
        lambda: 1000.0,
        nxdomain_rate=c.rrl_nxdomain_rate,
        error_rate=c.rrl_error_rate,
        window_s=c.rrl_window_s,
        exempt=c.rrl_exempt,
    )


def flood(server: DnsServer, wire: bytes, n: int, source: str = FLOODED) -> list[bytes | None]:
    return [server.handle(wire, source) for _ in range(n)]


@pytest.mark.parametrize("slip", [0, 1, 2])
def test_a_flood_of_one_response_is_limited_and_counted(make_server: Make, slip: int) -> None:
    server = make_server(quiet_config(rrl_rate=20, rrl_slip=slip))
    still_time(server)
    wire = query(NAME, "A").to_wire()
    replies = flood(server, wire, 200)
    answered = [r for r in replies if r is not None]
    full = [r for r in answered if not dns.message.from_wire(r).flags & dns.flags.TC]
    assert len(full) == 20  # one second's worth
    metrics = server.metrics
    assert metrics["rrl_limited_answer"] == 180
    assert metrics["rrl_dropped"] + metrics["rrl_slipped"] == 180
    assert metrics["rrl_slipped"] == {0: 0, 1: 180, 2: 90}[slip]
    for reply in answered[20:]:
        slipped = dns.message.from_wire(reply)
        assert slipped.flags & dns.flags.TC and not slipped.answer  # tiny: no amplification
        assert len(reply) <= len(wire) + 12
    assert ask(server, query(NAME, "A"), source="198.51.100.5").answer  # a bystander
    assert ask(server, query(NAME, "A"), source=FLOODED, tcp=True).answer  # TCP exempt


def test_other_names_of_the_flooded_prefix_are_still_answered(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=10, rrl_slip=0))
    still_time(server)
    flood(server, query(NAME, "A").to_wire(), 100)
    assert ask(server, query(f"api.{ZONE}", "A"), source="203.0.113.7").answer
    assert ask(server, query(NAME, "AAAA"), source="203.0.113.8").answer
    assert ask(server, query(ZONE, "SOA"), source="203.0.113.9").answer


def test_made_up_names_share_one_nxdomain_credit(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=100, rrl_nxdomain_rate=5, rrl_slip=0))
    still_time(server)
    replies = [server.handle(query(f"x{i}.{ZONE}", "A").to_wire(), FLOODED) for i in range(50)]
    sent = [r for r in replies if r is not None]
    assert len(sent) == 5
    assert all(dns.message.from_wire(r).rcode() == dns.rcode.NXDOMAIN for r in sent)
    assert server.metrics["rrl_limited_nxdomain"] == 45
    assert ask(server, query(NAME, "A"), source=FLOODED).answer  # answers have their own


def test_refusals_for_other_zones_share_one_error_credit(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=100, rrl_error_rate=3, rrl_slip=0))
    still_time(server)
    names = [f"victim{i}.example.org." for i in range(30)]
    replies = [server.handle(query(n, "ANY").to_wire(), FLOODED) for n in names]
    assert sum(r is not None for r in replies) == 3
    assert server.metrics["rrl_limited_error"] == 27


def test_cached_replies_are_limited_too(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=10, rrl_slip=2))
    still_time(server)
    wire = query(NAME, "A").to_wire()
    replies = flood(server, wire, 50)
    assert server.metrics["cache_hits"] >= 9  # answered from the reply cache while allowed
    assert (
        sum(r is not None and not dns.message.from_wire(r).flags & dns.flags.TC for r in replies)
        == 10
    )
    assert server.metrics["rrl_slipped"] == 20 and server.metrics["rrl_dropped"] == 20


def test_exempt_clients_are_never_limited(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=5, rrl_slip=0, rrl_exempt=("203.0.113.0/24",)))
    still_time(server)
    assert all(r is not None for r in flood(server, query(NAME, "A").to_wire(), 100))
    assert (
        sum(r is not None for r in flood(server, query(NAME, "A").to_wire(), 20, "192.0.2.1")) == 5
    )


def test_limited_responses_are_exported_by_class_per_worker(make_server: Make) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    server = make_server(quiet_config(rrl_rate=1, rrl_nxdomain_rate=1, rrl_slip=2))
    still_time(server)
    flood(server, query(NAME, "A").to_wire(), 5)
    flood(server, query(f"nope.{ZONE}", "A").to_wire(), 3)
    text = render([("0", snapshot(server))])
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    key = "trafficmgr_dns_rrl_limited_total"
    assert found[(key, (("class", "answer"), ("worker", "0")))] == 4
    assert found[(key, (("class", "nxdomain"), ("worker", "0")))] == 2
    assert found[(key, (("class", "error"), ("worker", "0")))] == 0
    limited = "trafficmgr_dns_rate_limited_total"
    assert found[(limited, (("action", "slipped"), ("worker", "0")))] == 3
    assert found[(limited, (("action", "dropped"), ("worker", "0")))] == 3
    assert found[("trafficmgr_dns_rrl_keys", (("worker", "0"),))] == 2
