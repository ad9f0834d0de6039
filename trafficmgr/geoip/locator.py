"""Client location from IP addresses, over a GeoIP database.

``Locator`` wraps a geoip2 City or Country database (the kind is read from the database
metadata) and caches answers per /24 (IPv4) and /56 (IPv6) prefix in a bounded LRU: clients of
one such prefix are treated as one place, which is also the granularity an ECS option carries.
It never raises on bad input; an address it cannot place gives ``ClientLocation()``, which
routes to the ``default`` zone.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from typing import Any

from trafficmgr.routing.countries import CENTROID_OF, continent_of
from trafficmgr.routing.types import ClientLocation, GeoPoint

V4_CACHE_PREFIX = 24
V6_CACHE_PREFIX = 56
CACHE_SIZE = 65_536

_IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def default_database_path() -> str | None:
    """Return the path of the GeoLite2 City database shipped by maxminddb-geolite2, if any."""
    try:
        from _maxminddb_geolite2 import geolite2_database
    except ImportError:
        return None
    path: str = geolite2_database()
    return path


class Locator:
    """Locate clients by IP address over a geoip2 City or Country database."""

    def __init__(self, path: str | None = None, cache_size: int = CACHE_SIZE) -> None:
        try:
            import geoip2.database
        except ImportError as exc:  # optional: every caller already copes with no database
            raise FileNotFoundError(f"geoip2 is not installed ({exc})") from None
        db_path = path or default_database_path()
        if db_path is None:
            raise FileNotFoundError("no GeoIP database given and maxminddb-geolite2 is missing")
        self.path = db_path
        self._reader = geoip2.database.Reader(db_path)
        self.database_type: str = self._reader.metadata().database_type
        self._is_city = "City" in self.database_type
        self._is_country = self._is_city or "Country" in self.database_type
        self._cache: OrderedDict[tuple[int, int, int], tuple[ClientLocation, int]] = OrderedDict()
        self._cache_size = max(1, cache_size)
        self.hits = 0
        self.misses = 0

    @property
    def cached(self) -> int:
        """Return how many prefixes the cache holds."""
        return len(self._cache)

    def close(self) -> None:
        """Close the database file."""
        self._reader.close()

    def __enter__(self) -> Locator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def locate(self, ip: str, prefix_len: int | None = None) -> ClientLocation:
        """Locate an address or an ECS subnet (address + source prefix); never raise."""
        return self.locate_with_scope(ip, prefix_len)[0]

    def locate_with_scope(
        self, ip: str, prefix_len: int | None = None
    ) -> tuple[ClientLocation, int]:
        """Locate like ``locate`` and return the prefix length the answer holds for (ECS scope)."""
        parsed = _cache_key(ip, prefix_len)
        if parsed is None:
            return ClientLocation(), 0
        address, key = parsed
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return cached
        self.misses += 1
        answer = self._lookup(address, key[2])
        self._cache[key] = answer
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return answer

    def _lookup(self, address: str, length: int) -> tuple[ClientLocation, int]:
        """Ask the database about ``address``; the answer stands for its ``/length`` network."""
        import geoip2.errors

        try:
            if self._is_city:
                record: Any = self._reader.city(address)
            elif self._is_country:
                record = self._reader.country(address)
            else:
                return ClientLocation(), length
        except geoip2.errors.AddressNotFoundError as exc:
            return ClientLocation(), _scope(length, getattr(exc, "network", None))
        except (ValueError, TypeError, OSError):
            return ClientLocation(), length
        return _location_of(record), _scope(length, record.traits.network)


def _cache_key(ip: str, prefix_len: int | None) -> tuple[str, tuple[int, int, int]] | None:
    """Return the address to look up and its cache key (version, network, length), as ``_parse``.

    Plain dotted-quad IPv4 text, what nearly every query carries, is read without ``ipaddress``.
    """
    if prefix_len is not None and (
        isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0
    ):
        return None
    text = ip.strip() if type(ip) is str else str(ip).strip()
    parts = text.split(".")
    if len(parts) == 4:
        value = 0
        for part in parts:
            # the same octets ipaddress accepts: 1-3 ASCII digits, no leading zero, <= 255
            if not (0 < len(part) <= 3 and part.isascii() and part.isdigit()):
                break
            if part[0] == "0" and len(part) > 1:
                break
            octet = int(part)
            if octet > 255:
                break
            value = value << 8 | octet
        else:
            if prefix_len is not None and prefix_len < 32:
                value &= _V4_MASKS[prefix_len]
                text = ".".join(str(value >> shift & 255) for shift in (24, 16, 8, 0))
            length = V4_CACHE_PREFIX if prefix_len is None else min(prefix_len, V4_CACHE_PREFIX)
            return text, (4, value & _V4_MASKS[length], length)
    parsed = _parse(text, prefix_len)
    if parsed is None:
        return None
    address, network = parsed
    return address, (network.version, int(network.network_address), network.prefixlen)


_V4_MASKS = tuple((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF for n in range(33))


def _parse(ip: str, prefix_len: int | None) -> tuple[str, _IpNetwork] | None:
    """Return the address to look up and the network it is cached under; None when invalid.

    An ECS address is masked to its source prefix; the cache network is that prefix or the
    /24 (/56) around the address, whichever is shorter.
    """
    if prefix_len is not None and (
        isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0
    ):
        return None
    try:
        address = ipaddress.ip_address(str(ip).strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if prefix_len is not None and prefix_len < address.max_prefixlen:
        address = ipaddress.ip_network(f"{address}/{prefix_len}", strict=False).network_address
    granularity = V4_CACHE_PREFIX if address.version == 4 else V6_CACHE_PREFIX
    length = granularity if prefix_len is None else min(prefix_len, granularity)
    return str(address), ipaddress.ip_network(f"{address}/{length}", strict=False)


def _scope(length: int, db_network: object) -> int:
    """Return the scope an answer holds for: the cache prefix, or the DB's shorter network."""
    db_len = getattr(db_network, "prefixlen", None)
    if isinstance(db_len, int) and db_len < length:
        return db_len
    return length


def _location_of(record: Any) -> ClientLocation:
    """Turn a geoip2 City or Country record into a ClientLocation."""
    country = record.country.iso_code or record.registered_country.iso_code
    country = country.upper() if country else None
    continent = record.continent.code or (continent_of(country) if country else None)
    point: GeoPoint | None = None
    location = getattr(record, "location", None)
    lat = getattr(location, "latitude", None)
    lon = getattr(location, "longitude", None)
    if lat is not None and lon is not None:
        point = GeoPoint(float(lat), float(lon))
    elif country and country in CENTROID_OF:
        point = GeoPoint(*CENTROID_OF[country])
    return ClientLocation(country=country, continent=continent, point=point)
