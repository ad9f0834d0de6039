"""Find a request's client address, one rule for both fronts: trusted proxy networks.

The peer that connected is the client unless it is a trusted proxy; then
``X-Forwarded-For`` is walked from the right (each proxy appends the address it saw),
skipping trusted proxies, and the first address that is not one is the client. A malformed
entry stops the walk at the last address known good: a chain with garbage in it says nothing
reliable further left. With no trusted proxies, ``X-Forwarded-For`` is never read (any
client can write one).

The gateway's peer is its TCP peer. The endpoint picker's peer is Envoy, which appends the
address of its own peer to ``x-forwarded-for`` (``use_remote_address``): so there the peer is
the header's last entry and the walk starts left of it (``forwarded_client``).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_LONGEST_ADDRESS = 64  # an IPv6 address with a zone index fits


def networks(specs: Iterable[str]) -> tuple[IpNetwork, ...]:
    """Parse addresses or CIDR networks (``127.0.0.1``, ``10.0.0.0/8``); raise ValueError."""
    return tuple(ipaddress.ip_network(s.strip(), strict=False) for s in specs if s.strip())


def client_address(
    peer: str | None, forwarded_for: str | None, trusted: tuple[IpNetwork, ...]
) -> str | None:
    """Return the client's address: ``peer``, or X-Forwarded-For's when the peer is trusted."""
    if peer is None:
        return None
    kind = _classify(peer, trusted)
    if kind is None:
        return None  # not an address: nowhere to locate
    if not kind or not forwarded_for:
        return peer
    address = peer
    for hop in reversed(forwarded_for.split(",")):
        hop = hop.strip()
        kind = _classify(hop, trusted)
        if kind is None:
            return address
        if not kind:
            return hop
        address = hop
    return address


def forwarded_client(headers: Mapping[str, str], trusted: tuple[IpNetwork, ...]) -> str | None:
    """Return the client behind Envoy: ``x-forwarded-for``'s last entry is Envoy's peer."""
    forwarded, _, peer = headers.get("x-forwarded-for", "").rpartition(",")
    return client_address(peer.strip() or None, forwarded or None, trusted)


def _classify(address: str, trusted: tuple[IpNetwork, ...]) -> bool | None:
    """Return whether ``address`` is a trusted proxy; None when it is not an address."""
    if len(address) > _LONGEST_ADDRESS:
        return None  # not an address, and never a cache entry a client can make huge
    return _classify_cached(address, trusted)


@functools.lru_cache(maxsize=16_384)
def _classify_cached(address: str, trusted: tuple[IpNetwork, ...]) -> bool | None:
    # cached: the same proxies and clients come back request after request, and parsing an
    # address costs more than the rest of the walk
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return any(ip in net for net in trusted)
