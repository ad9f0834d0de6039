"""Bad input through the whole handler: each case answered as the RFCs say, and counted."""

from __future__ import annotations

import os
import random
import struct

import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.update

from tests.dns.world import NAME, ask, header, query, rcode_of
from trafficmgr.dns.server import DnsServer

ID = 0xBEEF


def reply_to(server: DnsServer, wire: bytes) -> bytes | None:
    return server.handle(wire, "192.0.2.99")


def test_random_bytes_never_raise_and_get_formerr_or_silence(server: DnsServer) -> None:
    rng = random.Random(7)
    for size in (0, 1, 5, 11, 12, 13, 40, 300, 1500):
        for _ in range(30):
            wire = bytes(rng.getrandbits(8) for _ in range(size))
            reply = reply_to(server, wire)
            if reply is None:
                continue
            assert header(reply)[0] == header(wire)[0]  # the ID is echoed
            assert header(reply)[1] & 0x8000  # and it is a response
    metrics = server.metrics
    assert metrics["queries"] == 9 * 30
    assert metrics["dropped"] + metrics["answered"] == metrics["queries"]


def test_truncated_header_is_dropped_and_counted(server: DnsServer) -> None:
    assert reply_to(server, b"\xbe\xef\x01\x00\x00") is None
    assert server.metrics["dropped"] == 1


def test_question_count_65535_is_formerr(server: DnsServer) -> None:
    wire = struct.pack("!HHHHHH", ID, 0x0100, 65535, 0, 0, 0) + os.urandom(100)
    reply = reply_to(server, wire)
    assert reply is not None and rcode_of(reply) == dns.rcode.FORMERR
    assert header(reply)[:3] == (ID, header(reply)[1], 0)
    assert server.metrics["formerr"] == 1


def test_compression_loop_and_oversized_names_are_formerr(server: DnsServer) -> None:
    base = struct.pack("!HHHHHH", ID, 0, 1, 0, 0, 0)
    for name in (b"\xc0\x0c", b"\x03abc\xc0\x0c", b"\x40" + b"a" * 64 + b"\x00", b"\x3f" * 300):
        reply = reply_to(server, base + name + b"\x00\x01\x00\x01")
        assert reply is not None and rcode_of(reply) == dns.rcode.FORMERR, name[:8]
    assert server.metrics["formerr"] == 4


def test_ecs_prefix_longer_than_the_address_is_formerr_with_an_opt(server: DnsServer) -> None:
    message = query(NAME, "A", ecs=("81.2.69.0", 24))
    wire = bytearray(message.to_wire())
    at = wire.rfind(bytes([0, 8]))  # the option code, then length, family, source
    wire[at + 6] = 40  # SOURCE PREFIX-LENGTH 40 > 32
    reply = dns.message.from_wire(reply_to(server, bytes(wire)) or b"")
    assert reply.rcode() == dns.rcode.FORMERR
    assert reply.edns == 0 and not reply.answer


def test_unknown_edns_options_are_ignored(server: DnsServer) -> None:
    odd = dns.edns.GenericOption(dns.edns.OptionType.make(65001), b"whatever")
    reply = ask(server, query(NAME, "A", options=[odd], ecs=("81.2.69.142", 32)))
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer


def test_edns_version_other_than_zero_is_badvers(server: DnsServer) -> None:
    reply = ask(server, query(NAME, "A", edns=1))
    assert reply.rcode() == dns.rcode.BADVERS and reply.edns == 0 and not reply.answer
    assert server.metrics["badvers"] == 1


def test_opt_payload_is_clamped_between_512_and_the_cap(server: DnsServer) -> None:
    assert ask(server, query(NAME, "A", edns=0, payload=65000)).payload == 1232
    small = ask(server, query(NAME, "A", edns=0, payload=100))
    assert small.rcode() == dns.rcode.NOERROR and small.answer  # treated as 512


def test_dnssec_ok_is_echoed_and_the_answer_is_unsigned(server: DnsServer) -> None:
    message = query(NAME, "A", edns=0)
    message.want_dnssec(True)
    reply = ask(server, message)
    assert reply.ednsflags & dns.flags.DO and reply.answer and len(reply.answer) == 1


def test_responses_are_never_answered(server: DnsServer) -> None:
    response = dns.message.make_response(query()).to_wire()
    assert reply_to(server, response) is None


def test_notify_and_update_are_notimp(server: DnsServer) -> None:
    message = query()
    message.set_opcode(dns.opcode.NOTIFY)
    assert ask(server, message).rcode() == dns.rcode.NOTIMP
    update = dns.update.UpdateMessage("infer.example.test")
    update.add("x", 10, "A", "192.0.2.1")
    assert ask(server, update).rcode() == dns.rcode.NOTIMP


def test_server_keeps_answering_after_every_kind_of_bad_input(server: DnsServer) -> None:
    bad = [b"", b"\x00" * 11, os.urandom(64), struct.pack("!HHHHHH", 1, 0, 65535, 0, 0, 0)]
    for wire in bad:
        reply_to(server, wire)
    assert ask(server, query(NAME, "A")).answer
