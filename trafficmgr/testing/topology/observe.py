"""Watching the cluster from outside: the published tables, the public API, real DNS queries.

- ``TableFeed``: every table the control loop publishes, cued by the Redis channel the DNS
  servers subscribe to, with the time it arrived.
- ``Api``: the REST API with a bearer token (``GET /api/v1/routing/table``, drills).
- ``ask_dns``: one UDP query with an EDNS Client Subnet, answered regions by address.
- ``DnsWatch``: vantage points asking over and over from a thread.
- ``socket_owners``: which process holds the server end of each TCP connection to a port.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rdatatype

from trafficmgr.contracts import TABLE_REDIS_CHANNEL, TABLE_REDIS_KEY

# Client addresses the GeoIP database places in each country (the DNS server's own lookup
# decides; ``client_zone`` reads back what it decided from the TXT answer).
CLIENTS = {"GB": "81.2.69.142", "DE": "78.46.0.1", "US": "8.8.8.8"}


# --- tables -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    received_at: float
    doc: dict[str, Any]

    @property
    def generated_at(self) -> float:
        from trafficmgr.routing.table_json import parse_iso8601

        return parse_iso8601(self.doc["generated_at"])

    def state(self, region: str) -> str:
        return str(self.doc["regions"].get(region, {}).get("state", ""))

    def ramp(self, region: str) -> float:
        return float(self.doc["regions"].get(region, {}).get("ramp", 0.0))

    def weight(self, region: str) -> float:
        return max_weight(self.doc, region)


def weights(doc: dict[str, Any], region: str) -> dict[str, float]:
    """``zone/model`` → the weight ``region`` has in that list (0 where it is not listed)."""
    out = {}
    for zone, lists in doc.get("zones", {}).items():
        for model, entries in lists.items():
            out[f"{zone}/{model}"] = sum(e["weight"] for e in entries if e["region"] == region)
    return out


def max_weight(doc: dict[str, Any], region: str) -> float:
    return max(weights(doc, region).values(), default=0.0)


class TableFeed:
    """Collect every table the cluster publishes until closed.

    A message on the channel is taken as a cue to read the table key of the cluster's own
    Redis database: pub/sub ignores database indexes, so a message may come from another
    deployment on the same server. The key is read every 0.2 s without a message too.
    """

    def __init__(self, redis_url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.pubsub: Any = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        self.pubsub.subscribe(TABLE_REDIS_CHANNEL)
        self.tables: list[Published] = []
        self.errors: list[str] = []  # what interrupted the feed, for a failing test to show
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # a dropped or slow connection must not end the feed
                self.errors.append(f"{time.time():.3f} {exc!r}")
                self._stop.wait(0.1)  # the next read reconnects and subscribes again
                self._step_read_table()  # a table published meanwhile is not lost

    def _step(self) -> None:
        # A message is the cue; the key is also read when none came for 0.2 s, so that a
        # message the subscription lost delays a table here by at most that.
        self.pubsub.get_message(timeout=0.2)
        self._step_read_table()

    def _step_read_table(self) -> None:
        try:
            raw = self.client.get(TABLE_REDIS_KEY)
        except Exception as exc:
            self.errors.append(f"{time.time():.3f} {exc!r}")
            return
        doc = json.loads(raw) if raw else None
        last = self.tables[-1].doc["version"] if self.tables else None
        if isinstance(doc, dict) and "regions" in doc and doc.get("version") != last:
            self.tables.append(Published(time.time(), doc))

    def stored_version(self) -> str | None:
        """The version of the table the cluster's Redis holds now."""
        raw = self.client.get(TABLE_REDIS_KEY)
        doc = json.loads(raw) if raw else None
        return doc.get("version") if isinstance(doc, dict) else None

    def since(self, at: float) -> list[Published]:
        return [t for t in list(self.tables) if t.received_at >= at]

    def first(self, at: float, wanted: Any) -> Published | None:
        return next((t for t in self.since(at) if wanted(t)), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.pubsub.close()
        self.client.close()


# --- the public API -----------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class Api:
    url: str
    token: str

    def call(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}/api/v1/{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None

    def table(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.call("GET", "routing/table")
        return doc

    def drill(self, drill_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.call("GET", f"drills/{drill_id}/")
        return doc


# --- DNS ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DnsAnswer:
    at: float
    vantage: str
    regions: tuple[str, ...]
    error: str = ""


def ecs_query(name: str, client: str, rdtype: str = "A") -> dns.message.Message:
    subnet = ipaddress.ip_network(f"{client}/24", strict=False)
    ecs = dns.edns.ECSOption(str(subnet.network_address), 24)
    return dns.message.make_query(name, rdtype, use_edns=0, options=[ecs])


def ask_dns(
    server: tuple[str, int], name: str, client: str, region_of: dict[str, str], vantage: str = ""
) -> DnsAnswer:
    """Ask ``name`` A over UDP (TCP when truncated) as a client in ``client``'s /24."""
    query = ecs_query(name, client)
    at = time.time()
    try:
        reply = dns.query.udp(query, server[0], port=server[1], timeout=1.0)
        if reply.flags & dns.flags.TC:
            reply = dns.query.tcp(query, server[0], port=server[1], timeout=1.0)
    except Exception as exc:
        return DnsAnswer(at, vantage, (), f"{type(exc).__name__}")
    if reply.rcode() != 0:
        return DnsAnswer(at, vantage, (), f"rcode {reply.rcode()}")
    addresses = [
        str(rd.address) for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A for rd in rrset
    ]
    return DnsAnswer(at, vantage, tuple(sorted({region_of.get(a, f"?{a}") for a in addresses})))


def client_zone(server: tuple[str, int], name: str, client: str) -> str:
    """What the DNS server says it located ``client`` as (``client=DE/EU`` in the TXT)."""
    reply = dns.query.udp(ecs_query(name, client, "TXT"), server[0], port=server[1], timeout=1.0)
    for rrset in reply.answer:
        for rd in rrset:
            text = b"".join(rd.strings).decode()
            for word in text.split():
                if word.startswith("client="):
                    return word.removeprefix("client=")
    return ""


@dataclass
class DnsWatch:
    """Vantage points (name → client address) asking ``name`` every ``every_s``."""

    server: tuple[str, int]
    name: str
    vantages: dict[str, str]
    region_of: dict[str, str]
    every_s: float = 0.2
    answers: list[DnsAnswer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dns-watch", daemon=True)

    def start(self) -> DnsWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for vantage, client in self.vantages.items():
                self.answers.append(
                    ask_dns(self.server, self.name, client, self.region_of, vantage)
                )
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def of(self, vantage: str) -> list[DnsAnswer]:
        return [a for a in list(self.answers) if a.vantage == vantage]


def region_of_address(fleet: dict[str, Any]) -> dict[str, str]:
    return {
        str(ipaddress.ip_address(a)): r["name"] for r in fleet["regions"] for a in r["addresses"]
    }


# --- sockets ------------------------------------------------------------------------------

TCP_ESTABLISHED = "01"


def socket_owners(pids: Iterable[int], server_port: int) -> dict[int, int]:
    """Client port → the process (of ``pids``) holding the accepted end of each established
    TCP connection to ``server_port``, read from Linux's /proc (net/tcp and each fd)."""
    client_port_of: dict[str, int] = {}  # socket inode → the peer's port
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
                if state == TCP_ESTABLISHED and int(local.rsplit(":", 1)[1], 16) == server_port:
                    client_port_of[inode] = int(remote.rsplit(":", 1)[1], 16)
    owners: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # the process is gone
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):  # the fd closed meanwhile
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    inode = target.removeprefix("socket:[").removesuffix("]")
                    if target.startswith("socket:[") and inode in client_port_of:
                        owners[client_port_of[inode]] = pid
    return owners
