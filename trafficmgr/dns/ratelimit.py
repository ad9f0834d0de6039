"""Response-rate limiting keyed like BIND's RRL, against reflection and amplification.

A UDP source address can be forged, so an authoritative server that answers every datagram
lends its bandwidth to whoever spoofs a victim's address. What is limited is the flow of
*identical responses to one network*: the key is the client's prefix (``ipv4_prefix`` /24
and ``ipv6_prefix`` /56 by default, the granularity at which one operator's addresses sit)
times the response's identity:

- an answer (NOERROR, with records or without): its name and type;
- NXDOMAIN: the zone alone, whatever the name and type (the names are made up: keyed by name,
  a flood of random names would get a bucket each);
- an error (REFUSED, FORMERR, SERVFAIL, NOTIMP, BADVERS): the class alone, for the same
  reason: what the client asked is its own choice.

Each key earns ``rate`` responses per second of its class (``rate``, ``nxdomain_rate``,
``error_rate``; 0 leaves that class unlimited) up to ``burst`` in hand (one second's worth
by default), and every response spends one, limited or not, down to a debt of ``window_s``
seconds' worth: a key kept over its rate stays limited until its average over the window
falls below the rate, as in BIND. A limited response is dropped, except every ``slip``-th,
which goes out truncated (TC=1, no records): a real client retries over TCP, which cannot be
spoofed and is never limited here, while a victim receives no more bytes than the attacker
sent. ``slip`` 0 drops them all, 1 truncates them all (BIND's default is 2). Clients in
``exempt`` networks (large resolvers one trusts, monitoring) are never limited.

At most ``max_tracked`` keys are kept, in order of their last response; a new one past the
bound evicts the least recently seen. That one has usually refilled (a key idle for
``burst / rate`` seconds is full, the same as no key); in a flood from more keys than the
bound it is the one that waited longest. The prefix of each source address is cached (a
bounded map), so a response costs two dictionary look-ups and a little arithmetic.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

ALLOW = 0
DROP = 1
SLIP = 2

ANSWER = ord("A")
NXDOMAIN = ord("N")
ERROR = ord("E")
CLASS_NAMES = {ANSWER: "answer", NXDOMAIN: "nxdomain", ERROR: "error"}
NXDOMAIN_IDENTITY = b"N"
ERROR_IDENTITY = b"E"

MAX_TRACKED = 100_000
MAX_SOURCES = 65_536  # source address -> prefix, cleared when full
_EXEMPT = b""  # the prefix of an exempt source (a real one is never empty)
_MAPPED = b"\x00" * 10 + b"\xff\xff"


@dataclass(slots=True)
class _Bucket:
    credit: float
    stamp: float
    over: int = 0  # responses over the limit so far (drives the slip count)


def answer_identity(qname: bytes, qtype: int) -> bytes:
    """The identity of a NOERROR response: its (lower-cased, wire-form) name and type."""
    return b"A" + qname.lower() + qtype.to_bytes(2, "big")


def identity_of(rcode: str | None, qname: bytes, qtype: int) -> bytes:
    """What a response is limited by besides the client's prefix, from its response code."""
    if rcode == "NOERROR":
        return answer_identity(qname, qtype)
    if rcode == "NXDOMAIN":
        return NXDOMAIN_IDENTITY  # a server has one zone: the zone alone
    return ERROR_IDENTITY


def client_prefix(address: str, ipv4_prefix: int = 24, ipv6_prefix: int = 56) -> bytes:
    """Return the prefix a source address is limited by (family byte + masked address)."""
    try:
        if ":" not in address:
            packed, family, bits = socket.inet_pton(socket.AF_INET, address), 4, ipv4_prefix
        else:
            packed = socket.inet_pton(socket.AF_INET6, address.split("%", 1)[0])
            family, bits = 6, ipv6_prefix
            if packed[:12] == _MAPPED:  # IPv4-mapped: limit as IPv4
                packed, family, bits = packed[12:], 4, ipv4_prefix
    except OSError:
        return b"?" + address.encode("utf-8", "replace")
    whole, rest = divmod(bits, 8)
    masked = packed[:whole]
    if rest:
        masked += bytes((packed[whole] & (0xFF << (8 - rest)) & 0xFF,))
    return bytes((family, bits)) + masked


class RateLimiter:
    """Credits per (client prefix, response identity)."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        slip: int = 2,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = MAX_TRACKED,
        *,
        nxdomain_rate: float | None = None,
        error_rate: float | None = None,
        window_s: float = 15.0,
        ipv4_prefix: int = 24,
        ipv6_prefix: int = 56,
        exempt: Iterable[str] = (),
    ) -> None:
        self.rate = max(0.0, float(rate))
        on = self.rate > 0  # a rate of 0 turns limiting off, whatever the other classes say
        self.rates = {
            ANSWER: self.rate,
            NXDOMAIN: _or(nxdomain_rate, self.rate) if on else 0.0,
            ERROR: _or(error_rate, self.rate) if on else 0.0,
        }
        self.burst = float(burst) if burst is not None else None
        self.window_s = max(0.0, float(window_s))
        self.slip = max(0, int(slip))
        self.ipv4_prefix = ipv4_prefix
        self.ipv6_prefix = ipv6_prefix
        self.exempt = tuple(ipaddress.ip_network(n, strict=False) for n in exempt)
        self.enabled = any(r > 0 for r in self.rates.values())
        self._clock = clock
        self._keys: OrderedDict[bytes, _Bucket] = OrderedDict()  # least recently seen first
        self._sources: dict[str, bytes] = {}
        self._max_tracked = max(1, max_tracked)

    def check(self, address: str, identity: bytes) -> int:
        """Spend a credit for one response of ``identity`` to ``address``: ALLOW, DROP, SLIP."""
        rate = self.rates.get(identity[0], 0.0) if identity else 0.0
        if rate <= 0:
            return ALLOW
        prefix = self._sources.get(address)
        if prefix is None:
            prefix = self._prefix_of(address)
        if not prefix:  # exempt
            return ALLOW
        key = prefix + identity
        now = self._clock()
        keys = self._keys
        bucket = keys.get(key)
        burst = rate if self.burst is None else self.burst
        if bucket is None:
            if len(keys) >= self._max_tracked:
                keys.popitem(last=False)
            bucket = keys[key] = _Bucket(burst, now)
        else:
            keys.move_to_end(key)
            bucket.credit = min(burst, bucket.credit + (now - bucket.stamp) * rate)
            bucket.stamp = now
        bucket.credit -= 1.0
        if bucket.credit >= 0.0:
            return ALLOW
        floor = -self.window_s * rate
        if bucket.credit < floor:
            bucket.credit = floor
        bucket.over += 1
        if self.slip and bucket.over % self.slip == 0:
            return SLIP
        return DROP

    def _prefix_of(self, address: str) -> bytes:
        """Return the cached prefix key of a source address (``_EXEMPT`` when exempt)."""
        prefix = client_prefix(address, self.ipv4_prefix, self.ipv6_prefix)
        if self.exempt and _is_exempt(address, self.exempt):
            prefix = _EXEMPT
        if len(self._sources) >= MAX_SOURCES:
            self._sources.clear()
        self._sources[address] = prefix
        return prefix

    def __len__(self) -> int:
        return len(self._keys)


def _or(value: float | None, default: float) -> float:
    return default if value is None else max(0.0, float(value))


def _is_exempt(
    address: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in networks)


def parse_networks(texts: Iterable[str], option: str) -> tuple[str, ...]:
    """Check CIDR networks given on the command line; raise ValueError naming ``option``."""
    out = []
    for text in texts:
        try:
            out.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            raise ValueError(f"{option} {text!r}: not an address or network (CIDR)") from None
    return tuple(out)
