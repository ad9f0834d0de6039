"""Authoritative for the fleet's zone only: apex records, negative answers, refusals."""

from __future__ import annotations

from dataclasses import replace

import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from tests.dns.world import NAME, ZONE, addresses, ask, ecs_of, query
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import Fleet


def test_soa_and_ns_at_the_apex(server: DnsServer) -> None:
    soa = ask(server, query(ZONE, "SOA"))
    assert soa.rcode() == dns.rcode.NOERROR and soa.flags & dns.flags.AA
    record = soa.answer[0][0]
    assert record.mname.to_text() == f"ns1.{ZONE}." and record.minimum == 10  # the fleet's TTL
    ns = ask(server, query(ZONE, "NS"))
    assert [r.target.to_text() for r in ns.answer[0]] == [f"ns1.{ZONE}."]
    assert ns.additional and ns.additional[0][0].to_text() == "127.0.0.1"  # glue


def test_unknown_name_is_nxdomain_with_the_soa(server: DnsServer) -> None:
    for name in (f"nope.{ZONE}", f"x.{NAME}", f"a.b.c.{ZONE}"):
        reply = ask(server, query(name, "A"))
        assert reply.rcode() == dns.rcode.NXDOMAIN, name
        assert reply.flags & dns.flags.AA and not reply.answer
        assert reply.authority[0].rdtype == dns.rdatatype.SOA
        assert reply.authority[0].ttl == 10


def test_known_name_without_that_type_is_nodata(server: DnsServer) -> None:
    for name, rdtype in ((NAME, "MX"), (ZONE, "A"), (f"api.{ZONE}", "CAA"), (NAME, "HTTPS")):
        reply = ask(server, query(name, rdtype))
        assert reply.rcode() == dns.rcode.NOERROR and not reply.answer, (name, rdtype)
        assert reply.authority[0].rdtype == dns.rdatatype.SOA


def test_other_zones_are_refused_and_never_recursed(server: DnsServer) -> None:
    for name in ("example.com", "test", ".", "xinfer.example.test", "example.test"):
        reply = ask(server, query(name, "A"))
        assert reply.rcode() == dns.rcode.REFUSED, name
        assert not reply.flags & dns.flags.AA and not reply.answer


def test_recursion_available_is_never_set_and_rd_is_copied(server: DnsServer) -> None:
    message = query()
    reply = ask(server, message)
    assert not reply.flags & dns.flags.RA and reply.flags & dns.flags.RD
    message.flags &= ~dns.flags.RD
    assert not ask(server, message).flags & dns.flags.RD


def test_any_is_answered_minimally(server: DnsServer) -> None:
    reply = ask(server, query(NAME, "ANY"))
    assert reply.rcode() == dns.rcode.NOERROR and len(reply.answer) == 1
    rrset = reply.answer[0]
    assert rrset.rdtype == dns.rdatatype.HINFO and rrset[0].cpu == b"RFC8482"


def test_other_classes_and_zone_transfers_are_refused(server: DnsServer) -> None:
    chaos = dns.message.make_query("version.bind", "TXT", rdclass=dns.rdataclass.CH)
    assert ask(server, chaos).rcode() == dns.rcode.REFUSED
    assert ask(server, query(ZONE, "AXFR"), tcp=True).rcode() == dns.rcode.REFUSED


def test_case_of_the_question_is_echoed_and_the_answer_matches(server: DnsServer) -> None:
    plain = ask(server, query(NAME, "A"))
    mixed = ask(server, query(NAME.upper(), "A"))
    assert mixed.question[0].name.to_text() == NAME.upper() + "."
    assert addresses(mixed) == addresses(plain) and addresses(plain)


def test_nameserver_name_answers_its_addresses(server: DnsServer) -> None:
    assert addresses(ask(server, query(f"ns1.{ZONE}", "A"))) == {"127.0.0.1"}
    nodata = ask(server, query(f"ns1.{ZONE}", "AAAA"))
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer


def test_non_geo_answers_carry_ecs_scope_zero(server: DnsServer) -> None:
    for name, rdtype in ((ZONE, "SOA"), (f"nope.{ZONE}", "A"), ("example.com", "A")):
        option = ecs_of(ask(server, query(name, rdtype, ecs=("81.2.69.0", 24))))
        assert option is not None and option.scopelen == 0, (name, rdtype)
        assert option.srclen == 24 and option.address == "81.2.69.0"


def test_counters_break_down_by_rcode_and_qtype(server: DnsServer) -> None:
    ask(server, query(ZONE, "SOA"))
    ask(server, query(f"nope.{ZONE}", "A"))
    ask(server, query("example.com", "TXT"))
    metrics = server.metrics
    assert metrics["rcode"] == {"NOERROR": 1, "NXDOMAIN": 1, "REFUSED": 1}
    assert metrics["qtype"] == {"SOA": 1, "A": 1, "TXT": 1}
    assert metrics["nxdomain"] == 1 and metrics["refused"] == 1 and metrics["queries"] == 3


def test_a_changed_fleet_is_served_at_once(server: DnsServer, fleet: Fleet) -> None:
    renamed = replace(fleet, zone="gpu.example.test", ttl=30)
    server.set_fleet(renamed)
    assert ask(server, query(NAME, "A")).rcode() == dns.rcode.REFUSED
    reply = ask(server, query("llama-3-70b.gpu.example.test", "A"))
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer[0].ttl == 30
