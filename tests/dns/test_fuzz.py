"""Property-based fuzzing of the parser and the handler (a fixed number of cases per run)."""

from __future__ import annotations

import struct

import dns.exception
import dns.message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dns.world import NAME, query
from trafficmgr.dns.server import DnsServer
from trafficmgr.dns.wire import parse_query

FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
SEEDS = [
    query(NAME, "A").to_wire(),
    query(NAME, "AAAA", ecs=("81.2.69.142", 32)).to_wire(),
    query(NAME, "TXT", ecs=("2001:218::", 48)).to_wire(),
    query("infer.example.test", "SOA", edns=0).to_wire(),
]


def check_reply(wire: bytes, reply: bytes | None) -> None:
    """A reply, if any, is a well-formed response to this query's ID."""
    if reply is None:
        return
    assert len(reply) >= 12 and reply[:2] == wire[:2]
    assert reply[2] & 0x80  # QR
    assert not reply[3] & 0x80  # RA never set
    try:
        dns.message.from_wire(reply)
    except dns.exception.DNSException as exc:  # pragma: no cover - the failure message
        raise AssertionError(f"unparsable reply {reply!r} to {wire!r}") from exc


@FUZZ
@given(st.binary(max_size=600))
def test_parser_never_raises_on_random_bytes(wire: bytes) -> None:
    parsed = parse_query(wire)
    assert parsed is None or parsed.id == struct.unpack_from("!H", wire)[0]


@FUZZ
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 600),
)
def test_handler_answers_mutated_queries_well_or_not_at_all(
    server: DnsServer, seed: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    wire = bytearray(seed)
    for at, value in edits:
        if at < len(wire):
            wire[at] = value
    mutated = bytes(wire[: max(cut, 12)])
    for tcp in (False, True):
        check_reply(mutated, server.handle(mutated, "198.51.100.1", tcp))


@FUZZ
@given(st.binary(min_size=12, max_size=600))
def test_handler_answers_random_messages_well_or_not_at_all(server: DnsServer, wire: bytes) -> None:
    check_reply(wire, server.handle(wire, "2001:db8::1"))
