"""The Locator's cache key: the quick IPv4 reading agrees with ipaddress on every input."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from trafficmgr.geoip.locator import _cache_key

OCTETS = st.one_of(
    st.integers(0, 300).map(str),
    st.sampled_from(["", "0", "00", "01", "007", "255", "256", "1000", "+1", "-1", "0x1", " 1"]),
    st.text(alphabet="0123456789٣²abc .:", max_size=4),
)
PREFIXES = st.one_of(st.none(), st.integers(-2, 140), st.just(True), st.just(24.0))


def reference(ip: str, prefix_len: object) -> tuple[str, tuple[int, int, int]] | None:
    """Return the address and key the way ipaddress reads them."""
    if prefix_len is not None and (
        isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0
    ):
        return None
    try:
        address = ipaddress.ip_address(ip.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if prefix_len is not None and prefix_len < address.max_prefixlen:
        address = ipaddress.ip_network(f"{address}/{prefix_len}", strict=False).network_address
    granularity = 24 if address.version == 4 else 56
    length = granularity if prefix_len is None else min(prefix_len, granularity)
    network = ipaddress.ip_network(f"{address}/{length}", strict=False)
    return str(address), (network.version, int(network.network_address), network.prefixlen)


@given(st.lists(OCTETS, min_size=3, max_size=5), st.sampled_from(["", " ", "\n"]), PREFIXES)
def test_dotted_text_is_keyed_as_ipaddress_keys_it(
    octets: list[str], pad: str, prefix_len: int | None
) -> None:
    ip = pad + ".".join(octets) + pad
    assert _cache_key(ip, prefix_len) == reference(ip, prefix_len)


@given(st.ip_addresses(), PREFIXES)
def test_any_address_is_keyed_as_ipaddress_keys_it(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, prefix_len: int | None
) -> None:
    assert _cache_key(str(address), prefix_len) == reference(str(address), prefix_len)


def test_ecs_subnet_is_masked_to_its_source_prefix() -> None:
    assert _cache_key("198.51.100.77", 20) == ("198.51.96.0", (4, 0xC6336000, 20))
    assert _cache_key(" 198.51.100.77 ", None) == ("198.51.100.77", (4, 0xC6336400, 24))
