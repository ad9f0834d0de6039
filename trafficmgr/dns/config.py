"""Settings of the GeoDNS server."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_PORT = 5353
DEFAULT_STATE_FILE = "var/dns-table.json"
MAX_UDP_PAYLOAD = 1232  # the DNS flag day 2020 figure: no IP fragmentation on common paths
MIN_UDP_PAYLOAD = 512


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How one server (or each of its worker processes) listens and answers."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    table_file: str | None = None  # a routing table JSON file, watched for changes
    state_file: str | None = DEFAULT_STATE_FILE  # last good table, written on every swap
    redis_url: str | None = None
    geoip_db: str | None = None  # None: the GeoLite2 file of maxminddb-geolite2
    workers: int = 1
    answers: int = 1  # regions per answer
    max_udp_payload: int = MAX_UDP_PAYLOAD
    # Response-rate limiting (``ratelimit``; defaults and tuning in docs/dns.md): responses
    # per second per (client prefix, response identity), by class.
    rrl_rate: float = 200.0  # answers (NOERROR) per name and type; 0 turns RRL off
    rrl_nxdomain_rate: float = 50.0  # NXDOMAIN, per zone; 0: unlimited
    rrl_error_rate: float = 50.0  # errors (REFUSED, FORMERR, ...); 0: unlimited
    rrl_burst: float | None = None  # credit in hand; None: one second's worth of its class
    rrl_window_s: float = 15.0  # how long a key kept over its rate stays limited, at most
    rrl_slip: int = 2  # every n-th limited response goes out with TC=1; 0 drops them all
    rrl_ipv4_prefix: int = 24
    rrl_ipv6_prefix: int = 56
    rrl_exempt: tuple[str, ...] = ()  # networks never limited (CIDR)
    cache_size: int = 50_000  # entries per cache (rendered sections, replies by query)
    # DNS over TCP (RFC 7766; ``transport.TcpConnection``; defaults in docs/dns.md).
    tcp_idle_timeout_s: float = 10.0  # no complete query for this long: closed
    tcp_message_timeout_s: float = 2.0  # a message begun must arrive whole within this
    tcp_max_connections: int = 256  # open at once, in all (per worker process)
    tcp_max_per_client: int = 16  # open at once from one IPv4 address or IPv6 /64
    poll_interval_s: float = 1.0  # how often the table file is checked
    fleet_poll_s: float = 5.0  # how often the fleet source is read again; 0: never
    nameserver: str = "ns1"  # label of the apex NS name, inside the zone
    ns_addresses: tuple[str, ...] = ()  # its A/AAAA; empty: the listen address if specific
    metrics: tuple[str, int] | None = None  # HOST, PORT of the Prometheus endpoint; None: off

    def glue(self) -> tuple[str, ...]:
        """Return the addresses published for the nameserver name."""
        if self.ns_addresses:
            return self.ns_addresses
        try:
            address = ipaddress.ip_address(self.host)
        except ValueError:
            return ()
        return () if address.is_unspecified else (str(address),)


def parse_listen(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """Parse ``HOST:PORT``, ``[V6]:PORT``, ``HOST`` or ``:PORT``; raise ValueError if bad."""
    text = text.strip()
    host, port = text, default_port
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError(f"bad listen address {text!r}")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad listen address {text!r}")
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, _, rest = text.partition(":")
        port = _port(rest, text)
    host = host or "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError(f"bad listen host {host!r}: give an IP address") from None
    return host, port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise ValueError(f"bad port in listen address {whole!r}")
    return int(text)


def parse_metrics(text: str) -> tuple[str, int]:
    """Parse the ``--metrics`` address, ``HOST:PORT`` (the port is required)."""
    host, port = parse_listen(text, default_port=-1)
    if port < 0:
        raise ValueError(f"--metrics {text!r}: expected HOST:PORT, the port is missing")
    return host, port
