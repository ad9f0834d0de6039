"""TXT strings are ASCII: the engine's reasons say "strict gdpr → eu-west, eu-central", and the
arrow reached dig as ``\\226\\134\\146``."""

from __future__ import annotations

import dns.rdatatype

from tests.dns.world import NAME, SE, ask, query
from trafficmgr.dns.server import DnsServer
from trafficmgr.dns.zone import ascii_text


def test_a_residency_reason_is_answered_in_ascii(server: DnsServer) -> None:
    reply = ask(server, query(NAME, "TXT", ecs=(SE, 32)))  # an EEA client: gdpr
    strings = [
        s
        for rrset in reply.answer
        if rrset.rdtype == dns.rdatatype.TXT
        for rdata in rrset
        for s in rdata.strings
    ]
    assert strings
    assert all(max(s) < 0x80 for s in strings), strings
    text = b"\n".join(strings).decode("ascii")
    assert "strict gdpr -> " in text, text
    assert "\\" not in reply.answer[0].to_text()  # what dig prints: no octal escapes


def test_ascii_spelling_keeps_the_meaning() -> None:
    assert ascii_text("strict gdpr → eu-west") == "strict gdpr -> eu-west"
    assert ascii_text("São Paulo × 2 — ≤ 5 …") == "Sao Paulo x 2 - <= 5 ..."
    assert ascii_text("☃") == "?"
