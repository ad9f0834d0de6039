"""The zone the server is authoritative for: its names, addresses and how records render.

Names: the apex (SOA, NS), the nameserver (``ns1.<zone>``, A/AAAA from the configured
addresses), ``api.<zone>`` (any model) and ``<model>.<zone>`` for each model of the fleet.
A model name becomes a label by lower-casing it and replacing anything but letters, digits,
``-`` and ``_`` with ``-`` (``meta/llama`` is asked for as ``meta-llama.<zone>``).

Rendering goes through dnspython (name compression, record formats) and happens once per
cache entry; what is kept is the part of the message after the question, so that a cached
answer can be sent to any client by writing a fresh header and the client's own question in
front of it (same length, so compression pointers stay valid).
"""

from __future__ import annotations

import ipaddress
import re
import struct
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from dns.rdtypes.ANY.HINFO import HINFO
from dns.rdtypes.ANY.NS import NS
from dns.rdtypes.ANY.SOA import SOA
from dns.rdtypes.ANY.TXT import TXT
from dns.rdtypes.IN.A import A
from dns.rdtypes.IN.AAAA import AAAA

from trafficmgr.dns.choice import zone_seed
from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.wire import wire_name
from trafficmgr.routing.types import Fleet

IN = dns.rdataclass.IN
API_LABEL = "api"
SOA_REFRESH = 3600
SOA_RETRY = 600
SOA_EXPIRE = 86400
APEX_TTL = 3600  # SOA and NS: they change with the deployment, not with the traffic
_NOT_LABEL = re.compile(r"[^a-z0-9_-]")


class NameKind(IntEnum):
    APEX = 1
    NAMESERVER = 2
    ROUTED = 3


@dataclass(frozen=True, slots=True)
class RegionAddresses:
    v4: tuple[str, ...]
    v6: tuple[str, ...]

    def any(self) -> bool:
        """Tell whether there is an address of either family."""
        return bool(self.v4 or self.v6)

    def of(self, qtype: int) -> tuple[str, ...]:
        """Return the addresses of the family a query type asks for (A or AAAA)."""
        return self.v6 if qtype == dns.rdatatype.AAAA else self.v4


@dataclass(frozen=True, slots=True)
class Rendered:
    """A cached answer: everything after the question, plus what the header needs."""

    rcode: int
    aa: bool
    ancount: int
    nscount: int
    arcount: int
    sections: bytes
    multi: bool = False  # picked among several regions by client prefix (scope = that prefix)


def model_label(model: str) -> str:
    """Return the DNS label a model is asked for by."""
    return _NOT_LABEL.sub("-", model.lower())[:63] or "-"


def split_addresses(addresses: Iterable[str]) -> RegionAddresses:
    """Split addresses into IPv4 and IPv6, dropping anything that is not an IP address."""
    v4: list[str] = []
    v6: list[str] = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue
        (v4 if address.version == 4 else v6).append(str(address))
    return RegionAddresses(tuple(v4), tuple(v6))


class ZoneData:
    """What the server knows of its zone, built from the fleet and the server settings."""

    def __init__(self, fleet: Fleet, config: ServerConfig) -> None:
        self.fleet = fleet
        self.ttl = max(0, int(fleet.ttl))
        self.origin = dns.name.from_text(fleet.zone)
        self.seed = zone_seed(fleet.zone)
        self.apex = wire_name(self.origin).lower()
        self.nameserver = dns.name.Name((config.nameserver.encode(), *self.origin.labels))
        self.hostmaster = dns.name.Name((b"hostmaster", *self.origin.labels))
        self.glue = split_addresses(config.glue())
        self.addresses = {r.name: split_addresses(r.addresses) for r in fleet.regions}
        self.models = fleet.models()
        self.names: dict[bytes, tuple[NameKind, str | None]] = {}
        for model in self.models:
            self.names.setdefault(self._wire(model_label(model)), (NameKind.ROUTED, model))
        self.names[self._wire(API_LABEL)] = (NameKind.ROUTED, None)
        self.names.setdefault(wire_name(self.nameserver).lower(), (NameKind.NAMESERVER, None))
        self.names[self.apex] = (NameKind.APEX, None)
        # Everything a reply takes from the zone: two zones equal in this answer alike, so a
        # new fleet that leaves it alone keeps the cached replies (``responder``).
        self.answers = (
            self.origin.to_text(),  # with its letter case, which the records keep
            self.nameserver.to_text(),
            self.ttl,
            self.glue,
            tuple(sorted(self.addresses.items())),
            self.models,
        )

    def _wire(self, label: str) -> bytes:
        return wire_name(dns.name.Name((label.encode(), *self.origin.labels))).lower()

    def classify(self, qname: bytes) -> tuple[NameKind, str | None] | None:
        """Return what a (lower-cased, wire-form) name is in this zone; None if not a name."""
        return self.names.get(qname)

    def contains(self, qname: bytes) -> bool:
        """Tell whether a wire-form name is at or below the apex (on a label boundary)."""
        offset = len(qname) - len(self.apex)
        if offset < 0 or not qname.endswith(self.apex):
            return False
        pos = 0
        while pos < offset:
            pos += qname[pos] + 1
        return pos == offset

    # --- records ---------------------------------------------------------------------

    def soa(self, serial: int, ttl: int | None = None) -> dns.rrset.RRset:
        """Return the apex SOA; its minimum (negative-caching TTL) is the fleet's TTL."""
        rdata = SOA(  # type: ignore[no-untyped-call]
            IN,
            dns.rdatatype.SOA,
            self.nameserver,
            self.hostmaster,
            serial % 2**32,
            SOA_REFRESH,
            SOA_RETRY,
            SOA_EXPIRE,
            self.ttl,
        )
        return dns.rrset.from_rdata_list(self.origin, APEX_TTL if ttl is None else ttl, [rdata])

    def negative_soa(self, serial: int) -> dns.rrset.RRset:
        """Return the SOA for the authority section of NXDOMAIN/NODATA (RFC 2308 §3)."""
        return self.soa(serial, ttl=min(APEX_TTL, self.ttl))

    def ns(self) -> dns.rrset.RRset:
        return dns.rrset.from_rdata_list(
            self.origin,
            APEX_TTL,
            [NS(IN, dns.rdatatype.NS, self.nameserver)],  # type: ignore[no-untyped-call]
        )

    def glue_rrsets(self) -> list[dns.rrset.RRset]:
        """Return the nameserver's A and AAAA sets (for the additional section of NS)."""
        out = []
        for qtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            rrset = address_rrset(self.nameserver, qtype, self.glue.of(qtype), APEX_TTL)
            if rrset is not None:
                out.append(rrset)
        return out


def address_rrset(
    name: dns.name.Name, qtype: int, addresses: Sequence[str], ttl: int
) -> dns.rrset.RRset | None:
    """Return an A or AAAA set, or None when there is no address."""
    if not addresses:
        return None
    cls = AAAA if qtype == dns.rdatatype.AAAA else A
    rtype = dns.rdatatype.AAAA if qtype == dns.rdatatype.AAAA else dns.rdatatype.A
    rdatas = [cls(IN, rtype, a) for a in dict.fromkeys(addresses)]
    return dns.rrset.from_rdata_list(name, ttl, rdatas)


# The engine's reasons are written for people ("strict gdpr → eu-west"); in a TXT string
# anything past ASCII reaches dig and most tools as octal escapes (\226\134\146).
ASCII_SPELLING = str.maketrans(
    {"→": "->", "←": "<-", "×": "x", "…": "...", "—": "-", "–": "-", "≤": "<=", "≥": ">="}
)


def ascii_text(text: str) -> str:
    """Spell ``text`` in ASCII: arrows and signs as ASCII, accents dropped, the rest as ?."""
    spelled = unicodedata.normalize("NFKD", text.translate(ASCII_SPELLING))
    kept = "".join(c for c in spelled if not unicodedata.combining(c))
    return kept.encode("ascii", "replace").decode("ascii")


def txt_rrset(name: dns.name.Name, texts: Sequence[str], ttl: int) -> dns.rrset.RRset:
    """Return one TXT record whose strings are ``texts`` in ASCII (each cut into 255-octet
    pieces)."""
    strings: list[bytes] = []
    for text in texts:
        data = ascii_text(text).encode("ascii")
        strings.extend(data[i : i + 255] for i in range(0, len(data), 255))
    return dns.rrset.from_rdata_list(name, ttl, [TXT(IN, dns.rdatatype.TXT, strings or [b""])])


def rfc8482_rrset(name: dns.name.Name, ttl: int) -> dns.rrset.RRset:
    """Return the minimal answer to ANY (RFC 8482 §4.2): one HINFO "RFC8482"."""
    rdata = HINFO(IN, dns.rdatatype.HINFO, b"RFC8482", b"")  # type: ignore[no-untyped-call]
    return dns.rrset.from_rdata_list(name, ttl, [rdata])


def render(
    question: bytes,
    rcode: int,
    answer: Sequence[dns.rrset.RRset] = (),
    authority: Sequence[dns.rrset.RRset] = (),
    additional: Sequence[dns.rrset.RRset] = (),
    *,
    aa: bool = True,
    multi: bool = False,
) -> Rendered:
    """Render sections after ``question`` (a lower-cased question in wire form)."""
    qname, used = dns.name.from_wire(question, 0)
    qtype, qclass = struct.unpack_from("!HH", question, used)
    message = dns.message.Message(id=0)
    message.find_rrset(
        message.question,
        qname,
        dns.rdataclass.RdataClass.make(qclass),
        dns.rdatatype.RdataType.make(qtype),
        create=True,
        force_unique=True,
    )
    message.answer = list(answer)
    message.authority = list(authority)
    message.additional = list(additional)
    wire = message.to_wire(max_size=65535)
    _, _, _, ancount, nscount, arcount = struct.unpack_from("!HHHHHH", wire)
    sections = wire[12 + len(question) :]
    return Rendered(rcode, aa, ancount, nscount, arcount, sections, multi)


def qname_of(question: bytes) -> dns.name.Name:
    """Return the name of a question in wire form."""
    return dns.name.from_wire(question, 0)[0]
