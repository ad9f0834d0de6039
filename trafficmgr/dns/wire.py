"""Read queries off the wire: the hand-written hot path and its dnspython fallback.

The hot path parses only what an ordinary query holds: the 12-byte header, one uncompressed
question and at most one OPT record with its options (RFC 6891), the Client Subnet option
(RFC 7871) among them. Anything else (a compression pointer in the question, records in the
answer or authority section, a TSIG, several additional records) goes to dnspython, which is
slower but knows every corner of the format. Both paths produce the same ``Query``.

Malformed input never raises: ``parse_query`` returns None for what must not be answered at
all (shorter than a header, or a response) and otherwise a ``Query`` whose ``rcode`` is set
when the message is to be refused with FORMERR, NOTIMP or NOTAUTH.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import dns.exception
import dns.message
import dns.name

NOERROR = 0
FORMERR = 1
SERVFAIL = 2
NXDOMAIN = 3
NOTIMP = 4
REFUSED = 5
NOTAUTH = 9
BADVERS = 16

RCODE_NAMES = {
    NOERROR: "NOERROR",
    FORMERR: "FORMERR",
    SERVFAIL: "SERVFAIL",
    NXDOMAIN: "NXDOMAIN",
    NOTIMP: "NOTIMP",
    REFUSED: "REFUSED",
    NOTAUTH: "NOTAUTH",
    BADVERS: "BADVERS",
}

TYPE_OPT = 41
OPTION_ECS = 8
FAMILY_BITS = {1: 32, 2: 128}
MAX_NAME = 255
MAX_LABEL = 63

FLAG_QR = 0x8000
FLAG_AA = 0x0400
FLAG_TC = 0x0200
FLAG_RD = 0x0100
FLAG_CD = 0x0010

HEADER = struct.Struct("!HHHHHH")
_OPT_FIXED = struct.Struct("!HHBBHH")  # type, class (payload), ext rcode, version, flags, rdlen
_OPTION = struct.Struct("!HH")
_ECS_FIXED = struct.Struct("!HBB")
_TYPE_CLASS = struct.Struct("!HH")


class _Malformed(Exception):
    """The message breaks the format: answer FORMERR."""


class _Unusual(Exception):
    """The message is legal but outside the hot path: let dnspython read it."""


@dataclass(slots=True)
class ClientSubnet:
    """An EDNS Client Subnet option as the query carried it (RFC 7871 §6)."""

    family: int  # 1 IPv4, 2 IPv6
    source: int  # SOURCE PREFIX-LENGTH
    address: bytes  # exactly ceil(source / 8) octets, as sent

    def padded(self) -> bytes:
        """Return the address padded with zero octets to its family's full length."""
        full = FAMILY_BITS[self.family] // 8
        return self.address + bytes(full - len(self.address))

    def option(self, scope: int) -> bytes:
        """Render the option for a reply: the query's fields copied, ``scope`` filled in."""
        body = _ECS_FIXED.pack(self.family, self.source, scope) + self.address
        return _OPTION.pack(OPTION_ECS, len(body)) + body


@dataclass(slots=True)
class Query:
    """What the server needs from one query."""

    id: int
    flags: int
    question: bytes = b""  # the question as sent: name (case kept), type, class
    qname: bytes = b""  # the name in wire form, lower-cased
    qtype: int = 0
    qclass: int = 0
    edns: bool = False
    edns_version: int = 0
    payload: int = 512  # advertised UDP payload size
    dnssec_ok: bool = False
    ecs: ClientSubnet | None = None
    rcode: int = NOERROR  # set when the query itself is to be refused
    via_fallback: bool = False


def parse_query(wire: bytes) -> Query | None:
    """Parse a query; None when it must be dropped without an answer."""
    if len(wire) < HEADER.size:
        return None
    qid, flags, qdcount, ancount, nscount, arcount = HEADER.unpack_from(wire)
    if flags & FLAG_QR:
        return None  # a response: answering it could start a loop between two servers
    query = Query(qid, flags)
    if qdcount != 1:
        query.rcode = FORMERR
        return query
    if ancount or nscount or arcount > 1:
        return _fallback(wire)
    try:
        pos = _read_question(wire, query)
        if arcount:
            pos = _read_opt(wire, pos, query)
        if pos != len(wire):
            raise _Malformed("trailing bytes")
    except _Unusual:
        return _fallback(wire)
    except _Malformed:
        query.rcode = FORMERR
        return query
    if (flags >> 11) & 0xF:
        query.rcode = NOTIMP  # only standard queries (opcode 0)
    return query


def _read_question(wire: bytes, query: Query) -> int:
    """Read the question at offset 12 into ``query``; return the offset after it."""
    end = len(wire)
    pos = HEADER.size
    while True:
        if pos >= end:
            raise _Malformed("name runs past the end")
        length = wire[pos]
        if length == 0:
            pos += 1
            break
        if length & 0xC0 == 0xC0:
            raise _Unusual("compressed question name")
        if length > MAX_LABEL:
            raise _Malformed("label type not supported")
        pos += length + 1
        if pos - HEADER.size >= MAX_NAME:
            raise _Malformed("name longer than 255 octets")
    name = wire[HEADER.size : pos]
    if pos + 4 > end:
        raise _Malformed("question cut short")
    query.qtype, query.qclass = _TYPE_CLASS.unpack_from(wire, pos)
    query.qname = name.lower()  # ASCII only, which is what DNS names compare by
    query.question = wire[HEADER.size : pos + 4]
    return pos + 4


def _read_opt(wire: bytes, pos: int, query: Query) -> int:
    """Read the OPT record at ``pos`` into ``query``; return the offset after it."""
    if pos + 1 + _OPT_FIXED.size > len(wire):
        raise _Malformed("additional record cut short")
    if wire[pos] != 0:
        raise _Unusual("additional record with an owner name: not an OPT")
    rtype, payload, _ext, version, eflags, rdlen = _OPT_FIXED.unpack_from(wire, pos + 1)
    if rtype != TYPE_OPT:
        raise _Unusual("additional record other than OPT")
    query.edns = True
    query.payload = payload
    query.edns_version = version
    query.dnssec_ok = bool(eflags & 0x8000)
    pos += 1 + _OPT_FIXED.size
    end: int = pos + rdlen
    if end > len(wire):
        raise _Malformed("OPT data runs past the end")
    if version != 0:
        return end  # BADVERS: options of an unknown version are not ours to read
    while pos < end:
        if pos + _OPTION.size > end:
            raise _Malformed("option header cut short")
        code, length = _OPTION.unpack_from(wire, pos)
        pos += _OPTION.size
        if pos + length > end:
            raise _Malformed("option runs past the OPT data")
        if code == OPTION_ECS:
            if query.ecs is not None:
                raise _Malformed("more than one Client Subnet option")
            query.ecs = read_client_subnet(wire[pos : pos + length])
        pos += length  # other options are ignored, as RFC 6891 §6.1.2 asks
    return end


def read_client_subnet(data: bytes) -> ClientSubnet:
    """Validate a Client Subnet option's data (RFC 7871 §6, §7.1.1); raise on bad input."""
    if len(data) < _ECS_FIXED.size:
        raise _Malformed("Client Subnet option too short")
    family, source, _scope = _ECS_FIXED.unpack_from(data)
    bits = FAMILY_BITS.get(family)
    if bits is None:
        raise _Malformed("Client Subnet family not supported")
    if source > bits:
        raise _Malformed("Client Subnet prefix longer than its address")
    address = data[_ECS_FIXED.size :]
    if len(address) != (source + 7) // 8:
        raise _Malformed("Client Subnet address length does not match its prefix")
    if source % 8 and address[-1] & (0xFF >> (source % 8)):
        raise _Malformed("Client Subnet address has bits set beyond its prefix")
    return ClientSubnet(family, source, bytes(address))


def _fallback(wire: bytes) -> Query:
    """Read an unusual query with dnspython."""
    qid, flags = struct.unpack_from("!HH", wire)
    query = Query(qid, flags, via_fallback=True)
    try:
        message = dns.message.from_wire(wire)
    except dns.message.UnknownTSIGKey:
        query.rcode = NOTAUTH  # signed with a key this server does not have (RFC 8945 §5.2)
        return query
    except (dns.exception.DNSException, ValueError, TypeError, IndexError, struct.error):
        query.rcode = FORMERR
        return query
    if len(message.question) != 1:
        query.rcode = FORMERR
        return query
    rrset = message.question[0]
    name = wire_name(rrset.name)
    query.question = name + _TYPE_CLASS.pack(rrset.rdtype, rrset.rdclass)
    query.qname = name.lower()
    query.qtype, query.qclass = int(rrset.rdtype), int(rrset.rdclass)
    if message.edns >= 0:
        query.edns = True
        query.edns_version = message.edns
        query.payload = message.payload
        query.dnssec_ok = bool(message.ednsflags & 0x8000)
        if message.edns == 0:
            try:
                _fallback_ecs(message, query)
            except _Malformed:
                query.rcode = FORMERR
                return query
    if message.opcode() != 0:
        query.rcode = NOTIMP
    return query


def _fallback_ecs(message: dns.message.Message, query: Query) -> None:
    """Copy the Client Subnet option of a dnspython message into ``query``."""
    for option in message.options:
        if option.otype != OPTION_ECS:
            continue
        if query.ecs is not None:
            raise _Malformed("more than one Client Subnet option")
        query.ecs = read_client_subnet(option.to_wire() or b"")


def opt_record(payload: int, ext_rcode: int, dnssec_ok: bool, options: bytes = b"") -> bytes:
    """Render an OPT pseudo-record (RFC 6891 §6.1.2) for a reply."""
    flags = 0x8000 if dnssec_ok else 0
    fixed = _OPT_FIXED.pack(TYPE_OPT, payload, ext_rcode >> 4, 0, flags, len(options))
    return b"\x00" + fixed + options


def wire_name(name: dns.name.Name) -> bytes:
    """Return a name in uncompressed wire form."""
    data = name.to_wire()
    assert data is not None  # to_wire returns the bytes when given no file
    return data
