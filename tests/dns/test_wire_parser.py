"""The hand-written query parser: what it reads, and how it refuses what it must."""

from __future__ import annotations

import struct

import dns.message
import dns.opcode
import dns.rrset
import dns.tsigkeyring

from tests.dns.world import NAME, query
from trafficmgr.dns.wire import FORMERR, NOTAUTH, NOTIMP, parse_query

HEADER = struct.Struct("!HHHHHH")
NAME_WIRE = b"".join(bytes([len(p)]) + p.encode() for p in NAME.split(".")) + b"\x00"


def with_answer(message: dns.message.Message) -> bytes:
    """Add an answer record to a query: legal, unusual, and compressed against the question."""
    message.answer.append(dns.rrset.from_text(NAME + ".", 10, "IN", "A", "192.0.2.1"))
    return message.to_wire()


def raw_query(
    name_wire: bytes, qtype: int = 1, qid: int = 0x1234, additional: bytes = b"", ar: int = 0
) -> bytes:
    return (
        HEADER.pack(qid, 0x0100, 1, 0, 0, ar)
        + name_wire
        + struct.pack("!HH", qtype, 1)
        + additional
    )


def opt(options: bytes = b"", version: int = 0, payload: int = 1232) -> bytes:
    return b"\x00" + struct.pack("!HHBBHH", 41, payload, 0, version, 0x8000, len(options)) + options


def ecs_option(family: int, source: int, scope: int, address: bytes) -> bytes:
    body = struct.pack("!HBB", family, source, scope) + address
    return struct.pack("!HH", 8, len(body)) + body


def test_reads_header_question_and_ecs_and_keeps_the_question_case() -> None:
    wire = query("LLama-3-70B.Infer.Example.TEST", "AAAA", ecs=("81.2.69.0", 24)).to_wire()
    q = parse_query(wire)
    assert q is not None and q.rcode == 0 and not q.via_fallback
    assert q.qtype == 28 and q.qclass == 1
    assert q.qname == b"\x0bllama-3-70b\x05infer\x07example\x04test\x00"
    assert b"LLama-3-70B" in q.question  # echoed as sent (0x20 case randomisation)
    assert q.edns and q.edns_version == 0 and q.payload == 1232
    assert q.ecs is not None and (q.ecs.family, q.ecs.source) == (1, 24)
    assert q.ecs.address == bytes([81, 2, 69])


def test_too_short_for_a_header_or_a_response_is_dropped() -> None:
    assert parse_query(b"") is None
    assert parse_query(b"\x12\x34\x01") is None
    response = dns.message.make_response(query()).to_wire()
    assert parse_query(response) is None


def test_question_count_other_than_one_is_formerr() -> None:
    for count in (0, 2, 65535):
        wire = HEADER.pack(7, 0, count, 0, 0, 0) + b"\x00\x00\x01\x00\x01"
        q = parse_query(wire)
        assert q is not None and q.rcode == FORMERR and q.id == 7


def test_truncated_question_is_formerr() -> None:
    wire = query().to_wire()
    for cut in (13, 20, len(wire) - 3):
        q = parse_query(wire[:cut])
        assert q is not None and q.rcode == FORMERR


def test_oversized_label_and_name_are_formerr() -> None:
    label64 = b"\x40" + b"a" * 64 + b"\x00"
    assert parse_query(raw_query(label64)).rcode == FORMERR  # type: ignore[union-attr]
    long_name = b"\x3f" + b"a" * 63
    name = long_name * 4 + b"\x00"  # 4 x 64 + 1 = 257 octets > 255
    assert parse_query(raw_query(name)).rcode == FORMERR  # type: ignore[union-attr]
    fits = long_name * 3 + b"\x3d" + b"a" * 61 + b"\x00"  # exactly 255
    assert parse_query(raw_query(fits)).rcode == 0  # type: ignore[union-attr]


def test_compression_pointer_loop_is_formerr() -> None:
    looping = b"\xc0\x0c"  # points at itself
    q = parse_query(raw_query(looping))
    assert q is not None and q.rcode == FORMERR and q.via_fallback
    two_step = b"\x01a\xc0\x0c"  # a label, then back to the start
    assert parse_query(raw_query(two_step)).rcode == FORMERR  # type: ignore[union-attr]


def test_a_query_with_records_in_its_answer_section_is_read_by_the_fallback() -> None:
    q = parse_query(with_answer(query()))
    assert q is not None and q.via_fallback and q.rcode == 0
    assert q.qname == b"\x0bllama-3-70b\x05infer\x07example\x04test\x00"


def test_ecs_prefix_longer_than_its_address_is_formerr() -> None:
    for family, source, address in ((1, 33, b"\x51\x02\x45\x00\x00"), (2, 129, bytes(17))):
        wire = raw_query(b"\x00", additional=opt(ecs_option(family, source, 0, address)), ar=1)
        q = parse_query(wire)
        assert q is not None and q.rcode == FORMERR
        assert q.edns  # so the FORMERR carries an OPT record


def test_ecs_with_wrong_address_length_bits_or_family_is_formerr() -> None:
    bad = (
        ecs_option(1, 24, 0, b"\x51\x02"),  # too few octets
        ecs_option(1, 16, 0, b"\x51\x02\x45"),  # too many octets
        ecs_option(1, 20, 0, b"\x51\x02\x4f"),  # bits set beyond /20
        ecs_option(3, 8, 0, b"\x01"),  # no such family
        ecs_option(1, 8, 0, b"\x51") * 2,  # two ECS options
        struct.pack("!HH", 8, 2) + b"\x00\x01",  # shorter than the fixed part
    )
    for options in bad:
        q = parse_query(raw_query(b"\x00", additional=opt(options), ar=1))
        assert q is not None and q.rcode == FORMERR, options


def test_unknown_options_are_ignored_and_ecs_still_read() -> None:
    cookie = struct.pack("!HH", 10, 8) + b"\x01" * 8
    padding = struct.pack("!HH", 12, 5) + bytes(5)
    options = cookie + ecs_option(1, 24, 0, b"\x51\x02\x45") + padding
    q = parse_query(raw_query(NAME_WIRE, additional=opt(options), ar=1))
    assert q is not None and q.rcode == 0 and q.ecs is not None and q.ecs.source == 24


def test_unknown_edns_version_is_recorded_and_its_options_not_read() -> None:
    garbage_ecs = ecs_option(1, 99, 0, b"")
    q = parse_query(raw_query(NAME_WIRE, additional=opt(garbage_ecs, version=1), ar=1))
    assert q is not None and q.rcode == 0 and q.edns_version == 1 and q.ecs is None


def test_option_running_past_the_opt_data_is_formerr() -> None:
    options = struct.pack("!HH", 10, 50) + b"\x00" * 4
    q = parse_query(raw_query(NAME_WIRE, additional=opt(options), ar=1))
    assert q is not None and q.rcode == FORMERR


def test_trailing_bytes_are_formerr() -> None:
    q = parse_query(query().to_wire() + b"\x00")
    assert q is not None and q.rcode == FORMERR


def test_two_opt_records_are_formerr() -> None:
    wire = raw_query(NAME_WIRE, additional=opt() + opt(), ar=2)
    q = parse_query(wire)
    assert q is not None and q.rcode == FORMERR and q.via_fallback


def test_opcode_other_than_query_is_notimp() -> None:
    message = query()
    message.set_opcode(dns.opcode.NOTIFY)
    q = parse_query(message.to_wire())
    assert q is not None and q.rcode == NOTIMP


def test_tsig_signed_query_with_an_unknown_key_is_notauth() -> None:
    message = query()
    message.use_tsig(dns.tsigkeyring.from_text({"key.": "c2VjcmV0c2VjcmV0"}), keyname="key.")
    q = parse_query(message.to_wire())
    assert q is not None and q.rcode == NOTAUTH


def test_fallback_reads_ecs_and_flags_like_the_fast_path() -> None:
    q = parse_query(with_answer(query(ecs=("2001:218::", 48))))
    assert q is not None and q.via_fallback and q.rcode == 0
    assert q.ecs is not None and (q.ecs.family, q.ecs.source) == (2, 48)
